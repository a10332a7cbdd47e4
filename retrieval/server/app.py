"""The HTTP API: FastAPI routes under ``/v1``, plus ``/healthz``, ``/readyz``, ``/metrics``
and the MCP endpoint mounted at ``/mcp``.

:func:`create_app` assembles it: the lifespan (warm-up, thread limits, the MCP app's
lifespan), the exception handlers, the routes (:mod:`retrieval.server.routes`, one function
per group), the OpenAPI document's customisation, and the ASGI gate in front
(:mod:`retrieval.server.gate`: bearer token, body limits, 429, metrics).

Every error is one JSON shape, ``{"error": {"status": 404, "message": "..."}}``, with no
traceback and no server path in it. Every search runs in the threadpool, never on the event
loop, so /healthz answers at once under any load; a response over ``max_response_chars`` is
refused with 413.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Optional

import anyio
import anyio.to_thread
from fastapi import APIRouter, FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from indexes.errors import IndexFormatError, RetrError
from retrieval.server import guard as G
from retrieval.server import routes as R
from retrieval.server.gate import ApiError, Gate
from retrieval.server.metrics import Metrics
from retrieval.server.page import add_page_routes
from retrieval.server.registry import Registry

log = logging.getLogger("retr.server")
ERRORS = R.ERRORS


def error_json(status: int, message: str, headers: Optional[dict] = None) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status, headers=headers)


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
    mcp_app = None
    if mcp:
        from retrieval.server.mcp_tools import build_mcp

        mcp_app = build_mcp(registry, admission=admission, max_response_chars=max_response_chars,
                            writable=writable).http_app(path="/")

    app = FastAPI(title="retr", version="1", lifespan=_lifespan(registry, max_inflight, warm, mcp_app),
                  description="Search retr index folders: BM25, dense, DeepCT and fused pipelines, with metadata "
                              "filters. Errors are {\"error\": {\"status\", \"message\"}}.")
    _add_error_handlers(app, registry)
    # Searches: at most search_threads at once, on their own limiter (see routes.add_search_routes).
    search_threads = search_threads or max(2, os.cpu_count() or 2)
    st = R.Shared(registry=registry, budget=max_response_chars, limiter=anyio.CapacityLimiter(search_threads),
                  metrics=metrics, writable=writable)
    R.add_health_routes(app, st)  # on the app itself, as before the split: plain routes, not an included router
    add_page_routes(app)          # the search page at / (static, no token)
    v1 = APIRouter(prefix="/v1", responses=ERRORS)
    for add in (R.add_index_routes, R.add_search_routes, R.add_explain_routes, R.add_document_read_routes,
                R.add_document_write_routes):
        add(v1, st)  # in this order: /v1/indexes before /v1/{index}
    app.include_router(v1)
    app.state.routes = route_table(app, [v1])  # for the Allow header of a 405
    if mcp_app is not None:
        app.mount("/mcp", mcp_app)
    app.openapi = _openapi(app, registry, token)
    return Gate(app, token, admission, metrics)  # type: ignore[return-value]


def _lifespan(registry: Registry, max_inflight: int, warm: bool, mcp_app):
    """Start-up: the worker threads' limit, the warm-up (in a thread: /healthz answers at
    once, /readyz once it is done), and the MCP app's own lifespan."""
    @contextlib.asynccontextmanager
    async def lifespan(app):
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
    return lifespan


def _add_error_handlers(app: FastAPI, registry: Registry) -> None:
    """Every error in the one shape; a crash logged, and answered without its traceback."""
    @app.exception_handler(ApiError)
    async def _api(request, e: ApiError):
        return error_json(e.status, e.message, e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, e):
        headers = getattr(e, "headers", None)
        if e.status_code == 405:  # Starlette names the methods of the first route on the path only
            headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(app.state.routes, request.url.path))}
        return error_json(e.status_code, str(e.detail) if e.detail else "error", headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, e: RequestValidationError):
        return error_json(422, G.validation_message(e.errors()))

    @app.exception_handler(G.TooLarge)
    async def _too_large(request, e: G.TooLarge):
        return error_json(413, str(e))

    @app.exception_handler(RetrError)
    async def _retr(request, e: RetrError):
        status = 503 if isinstance(e, IndexFormatError) else 400
        return error_json(status, R.clean(R.input_message(e), registry))

    @app.exception_handler(Exception)
    async def _crash(request, e: Exception):
        log.exception("internal error on %s %s", request.method, request.url.path)
        return error_json(500, f"internal error ({type(e).__name__}); see the server log")


def route_table(app: FastAPI, routers) -> list:
    """(path regex, methods) of every route that answers something: the app's own and those of
    the included ``routers`` (whose routes' paths carry their prefix; FastAPI no longer copies them
    into ``app.router.routes``), without the routes that only answer 405."""
    from starlette.routing import compile_path

    table = []
    for routes in [app.router.routes, *(r.routes for r in routers)]:
        for route in routes:
            if getattr(route, "name", None) == R.NOT_ALLOWED or not getattr(route, "methods", None):
                continue
            table.append((compile_path(route.path)[0], frozenset(route.methods)))
    return table


def allowed_methods(table, path: str) -> list:
    """Every method some route answers on ``path`` (a 405's Allow), in the usual order."""
    methods = set()
    for regex, ms in table:
        if regex.match(path):
            methods |= ms
    order = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
    return sorted(methods, key=lambda m: (order.index(m) if m in order else len(order), m))


def _openapi(app: FastAPI, registry: Registry, token: Optional[str]):
    """``app.openapi``: the document built once, then cached on the app."""
    def openapi():
        if app.openapi_schema:
            return app.openapi_schema
        app.openapi_schema = _openapi_document(app, registry, token)
        return app.openapi_schema
    return openapi


def _openapi_document(app: FastAPI, registry: Registry, token: Optional[str]) -> dict:
    """FastAPI's document with the index names as an enum, every error answer in the one
    error shape (only the statuses an endpoint can answer), and the bearer scheme when a
    token is needed."""
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
    return doc
