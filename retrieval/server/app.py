"""The HTTP API: FastAPI routes under ``/v1``, plus ``/healthz``, ``/readyz``, ``/metrics``
and the MCP endpoint mounted at ``/mcp``.

Every error is one JSON shape, ``{"error": {"status": 404, "message": "..."}}``, with no
traceback and no server path in it. A pure ASGI gate in front of the app checks the
bearer token (constant-time), bounds request bodies, answers 429 with ``Retry-After``
once ``max_inflight`` requests are running (one count with the MCP tools': see
:mod:`retrieval.server.guard`), and records the metrics. Every search runs in the
threadpool, never on the event loop, so /healthz answers at once under any load; a
response over ``max_response_chars`` is refused with 413.
"""
from __future__ import annotations

import contextlib
import hmac
import os
import json
import logging
import math
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import anyio
import anyio.to_thread
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from indexes.errors import IndexFormatError, InputError, RetrError
from retrieval.server import guard as G
from retrieval.server import schemas as S
from retrieval.server.metrics import Metrics
from retrieval.server.registry import Registry

log = logging.getLogger("retr.server")
EXEMPT = ("/healthz", "/readyz", "/metrics")      # never refused for load
STREAM_CHUNK = 32                                  # queries searched at a time by batch_search/stream
MAX_BODY = 64 * 1024 * 1024                        # bytes; writes carry whole documents
MAX_BODY_READ = 2 * 1024 * 1024                    # for everything but document writes


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def error_json(status: int, message: str, headers: Optional[dict] = None) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status, headers=headers)


HEALTHY = b'{"status":"ok"}'


def _error_bytes(status: int, message: str) -> bytes:
    return json.dumps({"error": {"status": status, "message": message}}).encode()


try:  # several times faster than json for hits with passage text; json where it is missing
    import orjson

    def _encode(obj) -> bytes:
        return orjson.dumps(obj)
except ImportError:  # pragma: no cover
    def _encode(obj) -> bytes:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf-8")


def _dumps(obj) -> Response:
    return Response(_encode(obj), media_type="application/json")


class Gate:
    """Auth, body limits, admission (429) and metrics, before any routing."""

    def __init__(self, app, token: Optional[str], admission: G.Admission, metrics: Metrics, max_body: int = MAX_BODY):
        self.app = app
        self.token = token.encode() if token else None
        self.admission = admission
        self.metrics = metrics
        self.max_body = max_body

    async def _reply(self, send, status: int, message: str, headers=()):
        body = _error_bytes(status, message)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                *headers]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope["path"], scope["method"]
        t0 = time.perf_counter()
        status = [500]

        async def sending(msg):
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        def done():
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or ("/mcp" if path.startswith("/mcp") else "other")
            retriever = (scope.get("state") or {}).get("retriever", "")
            self.metrics.observe(endpoint, method, status[0], retriever, time.perf_counter() - t0)

        headers = dict(scope["headers"])
        if self.token is not None and path != "/healthz":
            got = headers.get(b"authorization", b"")
            scheme, _, cred = got.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(cred.strip(), self.token):
                status[0] = 401
                await self._reply(sending, 401, "missing or wrong bearer token (send 'Authorization: Bearer <token>')",
                                  [(b"www-authenticate", b'Bearer realm="retr"')])
                return done()
        limit = self.max_body if method in ("POST", "PUT") and path.endswith("/documents") else MAX_BODY_READ
        length = headers.get(b"content-length")
        if length is not None:
            try:
                n = int(length)
            except ValueError:
                n = -1
            if n < 0 or n > limit:
                await self._reply(sending, 413 if n > limit else 400,
                                  f"request body over {limit:,} bytes" if n > limit else "bad Content-Length")
                return done()
        # MCP requests are counted by the MCP tools themselves (each tools/call, the same count),
        # not here: an MCP session also holds long-lived requests that do no work.
        counted = path not in EXEMPT and not path.startswith("/mcp")
        if counted:
            try:
                self.admission.enter(path)
            except G.Busy as e:
                await self._reply(sending, 429, str(e), [(b"retry-after", b"1")])
                return done()
        seen = [0]

        async def receiving():
            msg = await receive()
            if msg["type"] == "http.request":
                seen[0] += len(msg.get("body", b""))
                if seen[0] > limit:
                    raise ApiError(413, f"request body over {limit:,} bytes")
            return msg

        try:
            await self.app(scope, receiving, sending)
        finally:
            if counted:
                self.admission.leave()
            done()


def _clean(message: str, registry: Registry) -> str:
    """An error message without server paths: index folders become their names."""
    return G.clean_message(message, registry.served.values())


def _input_message(e: RetrError) -> str:
    if isinstance(e, InputError) and e.path is not None:  # drop the "path:line: " prefix
        return str(e.args[0]).split(": ", 1)[-1] if str(e.args[0]).startswith(str(e.path)) else str(e)
    return str(e)


def _scrub(v):
    """Configs for the info endpoint: absolute paths reduced to their last part."""
    if isinstance(v, dict):
        return {k: _scrub(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_scrub(x) for x in v]
    if isinstance(v, str) and v.startswith("/"):
        return Path(v).name
    return v


def _hit(h, single: Optional[str], text: bool, text_chars: Optional[int]) -> Dict[str, Any]:
    score = float(h.score)
    d = {"docid": h.docid, "rank": h.rank, "score": score if math.isfinite(score) else 0.0,
         "scores": dict(h.scores) if h.scores else {single: score}}
    if text:
        t = h.text if text_chars is None else h.text[:text_chars]
        d.update(title=h.title, text=t, metadata=h.metadata if h.metadata is not None else {})
    else:
        d.update(title=None, text=None, metadata=None)
    return d


def _dimsel(o: Optional[S.DimselOptions]):
    if o is None:
        return None
    d = {"mode": o.mode}
    if o.alpha is not None:
        d["alpha"] = o.alpha
    if o.prf_k is not None:
        d["prf_k"] = o.prf_k
    if o.adaptive:
        d["adaptive"] = True
    return d


ERRORS = {s: {"model": S.ErrorResponse, "description": d} for s, d in [
    (400, "Bad input (unknown retriever, bad filter, ...)"), (401, "Missing or wrong bearer token"),
    (403, "Writes need --writable"), (404, "No such index or document"), (409, "Conflicting write"),
    (413, "Request body too large, or the response would be over --max-response-chars"),
    (422, "Request does not match the schema"),
    (429, "Too many requests in flight (see Retry-After)"), (500, "Internal error"), (503, "Not ready")]}


def create_app(registry: Registry, token: Optional[str] = None, writable: bool = False, max_inflight: int = 64,
               mcp: bool = True, warm: bool = True, max_response_chars: int = G.MAX_RESPONSE_CHARS,
               search_threads: Optional[int] = None) -> FastAPI:
    """The app for ``registry``. ``token``: every endpoint but /healthz needs it as a bearer
    token. ``writable``: the add/update/delete endpoints are enabled. ``mcp``: mount the MCP
    tools at /mcp. ``warm``: load every retriever at start-up (/readyz turns 200 after).
    ``search_threads``: searches answered at once (default: the machine's cores, at least 2;
    the others wait, counted against ``max_inflight``).
    ``max_inflight``: requests answered at once, /v1 and MCP tool calls together.
    ``max_response_chars``: the response budget (see :mod:`retrieval.server.guard`)."""
    metrics = Metrics()
    admission = G.Admission(max_inflight, metrics)
    budget = max_response_chars
    mcp_app = None
    if mcp:
        from retrieval.server.mcp_tools import build_mcp

        mcp_app = build_mcp(registry, admission=admission, max_response_chars=budget).http_app(path="/")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        import anyio.to_thread

        anyio.to_thread.current_default_thread_limiter().total_tokens = max(8, max_inflight)
        if warm:
            threading.Thread(target=registry.warm, name="retr-warm", daemon=True).start()
        else:
            registry.ready.set()
        if mcp_app is not None:
            async with mcp_app.lifespan(app):
                yield
        else:
            yield

    app = FastAPI(title="retr", version="1", lifespan=lifespan,
                  description="Search retr index folders: BM25, dense, DeepCT and fused pipelines, with metadata "
                              "filters. Errors are {\"error\": {\"status\", \"message\"}}.")
    v1 = APIRouter(prefix="/v1", responses=ERRORS)

    def served(name: str):
        try:
            return registry.get(name)
        except KeyError:
            raise ApiError(404, f"no index named {name!r} (served: {', '.join(registry.names())})") from None

    # ------------------------------------------------------------------ errors
    @app.exception_handler(ApiError)
    async def _api(request, e: ApiError):
        return error_json(e.status, e.message, e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, e):
        return error_json(e.status_code, str(e.detail) if e.detail else "error", getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, e: RequestValidationError):
        return error_json(422, G.validation_message(e.errors()))

    @app.exception_handler(G.TooLarge)
    async def _too_large(request, e: G.TooLarge):
        return error_json(413, str(e))

    @app.exception_handler(RetrError)
    async def _retr(request, e: RetrError):
        status = 503 if isinstance(e, IndexFormatError) else 400
        return error_json(status, _clean(_input_message(e), registry))

    @app.exception_handler(Exception)
    async def _crash(request, e: Exception):
        log.exception("internal error on %s %s", request.method, request.url.path)
        return error_json(500, f"internal error ({type(e).__name__}); see the server log")

    # ------------------------------------------------------------------ health
    # On the event loop and doing no work: it answers while every worker thread is searching.
    @app.get("/healthz", response_model=S.Health, tags=["health"])
    async def healthz():
        """Alive (no token needed)."""
        return Response(HEALTHY, media_type="application/json")

    @app.get("/readyz", response_model=S.Ready, tags=["health"], responses={503: ERRORS[503]})
    async def readyz():
        """Ready: the JVM started, models loaded and every index open."""
        if not registry.ready.is_set():
            raise ApiError(503, "warming up: loading the indexes and models")
        if registry.warm_error:
            raise ApiError(503, _clean(f"warm-up failed: {registry.warm_error}", registry))
        return {"ready": True, "indexes": registry.names()}

    @app.get("/metrics", response_class=PlainTextResponse, tags=["health"])
    async def metrics_text():
        """Request counts and latency by endpoint and retriever (Prometheus text format)."""
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    # ------------------------------------------------------------------ indexes
    def index_out(s) -> Dict[str, Any]:
        with s.index().snapshot() as snap:  # the count, the manifest and the generation of one generation
            m, count, gen = snap.manifest, len(snap), snap.generation
        subs = {n: {"kind": e.get("kind", ""), "documents": e.get("doc_count"), "config": _scrub(e.get("config", {}))}
                for n, e in m.get("subindexes", {}).items()}
        pipes = {n: p.get("spec", "") for n, p in (m.get("pipelines") or {}).items()}
        return {"name": s.name, "documents": count, "generation": gen, "retrievers": subs, "pipelines": pipes,
                "writable": writable, "created_at": m.get("created_at"), "updated_at": m.get("updated_at")}

    @v1.get("/indexes", response_model=S.IndexList, tags=["indexes"])
    def list_indexes():
        """The indexes this server answers for."""
        return _dumps({"indexes": [index_out(s) for s in registry.served.values()]})

    @v1.get("/{index}", response_model=S.IndexOut, tags=["indexes"])
    def index_info(index: str):
        """One index: documents, retrievers (sub-indexes) and their configuration, tuned pipelines."""
        return _dumps(index_out(served(index)))

    # ------------------------------------------------------------------ search
    # Searches run in worker threads, never on the event loop, and at most search_threads of them at
    # once (their own anyio limiter): more threads than cores only contend for the GIL, which made
    # requests slower and their p99 several times longer at concurrency 32 (benchmarks/results/serve.md).
    search_threads = search_threads or max(2, os.cpu_count() or 2)
    search_limiter = anyio.CapacityLimiter(search_threads)

    @v1.post("/{index}/search", response_model=S.SearchResponse, tags=["search"])
    async def search(index: str, body: S.SearchRequest, request: Request):
        """Top-k hits for one query, optionally filtered (see the filter field). A response over
        the server's --max-response-chars is refused with 413."""
        return await anyio.to_thread.run_sync(_search, index, body, request, limiter=search_limiter)

    def _search(index: str, body: S.SearchRequest, request: Request):
        s = served(index)
        idx = s.index()
        p = idx.pipeline(body.retriever, body.fusion)
        request.state.retriever = p.base
        G.check_planned(1, body.k, body.text, body.text_chars, budget)
        hits = idx.search(body.query, k=body.k, retriever=str(p), text=body.text, depth=body.depth,
                          dimsel=_dimsel(body.dimsel), filter=body.filter)
        if body.text:  # without text, check_planned already counted every hit
            G.check_hits(hits, body.text, body.text_chars, budget)
        single = None if p.fused else p.retrievers[0]
        return _dumps({"index": index, "query": body.query, "retriever": str(p), "k": body.k,
                       "hits": [_hit(h, single, body.text, body.text_chars) for h in hits]})

    @v1.post("/{index}/batch_search", response_model=S.BatchSearchResponse, tags=["search"])
    async def batch_search(index: str, body: S.BatchSearchRequest, request: Request):
        """Many queries in one request (the same options for all). The response budget
        (--max-response-chars) covers all of them: queries x k x (100 + text_chars) over it is
        refused with 413 before any search, and so are hits whose full texts are over it."""
        return await anyio.to_thread.run_sync(_batch_search, index, body, request, limiter=search_limiter)

    def _batch_search(index: str, body: S.BatchSearchRequest, request: Request):
        from retrieval.types import Query

        s = served(index)
        idx = s.index()
        p = idx.pipeline(body.retriever, body.fusion)
        request.state.retriever = p.base
        qs = [Query(str(i), q) if isinstance(q, str) else Query(q.qid, q.query) for i, q in enumerate(body.queries)]
        if len({q.qid for q in qs}) != len(qs):
            raise ApiError(400, "query ids must be unique")
        if any(not q.text.strip() for q in qs):
            raise ApiError(400, "query text is empty")
        G.check_planned(len(qs), body.k, body.text, body.text_chars, budget)
        res = idx.batch_search(qs, k=body.k, retriever=str(p), text=body.text, depth=body.depth,
                               dimsel=_dimsel(body.dimsel), filter=body.filter)
        if body.text:
            G.check_hits((h for q in qs for h in res.get(q.qid, [])), body.text, body.text_chars, budget)
        single = None if p.fused else p.retrievers[0]
        return _dumps({"index": index, "retriever": str(p), "k": body.k,
                       "results": [{"qid": q.qid, "hits": [_hit(h, single, body.text, body.text_chars)
                                                          for h in res.get(q.qid, [])]} for q in qs]})

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
        from fastapi.responses import StreamingResponse

        from retrieval.filters import parse_filter
        from retrieval.types import Query

        s = served(index)
        snap = s.index().snapshot()
        try:
            p = s.index().pipeline(body.retriever, body.fusion)
            request.state.retriever = p.base
            qs = [Query(str(i), q) if isinstance(q, str) else Query(q.qid, q.query)
                  for i, q in enumerate(body.queries)]
            if len({q.qid for q in qs}) != len(qs):
                raise ApiError(400, "query ids must be unique")
            if any(not q.text.strip() for q in qs):
                raise ApiError(400, "query text is empty")
            G.check_planned(1, body.k, body.text, body.text_chars, budget)
            parse_filter(body.filter)
            single = None if p.fused else p.retrievers[0]

            def chunk(part):
                res = snap.batch_search(part, k=body.k, retriever=str(p), text=body.text, depth=body.depth,
                                        dimsel=_dimsel(body.dimsel), filter=body.filter)
                lines = []
                for q in part:
                    hits = res.get(q.qid, [])
                    if body.text:
                        G.check_hits(hits, body.text, body.text_chars, budget)
                    lines.append(_encode({"qid": q.qid, "hits": [_hit(h, single, body.text, body.text_chars)
                                                                 for h in hits]}) + b"\n")
                return b"".join(lines)

            first = chunk(qs[:STREAM_CHUNK])  # the request's own errors are answered as errors, not lines
        except BaseException:
            snap.close()
            raise

        def lines():
            try:
                yield first
                for i in range(STREAM_CHUNK, len(qs), STREAM_CHUNK):
                    try:
                        yield chunk(qs[i:i + STREAM_CHUNK])
                    except (RetrError, G.TooLarge) as e:
                        status = 413 if isinstance(e, G.TooLarge) else 503 if isinstance(e, IndexFormatError) else 400
                        msg = _clean(_input_message(e) if isinstance(e, RetrError) else str(e), registry)
                        yield _encode({"error": {"status": status, "message": msg}}) + b"\n"
                        return
            finally:
                snap.close()
        return StreamingResponse(lines(), media_type="application/x-ndjson")

    # ------------------------------------------------------------------ documents
    def doc_out(row) -> Dict[str, Any]:
        return {"docid": row[0], "title": row[1], "text": row[2], "metadata": row[3] or {}}

    @v1.get("/{index}/documents/{docid:path}", response_model=S.DocumentOut, tags=["documents"])
    def get_document(index: str, docid: str):
        """One document by id."""
        row = served(index).index().docstore.get(docid)
        if row is None:
            raise ApiError(404, f"no document {docid[:200]!r} in {index!r}")
        return _dumps(doc_out(row))

    @v1.post("/{index}/documents/get", response_model=S.DocumentsOut, tags=["documents"])
    def get_documents(index: str, body: S.IdsRequest):
        """Many documents by id, in the order asked; ids not found are listed in ``missing``."""
        rows = served(index).index().docstore.get_many(body.ids)
        G.check_rows(rows.values(), budget)
        return _dumps({"documents": [doc_out(rows[d]) for d in dict.fromkeys(body.ids) if d in rows],
                       "missing": [d for d in dict.fromkeys(body.ids) if d not in rows]})

    def writer(name: str):
        if not writable:
            raise ApiError(403, "this server is read-only; start it with --writable to change documents")
        import retrieval.writer as w

        return getattr(w, name)

    def docs_of(body: S.WriteRequest):
        from retrieval.types import Document

        ids = [d.docid for d in body.documents]
        if len(set(ids)) != len(ids):
            raise ApiError(400, "a document id appears twice in the request")
        return [Document(d.docid, d.text, d.title, d.metadata) for d in body.documents]

    def write(index: str, op: str, run) -> Dict[str, Any]:
        s = served(index)
        with s.write_lock:
            n = run(s)
        return {"index": index, "operation": op, "documents": n, "total": len(s.index())}

    @v1.post("/{index}/documents", response_model=S.WriteResult, tags=["documents"])
    def add_documents(index: str, body: S.WriteRequest):
        """Add documents to every sub-index (``--writable``): all or nothing, visible to the next search."""
        add = writer("add_documents")
        docs = docs_of(body)

        def run(s):
            idx = s.index()
            have = idx.docstore.get_many(d.docid for d in docs)
            if have:
                raise ApiError(409, f"{len(have)} document id(s) are already in the index (first: "
                                    f"{next(iter(have))[:200]!r}); update them instead")
            rep: dict = {}
            add(idx, docs, quiet=True, report=rep)
            return int(rep.get("added", len(docs)))
        return _dumps(write(index, "add", run))

    @v1.put("/{index}/documents", response_model=S.WriteResult, tags=["documents"])
    def update_documents(index: str, body: S.WriteRequest):
        """Replace documents by id, or add those that are new (``--writable``; the live index)."""
        upd = writer("update_documents")
        docs = docs_of(body)

        def run(s):
            upd(s.index(), docs, quiet=True)
            return len(docs)
        return _dumps(write(index, "update", run))

    @v1.post("/{index}/documents/delete", response_model=S.WriteResult, tags=["documents"])
    def delete_documents(index: str, body: S.IdsRequest):
        """Delete documents by id (``--writable``; the live index). Ids not in the index are ignored."""
        rm = writer("delete_documents")

        def run(s):
            have = s.index().docstore.get_many(body.ids)
            gone = list(dict.fromkeys(d for d in body.ids if d in have))
            if gone:
                rm(s.index(), gone, quiet=True)
            return len(gone)
        return _dumps(write(index, "delete", run))

    app.include_router(v1)
    if mcp_app is not None:
        app.mount("/mcp", mcp_app)

    def openapi():
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        comps = doc.setdefault("components", {}).setdefault("schemas", {})
        comps.pop("HTTPValidationError", None)
        comps.pop("ValidationError", None)
        if token:
            doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        ref = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
        for path, ops in doc.get("paths", {}).items():
            codes = {"/healthz": (), "/readyz": (401, 503), "/metrics": (401,)}.get(path, tuple(ERRORS))
            for op in ops.values():
                for prm in op.get("parameters", []):
                    if prm.get("in") == "path" and prm.get("name") == "index":
                        prm["schema"] = {"type": "string", "enum": registry.names(), "title": "Index"}
                resp = op.setdefault("responses", {})
                for code in ERRORS:
                    resp.pop(str(code), None)
                for code in codes:
                    if code == 401 and not token:
                        continue
                    resp[str(code)] = {"description": ERRORS[code]["description"], "content": ref}
                if token and path != "/healthz":
                    op["security"] = [{"bearer": []}]
        app.openapi_schema = doc
        return doc

    app.openapi = openapi
    return Gate(app, token, admission, metrics)  # type: ignore[return-value]
