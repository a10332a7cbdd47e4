"""Issue #29: retrieval.Client on httpx against a real `retr serve` on loopback. Async searches
wait on their sockets in the event loop itself (no worker thread), several at once; a 429 from the
server's real admission gate (--max-inflight) is retried after its Retry-After and then succeeds, on
the sync, streamed and async paths."""
from __future__ import annotations

import asyncio
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import retrieval
from retrieval.client import MAX_WAIT, retry_wait
from tests.server.conftest import Server, finish, stalled_request
from tests.server.test_integrations import _counting_executor

Q = ["aspirin colorectal cancer", "vitamin D deficiency", "stem cells in mice", "statin side effects",
     "cerebral white matter newborn", "tuberculosis vaccine"]


def test_retry_wait_reads_retry_after_and_is_bounded():
    assert retry_wait("1", 0) == 1.0 and retry_wait("0.25", 3) == 0.25
    assert retry_wait(None, 0) == 0.5 and retry_wait(None, 2) == 2.0 and retry_wait("soon", 1) == 1.0
    assert retry_wait("nan", 0) == 0.5 and retry_wait("-5", 0) == 0.0
    assert retry_wait("86400", 0) == MAX_WAIT and retry_wait(None, 20) == MAX_WAIT
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 4))
    assert 2.0 < retry_wait(later, 0) <= 4.0                        # an HTTP date: the seconds until then
    assert retry_wait("Mon, 01 Jan 1990 00:00:00 GMT", 0) == 0.0


def test_async_searches_overlap_without_threads(server, token, meta_dense_index):
    """Six asearch calls through gather: every one is sent before any answer is read, the loop
    keeps ticking, and the default executor never sees a task (no thread offload)."""
    client = retrieval.Client(server.url, token=token, index="hy")
    ex = _counting_executor()

    async def main():
        asyncio.get_running_loop().set_default_executor(ex)
        ticks, stop, spans = [], asyncio.Event(), {}

        async def ticker():
            while not stop.is_set():
                ticks.append(time.perf_counter())
                await asyncio.sleep(0)

        async def one(q):
            t0 = time.perf_counter()
            hits = await client.asearch(q, k=5, retriever="bm25+dense")
            spans[q] = (t0, time.perf_counter())
            return hits

        t = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        out = await asyncio.gather(*(one(q) for q in Q))
        again = await client.asearch(Q[0], k=5, retriever="bm25+dense")   # the loop's pool, reused
        stop.set()
        await t
        await client.aclose()
        return out, again, ticks, spans

    out, again, ticks, spans = asyncio.run(main())
    for q, hits in zip(Q, out):
        assert [h.docid for h in hits] == [h.docid for h in meta_dense_index.search(q, k=5, retriever="bm25+dense")]
    assert [h.docid for h in again] == [h.docid for h in out[0]]
    assert max(t0 for t0, _ in spans.values()) < min(t1 for _, t1 in spans.values()), "searches ran one by one"
    first, last = min(t0 for t0, _ in spans.values()), max(t1 for _, t1 in spans.values())
    assert sum(first < x < last for x in ticks) >= 10, "the event loop was blocked during the searches"
    assert ex.submitted == 0, "a search went through a worker thread"
    # a second event loop gets its own pool (the first loop's connections died with it)
    assert [h.docid for h in asyncio.run(client.asearch(Q[0], k=5, retriever="bm25+dense"))] == \
        [h.docid for h in out[0]]


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory, meta_index, token):
    """A server that admits one request at a time (--max-inflight 1)."""
    s = Server("--index", f"sf={meta_index.path}", "--max-inflight", "1", token=token,
               tmp=tmp_path_factory.mktemp("busy"))
    yield s
    s.stop()


def _rejected(server) -> float:
    """Requests the server has refused with 429, every endpoint together (its /metrics)."""
    text = server.get("/metrics").text
    return sum(float(n) for n in re.findall(r'^retr_rejected_total\{[^}]*\} (\S+)$', text, re.M))


def _wait_for_rejections(server, before: float, n: int = 1) -> float:
    """Until the server has refused ``n`` more requests with 429 (its own count, /metrics)."""
    for _ in range(400):
        now = _rejected(server)
        if now >= before + n:
            return now
        time.sleep(0.025)
    raise AssertionError("the server refused nothing")


def _held(server):
    """One stalled request holding the only slot, once the server counts it (a probe gets 429)."""
    sock, rest = stalled_request(server, "/v1/sf/search")
    for _ in range(200):
        if server.post("/v1/sf/search", {"query": "x", "k": 1}).status_code == 429:
            return sock, rest
        time.sleep(0.025)
    raise AssertionError("the stalled request never took the slot")


@pytest.mark.parametrize("call", ["search", "batch_search"])
def test_sync_429_is_retried_after_retry_after(busy_server, token, meta_index, call):
    client = retrieval.Client(busy_server.url, token=token, index="sf", retries=3)
    sock, rest = _held(busy_server)
    before = _rejected(busy_server)
    result, errors = {}, []

    def run():
        try:
            t0 = time.perf_counter()
            result["hits"] = (client.search(Q[0], k=5) if call == "search"
                              else client.batch_search({"q": Q[0]}, k=5)["q"])
            result["s"] = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    th = threading.Thread(target=run)
    th.start()
    _wait_for_rejections(busy_server, before)   # the client got its 429 ...
    assert finish(sock, rest).startswith("HTTP/1.1 200")   # ... then the slot frees
    th.join(60)
    assert not errors, errors
    assert [h.docid for h in result["hits"]] == [h.docid for h in meta_index.search(Q[0], k=5)]
    assert result["s"] >= 0.9  # it waited for Retry-After: 1


def test_sync_429_without_retries_is_a_server_error(busy_server, token):
    client = retrieval.Client(busy_server.url, token=token, index="sf", retries=0)
    sock, rest = _held(busy_server)
    try:
        with pytest.raises(retrieval.client.ServerError) as e:
            client.search(Q[0])
        assert e.value.status == 429 and "in flight" in str(e.value)
    finally:
        finish(sock, rest)


def test_async_429_is_retried_while_the_loop_runs(busy_server, token, meta_index):
    client = retrieval.Client(busy_server.url, token=token, index="sf", retries=3)
    ex, side = _counting_executor(), ThreadPoolExecutor(1)

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ex)
        sock, rest = await loop.run_in_executor(side, _held, busy_server)
        before = await loop.run_in_executor(side, _rejected, busy_server)
        ticks, stop = [], asyncio.Event()

        async def ticker():
            while not stop.is_set():
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.001)

        t = asyncio.create_task(ticker())
        t0 = time.perf_counter()
        search = asyncio.create_task(client.asearch(Q[1], k=5))
        await loop.run_in_executor(side, _wait_for_rejections, busy_server, before)
        assert not search.done()                       # waiting out Retry-After, not failed
        assert (await loop.run_in_executor(side, finish, sock, rest)).startswith("HTTP/1.1 200")
        hits = await search
        t1 = time.perf_counter()
        stop.set()
        await t
        await client.aclose()
        return hits, t1 - t0, sum(t0 < x < t1 for x in ticks)

    hits, took, ticks = asyncio.run(main())
    side.shutdown()
    assert [h.docid for h in hits] == [h.docid for h in meta_index.search(Q[1], k=5)]
    assert took >= 0.9 and ticks >= 50        # it slept Retry-After (1 s) in the loop, which kept ticking
    assert ex.submitted == 0
