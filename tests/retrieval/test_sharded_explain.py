"""`explain` on a sharded index (issue #30): ShardedIndex.explain, `retr explain --index SHARDED` and
POST /v1/NAME/explain of `retr serve --index SHARDED` answer the dict one folder holding every
document answers: score, rank, each member's score, rank and list length, BM25's per-term parts
under the whole index's statistics (df, N, avgdl, idf: through the Java helper's explainWith), the
fusion's arithmetic, notes; for BM25 at 2 and 3 shards, dense and fusions at 2, with filters. Only
Lucene's own explanation text differs: it names the shard's doc number. Real Lucene, faiss, MiniLM
(the session's vectors of these passages: nothing is encoded here)."""
from __future__ import annotations

import json
import re

import pytest

from tests.conftest import encoded_by, run_retr

DOC_NUMBER = re.compile(r" in \d+\)")  # Lucene's "weight(contents:cell in 37)": the reader's own doc number


def comparable(out: dict) -> dict:
    """An explain dict with Lucene's doc numbers taken out of its explanation text, as JSON reads it."""
    out = json.loads(json.dumps(out))
    for m in out["retrievers"].values():
        text = m["details"].get("lucene_explanation")
        if text is not None:
            m["details"]["lucene_explanation"] = DOC_NUMBER.sub(" in #)", text)
    return out


def assert_same(folder: dict, sharded: dict) -> None:
    """The sharded explanation is the folder's, bit for bit (floats included), but for doc numbers."""
    a, b = comparable(folder), comparable(sharded)
    for name in a["retrievers"]:
        assert a["retrievers"][name] == b["retrievers"][name], name  # the first difference, by member
    assert a == b


@pytest.fixture(scope="module")
def indexes(tmp_path_factory, meta_dense_index, meta_corpus, small_dense_index):
    """The 400 metadata passages as one folder (BM25 + dense, the session's) and as 2 shards (BM25 +
    dense, the same vectors) and 3 shards (BM25)."""
    from retrieval.dense.subindex import DenseSpec
    from retrieval.sharded.write import build_sharded

    base = tmp_path_factory.mktemp("sharded-explain")
    two = build_sharded(meta_corpus, base / "two", 2, subindexes={"dense": DenseSpec()}, quiet=True,
                        precomputed=encoded_by(small_dense_index))
    three = build_sharded(meta_corpus, base / "three", 3, quiet=True)
    yield meta_dense_index, two, three
    two.close()
    three.close()


@pytest.fixture(scope="module")
def queries(meta_corpus, small_corpus):
    qs = [json.loads(l)["text"] for l in open(small_corpus / "queries.jsonl", encoding="utf-8")]
    return qs[:3] + ["cell"]  # and a one-term query with many ties


def _docs(single, q, retriever="bm25", **kw):
    """Documents worth explaining: the top 4, ranks 9 and 12 (beyond a depth of 10), the last one."""
    hits = single.search(q, k=60, retriever=retriever, text=False, **kw)
    picked = hits[:4] + hits[8:9] + hits[11:12] + hits[-1:]
    return list(dict.fromkeys(h.docid for h in picked))


def test_bm25_explains_as_one_folder_at_two_and_three_shards(indexes, queries):
    single, two, three = indexes
    seen = 0
    for q in queries:
        for docid in _docs(single, q):
            for depth in (None, 10):
                want = single.explain(q, docid, retriever="bm25", depth=depth)
                assert_same(want, two.explain(q, docid, retriever="bm25", depth=depth))
                assert_same(want, three.explain(q, docid, retriever="bm25", depth=depth))
                seen += 1
    assert seen >= 40
    # the global statistics, not a shard's own: N is the whole index's
    d = three.explain(queries[0], _docs(single, queries[0])[0])["retrievers"]["bm25"]["details"]
    assert d["docs"] == 400 and "BM25Similarity" in d["lucene_explanation"]


def test_a_shard_alone_would_explain_with_its_own_statistics(indexes, queries):
    """What the global statistics change: the owning shard's folder explains the same document with its
    own document count and frequencies, and other parts."""
    from indexes import sharded as sh

    single, two, _three = indexes
    docid = _docs(single, queries[0])[0]
    own = two.local()[sh.shard_of(docid, 2)].explain(queries[0], docid)["retrievers"]["bm25"]
    glob = two.explain(queries[0], docid)["retrievers"]["bm25"]
    assert own["details"]["docs"] < 400 == glob["details"]["docs"]
    assert [p["value"] for p in own["parts"]] != [p["value"] for p in glob["parts"]]


@pytest.mark.parametrize("retriever", ["dense", "bm25+dense", "bm25+dense:rrf(k=60)"])
def test_dense_and_fusions_explain_as_one_folder(indexes, queries, retriever):
    """Dense, the default (confidence-weighted) fusion and RRF: two of the top documents, and one beyond a
    depth of 10 in BM25's list (so in one member's list or in none)."""
    single, two, _three = indexes
    q = queries[0]
    docids = _docs(single, q, retriever)[:2] + [single.search(q, k=30, retriever="bm25", text=False)[-1].docid]
    for docid in docids:
        for depth in ((None, 10) if docid == docids[-1] else (None,)):
            assert_same(single.explain(q, docid, retriever=retriever, depth=depth),
                        two.explain(q, docid, retriever=retriever, depth=depth))


@pytest.mark.parametrize("flt", [{"shard": "odd"}, {"year": {"gte": 2000}}, {"tags": "a"}])
def test_a_filter_explains_the_filtered_lists_as_one_folder(indexes, queries, flt):
    """A filter's lists (Lucene's filtered search for a small share of the documents, the unfiltered
    ranking read deeper for a large one, both merged over the shards) as one folder's, and a document it
    refuses says so: BM25 at three shards, a fusion at two."""
    single, two, three = indexes
    q = queries[1]
    ranked = [h.docid for h in single.search(q, k=30, retriever="bm25", text=False)]
    kept = {h.docid for h in single.search(q, k=400, retriever="bm25", text=False, filter=flt)}
    allowed, refused = [d for d in ranked if d in kept], [d for d in ranked if d not in kept]
    assert len(allowed) >= 5 and refused
    for docid in allowed[:4] + allowed[-1:] + refused[:2]:
        assert_same(single.explain(q, docid, retriever="bm25", filter=flt), three.explain(q, docid, filter=flt))
    for docid in allowed[:2] + refused[:1]:
        assert_same(single.explain(q, docid, retriever="bm25+dense", filter=flt),
                    two.explain(q, docid, retriever="bm25+dense", filter=flt))
    out = three.explain(q, refused[0], filter=flt)
    assert out["rank"] is None and any("filter does not allow it" in n for n in out["retrievers"]["bm25"]["notes"])


def test_unknown_documents_and_bad_input_are_the_folder_s_errors(indexes, queries):
    from indexes.errors import InputError, NotFound, RetrError

    single, two, three = indexes
    docid = _docs(single, queries[0])[0]
    for idx in (two, three):
        with pytest.raises(NotFound, match="no document 'NO-SUCH-DOC' in the index"):
            idx.explain(queries[0], "NO-SUCH-DOC")
        with pytest.raises(NotFound):
            idx.explain(queries[0], "")
    for args, kw in [(("", docid), {}), ((queries[0], docid), {"depth": 0}), ((queries[0], docid), {"depth": True}),
                     ((queries[0], docid), {"retriever": "bm25+nope"}),
                     ((queries[0], docid), {"retriever": "bm25+dense:rrf(k=0)"}),
                     ((queries[0], docid), {"filter": {"year": {"between": 3}}})]:
        with pytest.raises(RetrError) as a:
            single.explain(*args, **kw)
        with pytest.raises(RetrError) as b:
            two.explain(*args, **kw)
        assert type(a.value) is type(b.value) and isinstance(b.value, InputError) and \
            str(a.value).replace(str(single.path), "PATH") == str(b.value).replace(str(two.path), "PATH"), kw


def test_cli_explains_a_sharded_index(indexes, queries, capsys):
    from cli.main import main

    single, two, _three = indexes
    q = queries[0]
    top = single.search(q, k=3, retriever="bm25+dense", text=False)[2]
    assert main(["explain", "--index", str(two.path), "--query", q, "--docid", top.docid,
                 "--retriever", "bm25+dense", "--json"]) == 0
    assert_same(single.explain(q, top.docid, retriever="bm25+dense"), json.loads(capsys.readouterr().out))
    assert main(["explain", "--index", str(two.path), "--query", q, "--docid", top.docid,
                 "--retriever", "bm25+dense"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("bm25 (bm25): score ") and text[-1].startswith(f"fused score {top.score:.4f} at rank 3")
    r = run_retr("explain", "--index", two.path, "--query", q, "--docid", "NO-SUCH-DOC")
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("retr: error: ") and "no document 'NO-SUCH-DOC' in the index" in r.stderr


def test_http_explain_on_a_sharded_index(indexes, queries, tmp_path):
    """`retr serve --index SHARDED` (the shards in the server's process) answers the explain route with the
    folder's dict, 404 for an unknown document, 400 for an unknown retriever."""
    from tests.server.conftest import Server

    single, _two, three = indexes
    s = Server("--index", f"sh={three.path}", tmp=tmp_path)
    try:
        q = queries[1]
        for docid in _docs(single, q)[:3]:
            r = s.post("/v1/sh/explain", json={"query": q, "docid": docid, "depth": 20, "filter": {"shard": "odd"}})
            assert r.status_code == 200, r.text
            assert_same(single.explain(q, docid, retriever="bm25", depth=20, filter={"shard": "odd"}), r.json())
        r = s.post("/v1/sh/explain", json={"query": q, "docid": "NO-SUCH-DOC"})
        assert r.status_code == 404 and r.json() == {"error": {"status": 404,
                                                                "message": "no document 'NO-SUCH-DOC' in the index"}}
        r = s.post("/v1/sh/explain", json={"query": q, "docid": docid, "retriever": "bm25+nope"})
        assert r.status_code == 400 and "no 'nope' sub-index" in r.json()["error"]["message"]
    finally:
        s.stop()
