"""RM3 and Rocchio per request (#29): Index.search's ``prf`` for one search, and the same over HTTP
(``"prf": {"method": "rm3", ...}`` on search, batch_search and its stream) and the MCP search tool,
against a real `retr serve` on loopback over real Lucene indexes (400 SciFact passages, one with
document vectors). A request's feedback gives the hits Index.configure's feedback gives; bad settings
are 422s, a pipeline with no retriever that takes feedback one 400. retrieval.Client takes Index.search's
forms of prf and gives its hits."""
from __future__ import annotations

import asyncio
import json

import pytest

import retrieval
from indexes.errors import ParameterError
from retrieval.bm25 import BM25Spec
from tests.server.conftest import Server

Q = "aspirin colorectal cancer"
QUERIES = [Q, "cerebral white matter newborn", "statin side effects"]
SETTINGS = [  # (the request's prf, the same as configure's spec)
    ({"method": "rm3"}, "rm3"),
    ({"method": "rm3", "fb_terms": 20, "fb_docs": 5, "original_query_weight": 0.3},
     "rm3(fb_terms=20,fb_docs=5,original_query_weight=0.3)"),
    ({"method": "rocchio", "fb_docs": 3, "bottom_fb_docs": 5, "gamma": 0.15, "use_negative": True},
     "rocchio(fb_docs=3,bottom_fb_docs=5,gamma=0.15,use_negative=true)"),
]


@pytest.fixture(scope="module")
def dv_index(tmp_path_factory, small_corpus):
    return retrieval.build_index(small_corpus, tmp_path_factory.mktemp("prfhttp") / "IDX",
                                 subindexes={"bm25": BM25Spec(store_docvectors=True)}, quiet=True)


@pytest.fixture(scope="module")
def prf_server(tmp_path_factory, dv_index, meta_dense_index):
    s = Server("--index", f"dv={dv_index.path}", "--index", f"hy={meta_dense_index.path}",
               tmp=tmp_path_factory.mktemp("prfsrv"))
    yield s
    s.stop()


def configured(path, spec, k=10):
    """What Index.configure's feedback gives, on a fresh Index (each query searched alone)."""
    idx = retrieval.open_index(path)
    idx.configure(retrieval.kinds.PRIMARY, prf=spec)
    try:
        return {q: [(h.docid, h.score) for h in idx.search(q, k=k, text=False)] for q in QUERIES}
    finally:
        idx.close()


@pytest.mark.parametrize("body,spec", SETTINGS, ids=[s for _, s in SETTINGS])
def test_a_requests_feedback_equals_configures(prf_server, dv_index, body, spec):
    want = configured(dv_index.path, spec)
    plain = retrieval.open_index(dv_index.path)
    assert [h.docid for h in plain.search(Q, k=10)] != [d for d, _ in want[Q]]   # feedback changes the ranking
    # the Python API per search, configure's setting left as it is
    assert {q: [(h.docid, h.score) for h in plain.search(q, k=10, text=False, prf=spec)] for q in QUERIES} == want
    batch = plain.batch_search(QUERIES, k=10, prf=body, threads=2)
    assert {q: [(h.docid, h.score) for h in batch[str(i)]] for i, q in enumerate(QUERIES)} == want
    assert [h.docid for h in plain.search(Q, k=10)] != [d for d, _ in want[Q]]   # still plain BM25
    plain.close()
    for q in QUERIES:   # over HTTP
        r = prf_server.post("/v1/dv/search", json={"query": q, "k": 10, "text": False, "prf": body})
        assert r.status_code == 200, r.text
        assert [(h["docid"], h["score"]) for h in r.json()["hits"]] == want[q]
    r = prf_server.post("/v1/dv/batch_search", json={"queries": QUERIES, "k": 10, "text": False, "prf": body})
    assert [[(h["docid"], h["score"]) for h in res["hits"]] for res in r.json()["results"]] == \
        [want[q] for q in QUERIES]
    r = prf_server.post("/v1/dv/batch_search/stream", json={"queries": QUERIES, "k": 10, "text": False, "prf": body})
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert [[(h["docid"], h["score"]) for h in line["hits"]] for line in lines] == [want[q] for q in QUERIES]


@pytest.mark.parametrize("prf,says", [
    ({"method": "rm3", "fb_terms": 0}, "fb_terms"),
    ({"method": "rm3", "fb_docs": 1001}, "fb_docs"),
    ({"method": "rm3", "original_query_weight": 1.5}, "original_query_weight"),
    ({"method": "rm3", "fb_terms": "20"}, "fb_terms"),
    ({"method": "rm3", "fb_terms": True}, "fb_terms"),
    ({"method": "rm3", "gamma": 0.1}, "gamma"),                  # Rocchio's parameter, not RM3's
    ({"method": "rocchio", "alpha": -1}, "alpha"),
    ({"method": "rocchio", "beta": 1e9}, "beta"),
    ({"method": "bm25"}, "method"),
    ({"fb_terms": 5}, "method"),
    ("rm3", "prf"),
])
def test_bad_feedback_is_a_422(prf_server, prf, says):
    for path, body in (("/v1/dv/search", {"query": Q}), ("/v1/dv/batch_search", {"queries": [Q]})):
        r = prf_server.post(path, json={**body, "prf": prf})
        assert r.status_code == 422 and says in r.json()["error"]["message"], r.text


def test_a_pipeline_that_takes_no_feedback_is_one_400(prf_server, meta_dense_index):
    for body, says in (({"retriever": "dense"}, "applies to no retriever of dense"),
                       ({}, "does not store"),                   # BM25 without document vectors
                       ({"retriever": "bm25+dense"}, "does not store")):
        r = prf_server.post("/v1/hy/search", json={"query": Q, "prf": {"method": "rm3"}, **body})
        assert r.status_code == 400, r.text
        err = r.json()["error"]["message"]
        assert says in err and "prf" in err and "\n" not in err and "Traceback" not in err
    # the Python API says the same
    idx = retrieval.open_index(meta_dense_index.path)
    with pytest.raises(ParameterError, match="applies to no retriever of dense"):
        idx.search(Q, retriever="dense", prf="rm3")
    with pytest.raises(ParameterError, match="fb_terms must be"):
        idx.search(Q, prf={"method": "rm3", "fb_terms": 0})
    idx.close()


def test_the_mcp_search_tool_takes_feedback(prf_server, dv_index):
    from fastmcp import Client

    want = configured(dv_index.path, "rm3(fb_terms=20)")

    async def go():
        async with Client(f"{prf_server.url}/mcp/") as c:
            res = await c.call_tool("search", {"query": Q, "index": "dv", "k": 10,
                                               "prf": {"method": "rm3", "fb_terms": 20}})
            sc = res.structured_content
            hits = (sc["result"] if set(sc) == {"result"} else sc)["hits"]
            assert [(h["docid"], h["score"]) for h in hits] == want[Q]
            bad = await c.call_tool("search", {"query": Q, "index": "dv", "prf": {"method": "rm3", "fb_docs": 0}},
                                    raise_on_error=False)
            assert bad.is_error and "fb_docs" in bad.content[0].text
            bad = await c.call_tool("search", {"query": Q, "index": "hy", "retriever": "dense",
                                               "prf": {"method": "rm3"}}, raise_on_error=False)
            assert bad.is_error and "applies to no retriever of dense" in bad.content[0].text
    asyncio.run(go())


def test_a_sharded_index_without_term_vectors_refuses_feedback(tmp_path, small_corpus):
    """A sharded index runs feedback over the whole index (tests/retrieval/test_sharded_prf.py), which
    reads the feedback documents' term vectors: without them, one ParameterError naming the rebuild,
    over HTTP a 400."""
    from retrieval.sharded.write import build_sharded

    s = build_sharded(small_corpus, tmp_path / "S", 2, quiet=True)
    try:
        for call in (lambda: s.search(Q, prf="rm3"), lambda: s.batch_search([Q], prf={"method": "rocchio"}),
                     lambda: s.configure("bm25", prf="rm3")):
            with pytest.raises(ParameterError) as e:
                call()
            msg = e.value.renamed({"prf": "--rm3/--rocchio", "store_docvectors": "`retr index --docvectors`"})
            assert str(msg).startswith("--rm3/--rocchio reads the feedback documents' term vectors")
            assert str(msg).endswith("rebuild it with `retr index --docvectors`")
        assert s.search(Q, k=3) and s.search(Q, k=3, prf="none")   # and searches without it as before
    finally:
        s.close()
    srv = Server("--index", f"s={tmp_path / 'S'}", tmp=tmp_path)
    try:
        r = srv.post("/v1/s/search", json={"query": Q, "prf": {"method": "rm3"}})
        assert r.status_code == 400 and "term vectors" in r.json()["error"]["message"], r.text
        assert srv.post("/v1/s/search", json={"query": Q}).status_code == 200
    finally:
        srv.stop()


def _pairs(hits):
    return [(h.docid, h.score) for h in hits]


def test_the_client_takes_index_search_s_forms_of_feedback(prf_server, dv_index):
    """retrieval.Client's prf: each form Index.search takes (spec, dict with Pyserini's alias and a whole
    number for a weight, Feedback) gives the hits Index.search gives, through search, asearch,
    batch_search (streamed), its frame and search_df; "none" is no feedback."""
    from retrieval.bm25.prf import Feedback

    forms = ["rm3(fb_terms=20,fb_docs=5)", {"method": "rocchio", "top_fb_docs": 3, "alpha": 1, "gamma": 0.15,
                                             "use_negative": True, "bottom_fb_docs": 5},
             Feedback("rm3", original_query_weight=0.3)]
    idx = retrieval.open_index(dv_index.path)
    client = retrieval.Client(prf_server.url, index="dv")
    try:
        plain = _pairs(idx.search(Q, k=10, text=False))
        for prf in forms:
            want = {q: _pairs(idx.search(q, k=10, text=False, prf=prf)) for q in QUERIES}
            assert want[Q] != plain   # the feedback changes the ranking
            assert {q: _pairs(client.search(q, k=10, text=False, prf=prf)) for q in QUERIES} == want
            assert _pairs(asyncio.run(client.asearch(Q, k=10, text=False, prf=prf))) == want[Q]
            got = client.batch_search(QUERIES, k=10, prf=prf, batch_size=2)   # two requests
            assert {q: _pairs(got[str(i)]) for i, q in enumerate(QUERIES)} == want
            frame = client.batch_search(QUERIES, k=10, prf=prf, as_frame=True)
            assert frame.equals(idx.batch_search(QUERIES, k=10, prf=prf, as_frame=True))
            assert client.search_df(Q, k=10, prf=prf).equals(idx.search_df(Q, k=10, prf=prf))
        assert _pairs(client.search(Q, k=10, text=False, prf="none")) == plain
    finally:
        client.close()
        idx.close()


def test_the_client_s_bad_feedback(prf_server, dv_index):
    """What Index.search refuses is the same ParameterError before any request; what only the server
    bounds (1,000 terms) its 422, and a pipeline without BM25 its 400, as ServerError."""
    from retrieval.client import ServerError

    idx = retrieval.open_index(dv_index.path)
    client = retrieval.Client(prf_server.url, index="dv")
    try:
        for bad in ("rm3(fb_terms=0)", {"method": "rm3", "gamma": 0.1}, "bm25(k1=1)", {"fb_terms": 5}, 7):
            with pytest.raises(ParameterError) as local:
                idx.search(Q, prf=bad)
            for call in (lambda: client.search(Q, prf=bad), lambda: client.batch_search([Q], prf=bad),
                         lambda: asyncio.run(client.asearch(Q, prf=bad))):
                with pytest.raises(ParameterError) as remote:
                    call()
                assert str(remote.value) == str(local.value)
        for call in (lambda: client.search(Q, prf="rm3(fb_terms=5000)"),
                     lambda: client.batch_search([Q], prf={"method": "rocchio", "beta": 1e9})):
            with pytest.raises(ServerError) as e:
                call()
            assert e.value.status == 422 and ("fb_terms" in str(e.value) or "beta" in str(e.value))
        hy = retrieval.Client(prf_server.url, index="hy")
        with pytest.raises(ServerError) as e:
            hy.search(Q, retriever="dense", prf="rm3")
        assert e.value.status == 400 and "applies to no retriever of dense" in str(e.value)
        hy.close()
    finally:
        client.close()
        idx.close()
