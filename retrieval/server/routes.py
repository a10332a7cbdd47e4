"""The HTTP routes: ``/healthz``, ``/readyz``, ``/metrics`` and everything under ``/v1``.

Each ``add_*_routes`` function registers one group of routes on a router, given the
:class:`Shared` state of the app (:func:`retrieval.server.app.create_app` calls them in
order; the order is the routing order and the OpenAPI document's). The work of a route is
a plain function beside it. Searches run in worker threads, never on the event loop, at
most ``search_threads`` at once (the state's limiter); a response over the budget
(``--max-response-chars``, :mod:`retrieval.server.guard`) is refused with 413.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

import anyio
import anyio.to_thread
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from indexes.errors import DuplicateIds, IndexFormatError, InputError, NotFound, RetrError
from retrieval.server import guard as G
from retrieval.server import schemas as S
from retrieval.server.gate import ApiError
from retrieval.server.metrics import Metrics
from retrieval.server.registry import Registry
from retrieval.server.sharded import partial_results
from retrieval.types import hit_dict

STREAM_CHUNK = 32                                  # queries searched at a time by batch_search/stream
HEALTHY = b'{"status":"ok"}'

ERRORS = {s: {"model": S.ErrorResponse, "description": d} for s, d in [
    (400, "Bad input (unknown retriever, bad filter, ...)"), (401, "Missing or wrong bearer token"),
    (403, "Writes need --writable"), (404, "No such index or document"), (409, "Conflicting write"),
    (413, "Request body too large, or the response would be over --max-response-chars"),
    (422, "Request does not match the schema"),
    (429, "Too many requests in flight (see Retry-After)"), (500, "Internal error"), (503, "Not ready")]}


try:  # several times faster than json for hits with passage text; json where it is missing
    import orjson

    def encode(obj) -> bytes:
        return orjson.dumps(obj)
except ImportError:  # pragma: no cover
    def encode(obj) -> bytes:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf-8")


def _dumps(obj) -> Response:
    return Response(encode(obj), media_type="application/json")


@dataclass
class Shared:
    """What the routes share: the served indexes, the response budget, the search threads'
    limiter, the metrics, and whether writes are enabled."""
    registry: Registry
    budget: int
    limiter: anyio.CapacityLimiter
    metrics: Metrics
    writable: bool = False

    def served(self, name: str):
        try:
            return self.registry.get(name)
        except KeyError:
            raise ApiError(404, f"no index named {name!r} (served: {', '.join(self.registry.names())})") from None


def clean(message: str, registry: Registry) -> str:
    """An error message without server paths: index folders become their names."""
    return G.clean_message(message, registry.served.values())


def input_message(e: RetrError) -> str:
    if isinstance(e, InputError) and e.path is not None:  # drop the "path:line: " prefix
        return str(e.args[0]).split(": ", 1)[-1] if str(e.args[0]).startswith(str(e.path)) else str(e)
    return str(e)


def _hit(h, text: bool, text_chars: Optional[int]) -> Dict[str, Any]:
    return hit_dict(h, text, text_chars)


def _source(idx, body) -> str:
    """Why the request's pipeline ran: ``"named"`` (the request named its retriever), else why the
    index's default is what it is (:func:`retrieval.request.default_pipeline`)."""
    return "named" if body.retriever is not None else idx.default_pipeline().source


# ---------------------------------------------------------------------- health
def add_health_routes(router: Union[FastAPI, APIRouter], st: Shared) -> None:
    """/healthz, /readyz, /metrics (registered on the app itself, no prefix). On the event
    loop and doing no work: they answer while every worker thread is searching."""
    registry, metrics = st.registry, st.metrics

    @router.get("/healthz", response_model=S.Health, tags=["health"])
    async def healthz():
        """Alive (no token needed)."""
        return Response(HEALTHY, media_type="application/json")

    @router.get("/readyz", response_model=S.Ready, tags=["health"], responses={503: ERRORS[503]})
    async def readyz():
        """Ready: the JVM started, models loaded and every index open."""
        if not registry.ready.is_set():
            raise ApiError(503, "warming up: loading the indexes and models")
        if registry.warm_error:
            raise ApiError(503, clean(f"warm-up failed: {registry.warm_error}", registry))
        return {"ready": True, "indexes": registry.names()}

    @router.get("/metrics", response_class=PlainTextResponse, tags=["health"])
    async def metrics_text():
        """Request counts and latency by endpoint and retriever (Prometheus text format)."""
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")


# ---------------------------------------------------------------------- indexes
def add_index_routes(v1: APIRouter, st: Shared) -> None:
    """GET /v1/indexes and GET /v1/{index}."""
    @v1.get("/indexes", response_model=S.IndexList, tags=["indexes"])
    def list_indexes():
        """The indexes this server answers for."""
        return _dumps({"indexes": [G.describe_index(s, st.writable) for s in st.registry.served.values()]})

    @v1.get("/{index}", response_model=S.IndexOut, tags=["indexes"])
    def index_info(index: str):
        """One index: documents, retrievers (sub-indexes) and their configuration, tuned pipelines."""
        return _dumps(G.describe_index(st.served(index), st.writable))


# ---------------------------------------------------------------------- search
# Searches run in worker threads, never on the event loop, and at most search_threads of them at
# once (their own anyio limiter): more threads than cores only contend for the GIL, which made
# requests slower and their p99 several times longer at concurrency 32 (benchmarks/results/serve.md).
def add_search_routes(v1: APIRouter, st: Shared) -> None:
    """POST /v1/{index}/search, /batch_search and /batch_search/stream."""
    @v1.post("/{index}/search", response_model=S.SearchResponse, tags=["search"])
    async def search(index: str, body: S.SearchRequest, request: Request):
        """Top-k hits for one query, optionally filtered (see the filter field). A response over
        the server's --max-response-chars is refused with 413."""
        return await anyio.to_thread.run_sync(_search, st, index, body, request, limiter=st.limiter)

    @v1.post("/{index}/batch_search", response_model=S.BatchSearchResponse, tags=["search"])
    async def batch_search(index: str, body: S.BatchSearchRequest, request: Request):
        """Many queries in one request (the same options for all). The response budget
        (--max-response-chars) covers all of them: queries x k x (100 + text_chars) over it is
        refused with 413 before any search, and so are hits whose full texts are over it."""
        return await anyio.to_thread.run_sync(_batch_search, st, index, body, request, limiter=st.limiter)

    @v1.post("/{index}/batch_search/stream", tags=["search"],
             responses={200: {"description": "One JSON object a line (application/x-ndjson): {\"qid\", \"hits\"} "
                                             "per query, in order; a line {\"error\": {...}} ends a stream that failed "
                                             "after it began.", "content": {"application/x-ndjson": {}}}})
    def batch_search_stream(index: str, body: S.BatchSearchRequest, request: Request):
        """The queries of a batch_search answered one line each as they are searched (STREAM_CHUNK
        at a time, all on one generation of the index), so a batch of any size costs the server one
        chunk's hits at a time. The response budget applies to each query's line instead of the whole
        response. Errors in the request (a bad retriever, filter or id) are a JSON error before the
        first line."""
        return _stream(st, index, body, request)


def _search(st: Shared, index: str, body: S.SearchRequest, request: Request):
    s = st.served(index)
    idx = s.index()
    p = idx.pipeline(body.retriever, body.fusion)
    request.state.retriever = p.base
    G.check_planned(1, body.k, body.text, body.text_chars, st.budget)
    with partial_results(body.allow_partial) as scope:  # which shards of a sharded index did not answer
        hits = idx.search(body.query, request=G.search_request(body, p))
    if body.text:  # without text, check_planned already counted every hit
        G.check_hits(hits, body.text, body.text_chars, st.budget)
    out = [_hit(h, body.text, body.text_chars) for h in hits]
    if body.highlight:
        _highlights(idx, body, str(p), hits, out)
    res = {"index": index, "query": body.query, "retriever": str(p), "pipeline_source": _source(idx, body),
           "k": body.k, "hits": out}
    if scope.missing:
        res["partial"] = scope.missing
    if not hits:  # conditions are all required: a field no document carries leaves no hit
        _warn_filter(idx, body.filter, res)
    return _dumps(res)


def _warn_filter(idx, filter, res: Dict[str, Any]) -> None:
    """``warnings`` in a response whose filter names fields no document carries: such a condition
    matches nothing, and a client deserves to hear why it got no hits (Index.search says the same
    on stderr as a FilterWarning). Worked out here rather than by catching that warning, since
    warnings.catch_warnings changes process-wide state and searches run in many threads."""
    from retrieval.filters import DOCID, parse_filter, unknown_fields_message

    flt = parse_filter(filter) if filter else None
    if flt is None:
        return
    fields = idx.fields()
    unknown = list(dict.fromkeys(f for f, _, _ in flt.conditions if f != DOCID and f not in fields))
    if unknown:
        res["warnings"] = [unknown_fields_message(unknown, fields)]


def _highlights(idx, body: S.SearchRequest, pipeline: str, hits, out) -> None:
    """Each hit's ``highlights`` (search with ``"highlight": true``): the spans of its title and
    text whose words match the query's terms (:meth:`Index.highlight`), computed on the whole text
    and kept within the text as cut by ``text_chars``; null without text."""
    if not body.text or not hits:
        for d in out:
            d["highlights"] = None
        return
    spans = idx.highlight(body.query, [h.title for h in hits] + [h.text for h in hits], retriever=pipeline) \
        or [[] for _ in range(2 * len(hits))]
    n = len(hits)
    for i, d in enumerate(out):
        cut = len(d["text"])
        d["highlights"] = {"title": [[a, b] for a, b in spans[i]],
                           "text": [[a, min(b, cut)] for a, b in spans[n + i] if a < cut]}


def _queries(body: S.BatchSearchRequest):
    """The batch's queries (ids: their positions where not given), each id once, none empty."""
    from retrieval.types import Query

    qs = [Query(str(i), q) if isinstance(q, str) else Query(q.qid, q.query) for i, q in enumerate(body.queries)]
    if len({q.qid for q in qs}) != len(qs):
        raise ApiError(400, "query ids must be unique")
    if any(not q.text.strip() for q in qs):
        raise ApiError(400, "query text is empty")
    return qs


def _batch_search(st: Shared, index: str, body: S.BatchSearchRequest, request: Request):
    s = st.served(index)
    idx = s.index()
    p = idx.pipeline(body.retriever, body.fusion)
    request.state.retriever = p.base
    qs = _queries(body)
    G.check_planned(len(qs), body.k, body.text, body.text_chars, st.budget)
    with partial_results(body.allow_partial) as scope:
        res = idx.batch_search(qs, request=G.search_request(body, p))
    if body.text:
        G.check_hits((h for q in qs for h in res.get(q.qid, [])), body.text, body.text_chars, st.budget)
    out = {"index": index, "retriever": str(p), "pipeline_source": _source(idx, body), "k": body.k,
           "results": [{"qid": q.qid, "hits": [_hit(h, body.text, body.text_chars)
                                              for h in res.get(q.qid, [])]} for q in qs]}
    if scope.missing:
        out["partial"] = scope.missing
    if any(not res.get(q.qid) for q in qs):
        _warn_filter(idx, body.filter, out)
    return _dumps(out)


def _stream(st: Shared, index: str, body: S.BatchSearchRequest, request: Request):
    """batch_search/stream: the request checked and its first chunk searched before the
    response starts (so its errors are answered as errors, not lines), then a line per query."""
    from fastapi.responses import StreamingResponse

    from retrieval.filters import parse_filter

    s = st.served(index)
    snap = s.index().snapshot()
    try:
        p = snap.pipeline(body.retriever, body.fusion)
        request.state.retriever = p.base
        qs = _queries(body)
        G.check_planned(1, body.k, body.text, body.text_chars, st.budget)
        parse_filter(body.filter)

        def chunk(part):
            with partial_results(body.allow_partial) as scope:  # per chunk: its lines name missing shards
                res = snap.batch_search(part, request=G.search_request(body, p))
            lines = []
            for q in part:
                hits = res.get(q.qid, [])
                if body.text:
                    G.check_hits(hits, body.text, body.text_chars, st.budget)
                line = {"qid": q.qid, "retriever": str(p),
                        "hits": [_hit(h, body.text, body.text_chars) for h in hits]}
                if scope.missing:
                    line["partial"] = scope.missing
                lines.append(encode(line) + b"\n")
            return b"".join(lines)

        first = chunk(qs[:STREAM_CHUNK])  # the request's own errors are answered as errors, not lines
    except BaseException:
        snap.close()
        raise
    return StreamingResponse(_lines(st, snap, first, chunk, qs), media_type="application/x-ndjson")


def _lines(st: Shared, snap, first: bytes, chunk, qs):
    """The stream's lines after the first chunk; an error ends it with an error line. The
    snapshot is closed when the stream ends, however it ends."""
    try:
        yield first
        for i in range(STREAM_CHUNK, len(qs), STREAM_CHUNK):
            try:
                yield chunk(qs[i:i + STREAM_CHUNK])
            except (RetrError, G.TooLarge) as e:
                status = 413 if isinstance(e, G.TooLarge) else 503 if isinstance(e, IndexFormatError) else 400
                msg = clean(input_message(e) if isinstance(e, RetrError) else str(e), st.registry)
                yield encode({"error": {"status": status, "message": msg}}) + b"\n"
                return
    finally:
        snap.close()


# ---------------------------------------------------------------------- explain
def add_explain_routes(v1: APIRouter, st: Shared) -> None:
    """POST /v1/{index}/explain."""
    @v1.post("/{index}/explain", response_model=S.ExplainResponse, tags=["search"])
    async def explain(index: str, body: S.ExplainRequest, request: Request):
        """How a document got its score and rank for a query (Index.explain): each member retriever's
        score, rank and the parts of its score, then the fusion's arithmetic. 404 for a document the
        index does not hold."""
        return await anyio.to_thread.run_sync(_explain, st, index, body, request, limiter=st.limiter)


def _explain(st: Shared, index: str, body: S.ExplainRequest, request: Request):
    s = st.served(index)
    idx = s.index()
    p = idx.pipeline(body.retriever, body.fusion)
    request.state.retriever = p.base
    try:
        out = idx.explain(body.query, body.docid, request=G.search_request(body, p))
    except NotFound as e:
        raise ApiError(404, clean(input_message(e), st.registry)) from None
    data = encode(out)
    G.check_explanation(len(data), st.budget)
    return Response(data, media_type="application/json")


# ---------------------------------------------------------------------- documents
def _doc_out(row) -> Dict[str, Any]:
    return {"docid": row[0], "title": row[1], "text": row[2], "metadata": row[3] or {}}


RESERVED_DOC_PATHS = ("get", "delete")  # /v1/{index}/documents/<these> are POST operations, not document ids
NOT_ALLOWED = "method-not-allowed"      # the name of the routes that only answer 405 (app.allowed_methods skips them)
ALL_METHODS = ("GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE")


def _post_only(router: APIRouter, path: str) -> None:
    """A route on ``path`` that answers every method but POST with 405 and ``Allow: POST``."""
    async def not_allowed(index: str):
        raise ApiError(405, "method not allowed", headers={"Allow": "POST"})
    router.add_api_route(path, not_allowed, methods=list(ALL_METHODS), include_in_schema=False, name=NOT_ALLOWED)


def add_document_read_routes(v1: APIRouter, st: Shared) -> None:
    """GET /v1/{index}/documents/{docid} and POST /v1/{index}/documents/get; before them, the
    paths of the POST-only operations under /documents/, so that another method there is a 405
    naming POST instead of a GET of a document named "get" or "delete"."""
    for op in RESERVED_DOC_PATHS:
        _post_only(v1, f"/{{index}}/documents/{op}")

    @v1.get("/{index}/documents/{docid:path}", response_model=S.DocumentOut, tags=["documents"])
    def get_document(index: str, docid: str):
        """One document by id."""
        row = st.served(index).index().docstore.get(docid)
        if row is None:
            raise ApiError(404, f"no document {docid[:200]!r} in {index!r}")
        return _dumps(_doc_out(row))

    @v1.post("/{index}/documents/get", response_model=S.DocumentsOut, tags=["documents"])
    def get_documents(index: str, body: S.IdsRequest):
        """Many documents by id, in the order asked; ids not found are listed in ``missing``."""
        rows = st.served(index).index().docstore.get_many(body.ids)
        G.check_rows(rows.values(), st.budget)
        return _dumps({"documents": [_doc_out(rows[d]) for d in dict.fromkeys(body.ids) if d in rows],
                       "missing": [d for d in dict.fromkeys(body.ids) if d not in rows]})


def _writable(st: Shared) -> None:
    if not st.writable:
        raise ApiError(403, "this server is read-only; start it with --writable to change documents")


def _docs_of(body: S.WriteRequest):
    from retrieval.types import Document

    ids = [d.docid for d in body.documents]
    if len(set(ids)) != len(ids):
        raise ApiError(400, "a document id appears twice in the request")
    return [Document(d.docid, d.text, d.title, d.metadata) for d in body.documents]


def _write(st: Shared, index: str, op: str, payload) -> Dict[str, Any]:
    """One change of a served folder or sharded folder (its ``write``: :mod:`retrieval.ops`); an add
    of an id the index holds is one 409."""
    _writable(st)
    s = st.served(index)
    with s.write_lock:
        try:
            n = s.write(op, payload)
        except DuplicateIds as e:
            raise ApiError(409, clean(input_message(e), st.registry)) from None
    return {"index": index, "operation": op, "documents": n, "total": len(s.index())}


def add_document_write_routes(v1: APIRouter, st: Shared) -> None:
    """POST, PUT /v1/{index}/documents and POST /v1/{index}/documents/delete (``--writable``)."""
    @v1.post("/{index}/documents", response_model=S.WriteResult, tags=["documents"])
    def add_documents(index: str, body: S.WriteRequest):
        """Add documents to every sub-index (``--writable``): all or nothing, visible to the next search."""
        _writable(st)
        return _dumps(_write(st, index, "add", _docs_of(body)))

    @v1.put("/{index}/documents", response_model=S.WriteResult, tags=["documents"])
    def update_documents(index: str, body: S.WriteRequest):
        """Replace documents by id, or add those that are new (``--writable``; the live index)."""
        _writable(st)
        return _dumps(_write(st, index, "update", _docs_of(body)))

    @v1.post("/{index}/documents/delete", response_model=S.WriteResult, tags=["documents"])
    def delete_documents(index: str, body: S.IdsRequest):
        """Delete documents by id (``--writable``; the live index). Ids not in the index are ignored."""
        return _dumps(_write(st, index, "delete", list(dict.fromkeys(body.ids))))
