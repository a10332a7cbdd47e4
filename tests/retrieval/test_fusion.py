import threading

import pytest

from indexes.errors import InputError
from retrieval.collections import read_queries
from retrieval.fusion import DEFAULT_FUSION, Fusion, fuse, parse_pipeline
from retrieval.tune import candidates, tune

A = [("d1", 10.0), ("d2", 8.0), ("d3", 4.0)]
B = [("d2", 0.9), ("d4", 0.7), ("d1", 0.1)]   # d3 missing from B, d4 missing from A


def test_rrf_by_hand():
    out = {d: s for d, s, _ in fuse({"a": A, "b": B}, Fusion("rrf", k=60))}
    assert out["d2"] == pytest.approx(1 / 62 + 1 / 61)
    assert out["d1"] == pytest.approx(1 / 61 + 1 / 63)
    assert out["d3"] == pytest.approx(1 / 63)          # missing list contributes nothing
    assert out["d4"] == pytest.approx(1 / 62)
    assert [d for d, _, _ in fuse({"a": A, "b": B}, Fusion("rrf", k=60))] == ["d2", "d1", "d4", "d3"]


def test_combsum_mnz_and_weighted_by_hand():
    # min-max: A -> d1 1, d2 4/6, d3 0 ; B -> d2 1, d4 0.75, d1 0 ; missing -> list minimum (0)
    cs = {d: s for d, s, _ in fuse({"a": A, "b": B}, Fusion("combsum", norm="minmax"))}
    assert cs == pytest.approx({"d1": 1.0, "d2": 4 / 6 + 1, "d3": 0.0, "d4": 0.75})
    mnz = {d: s for d, s, _ in fuse({"a": A, "b": B}, Fusion("combmnz", norm="minmax"))}
    assert mnz == pytest.approx({"d1": 2.0, "d2": 2 * (4 / 6 + 1), "d3": 0.0, "d4": 0.75})
    w = {d: s for d, s, _ in fuse({"a": A, "b": B}, Fusion("weighted", norm="minmax",
                                                         weights=(("a", 0.25), ("b", 0.75))))}
    assert w == pytest.approx({"d1": 0.25, "d2": 0.25 * 4 / 6 + 0.75, "d3": 0.0, "d4": 0.75 * 0.75})
    # z-score: the missing document gets the list's lowest z-score, not 0
    z = {d: s for d, s, _ in fuse({"a": A, "b": B}, Fusion("combsum", norm="zscore"))}
    assert z["d3"] < z["d4"] < z["d2"]


def test_raw_scores_kept_with_none_for_missing():
    out = {d: raw for d, _, raw in fuse({"a": A, "b": B}, Fusion("rrf"))}
    assert out["d3"] == {"a": 4.0, "b": None} and out["d4"] == {"a": None, "b": 0.7}


@pytest.mark.parametrize("spec", ["bm25", "bm25+dense:rrf(k=20)", "bm25+dense:combmnz(norm=zscore)",
                                  "bm25+dense:weighted(bm25=0.3,dense=0.7,norm=minmax)"])
def test_spec_round_trips(spec):
    assert str(parse_pipeline(spec)) == spec
    assert str(parse_pipeline(str(parse_pipeline(spec)))) == spec


def test_spec_forms_and_errors():
    assert str(parse_pipeline("bm25+dense", "rrf")) == "bm25+dense:rrf(k=60)"
    assert str(parse_pipeline("bm25+dense")) == "bm25+dense:combmnz(norm=minmax)"
    assert parse_pipeline("bm25+dense").fusion == DEFAULT_FUSION
    assert str(parse_pipeline("bm25+dense", default="bm25+dense:combsum(norm=zscore)")) == \
        "bm25+dense:combsum(norm=zscore)"
    for bad, msg in [("bm25+bm25", "each once"), ("bm25:rrf", "at least two"), ("a+b:magic", "unknown fusion"),
                     ("a+b:weighted(a=1)", "needs a weight"), ("a+b:rrf(c=1)", "not one of"),
                     ("a+b:rrf(k=x)", "integer"), ("a b", "cannot parse")]:
        with pytest.raises(InputError, match=msg):
            parse_pipeline(bad)
    with pytest.raises(InputError, match="not both"):
        parse_pipeline("a+b:rrf", "rrf")


def test_grid_is_convex():
    for f in candidates(["a", "b", "c"]):
        if f.method == "weighted":
            assert sum(w for _, w in f.weights) == pytest.approx(1.0)
            assert all(w > 0 for _, w in f.weights)


def test_fused_search_threads_and_per_retriever_scores(small_dense_index, small_corpus):
    idx = small_dense_index
    qs = read_queries(small_corpus / "queries.jsonl")[:12]
    batch = idx.batch_search(qs, k=10, retriever="bm25+dense:rrf(k=60)", text=True)
    for q in qs[:3]:
        single = idx.search(q.text, k=10, retriever="bm25+dense", fusion="rrf")
        assert [h.docid for h in single] == [h.docid for h in batch[q.qid]]
    h = batch[qs[0].qid][0]
    assert set(h.scores) == {"bm25", "dense"} and h.text
    out = {}

    def work(q):
        out[q.qid] = [x.docid for x in idx.search(q.text, k=10, retriever="bm25+dense:rrf(k=60)")]

    ts = [threading.Thread(target=work, args=(q,)) for q in qs]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert out == {q: [x.docid for x in hs] for q, hs in batch.items()}
    with pytest.raises(InputError, match="no 'deepct-x' sub-index"):
        idx.search("x", retriever="bm25+deepct-x")


def test_tune_uses_only_training_qrels(small_dense_index, small_corpus, tmp_path):
    idx = small_dense_index
    qs = read_queries(small_corpus / "queries.jsonl")
    test_lines = (small_corpus / "qrels" / "test.tsv").read_text().splitlines()[1:]
    train = {}
    for line in test_lines[:30]:  # pretend the first judgments are a training split
        q, d, r = line.split("\t")
        train.setdefault(q, {})[d] = int(r)
    with pytest.raises(InputError, match="test qrels"):
        tune(idx, qs, train, qrels_path=str(small_corpus / "qrels" / "test.tsv"), save=False, quiet=True)
    rep = tune(idx, qs, train, qrels_path=str(tmp_path / "train.tsv"), save=True, quiet=True, depth=100)
    assert rep["queries"] == len(train) and rep["tuned_on"].endswith("train.tsv")
    assert rep["value"] == max(t["nDCG@10"] for t in rep["top"])
    # searching with the stored spec reproduces the tuned value on the training queries
    from eval import evaluate

    res = idx.batch_search([q for q in qs if q.qid in train], k=100, retriever=rep["spec"], depth=100)
    run = {q: {h.docid: h.score for h in hs} for q, hs in res.items()}
    assert evaluate(train, run, ["nDCG@10"])["nDCG@10"] == pytest.approx(rep["value"])
    # the tuned spec is now the default for a bare bm25+dense, and is a valid, parseable pipeline
    assert str(idx.pipeline("bm25+dense")) == rep["spec"]
    assert idx.manifest["pipelines"]["bm25+dense"]["spec"] == rep["spec"]


def _untuned_copy(idx, tmp_path):
    """A copy of the folder with no tuned pipeline, whatever other tests stored in the shared fixture."""
    import shutil

    import retrieval
    from indexes import manifest as mf

    path = tmp_path / "copy"
    shutil.copytree(idx.path, path)
    m = mf.read_manifest(path)
    m.pop("pipelines", None)
    mf.write_manifest(path, m)
    return retrieval.open_index(path)


def test_untuned_default_is_combmnz_minmax_and_tuning_wins(small_dense_index, small_corpus, tmp_path):
    """A bare a+b on a folder never tuned fuses with DEFAULT_FUSION (the leave-one-collection-out choice of
    eval/results/defaults.md); checked against CombMNZ computed here from each retriever's own top 100."""
    idx = _untuned_copy(small_dense_index, tmp_path)
    assert idx.pipeline("bm25+dense").fusion == Fusion("combmnz", norm="minmax")
    qs = read_queries(small_corpus / "queries.jsonl")[:10]
    bare = idx.batch_search(qs, k=10, retriever="bm25+dense")
    lists = {n: idx.retriever(n).batch_search(qs, 100, 1) for n in ("bm25", "dense")}
    for q in qs:
        oracle = {}
        for n in lists:
            scores = [s for _, s in lists[n][q.qid]]
            lo, hi = min(scores), max(scores)
            for d, s in lists[n][q.qid]:
                total, count = oracle.get(d, (0.0, 0))
                oracle[d] = (total + (1.0 if hi == lo else (s - lo) / (hi - lo)), count + 1)
        fused = {d: t * c for d, (t, c) in oracle.items()}
        got = [(h.docid, h.score) for h in bare[q.qid]]
        want = sorted(fused.items(), key=lambda x: (-x[1], x[0]))[:10]
        assert [d for d, _ in got] == [d for d, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want])
    # retr tune's fusion, once stored, takes precedence over the untuned default
    train = {}
    for line in (small_corpus / "qrels" / "test.tsv").read_text().splitlines()[1:31]:
        q, d, r = line.split("\t")
        train.setdefault(q, {})[d] = int(r)
    rep = tune(idx, qs, train, qrels_path=str(tmp_path / "train.tsv"), quiet=True, depth=100)
    assert str(idx.pipeline("bm25+dense")) == rep["spec"]
    assert idx.pipeline("bm25+dense:rrf(k=60)").fusion == Fusion("rrf", 60)   # an explicit fusion wins over both
