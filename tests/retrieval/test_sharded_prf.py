"""Pseudo-relevance feedback on sharded indexes (issues #29, #30): RM3 and Rocchio (Anserini's own
rerankers) over 2 and 3 shards give the runs of one folder holding every shard's documents, byte for
byte (TREC text: docids, ranks, scores), with default and other parameters, per search and
configured, with filters (a large one read deeper, a small one a Lucene filter), through
ShardedIndex and `retr search --index SHARDED --rm3`; the feedback model is the whole index's (the
global top documents, their term vectors from the shards that own them, the global document
frequencies), so it differs from what each shard would make of its own documents. Real Lucene, the
400 metadata passages with document vectors."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

import retrieval
from indexes.errors import ParameterError
from retrieval.bm25 import BM25Spec
from tests.conftest import retr_in_process

DV = {"bm25": BM25Spec(store_docvectors=True)}
SETTINGS = ["rm3", "rm3(fb_terms=20,fb_docs=5,original_query_weight=0.3)", "rocchio",
            "rocchio(fb_terms=5,fb_docs=3,bottom_fb_docs=5,gamma=0.15,use_negative=true)"]
FILTERS = [{"shard": "odd"},            # half the documents: one folder reads the expanded ranking deeper
           {"year": {"gte": 2017}}]     # under a quarter: a Lucene filter on the expanded query


def _queries(corpus: Path, n: int = 20) -> dict:
    lines = open(corpus / "queries.jsonl", encoding="utf-8").read().splitlines()[:n]
    return {json.loads(l)["_id"]: json.loads(l)["text"] for l in lines}


def _run(idx, queries, k=20, **kw) -> str:
    from retrieval.runs import write_run

    res = idx.batch_search(queries, k=k, **kw)
    with tempfile.TemporaryDirectory() as d:
        write_run(res, Path(d) / "run", tag="t")
        return (Path(d) / "run").read_text()


@pytest.fixture(scope="module")
def folders(tmp_path_factory, meta_corpus):
    """One folder and two shards of the 400 metadata passages, BM25 with document vectors."""
    from retrieval.sharded.write import build_sharded

    base = tmp_path_factory.mktemp("shprf")
    single = retrieval.build_index(meta_corpus, base / "single", subindexes=DV, quiet=True)
    two = build_sharded(meta_corpus, base / "two", 2, subindexes=DV, quiet=True)
    yield single, two, base
    two.close()
    single.close()


def test_rm3_and_rocchio_on_two_shards_equal_one_folder(folders, meta_corpus, small_corpus):
    single, two, _ = folders
    qs = _queries(small_corpus)
    qs.update({"stop": "the of and", "unknown": "zzqx wyvv"})   # no terms, no hits: nothing to expand from
    plain = _run(single, qs)
    assert plain == _run(two, qs)
    for prf in SETTINGS:
        want = _run(single, qs, prf=prf)
        assert want != plain, prf                      # the feedback changes the runs
        assert _run(two, qs, prf=prf) == want, prf
    # search() too, texts fetched from each hit's shard
    q = next(iter(qs.values()))
    a, b = single.search(q, k=5, prf="rocchio"), two.search(q, k=5, prf="rocchio")
    assert [(h.docid, h.score, h.title, h.text) for h in a] == [(h.docid, h.score, h.title, h.text) for h in b]
    # the model is the whole index's: each shard's own feedback (each shard folder searched alone,
    # expanding from its own top documents), merged, would rank otherwise
    from retrieval.sharded.merge import merge_lists

    want = single.batch_search(qs, k=20, prf="rm3")
    per_shard = [s.index.batch_search(qs, k=20, prf="rm3") for s in two.shards]
    naive = {q: [d for d, _ in merge_lists("score", [[(h.docid, h.score) for h in r[q]] for r in per_shard], 20)]
             for q in qs}
    assert any(naive[q] != [h.docid for h in want[q]] for q in qs)


def test_three_shards_equal_one_folder(folders, meta_corpus, small_corpus):
    from retrieval.sharded.write import build_sharded

    single, _two, base = folders
    three = build_sharded(meta_corpus, base / "three", 3, subindexes=DV, quiet=True)
    try:
        qs = _queries(small_corpus, 10)
        for prf in (SETTINGS[0], SETTINGS[3]):
            assert _run(three, qs, prf=prf) == _run(single, qs, prf=prf), prf
    finally:
        three.close()


def test_feedback_with_filters_equals_one_folder(folders, meta_corpus, small_corpus):
    single, two, _ = folders
    qs = _queries(small_corpus, 12)
    for flt in FILTERS:
        for prf in (SETTINGS[0], SETTINGS[3]):
            want = _run(single, qs, filter=flt, prf=prf)
            assert want and want != _run(single, qs, filter=flt), (flt, prf)
            assert _run(two, qs, filter=flt, prf=prf) == want, (flt, prf)


def test_configured_feedback_on_a_sharded_index(folders, meta_corpus, small_corpus):
    """configure("bm25", prf=...) as on one folder; the router keeps it (no shard's own retriever
    has feedback set); a search's prf="none" searches without it; configure(prf="none") ends it."""
    single, two, _ = folders
    qs = _queries(small_corpus, 10)
    plain = _run(single, qs)
    try:
        for ix in (single, two):
            assert ix.configure("bm25", prf=SETTINGS[1], k1=1.2) == ["bm25"]
        assert all(s.index.snapshot().retriever("bm25").feedback is None for s in two.shards)
        want = _run(single, qs)
        assert want != plain and _run(two, qs) == want
        assert _run(two, qs, prf="none") == _run(single, qs, prf="none")
        assert _run(two, qs, prf=SETTINGS[2]) == _run(single, qs, prf=SETTINGS[2])   # a search's own wins
    finally:
        for ix in (single, two):
            ix.configure("bm25", prf="none", k1=0.9)
    assert _run(two, qs) == plain


def test_retr_search_rm3_on_a_sharded_index(folders, meta_corpus, small_corpus):
    single, two, base = folders
    q = base / "queries.jsonl"
    q.write_text("".join(open(small_corpus / "queries.jsonl", encoding="utf-8").read().splitlines(True)[:8]))
    for flags in (["--rm3", "--fb-terms", "20"], ["--rocchio", "--rocchio-use-negative"]):
        runs = []
        for path in (single.path, base / "two"):
            got = retr_in_process("search", "--index", path, "--topics", q, "--hits", "10", "-q", *flags)
            assert got.returncode == 0, got.stderr
            runs.append(got.stdout)
        assert runs[0] and runs[0] == runs[1], flags


def test_the_in_process_server_s_sharded_view_takes_feedback(folders, small_corpus):
    """`retr serve` over a sharded folder (retrieval.server.sharded) passes a request's prf on: its
    hits are one folder's. (A sharded index without term vectors refusing it over HTTP:
    tests/server/test_prf_http.py.)"""
    from retrieval.server.sharded import ShardedServed

    single, _two, base = folders
    served = ShardedServed.local("two", base / "two")
    try:
        view = served.index()
        for q in list(_queries(small_corpus, 3).values()):
            for prf in ({"method": "rm3", "fb_terms": 20}, {"method": "rocchio", "use_negative": True}):
                assert [(h.docid, h.score) for h in view.search(q, k=10, text=False, prf=prf)] == \
                    [(h.docid, h.score) for h in single.search(q, k=10, text=False, prf=prf)]
    finally:
        served.close()


def test_every_round_s_arguments_and_answers_survive_pickling(folders, small_corpus):
    """What goes to a remote shard and back (Ray Serve pickles both) gives the same hits."""
    import pickle

    from retrieval.sharded.index import ShardedIndex

    def call(shards, method, args, kwargs):
        args, kwargs = pickle.loads(pickle.dumps((args, kwargs)))
        return [pickle.loads(pickle.dumps(getattr(s, method)(*args, **kwargs))) for s in shards]

    single, two, base = folders
    remote = ShardedIndex(two.shards, call=call, path=base / "two")
    qs = _queries(small_corpus, 6)
    for prf in (SETTINGS[1], SETTINGS[3]):
        assert _run(remote, qs, prf=prf) == _run(single, qs, prf=prf)
        assert _run(remote, qs, prf=prf, filter=FILTERS[0]) == _run(single, qs, prf=prf, filter=FILTERS[0])


def test_rm3_s_first_ranking_is_as_deep_as_anserini_s(folders):
    """The router reads RM3's first ranking to Anserini's rerank cutoff and Rocchio's to k, as
    retr.lucene.Feedback does; bad settings are refused as on one folder."""
    from indexes import jvm
    from retrieval.sharded.prf import RM3_DEPTH

    F = jvm.autoclass("retr.lucene.Feedback")
    assert F.rm3(10, 10, 0.5, True).depth(7) == RM3_DEPTH
    assert F.rocchio(10, 10, 10, 10, 1.0, 0.75, 0.0, False).depth(7) == 7
    _single, two, _ = folders
    with pytest.raises(ParameterError, match="fb_docs"):
        two.search("cancer", prf="rm3(fb_docs=0)")
    with pytest.raises(ParameterError, match="names its method"):
        two.configure("bm25", prf={"method": "rm4"})
