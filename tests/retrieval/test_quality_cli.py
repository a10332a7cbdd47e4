"""`retr quality score` and `retr index --prune/--quality` through the real entry point."""
from __future__ import annotations

import json

from retrieval.collections import read_corpus


def _one_error_line(r):
    err = r.stderr.strip().splitlines()
    return r.returncode == 2 and len(err) == 1 and err[0].startswith("retr: error: ") and "Traceback" not in r.stderr


def test_score_then_prune_with_scores_file(retr, small_corpus, tmp_path):
    out = tmp_path / "scores.tsv"
    r = retr("quality", "score", "--corpus", small_corpus, "--estimator", "length", "--output", out, "--quiet")
    assert r.returncode == 0, r.stderr
    ids = [d.docid for d in read_corpus(small_corpus)]
    lines = [l.split("\t") for l in out.read_text().splitlines()]
    assert [l[0] for l in lines] == ids
    r = retr("index", "--corpus", small_corpus, "--index", tmp_path / "IDX", "--prune", "0.25", "--quality", out,
             "--quiet")
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "IDX" / "manifest.json").read_text())
    assert m["pruning"]["dropped"] == int(0.25 * len(ids)) and m["pruning"]["estimator"] == "scores-file"
    assert "retr: note" not in r.stderr   # the user's own scores: nothing to warn about
    assert m["docstore"]["doc_count"] == len(ids) - int(0.25 * len(ids))
    r = retr("info", "--index", tmp_path / "IDX")
    assert r.returncode == 0 and f"pruned     {int(0.25 * len(ids))} of {len(ids)} (25%) by scores-file" in r.stdout


def test_bad_prune_share_and_missing_ids_fail_clearly(retr, small_corpus, tmp_path):
    for bad in ("1", "1.2", "-0.1"):
        r = retr("index", "--corpus", small_corpus, "--index", tmp_path / "X", "--prune", bad, "--quality", "length")
        assert _one_error_line(r) and "'--prune'" in r.stderr and "0<=x<1" in r.stderr, r.stderr  # click's range
    short = tmp_path / "short.tsv"
    ids = [d.docid for d in read_corpus(small_corpus)]
    short.write_text("".join(f"{d}\t1.0\n" for d in ids[5:]))
    r = retr("index", "--corpus", small_corpus, "--index", tmp_path / "X", "--prune", "0.3", "--quality", short)
    assert _one_error_line(r) and "lacks 5 of the corpus's" in r.stderr and ids[0] in r.stderr, r.stderr
    r = retr("index", "--corpus", small_corpus, "--index", tmp_path / "X", "--prune", "0.3", "--quality", "bogus")
    assert _one_error_line(r) and "unknown quality estimator" in r.stderr, r.stderr
    assert not (tmp_path / "X").exists()


def test_prune_without_an_in_domain_estimator_says_so(retr, small_corpus, tmp_path):
    """--prune without --quality prunes by the measured default (length) and says, in one note line after a
    successful build, that no query-agnostic estimator beat random on every held-out collection."""
    from retrieval.quality import get_estimator, select_keep

    r = retr("index", "--corpus", small_corpus, "--index", tmp_path / "IDX", "--prune", "0.3", "--quiet")
    assert r.returncode == 0, r.stderr
    notes = [l for l in r.stderr.splitlines() if l.startswith("retr: note: ")]
    assert len(notes) == 1 and "'length' was not trained on this corpus" in notes[0] and "random" in notes[0]
    m = json.loads((tmp_path / "IDX" / "manifest.json").read_text())
    assert m["pruning"]["estimator"] == "length" and "leave one collection out" in m["pruning"]["default"]
    docs = list(read_corpus(small_corpus))
    keep = select_keep([d.docid for d in docs], get_estimator("length").score([d.contents for d in docs],
                                                                             quiet=True), 0.3)
    import retrieval
    assert {h.docid for h in retrieval.open_index(tmp_path / "IDX").batch_search(["the"], k=1000)["0"]} <= keep
    assert m["docstore"]["doc_count"] == len(keep)
    few = tmp_path / "few.jsonl"  # the note does not depend on the corpus: 40 passages score faster than 400
    few.write_text("".join((small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(True)[:40]),
                   encoding="utf-8")
    r = retr("index", "--corpus", few, "--index", tmp_path / "IDX2", "--prune", "0.3", "--quality",
             "learned", "--quiet")
    assert r.returncode == 0 and "'learned' was not trained on this corpus" in r.stderr, r.stderr
