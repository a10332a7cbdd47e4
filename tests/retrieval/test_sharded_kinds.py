"""Sharded indexes with DeepCT and SPLADE sub-indexes (issue #30): two shards give the single
folder's runs byte for byte (TREC text) for every DeepCT variant (impact and BM25 over pseudo term
frequencies, both weight scales, DeepCT-Query), SPLADE (both query weightings) and fused
pipelines over them, with and without filters, and after additions, updates and deletions made
through `retr add/update/delete --index` on both. Real Lucene, a DeepCT model trained here on
SPLADE-tiny, the bundled SPLADE-tiny."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from tests.conftest import judged_slice, retr_in_process, with_meta

# (retriever, configure options or None)
DEEPCT = [("deepct", {"mode": m, "scale": s}) for m in ("impact", "bm25") for s in ("linear", "sqrt")]
RUNS = DEEPCT + [("deepct", {"mode": "bm25", "scale": "linear", "k1": 1.2, "b": 0.75}),
                 ("deepct-query", None), ("splade", {"query": "splade"}), ("splade", {"query": "tokens"}),
                 ("bm25+deepct", None), ("bm25+deepct+splade", None), ("deepct+splade:rrf(k=60)", None),
                 ("splade+deepct-query:combsum(norm=minmax)", None)]
FILTERS = [None, {"shard": "odd"}, {"year": {"gte": 1995}}]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, scifact_dir):
    """80 SciFact passages (those judged for 20 training queries first) with conftest's metadata,
    and those queries with their qrels (the DeepCT model trains on them)."""
    src, out = tmp_path_factory.mktemp("sk-src"), tmp_path_factory.mktemp("sk-data")
    judged_slice(scifact_dir, 20, 80, src, out)
    return with_meta(src, out)


@pytest.fixture(scope="module")
def model(tmp_path_factory, corpus):
    import warnings

    from retrieval.deepct.train import TrainConfig, train_deepct

    out = tmp_path_factory.mktemp("sk-model") / "M"
    cfg = TrainConfig(base="splade-tiny", epochs=1, lr=1e-3, batch_size=8, max_length=64, dev_fraction=0.0,
                      max_windows=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train_deepct(corpus, out, queries=corpus / "queries.jsonl", qrels=corpus / "qrels" / "train.tsv",
                     cfg=cfg, quiet=True)
    return out


def _specs(model):
    from retrieval.deepct.subindex import DeepCTSpec
    from retrieval.splade.subindex import SpladeSpec

    return {"deepct": DeepCTSpec(model=str(model), mode="bm25", scale="linear", tune=False, tune_fusion=False,
                                 max_length=64),
            "splade": SpladeSpec(max_length=64)}


@pytest.fixture(scope="module")
def pair(tmp_path_factory, corpus, model):
    import retrieval
    from retrieval.sharded.write import build_sharded

    base = tmp_path_factory.mktemp("sk")
    single = retrieval.build_index(corpus, base / "single", subindexes=_specs(model), quiet=True)
    sharded = build_sharded(corpus, base / "sharded", 2, subindexes=_specs(model), quiet=True)
    yield single, sharded
    sharded.close()
    single.close()


def _queries(corpus: Path) -> dict:
    qs = {json.loads(l)["_id"]: json.loads(l)["text"] for l in open(corpus / "queries.jsonl", encoding="utf-8")}
    qs.update({"short": "cell", "two": "cancer risk", "none": "zzzqx"})  # ties, and a query with no hits
    return qs


def _run_text(idx, queries, retriever, filter, k=30) -> str:
    from retrieval.runs import write_run

    res = idx.batch_search(queries, k=k, retriever=retriever, filter=filter)
    with tempfile.TemporaryDirectory() as d:
        write_run(res, Path(d) / "run", tag="t")
        return (Path(d) / "run").read_text()


def _same(single, sharded, queries, runs=RUNS, filters=FILTERS):
    unequal = []
    for retriever, opts in runs:
        for idx in (single, sharded):
            idx.configure(retriever, **(opts or {}))
        for flt in filters:
            a, b = _run_text(single, queries, retriever, flt), _run_text(sharded, queries, retriever, flt)
            assert a, (retriever, opts, flt)
            if a != b:
                unequal.append((retriever, opts, flt))
    # back to the defaults the fixtures were built with
    for idx in (single, sharded):
        for name in ("deepct", "deepct-query"):
            idx.configure(name, mode="bm25", scale="linear", k1=20.0, b=0.9)
        idx.configure("splade", query="splade")
    assert not unequal, unequal


def test_deepct_and_splade_runs_equal_the_single_folder_s(pair, corpus):
    single, sharded = pair
    assert len(single) == len(sharded) == 80
    assert {"deepct", "deepct-query", "splade"} <= set(sharded.retrievers)
    assert all(s.count() > 20 for s in sharded.shards)
    # SPLADE's query backend is decided once per build, the same for the folder and every shard (ONNX on a CPU)
    qb = [i.manifest["subindexes"]["splade"]["config"]["query_backend"]
          for i in (single, *(s.index for s in sharded.shards))]
    assert qb == ["onnx"] * 3, qb
    _same(single, sharded, _queries(corpus))
    q = "vitamin d and bone density"
    for retriever in ("deepct", "splade", "bm25+deepct+splade"):
        a = single.search(q, k=5, retriever=retriever, ranks=True)
        b = sharded.search(q, k=5, retriever=retriever, ranks=True)
        assert [(h.docid, h.score, h.scores, h.ranks, h.text) for h in a] == \
            [(h.docid, h.score, h.scores, h.ranks, h.text) for h in b], retriever


def test_explain_equals_the_single_folder_s(pair, corpus):
    """ShardedIndex.explain (tests/retrieval/test_sharded_explain.py has BM25, dense and fusions) for
    DeepCT's BM25 over pseudo term frequencies (Lucene's explanation under the global statistics),
    its impact variant, DeepCT-Query, SPLADE and a fusion of them: the folder's dict."""
    from tests.retrieval.test_sharded_explain import assert_same

    single, sharded = pair
    q = "vitamin d and bone density"
    try:
        for retriever, opts in [("deepct", None), ("deepct", {"mode": "impact"}), ("deepct-query", None),
                                ("splade", None), ("bm25+deepct+splade", None)]:
            for idx in (single, sharded):
                idx.configure(retriever, **(opts or {}))
            hits = single.search(q, k=30, retriever=retriever, text=False)
            for h in hits[:2] + hits[-1:]:
                assert_same(single.explain(q, h.docid, retriever=retriever, depth=20),
                            sharded.explain(q, h.docid, retriever=retriever, depth=20))
    finally:
        for idx in (single, sharded):
            idx.configure("deepct", mode="bm25", scale="linear", k1=20.0, b=0.9)
    m = sharded.explain(q, hits[0].docid, retriever="deepct")["retrievers"]["deepct"]
    assert m["details"]["mode"] == "bm25" and m["details"]["docs"] == len(single) == 80


def _folders(path) -> list:
    from indexes import sharded as sh

    return sh.shard_paths(path, sh.read(path)) if sh.is_sharded(path) else [Path(path)]


def _stored(path) -> tuple:
    """The DeepCT term weights stored for every document (the shards' together) and the DeepCT
    manifest entry of each folder."""
    from indexes import manifest as mf
    from retrieval.deepct.weights import read_weights

    weights, entries = {}, []
    for p in _folders(path):
        e = mf.read_manifest(p)["subindexes"]["deepct"]
        entries.append(e)
        weights.update(read_weights(p / e["path"]))
    return weights, entries


def test_a_shard_s_own_batches_would_weight_otherwise(corpus, model):
    """Why the shards share one encoding: the weights a shard's passages get in batches of their own
    differ in the last float bits from those they get in one folder's batches."""
    from indexes.sharded import shard_of
    from retrieval.collections import read_corpus
    from retrieval.deepct.subindex import shared_weights

    docs = list(read_corpus(corpus))
    spec = _specs(model)["deepct"]
    whole = shared_weights(docs, spec=spec, quiet=True)["weights"]
    part = [d for d in docs if shard_of(d.docid, 2) == 0]
    own = shared_weights(part, spec=spec, quiet=True)["weights"]
    assert sum(own[d.docid] != whole[d.docid] for d in part) > 0


def test_the_shards_store_the_folder_s_weights_without_encoding(pair):
    """Every document's stored DeepCT weights are the folder's, and no shard encoded: the sharded
    build encoded once for all of them (each shard's entry says where its weights came from); the
    same for SPLADE's impacts."""
    from indexes import manifest as mf

    single, sharded = pair
    a, single_entries = _stored(single.path)
    b, shard_entries = _stored(sharded.path)
    assert len(a) == 80 and a == b
    assert [e["weights_from"] for e in single_entries] == ["encoded"]
    assert all(e["weights_from"] == "the sharded index's build (encoded once for every shard)"
               and e["encoded_by"]["executor"] == "in-process" for e in shard_entries), shard_entries
    splade = [mf.read_manifest(p)["subindexes"]["splade"]["impacts_from"] for p in _folders(sharded.path)]
    assert mf.read_manifest(single.path)["subindexes"]["splade"]["impacts_from"] == "encoded"
    assert splade == ["the sharded index's build (encoded once for every shard)"] * 2


def test_three_shards_store_the_folder_s_weights(pair, model, corpus, tmp_path):
    """In its shard's own batches one passage of this corpus gets another stored (5-decimal) weight at
    3 shards than in the folder's (measured when shards encoded their own parts: 13 of 80 passages' float
    weights differed, one at the stored precision; at 2 shards only below it): the shards store the
    folder's weights."""
    from retrieval.sharded.write import build_sharded

    single, _sharded = pair
    spec = {"deepct": _specs(model)["deepct"]}
    build_sharded(corpus, tmp_path / "s3", 3, subindexes=spec, quiet=True).close()
    a, _e = _stored(single.path)
    b, entries = _stored(tmp_path / "s3")
    assert len(entries) == 3 and a == b


# no collection statistics: exact after any history of changes
IMPACT = DEEPCT[:2] + [("splade", {"query": "splade"}), ("splade", {"query": "tokens"}),
                       ("deepct+splade:rrf(k=60)", None), ("deepct-query", {"mode": "impact", "scale": "linear"}),
                       ("splade+deepct-query:combsum(norm=minmax)", None)]


def test_writes_through_the_cli_keep_the_runs_equal(pair, corpus, tmp_path):
    """Additions, an update and deletions through `retr` on the sharded index, the same through the
    library on the folder. Impact scores (DeepCT's impact variants, SPLADE) stay equal right away;
    BM25's statistics (BM25 and DeepCT's BM25 over pseudo term frequencies) count deleted documents
    until Lucene merges them away, which each shard and the folder do on their own segments, so
    those runs are equal again once `retr compact` has expunged the deleted documents on both.
    The commands run retr's entry point in this process (tests.conftest.retr_in_process): the
    sharded add, update, delete, compact and check in a process of their own are
    tests/retrieval/test_sharded_long_reader.py's, and test_sharded.py's check."""
    from indexes import manifest as mf
    from retrieval import writer
    from retrieval.collections import read_corpus

    single, sharded = pair
    new = tmp_path / "new.jsonl"
    rows = [{"_id": f"n{i}", "title": f"added {i}", "text": f"vitamin d receptor and bone cells, study {i}",
             "metadata": {"shard": "odd", "year": 2001}} for i in range(6)]
    new.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    upd = tmp_path / "upd.jsonl"
    upd.write_text(json.dumps({"_id": "n3", "title": "changed", "text": "stem cells and cancer risk",
                               "metadata": {"shard": "even", "year": 1990}}) + "\n", encoding="utf-8")
    ids = [json.loads(l)["_id"] for l in open(corpus / "corpus.jsonl", encoding="utf-8")][3:11] + ["n5"]
    for args in (["add", "--corpus", new], ["update", "--corpus", upd], ["delete", *ids]):
        r = retr_in_process(args[0], "--index", sharded.path, *args[1:], "-q")
        assert r.returncode == 0, r.stderr
    writer.add_documents(single.path, list(read_corpus(new)), quiet=True).close()
    writer.update_documents(single.path, list(read_corpus(upd)), quiet=True).close()
    writer.delete_documents(single.path, ids, quiet=True).close()
    single.refresh()
    a, single_entries = _stored(single.path)  # deleted documents' weights stay until compaction, in both
    b, shard_entries = _stored(sharded.path)
    assert len(a) == 80 + 6 and a == b
    assert [e["added_weights_from"] for e in single_entries] == ["encoded"]
    assert [e["added_weights_from"] for e in shard_entries] == \
        ["the sharded index's change (encoded once for every shard)"] * 2
    assert [mf.read_manifest(p)["subindexes"]["splade"]["added_impacts_from"] for p in _folders(sharded.path)] == \
        ["the sharded index's change (encoded once for every shard)"] * 2
    assert len(sharded) == len(single) == 80 + 6 - 9
    qs = _queries(corpus)
    _same(single, sharded, qs, runs=IMPACT)
    for retriever in ("deepct", "splade", "bm25"):
        assert not set(ids) & {h.docid for hs in sharded.batch_search(qs, k=100, retriever=retriever).values()
                               for h in hs}
    assert retr_in_process("compact", "--index", sharded.path, "-q").returncode == 0
    writer.compact(single.path, quiet=True).close()
    single.refresh()
    r = retr_in_process("check", "--index", sharded.path, "--full")
    assert r.returncode == 0 and "every document routes to shard 1 of 2" in r.stdout, r.stdout + r.stderr
    _same(single, sharded, qs, runs=RUNS + [("bm25", None)])
