"""Start-up for ``retr serve`` and ``retr mcp``: checks that fail in one line, then uvicorn
(or the MCP stdio loop). uvicorn drains in-flight requests on SIGTERM before it exits."""
from __future__ import annotations

import ipaddress
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Optional, Sequence

from indexes.errors import InputError, ParameterError


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(path: Optional[Path]) -> Optional[str]:
    if path is None:
        return None
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the token file ({type(e).__name__})", path) from None
    if len(token) < 16 or any(c.isspace() for c in token):
        raise InputError("the token file must hold one token of at least 16 characters, without spaces", path)
    return token


def check(host: str, token: Optional[str]) -> None:
    if not is_loopback(host) and token is None:
        raise ParameterError("refusing to listen on {_host} without a token: only loopback (127.0.0.1, ::1, "
                             "localhost) may be served without {token_file}", _host=host)


def _exit_cleanly(signum, frame):
    raise SystemExit(0)


def _one_thread_per_request() -> None:
    """A server runs requests side by side; torch and faiss splitting each query's small
    matrices over OpenMP threads as well only makes them wait on each other: on the 2 shared
    cores here a MiniLM query took 779 ms with 2 threads and 26 ms with 1. Set before torch
    loads (a value the user exported wins)."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def _check_limits(max_inflight: int, max_response_chars: int) -> None:
    if max_inflight < 1:
        raise ParameterError("{max_inflight} must be at least 1, got {got}", got=max_inflight)
    if max_response_chars < 1:
        raise ParameterError("{max_response_chars} must be at least 1, got {got}", got=max_response_chars)


@dataclass(frozen=True)
class Serving:
    """How ``retr serve`` serves (:func:`serve`'s keywords): where it listens (``host``, ``port``), the
    bearer token's file (``token_file``), ``writable``, the limits (``max_inflight``,
    ``max_response_chars``: None is :data:`retrieval.server.guard.MAX_RESPONSE_CHARS`,
    ``search_threads``), ``mcp``, ``log_level``; and the sharded indexes served on Ray Serve
    (``sharded``, ``ray_address``, ``replicas``, ``shard_timeout``, ``replica_cpus``)."""
    host: str = "127.0.0.1"
    port: int = 8080
    token_file: Optional[Path] = None
    writable: bool = False
    max_inflight: int = 64
    mcp: bool = True
    log_level: str = "warning"
    max_response_chars: Optional[int] = None
    search_threads: Optional[int] = None
    sharded: Sequence[str] = ()
    ray_address: Optional[str] = None
    replicas: int = 1
    shard_timeout: Optional[float] = None
    replica_cpus: Optional[float] = None


def serve(index_specs: Sequence[str], *, how: Optional[Serving] = None, **options: Any) -> None:
    """Serve ``index_specs`` ([NAME=]DIR) over HTTP until SIGTERM. ``how`` (:class:`Serving`), or its
    fields as keywords (``**options``; another keyword is a TypeError naming it).
    ``sharded``: [NAME=]DIR of sharded indexes whose shards are served as Ray Serve deployments
    on the cluster at ``ray_address`` (``local``: one started here), ``replicas`` each
    (:mod:`retrieval.server.ray_shards`); this process is then their router."""
    from retrieval.server.guard import MAX_RESPONSE_CHARS

    bad = sorted(set(options) - {f.name for f in fields(Serving)})
    if bad:
        raise TypeError(f"serve() got an unexpected keyword argument {bad[0]!r}")
    how = replace(how or Serving(), **options)
    if how.max_response_chars is None:
        how = replace(how, max_response_chars=MAX_RESPONSE_CHARS)
    token = read_token(how.token_file)
    check(how.host, token)
    _one_thread_per_request()
    _check_limits(how.max_inflight, how.max_response_chars)
    from retrieval.server.registry import Registry, parse_index_specs

    if how.sharded:
        registry = _sharded_registry(index_specs, how.sharded, how.ray_address, how.replicas, how.shard_timeout,
                                     how.replica_cpus)
    else:
        registry = Registry(parse_index_specs(index_specs))
        # The JVM starts with -Xrs (indexes/jvm.py), so it leaves SIGTERM to uvicorn, which drains;
        # started here, before uvicorn, so the first request does not wait for it.
        from indexes import jvm

        jvm.start()
    try:
        _run_uvicorn(registry, token, how)
    finally:
        for s in registry.served.values():
            close = getattr(s, "close", None) if getattr(s, "sharded", False) else None
            if close is not None:
                close()


def _sharded_registry(index_specs, sharded, ray_address, replicas, shard_timeout, replica_cpus):
    """The registry of a router: every --sharded index deployed on Ray Serve. Plain folders are
    refused beside them: this process then holds Ray's core worker, and the JVM a folder needs
    must not share a process with it (tests/conftest.py's ray_address says why)."""
    from retrieval.server import ray_shards as rs
    from retrieval.server.registry import Registry, parse_index_specs

    if index_specs:
        raise ParameterError("{sharded} cannot be combined with {index_specs} in one server (its router runs Ray, "
                             "and the folders' JVM may not share its process): start a second retr serve for them")
    if replicas < 1:
        raise ParameterError("{replicas} must be at least 1, got {got}", got=replicas)
    served = {}
    try:
        for name, path in parse_index_specs(sharded).items():
            served[name] = rs.serve_sharded(name, path, ray_address, replicas,
                                            rs.REPLICA_CPUS if replica_cpus is None else replica_cpus,
                                            rs.SHARD_TIMEOUT if shard_timeout is None else shard_timeout)
    except BaseException:
        for s in served.values():
            s.close()
        raise
    return Registry({}, served=served)


def _run_uvicorn(registry, token: Optional[str], how: Serving) -> None:
    import uvicorn

    from retrieval.server.app import create_app

    host, port, mcp = how.host, how.port, how.mcp
    app = create_app(registry, token=token, writable=how.writable, max_inflight=how.max_inflight, mcp=mcp,
                     max_response_chars=how.max_response_chars, search_threads=how.search_threads)
    config = uvicorn.Config(app, host=host, port=port, log_level=how.log_level, access_log=False, lifespan="on",
                            timeout_graceful_shutdown=30, server_header=False)
    server = uvicorn.Server(config)
    threading.Thread(target=_announce, args=(server, registry, host, mcp), name="retr-ready", daemon=True).start()
    # uvicorn drains, restores the handler it found and raises the signal again: this one makes
    # that a clean exit (status 0) instead of death by signal.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    server.run()
    if not server.started:
        raise InputError(f"could not listen on {host}:{port} (in use, or not allowed)")


def ready_line(names: Sequence[str], url: str, mcp: bool) -> str:
    extra = ", MCP at /mcp" if mcp else ""
    return f"retr: serving {', '.join(names)} at {url} (search page at /, API at /v1, docs at /docs{extra})"


def _announce(server, registry, host: str, mcp: bool, stream=None) -> None:
    """Once uvicorn listens and the warm-up is done (what /readyz waits for), one line on stderr
    naming the indexes and the URL (stdout stays free for whatever else uses it); a failed
    warm-up adds a line saying so."""
    while not server.started:
        if server.should_exit:
            return
        time.sleep(0.05)
    registry.ready.wait()
    if server.should_exit:
        return
    port = None
    for srv in getattr(server, "servers", None) or []:
        for sock in getattr(srv, "sockets", None) or []:
            port = sock.getsockname()[1]
            break
        if port is not None:
            break
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    stream = stream or sys.stderr
    print(ready_line(registry.names(), f"http://{shown}:{port}/", mcp), file=stream, flush=True)
    if registry.warm_error:
        print(f"retr: warning: warm-up failed ({registry.warm_error}); /readyz answers 503", file=stream,
              flush=True)


def serve_mcp_stdio(index_specs: Sequence[str], max_inflight: int = 64,
                    max_response_chars: Optional[int] = None) -> None:
    """MCP over stdio. The protocol owns stdout, so anything else that writes to file
    descriptor 1 (the JVM, a library) is sent to stderr instead. The tools keep the limits
    of ``retr serve`` (:mod:`retrieval.server.guard`)."""
    from retrieval.server.guard import MAX_RESPONSE_CHARS, Admission
    from retrieval.server.registry import Registry, parse_index_specs

    max_response_chars = MAX_RESPONSE_CHARS if max_response_chars is None else max_response_chars
    _check_limits(max_inflight, max_response_chars)
    _one_thread_per_request()
    registry = Registry(parse_index_specs(index_specs))
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = proto
    registry.warm()
    import anyio

    from retrieval.server.mcp_tools import build_mcp

    mcp = build_mcp(registry, admission=Admission(max_inflight), max_response_chars=max_response_chars)
    anyio.run(_run_stdio, mcp, max(8, max_inflight))


class _AnswerMalformed:
    """The stdio transport's read stream, answering what it could not read. fastmcp's stdio
    transport (mcp.server.stdio) turns a line that is not a JSON-RPC message into an exception
    on the stream, which the dispatcher logs and drops, so the client never hears back. Here
    such a line is answered as JSON-RPC 2.0 asks: -32700 "Parse error" for a line that is
    not JSON, -32600 "Invalid Request" for JSON that is not a message (with its id when it
    has a usable one, else null), and the next line is read as usual."""

    def __init__(self, inner, write):
        self._inner, self._write = inner, write

    @property
    def last_context(self):  # the sender's contextvars, as the wrapped stream carries them
        return getattr(self._inner, "last_context", None)

    @staticmethod
    def _error(exc: Exception):
        from mcp.shared.message import SessionMessage
        from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError

        errors = exc.errors() if hasattr(exc, "errors") else []
        if not errors or any(e.get("type") == "json_invalid" for e in errors):
            code, message, rid = PARSE_ERROR, "Parse error", None
        else:
            obj = next((e.get("input") for e in errors if isinstance(e.get("input"), dict)), None)
            rid = obj.get("id") if isinstance(obj, dict) else None
            if isinstance(rid, bool) or not isinstance(rid, (str, int)):
                rid = None
            code, message = INVALID_REQUEST, "Invalid Request"
        return SessionMessage(JSONRPCError(jsonrpc="2.0", id=rid, error=ErrorData(code=code, message=message)))

    async def receive(self):
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            await self._write.send(self._error(item))

    def __aiter__(self):
        return self

    async def __anext__(self):
        import anyio

        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()


async def _run_stdio(mcp, threads: int) -> None:
    """fastmcp's ``run_stdio_async`` (without the banner), with :class:`_AnswerMalformed`
    between the stdio transport and the server."""
    import anyio.to_thread
    from fastmcp.server.context import reset_transport, set_transport
    from mcp.server.stdio import stdio_server

    anyio.to_thread.current_default_thread_limiter().total_tokens = threads
    token = set_transport("stdio")
    try:
        async with mcp._lifespan_manager():
            async with stdio_server() as (read_stream, write_stream):
                server = mcp._mcp_server
                await server.run(_AnswerMalformed(read_stream, write_stream), write_stream,
                                 server.create_initialization_options())
    finally:
        reset_transport(token)
