"""The search, get-document and list-indexes operations as MCP tools (fastmcp), for
``retr mcp`` (stdio) and for the HTTP server (mounted at ``/mcp``)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from indexes.errors import RetrError
from retrieval.server import guard as G
from retrieval.server.registry import Registry

MAX_K = 100


def build_mcp(registry: Registry):
    import anyio.to_thread
    from fastmcp import FastMCP
    from fastmcp.exceptions import ToolError

    mcp = FastMCP("retr", instructions="Search document collections indexed by retr (BM25, dense, DeepCT, fused "
                                       "pipelines) and read documents by id.")

    def pick(index: Optional[str]):
        names = registry.names()
        if index is None:
            if len(names) != 1:
                raise ToolError(f"name the index: one of {', '.join(names)}")
            index = names[0]
        try:
            return index, registry.get(index)
        except KeyError:
            raise ToolError(f"no index named {index!r} (served: {', '.join(names)})") from None

    async def run(fn, *args):
        try:
            return await anyio.to_thread.run_sync(fn, *args)
        except RetrError as e:
            raise ToolError(G.clean_message(str(e), registry.served.values())) from None

    @mcp.tool
    async def search(query: str, index: Optional[str] = None, k: int = 10, retriever: str = "bm25",
                     filter: Optional[Dict[str, Any]] = None, text_chars: Optional[int] = 1000) -> Dict[str, Any]:
        """Search an index. retriever: bm25, dense, deepct or a fused pipeline such as bm25+dense.
        filter: metadata conditions, e.g. {"year": {"gte": 2000}}, {"shard": "odd"},
        {"docid": {"in": [...]}}. Returns ranked hits with docid, score, title, text and metadata."""
        if not 1 <= k <= MAX_K:
            raise ToolError(f"k must be between 1 and {MAX_K}")
        name, s = pick(index)

        def go():
            idx = s.index()
            p = idx.pipeline(retriever)
            hits = idx.search(query, k=k, retriever=str(p), filter=filter)
            return {"index": name, "retriever": str(p), "hits": [
                {"docid": h.docid, "rank": h.rank, "score": h.score,
                 "scores": h.scores or {p.retrievers[0]: h.score}, "title": h.title,
                 "text": h.text if text_chars is None else h.text[:max(0, text_chars)], "metadata": h.metadata or {}}
                for h in hits]}
        return await run(go)

    @mcp.tool
    async def get_document(docid: str, index: Optional[str] = None) -> Dict[str, Any]:
        """A document by id: title, text and metadata."""
        name, s = pick(index)
        row = await run(lambda: s.index().docstore.get(docid))
        if row is None:
            raise ToolError(f"no document {docid!r} in {name!r}")
        return {"docid": row[0], "title": row[1], "text": row[2], "metadata": row[3] or {}}

    @mcp.tool
    async def list_indexes() -> List[Dict[str, Any]]:
        """The indexes served, with their document counts and retrievers."""
        def go():
            out = []
            for n, s in registry.served.items():
                idx = s.index()
                out.append({"name": n, "documents": len(idx), "retrievers": idx.retrievers,
                            "pipelines": sorted((idx.manifest.get("pipelines") or {}))})
            return out
        return await run(go)

    return mcp
