"""The search, explain, get-document and list-indexes operations as MCP tools (fastmcp), for
``retr mcp`` (stdio) and for the HTTP server (mounted at ``/mcp``).

The tools keep the HTTP API's limits (:mod:`retrieval.server.guard`): each call counts
against the same ``--max-inflight`` as ``/v1`` requests (beyond it: a JSON-RPC error,
code -32000, "server busy"), search arguments are checked by the HTTP request model
(query length, ``k``, ...), and results are held to the response budget. The search tool's
input schema carries the same bounds (``k`` 1 to 1,000, ``depth``, ``text_chars``, the
dimension-selection modes), and the server reports retr's version, not fastmcp's."""
from __future__ import annotations

import json
from typing import Annotated, Any, Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from indexes.errors import RetrError
from retrieval.types import hit_dict
from retrieval.server import guard as G
from retrieval.server import schemas as S
from retrieval.server.registry import Registry

MAX_DOCID_CHARS = 512  # as schemas.IdsRequest / DocumentIn
SEARCH_DOC = (f"Search an index. retriever: bm25, dense, deepct or a fused pipeline such as bm25+dense (unset: the "
              f"index's default pipeline, its tuned one else every sub-index fused; pipeline_source says which). "
              f"fusion: for a fused pipeline, e.g. rrf(k=60) or combmnz(norm=zscore). depth: candidates per fused "
              f"retriever. dimsel: query-aware dimension selection for dense retrievers, e.g. "
              f"{{\"mode\": \"prf\", \"alpha\": 0.5}}. "
              f"filter: metadata conditions, e.g. {{\"year\": {{\"gte\": 2000}}}}, {{\"shard\": \"odd\"}}, "
              f"{{\"docid\": {{\"in\": [...]}}}}. prf: pseudo-relevance feedback (BM25), e.g. {{\"method\": \"rm3\", "
              f"\"fb_terms\": 20}} or {{\"method\": \"rocchio\"}}. per_document: one hit per document (its best passage). Returns ranked hits with docid, score, title, text and metadata. "
              f"query: at most {S.MAX_QUERY_CHARS:,} characters; k: 1 to {S.MAX_K:,}; text_chars: each hit's "
              f"text is cut to that many characters (null: the whole text).")


def retr_version() -> str:
    """retr's own version (the installed distribution's; the package's when run from a checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("retr")
    except PackageNotFoundError:  # pragma: no cover - a source tree on PYTHONPATH
        import retrieval

        return retrieval.__version__


class Dimsel(BaseModel):
    """The search tool's ``dimsel``: :class:`schemas.DimselOptions`' fields and bounds."""
    model_config = ConfigDict(extra="forbid")
    mode: Literal["none", "prf", "learned"] = Field(description="none, prf (pseudo-relevance feedback) or learned.")
    alpha: Optional[float] = Field(None, gt=0, le=1, description="Share of dimensions kept.")
    prf_k: Optional[int] = Field(None, ge=1, le=100, description="Feedback documents (prf).")
    adaptive: bool = Field(False, description="learned: a per-query count of dimensions.")


def build_mcp(registry: Registry, admission: Optional[G.Admission] = None,
              max_response_chars: int = G.MAX_RESPONSE_CHARS, writable: bool = False):
    """The tools over ``registry``. ``admission``: the count shared with the HTTP API (a new
    one of 64 when not given). ``writable``: whether the HTTP API beside them takes writes (as
    ``list_indexes`` says; the tools themselves only read)."""
    from fastmcp import FastMCP

    admission = admission or G.Admission(64)
    mcp = FastMCP("retr", version=retr_version(), instructions="Search document collections indexed by retr (BM25, dense, DeepCT, fused "
                                       "pipelines) and read documents by id.", middleware=[_admit(admission)])
    pick, run = _picker(registry), _runner(registry)
    _add_search_tool(mcp, pick, run, max_response_chars)
    _add_explain_tool(mcp, pick, run, max_response_chars)
    _add_reading_tools(mcp, registry, pick, run, max_response_chars, writable)
    return mcp


def _admit(admission: G.Admission):
    """The middleware by which every tool call takes a place in the shared count first."""
    from fastmcp.exceptions import ToolError
    from fastmcp.exceptions import ValidationError as FastMCPValidationError
    from fastmcp.server.middleware import Middleware
    from mcp.shared.exceptions import MCPError
    from pydantic import ValidationError as PydanticValidationError

    class Admit(Middleware):
        """Every tool call takes a place in the shared count first: over the limit it is
        refused at once with a JSON-RPC error (as fastmcp's own rate limiter refuses)."""

        async def on_call_tool(self, context, call_next):
            try:
                admission.enter("/mcp")
            except G.Busy as e:
                raise MCPError(code=G.BUSY_CODE, message=str(e), data={"retry_after": 1}) from None
            try:
                return await call_next(context)
            except FastMCPValidationError as e:
                # arguments outside the input schema's bounds: in the HTTP API's words (guard.validation_message)
                cause = e.__cause__
                if isinstance(cause, PydanticValidationError):
                    raise ToolError(G.validation_message(cause.errors())) from None
                raise
            finally:
                admission.leave()

    return Admit()


def _clean(registry: Registry, message: str) -> str:
    return G.clean_message(message, registry.served.values())


def _picker(registry: Registry):
    """``pick(index)``: (name, served folder) of the index a tool call names, or of the only one."""
    from fastmcp.exceptions import ToolError

    def pick(index: Optional[str]):
        names = registry.names()
        if index is None:
            if len(names) != 1:
                raise ToolError(f"name the index: one of {', '.join(names)}")
            index = names[0]
        try:
            return index, registry.get(index)
        except KeyError:
            shown = _clean(registry, index)[:200]
            raise ToolError(f"no index named {shown!r} (served: {', '.join(names)})") from None

    return pick


def _runner(registry: Registry):
    """``await run(fn, *args)``: ``fn`` in a worker thread, its retr errors as tool errors (paths scrubbed)."""
    import anyio.to_thread
    from fastmcp.exceptions import ToolError

    async def run(fn, *args):
        try:
            return await anyio.to_thread.run_sync(fn, *args)
        except G.TooLarge as e:
            raise ToolError(str(e)) from None
        except RetrError as e:
            raise ToolError(_clean(registry, str(e))) from None

    return run


def _add_search_tool(mcp, pick, run, budget: int) -> None:
    from fastmcp.exceptions import ToolError

    @mcp.tool(description=SEARCH_DOC)
    async def search(query: Annotated[str, Field(min_length=1, max_length=S.MAX_QUERY_CHARS)],
                     index: Optional[str] = None,
                     k: Annotated[int, Field(ge=1, le=S.MAX_K, description="Hits to return.")] = 10,
                     retriever: Annotated[Optional[str], Field(min_length=1, max_length=S.MAX_SPEC_CHARS)] = None,
                     fusion: Annotated[Optional[str], Field(max_length=S.MAX_SPEC_CHARS)] = None,
                     depth: Annotated[Optional[int], Field(ge=1, le=S.MAX_DEPTH)] = None,
                     dimsel: Optional[Dimsel] = None,
                     filter: Optional[Dict[str, Any]] = None,
                     text_chars: Annotated[Optional[int], Field(ge=0, le=1_000_000)] = 1000,
                     prf: Optional[S.PrfOptions] = None, per_document: bool = False) -> Dict[str, Any]:
        try:
            req = G.validate_search(query=query, k=k, retriever=retriever, fusion=fusion, depth=depth,
                                    dimsel=dimsel.model_dump() if dimsel is not None else None, filter=filter,
                                    text_chars=text_chars, prf=S.prf_options(prf), per_document=per_document)
        except ValueError as e:
            raise ToolError(str(e)) from None
        name, s = pick(index)

        def go():
            idx = s.index()
            p = idx.pipeline(req.retriever, req.fusion)
            G.check_planned(1, req.k, True, req.text_chars, budget)
            hits = idx.search(req.query, request=G.search_request(req, p))
            G.check_hits(hits, True, req.text_chars, budget)
            source = "named" if req.retriever is not None else idx.default_pipeline().source
            return {"index": name, "retriever": str(p), "pipeline_source": source,
                    "hits": [hit_dict(h, True, req.text_chars) for h in hits]}
        return await run(go)


EXPLAIN_DOC = ("Why a document got its score and rank for a query: each member retriever's score, rank and the parts "
               "of its score (BM25 per query term: tf, df, idf, length normalisation; stored term weights; a dense "
               "inner product), then the fusion's arithmetic for a fused pipeline. Takes search's retriever, fusion, "
               "depth, dimsel and filter; the parts add up to the score search returns.")


def _add_explain_tool(mcp, pick, run, budget: int) -> None:
    from fastmcp.exceptions import ToolError

    @mcp.tool(description=EXPLAIN_DOC)
    async def explain(query: Annotated[str, Field(min_length=1, max_length=S.MAX_QUERY_CHARS)],
                      docid: Annotated[str, Field(min_length=1, max_length=MAX_DOCID_CHARS)],
                      index: Optional[str] = None,
                      retriever: Annotated[Optional[str], Field(min_length=1, max_length=S.MAX_SPEC_CHARS)] = None,
                      fusion: Annotated[Optional[str], Field(max_length=S.MAX_SPEC_CHARS)] = None,
                      depth: Annotated[Optional[int], Field(ge=1, le=S.MAX_DEPTH)] = None,
                      dimsel: Optional[Dimsel] = None,
                      filter: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        try:
            req = G.validate_search(S.ExplainRequest, query=query, docid=docid, retriever=retriever, fusion=fusion,
                                    depth=depth, dimsel=dimsel.model_dump() if dimsel is not None else None,
                                    filter=filter)
        except ValueError as e:
            raise ToolError(str(e)) from None
        name, s = pick(index)

        def go():
            idx = s.index()
            p = idx.pipeline(req.retriever, req.fusion)
            out = idx.explain(req.query, req.docid, request=G.search_request(req, p))
            G.check_explanation(len(json.dumps(out, default=str)), budget)
            return out
        return await run(go)


def _add_reading_tools(mcp, registry: Registry, pick, run, budget: int, writable: bool) -> None:
    from fastmcp.exceptions import ToolError

    @mcp.tool
    async def get_document(docid: str, index: Optional[str] = None) -> Dict[str, Any]:
        """A document by id: title, text and metadata."""
        if not 1 <= len(docid) <= MAX_DOCID_CHARS:
            raise ToolError(f"docid: 1 to {MAX_DOCID_CHARS} characters")
        name, s = pick(index)

        def go():
            row = s.index().docstore.get(docid)
            if row is not None:
                G.check_rows([row], budget)
            return row
        row = await run(go)
        if row is None:
            raise ToolError(f"no document {docid!r} in {name!r}")
        return {"docid": row[0], "title": row[1], "text": row[2], "metadata": row[3] or {}}

    @mcp.tool
    async def list_indexes() -> List[Dict[str, Any]]:
        """The indexes served, each as GET /v1/NAME describes it: name, documents, generation, retrievers
        (kind, documents, config), tuned pipelines, metadata fields (and a sharded index's shards)."""
        def go():
            return [G.describe_index(s, writable) for s in registry.served.values()]
        return await run(go)
