"""`retr tune --folds N` / retrieval.tune.cross_validate: tuning estimated on test-only judgments."""
import json

import pytest

from eval import evaluate
from indexes.errors import ParameterError
from retrieval.collections import read_queries
from retrieval.datasets.qrels import read_qrels
from retrieval.tune import cross_validate, split_folds, tune
from tests.conftest import retr_in_process


def _handful(small_corpus, tmp_path, n=12):
    """The first n judged queries and their test qrels, written where the CLI can read them."""
    qrels = read_qrels(small_corpus / "qrels" / "test.tsv")
    qs = [q for q in read_queries(small_corpus / "queries.jsonl") if q.qid in qrels][:n]
    keep = {q.qid for q in qs}
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"_id": q.qid, "text": q.text}) + "\n" for q in qs))
    (tmp_path / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{r}\n" for q, ds in qrels.items() if q in keep for d, r in ds.items()))
    return qs, {q: qrels[q] for q in keep}


def test_split_folds_deals_every_query_into_one_fold():
    qids = [str(i) for i in range(11)]
    folds = split_folds(qids, 3, seed=0)
    assert sorted(q for f in folds for q in f) == sorted(qids) and [len(f) for f in folds] == [4, 4, 3]
    assert folds == split_folds(qids, 3, seed=0) and folds != split_folds(qids, 3, seed=1)


def test_each_fold_is_chosen_without_its_queries_and_scored_on_them(small_dense_index, small_corpus, tmp_path):
    idx = small_dense_index
    qs, qrels = _handful(small_corpus, tmp_path)
    rep = cross_validate(idx, qs, qrels, 2, depth=100, quiet=True)
    parts = split_folds([q.qid for q in qs], 2, seed=0)
    assert [f["queries"] for f in rep["folds"]] == [len(p) for p in parts]
    held = {}
    for f, part in zip(rep["folds"], parts):
        train = [q for q in qs if q.qid not in part]
        # the fold's choice is what tuning on the other fold's queries alone chooses
        alone = tune(idx, train, {q.qid: qrels[q.qid] for q in train}, depth=100, save=False, quiet=True)
        assert (f["spec"], f["train_queries"]) == (alone["spec"], len(train))
        assert f["train_value"] == pytest.approx(alone["value"])
        # and its held-out value is what searching the fold's queries with that pipeline scores
        res = idx.batch_search([q for q in qs if q.qid in part], k=100, retriever=f["spec"], depth=100)
        run = {q: {h.docid: h.score for h in hs} for q, hs in res.items()}
        assert evaluate({q: qrels[q] for q in part}, run, ["nDCG@10"])["nDCG@10"] == pytest.approx(f["value"])
        held.update(run)
    assert rep["value"] == pytest.approx(evaluate(qrels, held, ["nDCG@10"])["nDCG@10"])
    with pytest.raises(ParameterError, match="folds must be from 2 to the number of judged queries"):
        cross_validate(idx, qs, qrels, len(qs) + 1, depth=100, quiet=True)


def test_cli_folds_reports_each_fold_and_stores_nothing(small_dense_index, small_corpus, tmp_path):
    qs, _ = _handful(small_corpus, tmp_path)
    before = (small_dense_index.path / "manifest.json").read_bytes()
    args = ["tune", "--index", small_dense_index.path, "--queries", tmp_path / "queries.jsonl",
            "--qrels", tmp_path / "test.tsv", "--depth", "100", "--quiet"]
    refused = retr_in_process(*args)  # test judgments without --folds: refused, and the error names --folds
    assert refused.returncode == 2 and "--folds" in refused.stderr
    r = retr_in_process(*args, "--folds", "3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [l.split(":")[0] for l in lines[:3]] == ["fold 1/3", "fold 2/3", "fold 3/3"]
    assert all("chosen on 8 queries" in l and "held out 4 queries: nDCG@10 " in l for l in lines[:3])
    assert lines[3].startswith("cross-validated nDCG@10 ") and f"on {len(qs)} queries" in lines[3]
    assert "nothing stored" in r.stderr
    assert (small_dense_index.path / "manifest.json").read_bytes() == before
    bad = retr_in_process(*args, "--folds", "13")
    assert bad.returncode == 2 and bad.stderr.startswith("retr: error: --folds must be from 2 to the number of "
                                                         "judged queries (12), got 13")
