"""Filtered search equals brute-force filtering of the full ranking, for every retriever
and for fused pipelines (the definition in retrieval.index.Index.search)."""
from __future__ import annotations

import json

import pytest

from retrieval.filters import FilterError, matches, parse_filter
from tests.conftest import with_meta

QUERIES = ["aspirin colorectal cancer", "vitamin D deficiency and bone density", "stem cells in mice",
           "the", "zzzqqx unmatched"]
FILTERS = [
    {"shard": "odd"},
    {"year": {"gte": 2000, "lt": 2005}},
    {"year": 2003, "shard": "odd"},
    {"shard": {"in": ["even", "nowhere"]}, "year": {"gt": 1995}},
    {"tags": "b"},                          # list-valued metadata
    {"shard": {"in": ["odd", "even"]}},     # every document
    {"year": {"lt": 0}},                    # no document
]


_FULL = {}


def full_ranking(idx, query, retriever="bm25", **kw):
    """Every document the retriever ranks for the query, with metadata (computed once)."""
    mode = getattr(idx.snapshot().retriever("deepct"), "mode", None) if "deepct" in retriever else None
    key = (str(idx.path), query, retriever, json.dumps(kw, sort_keys=True), mode)
    if key not in _FULL:
        _FULL[key] = [(h.docid, h.score, h.metadata) for h in idx.search(query, k=len(idx), retriever=retriever,
                                                                            text=True, **kw)]
    return _FULL[key]


def brute(idx, query, k, flt, retriever="bm25", **kw):
    """The first k documents of the full ranking that pass the filter (the oracle)."""
    f = parse_filter(flt)
    return [d for d, _s, m in full_ranking(idx, query, retriever, **kw) if matches(d, m, f)][:k]


def test_parse_rejects_bad_filters():
    for bad in [[1], {"a": []}, {"a": {}}, {"a": {"gte": "x"}}, {"a": {"near": 1}}, {"a": {"in": 3}},
                {"a": {"a": 1}}, {"docid": {"gte": 1}}, {"docid": 3}, {"a": {"x": 1}}, {"": 1},
                {"a": {"gt": float("nan")}}, {"a": {"in": [{"x": 1}]}}]:
        with pytest.raises(FilterError):
            parse_filter(bad)
    assert parse_filter({}) is None and parse_filter(None) is None
    assert parse_filter({"a": 1, "b": "x"}).key == parse_filter({"b": "x", "a": 1.0}).key


def test_matching_rules():
    f = parse_filter({"y": {"gte": 2000, "lt": 2005}})
    assert matches("d", {"y": 2000}, f) and not matches("d", {"y": 2005}, f)
    assert not matches("d", {"y": "2001"}, f) and not matches("d", {}, f) and not matches("d", None, f)
    assert matches("d", {"t": ["x", "y"]}, parse_filter({"t": "y"}))
    assert not matches("d", {"b": 1}, parse_filter({"b": True})) and matches("d", {"b": True}, parse_filter({"b": True}))
    assert matches("d", {"n": None}, parse_filter({"n": None})) and not matches("d", {}, parse_filter({"n": None}))
    assert matches("d7", None, parse_filter({"docid": {"in": ["d7", "d9"]}}))


def test_metadata_table_equals_the_plain_rules(meta_dense_index):
    rows = {d: m for d, m in meta_dense_index.docstore.iter_meta()}
    for flt in FILTERS + [{"docid": {"in": list(rows)[:5] + ["missing"]}}, {"tags": {"in": ["a", "c"]}}]:
        f = parse_filter(flt)
        want = [d for d, m in rows.items() if matches(d, m, f)]
        assert meta_dense_index.snapshot().allowed(flt).docids == want, flt


@pytest.fixture(params=["auto", "native", "deepen"])
def strategy(request, monkeypatch):
    """Either way of filtering: the retriever's own filtered search, or a deeper unfiltered ranking."""
    import retrieval.index as ri

    monkeypatch.setattr(ri, "DEEPEN_SHARE", {"auto": ri.DEEPEN_SHARE, "native": 2.0, "deepen": 0.0}[request.param])
    return request.param


@pytest.mark.parametrize("retriever", ["bm25", "dense", "bm25+dense", "bm25+dense:combsum(norm=minmax)",
                                       "bm25+dense:weighted(bm25=0.3,dense=0.7,norm=zscore)"])
def test_filtered_search_is_the_filtered_full_ranking(meta_dense_index, retriever, strategy):
    for flt in FILTERS:
        for q in QUERIES:
            got = meta_dense_index.search(q, k=10, retriever=retriever, filter=flt, text=False)
            if "+" in retriever:
                want = fused_oracle(meta_dense_index, q, 10, retriever, flt)
            else:
                want = brute(meta_dense_index, q, 10, flt, retriever=retriever)
            assert [h.docid for h in got] == want, (retriever, flt, q)
            assert [h.rank for h in got] == list(range(1, len(got) + 1))


def fused_oracle(idx, q, k, spec, flt, depth=100):
    """The definition for fused pipelines: each member's full ranking, filtered, cut at the
    fusion depth; each filtered list's confidence (its retriever's, from the list's own top hit);
    fused by retrieval.fusion.fuse; the first k."""
    from retrieval.fusion import fuse, list_confidences

    p = idx.pipeline(spec)
    f = parse_filter(flt)
    lists = {name: [(d, s) for d, s, m in full_ranking(idx, q, name) if matches(d, m, f)][:max(k, depth)]
             for name in p.retrievers}
    conf = list_confidences({n: idx.snapshot().retriever(n) for n in p.retrievers}, [q], {n: [lists[n]] for n in lists})[0]
    return [d for d, _s, _raw in fuse(lists, p.fusion, conf)[:k]]


def test_filtered_scores_equal_unfiltered_scores(meta_dense_index):
    for retriever in ("bm25", "dense"):
        full = {h.docid: h.score for h in meta_dense_index.search(QUERIES[0], k=len(meta_dense_index), retriever=retriever,
                                                            text=False)}
        for h in meta_dense_index.search(QUERIES[0], k=20, retriever=retriever, filter={"shard": "odd"}):
            assert h.score == pytest.approx(full[h.docid], abs=1e-6)
            assert h.metadata["shard"] == "odd"


def test_match_all_filter_is_the_unfiltered_search(meta_dense_index):
    every = {"shard": {"in": ["odd", "even"]}}
    for retriever in ("bm25", "dense", "bm25+dense"):
        for q in QUERIES:
            a = meta_dense_index.search(q, k=10, retriever=retriever, text=False)
            b = meta_dense_index.search(q, k=10, retriever=retriever, filter=every, text=False)
            assert [(h.docid, h.score) for h in a] == [(h.docid, h.score) for h in b]


def test_id_allow_list_and_batch(meta_dense_index):
    full = [h.docid for h in meta_dense_index.search(QUERIES[0], k=50, retriever="bm25", text=False)]
    allow = full[10:50:3] + ["not-a-doc"]
    got = meta_dense_index.search(QUERIES[0], k=5, retriever="bm25", filter={"docid": {"in": allow}},
                                  text=False)
    assert [h.docid for h in got] == [d for d in full if d in allow][:5]
    res = meta_dense_index.batch_search(QUERIES, k=10, retriever="bm25", filter={"shard": "odd"})
    for i, q in enumerate(QUERIES):
        assert [h.docid for h in res[str(i)]] == brute(meta_dense_index, q, 10, {"shard": "odd"})


def test_dimsel_filtered(meta_dense_index):
    _FULL.clear()
    got = meta_dense_index.search(QUERIES[0], k=10, retriever="dense", dimsel={"mode": "prf", "alpha": 0.5},
                            filter={"shard": "odd"}, text=False)
    want = brute(meta_dense_index, QUERIES[0], 10, {"shard": "odd"}, retriever="dense",
                 dimsel={"mode": "prf", "alpha": 0.5})
    assert [h.docid for h in got] == want


def test_approximate_faiss_types_filter_through_the_selector(meta_dense_index):
    """HNSW and IVF restrict through the same selector (as approximate as unfiltered): every hit
    is allowed, and a type without selector support ranks everything and filters."""
    import numpy as np

    from indexes.faiss_index import FaissIndex

    dense = meta_dense_index.snapshot().retriever("dense")
    ids = dense._index.docids
    X = np.vstack([dense._index.index.reconstruct(i) for i in range(len(ids))])
    q = dense.encode_queries([QUERIES[0]])
    allowed = meta_dense_index.snapshot().allowed({"shard": "odd"})
    flat = FaissIndex.build(X, ids, factory="Flat", use_gpu=False)
    _, want = flat.search(q, 10, allowed=allowed)
    for factory in ("HNSW16", "IVF4,Flat", "PCA64,Flat"):
        fi = FaissIndex.build(X, ids, factory=factory, use_gpu=False)
        if factory.startswith("IVF"):
            fi.set_search_params(nprobe=4)  # every list: exact
        _, got = fi.search(q, 10, allowed=allowed)
        assert len(got[0]) == 10 and all(d in allowed for d in got[0]), factory
        if factory != "HNSW16":
            assert got[0][:5] == want[0][:5] or factory.startswith("PCA"), factory


# ----------------------------------------------------------------------------------- DeepCT
@pytest.fixture(scope="module")
def deepct_index(tmp_path_factory, scifact_dir):
    """A tiny DeepCT model (SPLADE-tiny body, one epoch on 60 passages) over a metadata corpus."""
    import retrieval
    from retrieval.deepct.subindex import DeepCTSpec
    from retrieval.deepct.train import TrainConfig, train_deepct
    from retrieval.writer import add_subindex

    base = tmp_path_factory.mktemp("dct")
    pairs = [l.split("\t") for l in (scifact_dir / "qrels" / "train.tsv").read_text().splitlines()[1:]][:20]
    wanted = {d for _q, d, _r in pairs}
    docs, rest = [], []
    for line in open(scifact_dir / "corpus.jsonl", encoding="utf-8"):
        (docs if json.loads(line)["_id"] in wanted else rest).append(line)
    (base / "src").mkdir()
    (base / "src" / "corpus.jsonl").write_text("".join(docs + rest[:60 - len(docs)]), encoding="utf-8")
    qids = {q for q, _d, _r in pairs}
    (base / "queries.jsonl").write_text("".join(l for l in open(scifact_dir / "queries.jsonl", encoding="utf-8")
                                                if json.loads(l)["_id"] in qids), encoding="utf-8")
    (base / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d, _ in pairs))
    corpus = with_meta(base / "src", base / "meta")
    train_deepct(corpus, base / "M", base / "queries.jsonl", base / "qrels.tsv",
                 TrainConfig(base="splade-tiny", epochs=1, lr=1e-3, max_length=64, dev_fraction=0.0), quiet=True)
    idx = retrieval.build_index(corpus, base / "IDX", quiet=True)
    return add_subindex(idx, DeepCTSpec(model=str(base / "M"), mode="impact", scale="linear", tune=False,
                                        tune_fusion=False), quiet=True)


@pytest.mark.parametrize("mode", ["impact", "bm25"])
def test_deepct_filtered_is_the_filtered_full_ranking(deepct_index, mode, strategy):
    deepct_index.configure("deepct", mode=mode)
    for flt in FILTERS[:4]:
        for q in QUERIES[:3]:
            for retriever in ("deepct", "bm25+deepct"):
                got = [h.docid for h in deepct_index.search(q, k=5, retriever=retriever, filter=flt, text=False)]
                want = (brute(deepct_index, q, 5, flt, retriever=retriever) if "+" not in retriever
                        else fused_oracle(deepct_index, q, 5, retriever, flt))
                assert got == want, (mode, retriever, flt, q)


def test_filtered_search_after_live_changes(tmp_path, meta_dense_index, strategy):
    """After deletions and an update (the live index: Lucene deletes, faiss delta rows and a
    deletion mask, a new document-store generation) filters still equal the filtered full ranking."""
    import shutil

    import retrieval
    from retrieval.types import Document
    from retrieval.writer import delete_documents, update_documents

    shutil.copytree(meta_dense_index.path, tmp_path / "L")
    idx = retrieval.open_index(tmp_path / "L")
    ranked = [h.docid for h in idx.search(QUERIES[0], k=20, text=False)]
    delete_documents(idx, ranked[:3], quiet=True)
    update_documents(idx, [Document(ranked[5], "aspirin colorectal cancer trial", "", {"shard": "odd", "year": 2003})],
                     quiet=True)
    _FULL.clear()
    for flt in (FILTERS[0], FILTERS[2], {"docid": {"in": ranked[:8]}}):
        for retriever in ("bm25", "dense", "bm25+dense"):
            got = [h.docid for h in idx.search(QUERIES[0], k=10, retriever=retriever, filter=flt, text=False)]
            want = (brute(idx, QUERIES[0], 10, flt, retriever=retriever) if "+" not in retriever
                    else fused_oracle(idx, QUERIES[0], 10, retriever, flt))
            assert got == want, (retriever, flt)
            assert not set(got) & set(ranked[:3])
    _FULL.clear()
