import threading

import pytest

from indexes.errors import InputError
from retrieval.collections import read_queries
from retrieval.fusion import DEFAULT_FUSION, Fusion, confidence_weights, fuse, parse_pipeline
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


def test_confidence_weights_by_hand():
    """Two lists: the BM25 list weighs 1 / (1 + exp(-slope * (share - cosine - centre))); without a
    confidence for every list, or with the slope at 0, the fusion is unweighted."""
    import math

    f = Fusion("combmnz", norm="minmax", confidence=4, centre=-0.3)
    conf = {"a": ("share", 0.5), "b": ("cosine", 0.6)}
    w = confidence_weights(conf, f)
    wa = 1 / (1 + math.exp(-4 * (0.5 - 0.6 + 0.3)))
    assert w == pytest.approx({"a": wa, "b": 1 - wa})
    # the same two kinds in the other order weigh the same
    assert confidence_weights({"b": conf["b"], "a": conf["a"]}, f) == pytest.approx(w)
    # two lists of one kind: the centre cancels, equal confidences weigh equally
    assert confidence_weights({"a": ("cosine", 0.7), "b": ("cosine", 0.7)}, f) == pytest.approx({"a": .5, "b": .5})
    assert confidence_weights({"a": conf["a"], "b": None}, f) is None
    assert confidence_weights(conf, Fusion("combmnz", norm="minmax")) is None
    # min-max: A -> d1 1, d2 4/6, d3 0 ; B -> d2 1, d4 0.75, d1 0
    got = {d: s for d, s, _ in fuse({"a": A, "b": B}, f, conf)}
    assert got == pytest.approx({"d1": 2 * wa, "d2": 2 * (wa * 4 / 6 + (1 - wa)), "d3": 0.0, "d4": (1 - wa) * 0.75})
    plain = [d for d, _, _ in fuse({"a": A, "b": B}, Fusion("combmnz", norm="minmax"))]
    assert [d for d, _, _ in fuse({"a": A, "b": B}, f, {"a": conf["a"], "b": None})] == plain
    # a very sure BM25 list and an unsure dense one: BM25's order wins where the plain fusion's does not
    sure = {d for d, _, _ in fuse({"a": A, "b": B}, f, {"a": ("share", 1.0), "b": ("cosine", 0.0)})[:1]}
    assert sure == {"d1"} and plain[0] == "d2"


def test_raw_scores_kept_with_none_for_missing():
    out = {d: raw for d, _, raw in fuse({"a": A, "b": B}, Fusion("rrf"))}
    assert out["d3"] == {"a": 4.0, "b": None} and out["d4"] == {"a": None, "b": 0.7}


@pytest.mark.parametrize("spec", ["bm25", "bm25+dense:rrf(k=20)", "bm25+dense:combmnz(norm=zscore)",
                                  "bm25+dense:weighted(bm25=0.3,dense=0.7,norm=minmax)",
                                  "bm25+dense:combmnz(confidence=4,centre=-0.3,norm=minmax)",
                                  "bm25+dense:combsum(confidence=2.5,centre=0.1,norm=zscore)"])
def test_spec_round_trips(spec):
    assert str(parse_pipeline(spec)) == spec
    assert str(parse_pipeline(str(parse_pipeline(spec)))) == spec


def test_spec_forms_and_errors():
    assert str(parse_pipeline("bm25+dense", "rrf")) == "bm25+dense:rrf(k=60)"
    assert str(parse_pipeline("bm25+dense")) == "bm25+dense:combmnz(confidence=4,centre=-0.3,norm=minmax)"
    assert parse_pipeline("bm25+dense").fusion == DEFAULT_FUSION
    assert str(parse_pipeline("bm25+dense", default="bm25+dense:combsum(norm=zscore)")) == \
        "bm25+dense:combsum(norm=zscore)"
    for bad, msg in [("bm25+bm25", "each once"), ("bm25:rrf", "at least two"), ("a+b:magic", "unknown fusion"),
                     ("a+b:weighted(a=1)", "needs a weight"), ("a+b:rrf(c=1)", "not one of"),
                     ("a+b:rrf(k=x)", "integer"), ("a b", "cannot parse"),
                     ("a+b:rrf(confidence=4)", "combsum and combmnz only"),
                     ("a+b:combmnz(confidence=-1)", r"\[0, 100\]"), ("a+b:combmnz(confidence=x)", "a number"),
                     ("a+b:combmnz(confidence=4,centre=3)", r"\[-1, 1\]")]:
        with pytest.raises(InputError, match=msg):
            parse_pipeline(bad)
    with pytest.raises(InputError, match="inside retriever .* with fusion, not both"):  # the parameters' names
        parse_pipeline("a+b:rrf", "rrf")


def test_grid_is_convex():
    assert DEFAULT_FUSION in candidates(["a", "b"])   # tuning can always keep the untuned default
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
    idx = _untuned_copy(small_dense_index, tmp_path)  # tune(save=True) writes the folder: not the shared one
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


def _mass(bm25_dir, text):
    """The query's BM25 mass computed here from Pyserini's index reader: the sum over its analysed terms
    (repeats included) that some passage has of log(1 + (N - df + 0.5) / (df + 0.5))."""
    import math

    from pyserini.index.lucene import LuceneIndexReader

    r = LuceneIndexReader(str(bm25_dir))
    n = r.stats()["documents"]
    total = 0.0
    for t in r.analyze(text):
        df, _ = r.get_term_counts(t, analyzer=None)
        if df:
            total += math.log(1 + (n - df + 0.5) / (df + 0.5))
    return total


def test_untuned_default_is_confidence_weighted_combmnz_and_tuning_wins(small_dense_index, small_corpus, tmp_path):
    """A bare a+b on a folder never tuned fuses with DEFAULT_FUSION (the leave-one-collection-out choice of
    benchmarks/results/defaults.md); checked against a confidence-weighted CombMNZ computed here from each
    retriever's own top 100, the BM25 mass from Pyserini's index reader and the dense top cosine."""
    import math

    idx = _untuned_copy(small_dense_index, tmp_path)
    assert idx.pipeline("bm25+dense").fusion == Fusion("combmnz", norm="minmax", confidence=4, centre=-0.3)
    qs = read_queries(small_corpus / "queries.jsonl")[:10]
    bare = idx.batch_search(qs, k=10, retriever="bm25+dense")
    lists = {n: idx.snapshot().retriever(n).batch_search(qs, 100, 1) for n in ("bm25", "dense")}
    bm25_dir = idx.path / idx.manifest["subindexes"]["bm25"]["path"]
    weights_differ = 0
    for q in qs:
        mass = _mass(bm25_dir, q.text)
        assert all(s <= mass * (1 + 1e-6) for _, s in lists["bm25"][q.qid])   # no passage beats the mass
        share = lists["bm25"][q.qid][0][1] / mass if lists["bm25"][q.qid] and mass > 0 else 0.0
        cosine = lists["dense"][q.qid][0][1]
        wb = 1 / (1 + math.exp(-4 * (share - cosine + 0.3)))
        weights_differ += abs(wb - 0.5) > 0.05
        oracle = {}
        for n, w in (("bm25", wb), ("dense", 1 - wb)):
            scores = [s for _, s in lists[n][q.qid]]
            lo, hi = min(scores), max(scores)
            for d, s in lists[n][q.qid]:
                total, count = oracle.get(d, (0.0, 0))
                oracle[d] = (total + w * (1.0 if hi == lo else (s - lo) / (hi - lo)), count + 1)
        fused = {d: t * c for d, (t, c) in oracle.items()}
        got = [(h.docid, h.score) for h in bare[q.qid]]
        want = sorted(fused.items(), key=lambda x: (-x[1], x[0]))[:10]
        assert [d for d, _ in got] == [d for d, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-5)
        one = idx.search(q.text, k=10, retriever="bm25+dense", text=False)   # one query: the same weights
        assert [h.docid for h in one] == [d for d, _ in got]
    assert weights_differ    # the weights moved away from equal for some query here
    # retr tune's fusion, once stored, takes precedence over the untuned default
    train = {}
    for line in (small_corpus / "qrels" / "test.tsv").read_text().splitlines()[1:31]:
        q, d, r = line.split("\t")
        train.setdefault(q, {})[d] = int(r)
    rep = tune(idx, qs, train, qrels_path=str(tmp_path / "train.tsv"), quiet=True, depth=100)
    assert str(idx.pipeline("bm25+dense")) == rep["spec"]
    assert idx.pipeline("bm25+dense:rrf(k=60)").fusion == Fusion("rrf", 60)   # an explicit fusion wins over both
