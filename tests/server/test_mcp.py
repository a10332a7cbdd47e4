"""The MCP tools through a real MCP client (fastmcp): mounted on the HTTP server, and over stdio."""
from __future__ import annotations

import asyncio
import os
import sys

import pytest

from tests.conftest import ROOT

Q = "aspirin colorectal cancer"


def _content(res):
    sc = res.structured_content
    return sc["result"] if isinstance(sc, dict) and set(sc) == {"result"} else sc


async def _exercise(client, index, name):
    async with client:
        tools = {t.name for t in await client.list_tools()}
        assert {"search", "get_document", "list_indexes"} <= tools
        res = _content(await client.call_tool("search", {"query": Q, "index": name, "k": 5,
                                                         "filter": {"shard": "odd"}}))
        want = index.search(Q, k=5, filter={"shard": "odd"})
        assert [h["docid"] for h in res["hits"]] == [h.docid for h in want]
        assert [h["score"] for h in res["hits"]] == [h.score for h in want]
        assert all(h["metadata"]["shard"] == "odd" for h in res["hits"])
        doc = _content(await client.call_tool("get_document", {"docid": want[0].docid, "index": name}))
        assert doc["text"] == want[0].text and doc["metadata"] == want[0].metadata
        listed = _content(await client.call_tool("list_indexes", {}))
        assert name in [i["name"] for i in listed]
        bad = await client.call_tool("search", {"query": Q, "index": name, "retriever": "nope"},
                                     raise_on_error=False)
        assert bad.is_error and "nope" in bad.content[0].text
        bad = await client.call_tool("get_document", {"docid": "missing-doc", "index": name}, raise_on_error=False)
        assert bad.is_error


def test_mcp_over_http(server, token, meta_index):
    from fastmcp import Client

    asyncio.run(_exercise(Client(f"{server.url}/mcp/", auth=token), meta_index, "sf"))


def test_mcp_needs_the_token_over_http(server):
    import httpx

    r = httpx.post(f"{server.url}/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
    assert r.status_code == 401


def test_mcp_over_stdio(meta_index):
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH", "RETR_DATA", "LANG")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    t = StdioTransport(command=sys.executable, args=["-m", "cli.main", "mcp", "--index", f"sf={meta_index.path}"],
                       env=env, cwd=str(ROOT))
    asyncio.run(_exercise(Client(t, timeout=120), meta_index, "sf"))


def test_mcp_over_stdio_answers_a_malformed_line_and_keeps_serving(meta_index):
    """JSON-RPC 2.0 over `retr mcp`'s stdin, line by line: a line that is not JSON is answered with
    -32700 "Parse error" (id null), JSON that is not a request with -32600, and the next lines are
    served as usual."""
    import json
    import queue
    import subprocess
    import threading

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    p = subprocess.Popen([sys.executable, "-m", "cli.main", "mcp", "--index", f"sf={meta_index.path}"], cwd=ROOT,
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in p.stdout], daemon=True).start()

    def send(line: str):
        p.stdin.write(line + "\n")
        p.stdin.flush()

    def answer(timeout=20):
        return json.loads(lines.get(timeout=timeout))

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}))
        assert answer(timeout=120)["id"] == 1  # after the start-up (the JVM, the indexes)
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        send('{"jsonrpc": "2.0", "id": 2, "method": "tools/list"')  # cut short
        assert answer() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
        send("not json at all")
        assert answer()["error"]["code"] == -32700
        send("[1, 2]")
        assert answer() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}}
        send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": 5}))
        assert answer() == {"jsonrpc": "2.0", "id": 3, "error": {"code": -32600, "message": "Invalid Request"}}
        send(json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                         "params": {"name": "search", "arguments": {"query": Q, "k": 3}}}))
        res = answer()
        assert res["id"] == 4 and not res["result"].get("isError")
        want = [h.docid for h in meta_index.search(Q, k=3)]
        assert [h["docid"] for h in res["result"]["structuredContent"]["hits"]] == want
        p.stdin.close()
        assert p.wait(60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_mcp_reports_retr_version_and_search_bounds(server, token, meta_dense_index):
    """serverInfo carries retr's version; the search tool's schema carries k's range and the fusion,
    depth and dimsel parameters, which reach the search as the HTTP API's do."""
    from importlib.metadata import version

    from fastmcp import Client

    async def go():
        async with Client(f"{server.url}/mcp/", auth=token) as c:
            info = c.server_info
            assert (info.name, info.version) == ("retr", version("retr"))
            tool = next(t for t in await c.list_tools() if t.name == "search")
            props = tool.input_schema["properties"]
            assert (props["k"]["minimum"], props["k"]["maximum"]) == (1, 1000)
            assert {"fusion", "depth", "dimsel", "text_chars"} <= set(props)
            assert props["query"]["minLength"] == 1
            args = {"query": Q, "index": "hy", "k": 4, "retriever": "bm25+dense", "fusion": "combsum(norm=minmax)",
                    "depth": 7, "dimsel": {"mode": "prf", "alpha": 0.5}}
            res = _content(await c.call_tool("search", args))
            want = meta_dense_index.search(Q, k=4, retriever="bm25+dense", fusion="combsum(norm=minmax)", depth=7,
                                           dimsel={"mode": "prf", "alpha": 0.5})
            assert [h["docid"] for h in res["hits"]] == [h.docid for h in want]
            assert [h["score"] for h in res["hits"]] == pytest.approx([h.score for h in want], rel=1e-5)
            assert "combsum" in res["retriever"]
            for bad in ({"k": 0}, {"k": 1001}, {"depth": 0}, {"dimsel": {"mode": "magic"}},
                        {"dimsel": {"mode": "prf", "alpha": 2}}, {"query": ""}, {"fusion": "nope(x=1)"}):
                r = await c.call_tool("search", {"query": Q, "index": "hy", **bad}, raise_on_error=False)
                assert r.is_error, bad
    asyncio.run(go())


@pytest.mark.parametrize("auth", [None, "wrong-token-0123456789"])
def test_mcp_client_without_the_token_is_told_why(server, auth):
    """An MCP client without the bearer token (or with a wrong one) gets the reason, not a bare
    -32603 "Server returned an error response"; raw HTTP still sees 401 + WWW-Authenticate."""
    import httpx
    from fastmcp import Client
    from mcp.shared.exceptions import MCPError

    async def go():
        async with Client(f"{server.url}/mcp/", auth=auth, timeout=30):
            pass
    with pytest.raises(Exception) as e:
        asyncio.run(go())
    msg = str(e.value)
    assert "bearer token" in msg and ("missing" in msg if auth is None else "invalid" in msg), msg
    assert isinstance(e.value, MCPError) and e.value.error.code == -32001, repr(e.value)
    r = httpx.post(f"{server.url}/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30,
                   headers={"Authorization": f"Bearer {auth}"} if auth else {})
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    assert r.json()["error"]["code"] == -32001


def test_mcp_explain_equals_index_explain(server, token, meta_dense_index):
    """The explain tool gives Index.explain's answer (score, rank, each member's parts) for a fused
    pipeline; an unknown document or retriever and out-of-bounds arguments are tool errors."""
    from fastmcp import Client

    want_hit = meta_dense_index.search(Q, k=3, retriever="bm25+dense", depth=20)[2]
    want = meta_dense_index.explain(Q, want_hit.docid, retriever="bm25+dense", depth=20)

    async def go():
        async with Client(f"{server.url}/mcp/", auth=token) as c:
            assert "explain" in {t.name for t in await c.list_tools()}
            got = _content(await c.call_tool("explain", {"query": Q, "docid": want_hit.docid, "index": "hy",
                                                         "retriever": "bm25+dense", "depth": 20}))
            assert (got["docid"], got["rank"]) == (want["docid"], want["rank"])
            assert got["score"] == pytest.approx(want["score"]) == pytest.approx(want_hit.score, rel=1e-6)
            assert {n: (m["kind"], m["rank"]) for n, m in got["retrievers"].items()} == \
                {n: (m["kind"], m["rank"]) for n, m in want["retrievers"].items()}
            assert got["fusion"]["score"] == pytest.approx(want["fusion"]["score"])
            for m in got["retrievers"].values():
                if m["explained"] is not None:
                    assert m["explained"] == pytest.approx(m["score"], rel=1e-5)
            for bad in ({"docid": "no-such-doc"}, {"retriever": "nope"}, {"depth": 0}, {"docid": ""}):
                r = await c.call_tool("explain", {"query": Q, "docid": want_hit.docid, "index": "hy", **bad},
                                      raise_on_error=False)
                assert r.is_error, bad
    asyncio.run(go())
