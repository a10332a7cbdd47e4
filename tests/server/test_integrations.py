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
    single = RetrRetriever(index=src, k=3, retriever="bm25").invoke(Q[0])
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


def _counting_executor():
    """The event loop's default executor, counting what is sent to its threads (which path a
    retriever's async search took: a worker thread, or the loop itself through async HTTP)."""
    from concurrent.futures import ThreadPoolExecutor

    class Counting(ThreadPoolExecutor):
        submitted = 0

        def submit(self, fn, *args, **kwargs):
            self.submitted += 1
            return super().submit(fn, *args, **kwargs)

    return Counting(2)


def _while_ticking(make_call):
    """Run ``make_call()``'s coroutine beside a task that ticks whenever the loop is free; returns
    (its result, ticks during it, the executor's count). A call that blocks the loop sees no tick."""
    import asyncio
    import time

    ex = _counting_executor()

    async def main():
        asyncio.get_running_loop().set_default_executor(ex)
        ticks, stop = [], asyncio.Event()

        async def ticker():
            while not stop.is_set():
                ticks.append(time.perf_counter())
                await asyncio.sleep(0)
        t = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        out = await make_call()
        t1 = time.perf_counter()
        stop.set()
        await t
        return out, sum(t0 < x < t1 for x in ticks)
    out, during = asyncio.run(main())
    return out, during, ex.submitted


@pytest.mark.parametrize("over", ["index", "client"])
def test_langchain_k_per_call_and_search_kwargs(over, client, meta_dense_index):
    from retrieval.integrations.langchain import RetrRetriever

    src = meta_dense_index if over == "index" else client
    want = [h.docid for h in meta_dense_index.search(Q[0], k=6, retriever="bm25+dense")]
    r = RetrRetriever(index=src, k=6, retriever="bm25+dense")
    assert [d.id for d in r.invoke(Q[0])] == want
    assert [d.id for d in r.invoke(Q[0], k=2)] == want[:2]           # per call, as LangChain passes it
    sk = RetrRetriever(index=src, retriever="bm25+dense", search_kwargs={"k": 3})  # VectorStoreRetriever's form
    assert [d.id for d in sk.invoke(Q[0])] == want[:3]
    assert [d.id for d in sk.invoke(Q[0], k=5)] == want[:5]          # the call wins over search_kwargs
    odd = [h.docid for h in meta_dense_index.search(Q[1], k=4, filter={"shard": "odd"})]
    assert [d.id for d in RetrRetriever(index=src, search_kwargs={"k": 4, "filter": {"shard": "odd"}})
            .invoke(Q[1])] == odd
    assert [d.id for d in RetrRetriever(index=src).invoke(Q[1], k=4, filter={"shard": "odd"})] == odd
    deep = meta_dense_index.search(Q[2], k=3, retriever="bm25+dense", depth=5)
    assert [d.id for d in RetrRetriever(index=src, retriever="bm25+dense", search_kwargs={"depth": 5, "k": 3})
            .invoke(Q[2])] == [h.docid for h in deep]
    with pytest.raises(ValueError):
        r.invoke(Q[0], k=0)


@pytest.mark.parametrize("over", ["index", "client"])
def test_langchain_ainvoke_is_async(over, client, meta_dense_index):
    from retrieval.integrations.langchain import RetrRetriever

    src = meta_dense_index if over == "index" else client
    r = RetrRetriever(index=src, k=6, retriever="bm25+dense", search_kwargs={"filter": {"shard": "odd"}})
    want = [h.docid for h in meta_dense_index.search(Q[0], k=2, retriever="bm25+dense", filter={"shard": "odd"})]
    docs, ticks, threads = _while_ticking(lambda: r.ainvoke(Q[0], k=2))
    assert [d.id for d in docs] == want
    assert docs[0].metadata["scores"].keys() == {"bm25", "dense"}
    assert ticks >= 2, "the event loop was blocked during the search"
    # over HTTP the loop itself waits on the socket (httpx.AsyncClient); in process a worker thread searches
    assert (threads == 0) if over == "client" else (threads >= 1)


@pytest.mark.parametrize("over", ["index", "client"])
def test_llama_index_aretrieve_keeps_the_loop_running(over, client, meta_dense_index):
    from retrieval.integrations.llama_index import RetrRetriever

    src = meta_dense_index if over == "index" else client
    r = RetrRetriever(src, k=5, retriever="bm25+dense")
    nodes, ticks, threads = _while_ticking(lambda: r.aretrieve(Q[1]))
    want = meta_dense_index.search(Q[1], k=5, retriever="bm25+dense")
    assert [n.node.node_id for n in nodes] == [h.docid for h in want]
    assert [n.score for n in nodes] == pytest.approx([h.score for h in want], rel=1e-5)
    assert ticks >= 2, "the event loop was blocked during the search"
    assert (threads == 0) if over == "client" else (threads >= 1)


def test_llama_index_keeps_scores_out_of_the_prompt(meta_dense_index):
    from llama_index.core.schema import MetadataMode

    from retrieval.integrations.llama_index import RetrRetriever

    nodes = RetrRetriever(meta_dense_index, k=3, retriever="bm25+dense").retrieve(Q[0])
    for n in nodes:
        assert {"score", "scores", "rank"} <= set(n.node.metadata)  # still there for the program
        llm = n.node.get_content(metadata_mode=MetadataMode.LLM)
        assert n.node.get_content() in llm and f"shard: {n.node.metadata['shard']}" in llm
        assert "score" not in llm and "rank:" not in llm and n.node.node_id in llm
        emb = n.node.get_content(metadata_mode=MetadataMode.EMBED)
        assert "score" not in emb and "rank:" not in emb


def test_retrievers_take_a_path_an_index_or_a_sharded_index(small_index, small_corpus, tmp_path):
    """A folder path (str or Path) is opened at construction, as PyTerrier's retriever does; a sharded
    index and an open Index are taken as they are; anything else is refused at construction."""
    from pathlib import Path

    from retrieval.integrations.langchain import RetrRetriever as LC
    from retrieval.integrations.llama_index import RetrRetriever as LI
    from retrieval.sharded.write import build_sharded

    want = [h.docid for h in small_index.search(Q[0], k=3)]
    path = small_index.path
    for src in (str(path), Path(path), small_index):
        assert [d.id for d in LC(index=src, k=3).invoke(Q[0])] == want
        assert [n.node.node_id for n in LI(src, k=3).retrieve(Q[0])] == want
    sharded = build_sharded(small_corpus, tmp_path / "S", 2, quiet=True)
    sharded.close()
    lc, li = LC(index=str(tmp_path / "S"), k=3), LI(tmp_path / "S", k=3)
    assert type(lc.index).__name__ == type(li.index).__name__ == "ShardedIndex"
    # the same 400 passages split over two shards: the same top three documents
    assert {d.id for d in lc.invoke(Q[0])} == {n.node.node_id for n in li.retrieve(Q[0])} == set(want)
    for bad in (42, object(), ["IDX"]):
        with pytest.raises(TypeError, match="index path"):
            LC(index=bad)
        with pytest.raises(TypeError, match="index path"):
            LI(bad)
    with pytest.raises(retrieval.RetrError):
        LC(index=str(tmp_path / "nothing-here"))


@pytest.mark.parametrize("k", [0, -3, 2.0, "4", True, None])
def test_retrievers_refuse_a_bad_k_at_construction(k, small_index):
    from pydantic import ValidationError

    from retrieval.integrations.langchain import RetrRetriever as LC
    from retrieval.integrations.llama_index import RetrRetriever as LI

    with pytest.raises(ValidationError, match="k must be a positive integer"):
        LC(index=small_index, k=k)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        LI(small_index, k=k)
