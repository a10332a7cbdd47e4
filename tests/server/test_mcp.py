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
