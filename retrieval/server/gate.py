"""The pure ASGI gate in front of the app: bearer token, body limits, admission, metrics.

:class:`Gate` answers before any routing: 401 (a missing or wrong bearer token, compared in
constant time; /healthz needs none), 413/400 (a Content-Length over the limit or unreadable,
a chunked body over the limit, and a body that turns out longer than it said), 429 with ``Retry-After`` once
``--max-inflight`` requests are running (one count with the MCP tools': see
:mod:`retrieval.server.guard`), and records every request in the metrics. Its errors have the
app's one shape, ``{"error": {"status", "message"}}``; a 401 on ``/mcp`` is also a JSON-RPC error
(code :data:`AUTH_CODE`, the same message), which MCP clients show as it is instead of a bare
"Server returned an error response" (-32603).
"""
from __future__ import annotations

import hmac
import json
import time
from typing import Optional

from retrieval.server import guard as G
from retrieval.server.metrics import Metrics
from retrieval.server.page import PATHS as PAGE

EXEMPT = ("/healthz", "/readyz", "/metrics", *PAGE)   # never refused for load
MAX_BODY = 64 * 1024 * 1024                        # bytes; writes carry whole documents
MAX_BODY_READ = 2 * 1024 * 1024                    # for everything but document writes
AUTH_CODE = -32001                                 # JSON-RPC "server error" range: the MCP endpoint's 401


class ApiError(Exception):
    """An HTTP error with its status and message (and headers), answered in the one error shape."""

    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def error_bytes(status: int, message: str) -> bytes:
    return json.dumps({"error": {"status": status, "message": message}}).encode()


def _content_length(headers: dict, limit: int):
    """``None`` when the header is missing or fine, else the (status, message) to answer."""
    length = headers.get(b"content-length")
    if length is None:
        return None
    try:
        n = int(length)
    except ValueError:
        n = -1
    if n < 0 or n > limit:
        return (413, f"request body over {limit:,} bytes") if n > limit else (400, "bad Content-Length")
    return None


class Gate:
    """Auth, body limits, admission (429) and metrics, before any routing."""

    def __init__(self, app, token: Optional[str], admission: G.Admission, metrics: Metrics, max_body: int = MAX_BODY):
        self.app = app
        self.token = token.encode() if token else None
        self.admission = admission
        self.metrics = metrics
        self.max_body = max_body

    async def _reply(self, send, status: int, message: str, headers=(), body: Optional[bytes] = None):
        body = body if body is not None else error_bytes(status, message)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                *headers]})
        await send({"type": "http.response.body", "body": body})

    def _refusal(self, path: str, headers: dict) -> Optional[str]:
        """None when the request may pass, else why not (no token sent, or a wrong one)."""
        if self.token is None or path == "/healthz" or path in PAGE:  # the page is static: its API calls send the token
            return None
        got = headers.get(b"authorization")
        if not got:
            return "missing bearer token: send 'Authorization: Bearer <token>' (the server's --token-file)"
        scheme, _, cred = got.partition(b" ")
        if scheme.lower() != b"bearer":
            return "the Authorization header is not a bearer token: send 'Authorization: Bearer <token>'"
        if not hmac.compare_digest(cred.strip(), self.token):
            return "invalid bearer token: it does not match the server's --token-file"
        return None

    @staticmethod
    def _counted(receive, limit: int):
        """``receive``, refusing a body longer than its Content-Length said (the server's HTTP parser
        already holds a body to its stated length: a safeguard)."""
        seen = [0]

        async def receiving():
            msg = await receive()
            if msg["type"] == "http.request":
                seen[0] += len(msg.get("body", b""))
                if seen[0] > limit:
                    raise ApiError(413, f"request body over {limit:,} bytes")
            return msg
        return receiving

    @staticmethod
    async def _read_unsized(receive, limit: int):
        """A body without a Content-Length (``Transfer-Encoding: chunked``), read here up to ``limit``
        bytes: None when it is longer (the caller answers 413 before the app sees the request), else a
        ``receive`` that hands the app the body read, then the connection's own messages. Read here
        because an error raised while the app reads its body reaches the client as FastAPI's 400
        "error parsing the body", not the 413 a Content-Length over the limit gets."""
        parts, seen = [], 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":  # the client went away: the app sees that
                first = [msg]
                break
            body = msg.get("body", b"")
            seen += len(body)
            if seen > limit:
                return None
            parts.append(body)
            if not msg.get("more_body", False):
                first = [{"type": "http.request", "body": b"".join(parts), "more_body": False}]
                break

        async def receiving():
            return first.pop() if first else await receive()
        return receiving

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
        why = self._refusal(path, headers)
        if why is not None:
            status[0] = 401
            body = None
            if path == "/mcp" or path.startswith("/mcp/"):  # a JSON-RPC error the MCP client can show
                body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                    "code": AUTH_CODE, "message": f"unauthorized: {why}", "data": {"status": 401}}}).encode()
            await self._reply(sending, 401, why, [(b"www-authenticate", b'Bearer realm="retr"')], body)
            return done()
        limit = self.max_body if method in ("POST", "PUT") and path.endswith("/documents") else MAX_BODY_READ
        refused = _content_length(headers, limit)
        if refused is not None:
            await self._reply(sending, *refused)
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
        try:
            if b"transfer-encoding" not in headers:
                receiving = self._counted(receive, limit)
            else:  # a chunked body: its size is known once read (see _read_unsized)
                receiving = await self._read_unsized(receive, limit)
                if receiving is None:
                    await self._reply(sending, 413, f"request body over {limit:,} bytes")
                    return
            await self.app(scope, receiving, sending)
        finally:
            if counted:
                self.admission.leave()
            done()
