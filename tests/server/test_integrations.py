"""retrieval.Client and the LangChain / LlamaIndex retrievers against a real server and the real
frameworks: the same documents, in the same order, as Index.search."""
from __future__ import annotations

import pytest

import retrieval

Q = ["aspirin colorectal cancer", "vitamin D deficiency", "stem cells in mice"]


@pytest.fixture(scope="module")
def client(server, token):
    return retrieval.Client(server.url, token=token, index="hy")


def test_client_matches_index(client, meta_dense_index):
    for q in Q:
        for spec in ("bm25", "dense", "bm25+dense"):
            a, b = client.search(q, k=8, retriever=spec), meta_dense_index.search(q, k=8, retriever=spec)
            assert [(h.docid, h.rank, h.title, h.text, h.metadata) for h in a] == \
                [(h.docid, h.rank, h.title, h.text, h.metadata) for h in b]
            # the server runs torch on one thread per request: dense scores agree to float rounding
            assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=1e-5)
            assert [h.scores is None for h in a] == [h.scores is None for h in b]
            for x, y in zip(a, b):
                if y.scores:
                    assert x.scores == pytest.approx(y.scores, rel=1e-5)
    a = client.batch_search(Q, k=5, retriever="bm25+dense", filter={"shard": "odd"}, batch_size=2)
    b = meta_dense_index.batch_search(Q, k=5, retriever="bm25+dense", filter={"shard": "odd"})
    assert {q: [h.docid for h in hs] for q, hs in a.items()} == {q: [h.docid for h in hs] for q, hs in b.items()}
    d = meta_dense_index.get(b["0"][0].docid)
    assert client.get(d.docid) == d and client.get("nope") is None
    assert client.get_many([d.docid, "nope"]) == {d.docid: d}
    assert len(client) == len(meta_dense_index)
    assert retrieval.Client(client.url + "/v1/sf", token=client.token).index == "sf"


def test_client_errors(server, token):
    with pytest.raises(retrieval.InputError):
        retrieval.Client(server.url, token=token)  # two indexes: name one
    with pytest.raises(retrieval.client.ServerError) as e:
        retrieval.Client(server.url, token="x" * 32, index="sf").search("x")
    assert e.value.status == 401
    with pytest.raises(retrieval.client.ServerError) as e:
        retrieval.Client(server.url, token=token, index="sf").search("x", retriever="dense")
    assert e.value.status == 400 and "dense" in str(e.value)


@pytest.mark.parametrize("over", ["index", "client"])
def test_langchain_retriever(over, client, meta_dense_index):
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    from retrieval.integrations.langchain import RetrRetriever

    src = meta_dense_index if over == "index" else client
    r = RetrRetriever(index=src, k=6, retriever="bm25+dense", filter={"shard": "odd"})
    assert isinstance(r, BaseRetriever)
    for q in Q:
        docs = r.invoke(q)
        want = meta_dense_index.search(q, k=6, retriever="bm25+dense", filter={"shard": "odd"})
        assert all(isinstance(d, Document) for d in docs)
        assert [d.id for d in docs] == [h.docid for h in want]
        assert [d.page_content for d in docs] == [h.text for h in want]
        assert [d.metadata["score"] for d in docs] == pytest.approx([h.score for h in want], rel=1e-5)
        for d, h in zip(docs, want):
            assert d.metadata["scores"] == pytest.approx(h.scores, rel=1e-5)
        assert all(d.metadata["shard"] == "odd" for d in docs)
    single = RetrRetriever(index=src, k=3).invoke(Q[0])
    assert single[0].metadata["scores"] == {"bm25": single[0].metadata["score"]}


@pytest.mark.parametrize("over", ["index", "client"])
def test_llama_index_retriever(over, client, meta_dense_index):
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore

    from retrieval.integrations.llama_index import RetrRetriever

    src = meta_dense_index if over == "index" else client
    r = RetrRetriever(src, k=6, retriever="bm25+dense")
    assert isinstance(r, BaseRetriever)
    for q in Q:
        nodes = r.retrieve(q)
        want = meta_dense_index.search(q, k=6, retriever="bm25+dense")
        assert all(isinstance(n, NodeWithScore) for n in nodes)
        assert [n.node.node_id for n in nodes] == [h.docid for h in want]
        assert [n.score for n in nodes] == pytest.approx([h.score for h in want], rel=1e-5)
        assert [n.node.get_content() for n in nodes] == [h.text for h in want]
        for n, h in zip(nodes, want):
            assert n.node.metadata["scores"] == pytest.approx(h.scores, rel=1e-5)


def test_import_retrieval_stays_cheap():
    import subprocess
    import sys

    code = ("import sys, retrieval; retrieval.Client; "
            "bad = [m for m in ('fastapi', 'uvicorn', 'fastmcp', 'langchain_core', 'llama_index', 'torch', 'jnius') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr
