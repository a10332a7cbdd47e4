"""Sharded indexes (issue #30): N folders searched as one give the single folder's runs, byte for
byte (TREC text), for BM25 (global statistics through the Java helper), dense, and fused pipelines
(the default confidence-weighted fusion reads BM25's query mass under the global statistics), with
and without filters, and after additions, updates and deletions routed to the shards; writes keep
every shard checkable; a damaged sharded folder is one error line. Real Lucene, faiss and MiniLM."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from indexes import sharded as sh
from tests.conftest import encoded_by, retr_in_process, run_retr

PIPELINES = ["bm25", "dense", "bm25+dense", "bm25+dense:rrf(k=60)"]
FILTERS = [None, {"shard": "odd"}, {"year": {"gte": 2000}}, {"docid": {"in": []}}]


def _queries(corpus: Path) -> dict:
    return {json.loads(l)["_id"]: json.loads(l)["text"] for l in open(corpus / "queries.jsonl", encoding="utf-8")}


def _run_text(idx, queries, retriever, filter, k=50, **kw) -> str:
    from retrieval.runs import write_run
    import tempfile

    res = idx.batch_search(queries, k=k, retriever=retriever, filter=filter, **kw)
    with tempfile.TemporaryDirectory() as d:
        write_run(res, Path(d) / "run", tag="t")
        return (Path(d) / "run").read_text()


@pytest.fixture(scope="module")
def pair(tmp_path_factory, meta_corpus, small_dense_index):
    """The 400 metadata passages as one folder and as two shards, both with BM25 and dense. The
    sharded build encodes them (once for both shards); the single folder takes the vectors MiniLM
    made of the same texts for the session's shared dense index (its texts are meta_corpus's), as
    conftest's meta_dense_index does, instead of encoding the 400 a second time here. BM25 stores
    document vectors (for feedback; they change no ranking)."""
    import retrieval
    from retrieval.bm25 import BM25Spec
    from retrieval.dense.subindex import DenseSpec
    from retrieval.sharded.write import build_sharded

    base = tmp_path_factory.mktemp("sharded")
    subs = {"bm25": BM25Spec(store_docvectors=True), "dense": DenseSpec()}
    single = retrieval.build_index(meta_corpus, base / "single", subindexes=subs, quiet=True,
                                   precomputed=encoded_by(small_dense_index))
    assert single.manifest["subindexes"]["dense"]["vectors_from"] != "encoded"
    sharded = build_sharded(meta_corpus, base / "sharded", 2, subindexes=subs, quiet=True)
    yield single, sharded, base
    sharded.close()
    single.close()


def _same(single, sharded, queries, filters=FILTERS, pipelines=PIPELINES):
    for retriever in pipelines:
        for flt in filters:
            a = _run_text(single, queries, retriever, flt)
            b = _run_text(sharded, queries, retriever, flt)
            assert a == b, (retriever, flt)
            assert a or flt == {"docid": {"in": []}}


def test_runs_equal_the_single_folder_s(pair, small_corpus):
    single, sharded, base = pair
    assert len(sharded) == len(single) == 400
    counts = [s.count() for s in sharded.shards]
    assert min(counts) > 100 and sum(counts) == 400       # both shards hold documents
    _same(single, sharded, _queries(small_corpus))
    q = next(iter(_queries(small_corpus).values()))
    a, b = single.search(q, k=5), sharded.search(q, k=5)  # search() fetches texts from each hit's shard
    assert [(h.docid, h.score, h.title, h.text, h.metadata) for h in a] == \
        [(h.docid, h.score, h.title, h.text, h.metadata) for h in b]
    from indexes.errors import FilterWarning

    with pytest.warns(FilterWarning, match="carried by no document"):
        assert sharded.search(q, k=5, filter={"colour": "red"}) == []
    ra = single.search(q, k=5, retriever="bm25+dense", ranks=True)
    rb = sharded.search(q, k=5, retriever="bm25+dense", ranks=True)
    assert [(h.docid, h.score, h.scores, h.ranks) for h in ra] == [(h.docid, h.score, h.scores, h.ranks) for h in rb]


def _rows(hits):
    return [(h.docid, h.score, h.title, h.text, h.metadata) for h in hits]


def test_a_snapshot_and_the_docstore_answer_as_the_folder_s(pair, small_corpus):
    """ShardedIndex.snapshot() and .docstore have Index's surface and answers: a snapshot's searches,
    batch searches, explanations, documents, count, docstore rows (get, get_many, len) and description
    equal the single folder's snapshot's on the same documents."""
    from tests.retrieval.test_sharded_explain import assert_same

    single, sharded, _base = pair
    qs = _queries(small_corpus)
    q = next(iter(qs.values()))
    with single.snapshot() as a, sharded.snapshot() as b:
        assert len(a) == len(b) == len(single)
        for retriever in ("bm25", "bm25+dense"):
            for flt in (None, {"shard": "odd"}):
                assert _rows(a.search(q, k=8, retriever=retriever, filter=flt)) == \
                    _rows(b.search(q, k=8, retriever=retriever, filter=flt)), (retriever, flt)
        ra, rb = a.batch_search(qs, k=5, retriever="bm25+dense"), b.batch_search(qs, k=5, retriever="bm25+dense")
        assert {k: _rows(v) for k, v in ra.items()} == {k: _rows(v) for k, v in rb.items()}
        top = a.search(q, k=3, text=False)
        assert_same(a.explain(q, top[1].docid, retriever="bm25+dense", depth=10),
                    b.explain(q, top[1].docid, retriever="bm25+dense", depth=10))
        ids = [h.docid for h in top] + ["no-such-doc"]
        assert [b.get(d) for d in ids] == [a.get(d) for d in ids] and a.get(ids[0]) is not None
        for x, y in ((a.docstore, b.docstore), (single.docstore, sharded.docstore)):
            assert y.get(ids[0]) == x.get(ids[0]) and y.get("no-such-doc") is None
            assert y.get_many(ids[::-1]) == x.get_many(ids[::-1]) and list(y.get_many(ids[::-1])) == ids[2::-1]
            assert len(y) == len(x)
        assert b.retrievers == a.retrievers and str(b.pipeline("bm25+dense")) == str(a.pipeline("bm25+dense"))
        assert {n: e["doc_count"] for n, e in b.manifest["subindexes"].items()} == \
            {n: len(a) for n in a.retrievers}
        assert [x["documents"] for x in b.shards] == [s.count() for s in sharded.shards]
        assert b.generation == sum(x["generation"] for x in b.shards)
    from indexes.errors import InputError

    with pytest.raises(InputError, match="closed"):
        b.search(q)


def test_a_snapshot_holds_one_commit_while_a_write_lands(pair, small_corpus, tmp_path):
    """A sharded snapshot keeps reading the commit it was taken at while a write through the sharded
    index deletes documents from both shards and adds one: its searches, count and documents are the
    old commit's; the index itself, and a new snapshot, read the new one."""
    import retrieval
    from retrieval.sharded import write as sw
    from retrieval.sharded.index import ShardedIndex

    _single, _sharded, base = pair
    shutil.copytree(base / "sharded", tmp_path / "SH")
    q = next(iter(_queries(small_corpus).values()))
    with ShardedIndex.open(tmp_path / "SH") as ix:
        snap = ix.snapshot()
        before, n = _rows(snap.search(q, k=10, retriever="bm25+dense")), len(snap)
        gone = [r[0] for r in before[:4]]
        assert {sh.shard_of(d, 2) for d in gone} == {0, 1}
        sw.delete_documents(tmp_path / "SH", gone, quiet=True)
        sw.write_documents(tmp_path / "SH", [retrieval.Document("new1", q, "new")], "add", quiet=True)
        try:
            assert len(ix) == n - 3 and ix.get("new1") is not None and ix.get(gone[0]) is None
            assert gone[0] not in [h.docid for h in ix.search(q, k=10)]
            assert _rows(snap.search(q, k=10, retriever="bm25+dense")) == before
            assert len(snap) == len(snap.docstore) == n
            assert snap.get("new1") is None and snap.docstore.get("new1") is None
            assert [snap.get(d).docid for d in gone] == gone and list(snap.docstore.get_many(gone)) == gone
            assert [h.docid for h in snap.batch_search({"q": q}, k=10, retriever="bm25+dense")["q"]] == [r[0] for r in before]
            with ix.snapshot() as now:
                assert len(now) == n - 3 and now.generation > snap.generation
                assert now.docstore.get("new1")[1:3] == ("new", q)
        finally:
            snap.close()


def test_rounds_are_left_out_where_they_change_nothing(pair, small_corpus):
    """Dense alone reads no statistics (no statistics round); an unfused search with text gets its texts
    with the shards' lists (no fetch round); BM25 keeps its statistics round and a fusion its fetch (one
    call for both shards) after its confidence round. Every answer equals the single folder's, texts included."""
    from retrieval.sharded.index import ShardedIndex, call_each

    single, _sharded, base = pair
    rounds = []

    def counting(shards, method, args, kwargs):  # the in-process caller, each round written down
        rounds.append(method)
        return call_each(shards, method, args, kwargs)

    q = next(iter(_queries(small_corpus).values()))
    with ShardedIndex.open(base / "sharded") as ix:
        ix._call = counting
        for retriever, text, want in (("dense", True, ["search"]), ("dense", False, ["search"]),
                                      ("bm25", True, ["stats", "search"]),
                                      ("bm25+dense", True, ["stats", "search", "confidence", "fetch"])):
            rounds.clear()
            got = ix.search(q, k=5, retriever=retriever, text=text)
            assert rounds == want, retriever
            assert [(h.docid, h.score, h.title, h.text, h.metadata) for h in got] == \
                [(h.docid, h.score, h.title, h.text, h.metadata) for h in single.search(q, k=5, retriever=retriever,
                                                                                        text=text)]


def test_bm25_parameters_apply_to_every_shard(pair, small_corpus):
    single, sharded, _ = pair
    qs = _queries(small_corpus)
    try:
        single.configure("bm25", k1=1.2, b=0.75)
        sharded.configure("bm25", k1=1.2, b=0.75)
        _same(single, sharded, qs, filters=[None, {"shard": "even"}], pipelines=["bm25"])
        assert _run_text(single, qs, "bm25", None) != _run_text(single.__class__.open(single.path), qs, "bm25", None)
    finally:
        single.configure("bm25", k1=0.9, b=0.4)
        sharded.configure("bm25", k1=0.9, b=0.4)


def test_dimension_selection_that_reads_documents_is_refused(pair, small_corpus):
    """PRF-DIME (``prf``) and the oracle choose dimensions from documents: each shard would choose from
    its own (at 2 shards every one of 15 queries ranked otherwise than one folder), so a sharded index
    refuses them, in every entry point, with one error naming the option; one folder takes them."""
    from indexes.errors import ParameterError
    from tests.conftest import retr_in_process

    single, sharded, base = pair
    q = next(iter(_queries(small_corpus).values()))
    assert single.search(q, k=5, retriever="dense", dimsel={"mode": "prf", "prf_k": 3})
    for sel in ("prf", {"mode": "prf", "prf_k": 3}, {"mode": "oracle", "qrels": {}}):
        with pytest.raises(ParameterError, match="not available on a sharded index"):
            sharded.search(q, k=5, retriever="dense", dimsel=sel)
    with pytest.raises(ParameterError, match="dimsel prf is not available"):
        sharded.batch_search({"q": q}, k=5, retriever="bm25+dense", dimsel="prf")
    with pytest.raises(ParameterError, match="not available on a sharded index"):
        sharded.explain(q, sharded.search(q, k=1)[0].docid, retriever="dense", dimsel="prf")
    with pytest.raises(ParameterError, match="not available on a sharded index"):
        sharded.configure("dense", dimsel={"mode": "prf"})
    assert sharded.search(q, k=5, retriever="dense")  # nothing stuck
    qf = base / "q.jsonl"
    qf.write_text('{"_id": "1", "text": "%s"}\n' % q.replace('"', ""), encoding="utf-8")
    r = retr_in_process("search", "--index", sharded.path, "--queries", qf, "--retriever", "dense",
                        "--dimsel", "prf", "-o", base / "out.trec")
    assert r.returncode != 0 and "--dimsel prf is not available on a sharded index" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (base / "out.trec").exists()


def test_feedback_in_a_fused_pipeline_equals_the_single_folder_s(pair, small_corpus):
    """RM3 and Rocchio on BM25 fused with dense (the default confidence-weighted fusion, which reads
    BM25's query mass, and RRF), with and without a filter: one folder's runs
    (tests/retrieval/test_sharded_prf.py has BM25 alone, 3 shards, the CLI and the server)."""
    single, sharded, _ = pair
    qs = dict(list(_queries(small_corpus).items())[:8])   # each dense search encodes its queries: kept few
    for prf, retriever, flt in (("rm3", "bm25+dense", None),
                                ("rocchio(use_negative=true,gamma=0.15)", "bm25+dense:rrf(k=60)", {"shard": "odd"})):
        want = _run_text(single, qs, retriever, flt, prf=prf)
        assert _run_text(sharded, qs, retriever, flt, prf=prf) == want, (prf, retriever, flt)
    assert want != _run_text(single, qs, retriever, flt)   # the feedback changes the fused run


def test_writes_route_to_shards_and_keep_the_runs_equal(pair, meta_corpus, small_corpus, tmp_path):
    """Additions, updates and deletions through retr (the CLI) on both; every shard passes retr
    check, each document lives in the shard its hash names, and the runs still agree."""
    single, sharded, base = pair
    new = tmp_path / "new.jsonl"
    rows = [{"_id": f"n{i}", "title": f"added {i}", "text": f"vitamin d receptor study number {i} of cells",
             "metadata": {"shard": "odd", "year": 2001}} for i in range(12)]
    new.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    upd = tmp_path / "upd.jsonl"
    upd.write_text(json.dumps({"_id": "n3", "title": "changed", "text": "stem cells and bone"}) + "\n", encoding="utf-8")
    ids = [json.loads(l)["_id"] for l in open(meta_corpus / "corpus.jsonl", encoding="utf-8")][5:25]
    # both through the CLI's entry point in this process: these commands' own processes on a sharded
    # folder are test_sharded_long_reader's and test_sharded_atomic's, on a folder test_live's
    for path in (single.path, sharded.path):
        for args in (["add", "--corpus", new], ["update", "--corpus", upd], ["delete", *ids, "n5"]):
            r = retr_in_process(args[0], "--index", path, *args[1:], "-q")
            assert r.returncode == 0, r.stderr
    r = run_retr("check", "--index", sharded.path, "--full")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every document routes to shard 0 of 2" in r.stdout and "every document routes to shard 1 of 2" in r.stdout
    single.refresh()
    assert len(sharded) == len(single) == 400 + 12 - 21
    for i, s in enumerate(sharded.shards):
        for d, _m in s.index.docstore.iter_meta():
            assert sh.shard_of(d, 2) == i
    # Before compaction only what reads no collection statistics is guaranteed equal: Lucene counts a
    # deleted document in BM25's statistics until a merge drops it, and the folder and the shards merge
    # their own segments (README, Limits). No deleted document may show anywhere, BM25 included.
    _same(single, sharded, _queries(small_corpus), pipelines=["dense"])
    gone = set(ids) | {"n5"}
    for idx in (single, sharded):
        res = idx.batch_search(_queries(small_corpus), k=400, retriever="bm25+dense")
        assert not gone & {h.docid for hs in res.values() for h in hs}
    for path in (single.path, sharded.path):
        assert retr_in_process("compact", "--index", path, "-q").returncode == 0
    single.refresh()
    _same(single, sharded, _queries(small_corpus))


def test_check_finds_a_document_in_the_wrong_shard(tmp_path, small_corpus):
    from retrieval import writer
    from retrieval.sharded.write import build_sharded, check_sharded
    from retrieval.types import Document

    build_sharded(small_corpus, tmp_path / "S", 2, quiet=True).close()
    assert check_sharded(tmp_path / "S").ok
    stray = next(f"x{i}" for i in range(100) if sh.shard_of(f"x{i}", 2) == 1)
    writer.add_documents(tmp_path / "S" / "shard-000", [Document(stray, "misplaced text")], quiet=True).close()
    rep = check_sharded(tmp_path / "S")
    assert not rep.ok and any(stray in p and "another shard" in p for p in rep.problems), rep.problems


def test_cli_builds_and_searches_a_sharded_index(tmp_path, small_corpus):
    out = tmp_path / "S"
    r = run_retr("index", "--corpus", small_corpus, "--index", out, "--shards", "3", "-q")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["shard-000", "shard-001", "shard-002", "shards.json"]
    # the single folder (the reference) through the same entry point in this process
    r = retr_in_process("index", "--corpus", small_corpus, "--index", tmp_path / "one", "-q")
    assert r.returncode == 0, r.stderr
    for where, retr in ((out, run_retr), (tmp_path / "one", retr_in_process)):
        r = retr("search", "--index", where, "--queries", small_corpus / "queries.jsonl", "--k", "100",
                 "-o", where.with_suffix(".run"), "-q")
        assert r.returncode == 0, r.stderr
    assert out.with_suffix(".run").read_bytes() == (tmp_path / "one").with_suffix(".run").read_bytes()
    r = run_retr("search", "--index", out, "cancer cells", "--k", "3")
    assert r.returncode == 0 and r.stdout.count("\n") >= 3, r.stderr
    r = run_retr("info", "--index", out)
    assert r.returncode == 0 and "3 shards" in r.stdout and "400" in r.stdout


def _one_line(r):
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("retr: error:") and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_a_damaged_sharded_folder_is_one_error_line(tmp_path, small_corpus):
    from retrieval.sharded.write import build_sharded

    a, b = tmp_path / "A", tmp_path / "B"
    build_sharded(small_corpus, a, 2, quiet=True).close()
    build_sharded(small_corpus, b, 2, quiet=True).close()
    # the first damage in a real `retr` process, the others through the same entry point in this one
    search = lambda: retr_in_process("search", "--index", a, "cancer", "--k", "3")  # noqa: E731
    assert search().returncode == 0
    # a shard folder from another sharded index
    shutil.move(a / "shard-001", tmp_path / "kept")
    shutil.copytree(b / "shard-001", a / "shard-001")
    assert "a shard of another sharded index" in _one_line(run_retr("search", "--index", a, "cancer", "--k", "3"))
    # a shard folder missing
    shutil.rmtree(a / "shard-001")
    assert "shard 1 of 2 is missing" in _one_line(search())
    shutil.move(tmp_path / "kept", a / "shard-001")
    assert search().returncode == 0
    # shards swapped: each records its own position
    shutil.move(a / "shard-000", tmp_path / "x")
    shutil.move(a / "shard-001", a / "shard-000")
    shutil.move(tmp_path / "x", a / "shard-001")
    assert "lists it as shard" in _one_line(search())
    shutil.move(a / "shard-000", tmp_path / "x")
    shutil.move(a / "shard-001", a / "shard-000")
    shutil.move(tmp_path / "x", a / "shard-001")
    good = json.loads((a / "shards.json").read_text())
    tampered = [dict(good, folders=["shard-000", "../B/shard-001"]), dict(good, shards=3),
                dict(good, folders=["shard-000", "shard-000"]), dict(good, id="x"), dict(good, shards=True),
                dict(good, routing="python-hash"), [1, 2], dict(good, format_version=99)]
    for bad in tampered:
        (a / "shards.json").write_text(json.dumps(bad))
        line = _one_line(search())
        assert "shards.json" in line, line
    (a / "shards.json").write_text("{not json")
    assert "unreadable sharded manifest" in _one_line(search())
    (a / "shards.json").write_text(json.dumps(good))
    assert run_retr("check", "--index", a).returncode == 0
    assert "no document ids" not in _one_line(run_retr("delete", "--index", a, "nope-not-there"))
    (a / "shard-001").rename(tmp_path / "gone")
    r = run_retr("check", "--index", a)
    assert r.returncode == 1 and "shard 1 of 2 is missing" in r.stdout


def test_routing_is_a_documented_hash():
    import hashlib

    for d in ["0", "abc", "ünïcødé", "x" * 300]:
        h = int.from_bytes(hashlib.blake2b(d.encode("utf-8"), digest_size=8).digest(), "big")
        assert sh.shard_of(d, 7) == h % 7
    counts = [0] * 4
    for i in range(4000):
        counts[sh.shard_of(str(i), 4)] += 1
    assert min(counts) > 850


def test_merge_rounds_ties_as_the_java_helper(small_index, small_corpus):
    """One folder's raw scores (ShardView, its own statistics) through merge.merge_lists("anserini")
    give exactly what its search returns after HitSearcher.adjustTies: rounding, runs of ties, order.
    Short queries at k=400 put many equal scores in a row."""
    from indexes.lucene import LuceneIndex
    from indexes.lucene_shard import ShardView
    from retrieval.sharded.merge import merge_lists

    lx = LuceneIndex(small_index.path / small_index.manifest["subindexes"]["bm25"]["path"])
    texts = list(_queries(small_corpus).values())[:40] + ["cell", "the cancer", "protein", "a b c risk"]
    qids = [str(i) for i in range(len(texts))]
    want = lx.batch_search(texts, qids, 400)
    raw = ShardView(lx, None).batch_search(texts, qids, 400)
    ties = 0
    for q in qids:
        assert merge_lists("anserini", [raw[q]], 400) == want[q]
        assert [d for d, _ in raw[q]] == [d for d, _ in want[q]]
        ties += sum(1 for (_, a), (_, b) in zip(want[q], want[q][1:]) if abs(a - b) < 2e-4)
    assert ties > 50
    lx.close()
