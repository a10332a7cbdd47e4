"""A sharded folder served beside a folder of the same 400 passages by one real `retr serve` on
loopback (the shards in the server's process, no Ray): the MCP tools and the HTTP routes answer for
the sharded folder what they answer for the folder (list_indexes / GET /v1/NAME, documents, searches,
a streamed batch), and listing the indexes works while a sharded index is served."""
from __future__ import annotations

import asyncio
import json

import pytest

from tests.server.conftest import Server

Q = "aspirin colorectal cancer"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, meta_corpus):
    """The metadata corpus (as meta_index holds it: BM25) in 2 shards."""
    from retrieval.sharded.write import build_sharded

    path = tmp_path_factory.mktemp("sharded") / "SH"
    build_sharded(meta_corpus, path, 2, quiet=True).close()
    return path


@pytest.fixture(scope="module")
def both(tmp_path_factory, meta_index, sharded, token):
    """sf = the BM25 metadata folder, sh = the same documents in 2 shards."""
    s = Server("--index", f"sf={meta_index.path}", "--index", f"sh={sharded}", token=token,
               tmp=tmp_path_factory.mktemp("both"))
    yield s
    s.stop()


def _content(res):
    sc = res.structured_content
    return sc["result"] if isinstance(sc, dict) and set(sc) == {"result"} else sc


def _same_description(folder: dict, shards: dict) -> None:
    """A sharded index's description is the folder's but for its name, generation and shards."""
    assert [x["shard"] for x in shards.pop("shards")] == ["shard-000", "shard-001"]
    assert "shards" not in folder
    for d in (folder, shards):
        d.pop("name"), d.pop("generation")
        d.pop("created_at"), d.pop("updated_at")
    assert shards == folder


def test_mcp_list_indexes_and_documents_of_a_sharded_index_are_the_folder_s(both, meta_index):
    """The MCP list_indexes tool answers while a sharded index is served (it failed for every index
    with "'ShardedView' object has no attribute 'manifest'"), each index as GET /v1/NAME and GET
    /v1/indexes describe it; the sharded one as the folder of the same documents, plus its shards.
    get_document and search answer for the sharded index what they answer for the folder."""
    from fastmcp import Client

    ids = [h.docid for h in meta_index.search(Q, k=3)]

    async def answers(name):
        async with Client(f"{both.url}/mcp/", auth=both.token, timeout=120) as c:
            res = await c.call_tool("list_indexes", {}, raise_on_error=False)
            assert not res.is_error, res.content[0].text
            docs = [_content(await c.call_tool("get_document", {"docid": d, "index": name})) for d in ids]
            missing = await c.call_tool("get_document", {"docid": "no-such-doc", "index": name},
                                        raise_on_error=False)
            hits = _content(await c.call_tool("search", {"query": Q, "index": name, "k": 5,
                                                         "filter": {"shard": "odd"}}))
            return _content(res), (docs, missing.is_error, [(h["docid"], h["score"], h["text"]) for h in hits["hits"]])
    listed, folder = asyncio.run(answers("sf"))
    _, shards = asyncio.run(answers("sh"))
    http = both.get("/v1/indexes").json()["indexes"]
    assert [i["name"] for i in listed] == ["sf", "sh"]
    assert listed == http == [both.get("/v1/sf").json(), both.get("/v1/sh").json()]
    sf, sh = listed
    assert sh["documents"] == len(meta_index) == sum(x["documents"] for x in sh["shards"])
    _same_description(sf, sh)
    assert shards == folder and folder[1] is True
    assert [d["docid"] for d in folder[0]] == ids and folder[0][0]["text"] == meta_index.get(ids[0]).text
    assert "Traceback" not in both.output()


def test_http_routes_of_a_sharded_index_are_the_folder_s_and_a_stream_reads_one_commit(both, meta_index, sharded,
                                                                                      tmp_path, token):
    """GET /v1/NAME, GET /v1/NAME/documents/ID, POST /v1/NAME/documents/get and a streamed batch answer
    for the sharded index what they answer for the folder. A streamed batch reads one commit of every
    shard (the index's snapshot) to its last line, while a write deletes documents it lists half-way."""
    import shutil

    import httpx

    _same_description(both.get("/v1/sf").json(), both.get("/v1/sh").json())
    ids = [h.docid for h in meta_index.search(Q, k=4)]
    for d in ids:
        a, b = both.get(f"/v1/sf/documents/{d}"), both.get(f"/v1/sh/documents/{d}")
        assert a.status_code == b.status_code == 200 and a.json() == b.json()
    assert both.get("/v1/sh/documents/no-such-doc").status_code == 404
    body = {"ids": ids[::-1] + ["no-such-doc", ids[0]]}
    a, b = both.post("/v1/sf/documents/get", body), both.post("/v1/sh/documents/get", body)
    assert a.status_code == b.status_code == 200 and a.json() == b.json()
    assert [d["docid"] for d in b.json()["documents"]] == ids[::-1] and b.json()["missing"] == ["no-such-doc"]
    words = ["cancer", "cells", "insulin", "vitamin", "mice", "protein", "bone", "virus", "stem", "gene"]
    queries = [f"{w} {v}" for w in words for v in words[:5]]  # 50: two chunks of the stream
    body = {"queries": queries, "k": 5, "text": True, "text_chars": 80}
    a = both.post("/v1/sf/batch_search/stream", body)
    b = both.post("/v1/sh/batch_search/stream", body)
    assert a.status_code == b.status_code == 200
    lines = [json.loads(x) for x in b.text.splitlines()]
    assert len(lines) == len(queries) and lines == [json.loads(x) for x in a.text.splitlines()]

    # 320 lines of 100 hits with their whole texts: far more than the socket buffers hold, so the server
    # searches the later chunks only as they are read, after the write
    shutil.copytree(sharded, tmp_path / "SH")
    w = Server("--index", f"sh={tmp_path / 'SH'}", "--writable", token=token, tmp=tmp_path)
    try:
        gone = ids[:3]
        with httpx.stream("POST", w.url + "/v1/sh/batch_search/stream", headers=w.headers(), timeout=120,
                          json={"queries": [Q] * 320, "k": 100, "text": True}) as r:
            assert r.status_code == 200
            it = r.iter_lines()
            first = json.loads(next(it))
            assert gone == [h["docid"] for h in first["hits"][:3]]
            d = w.post("/v1/sh/documents/delete", {"ids": gone})
            assert d.status_code == 200 and d.json()["documents"] == 3, d.text
            assert w.post("/v1/sh/search", {"query": Q, "k": 1}).json()["hits"][0]["docid"] == ids[3]  # landed
            rest = [json.loads(x) for x in it]
        assert len(rest) == 319 and all(x["hits"] == first["hits"] for x in rest)
        assert not set(gone) & {h["docid"] for h in w.post("/v1/sh/search", {"query": Q, "k": 100}).json()["hits"]}
    finally:
        w.stop()
