"""``retrieval.Client``: a ``retr serve`` index through HTTP, with the search API of
:class:`retrieval.index.Index` (``search``, ``batch_search``, ``get``, ``info``) and the
same :class:`retrieval.types.Hit` objects. The transport is httpx (imported when the first
request is made): one ``httpx.Client`` with its keep-alive pool (thread-safe, so one Client may be
shared by threads) and, for asyncio callers (``asearch``, ``arequest``), one ``httpx.AsyncClient``
per event loop, so an async search waits on its socket in the loop itself, never in a thread.

    c = retrieval.Client("http://127.0.0.1:8080", token=None, index="sf")
    hits = c.search("does aspirin prevent colorectal cancer", k=5, filter={"shard": "odd"})
    hits = await c.asearch("statins", k=3)
"""
from __future__ import annotations

import asyncio
import email.utils
import json
import threading
import time
from typing import Any, Dict, List, Optional, Sequence
from urllib.parse import quote, urlsplit

from typing_extensions import Unpack

from indexes.errors import InputError, RetrError
from retrieval.frames import batch_result, search_df
from retrieval.request import (DEFAULT_K, BatchOptions, SearchOptions, SearchRequest, batch_request,
                               search_request)
from retrieval.types import Document, Hit, Hits, QueriesArg, as_queries

MAX_BATCH = 1_000  # queries per request: the server's limit (retrieval.server.schemas.MAX_BATCH, not imported here)
MAX_WAIT = 30.0    # seconds: the longest wait before retrying a 429, whatever its Retry-After says


def _error(status: int, answer: Any, raw: bytes) -> "ServerError":
    """The server's one error shape, {"error": {"message"}}, as a ServerError (its raw start otherwise)."""
    msg = (answer or {}).get("error", {}).get("message") if isinstance(answer, dict) else None
    return ServerError(status, msg or raw[:200].decode("utf-8", "replace"))


class ServerError(RetrError):
    """An error answer from the server (``status``: its HTTP status; 0 when it could not be reached)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"server answered {status}: {message}")
        self.status = status


def retry_wait(retry_after: Optional[str], attempt: int) -> float:
    """Seconds to wait before trying a 429 again: its Retry-After (delay-seconds or an HTTP date),
    else 0.5 s doubled on each attempt; never negative, never over :data:`MAX_WAIT`.

    Hand-written because httpx has no retry for answers: ``HTTPTransport(retries=n)`` retries only
    failed connection attempts (connect errors and timeouts), never a 429 and never its Retry-After."""
    wait = None
    if retry_after:
        try:
            wait = float(retry_after)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(retry_after)
                wait = when.timestamp() - time.time()
            except (TypeError, ValueError):
                wait = None
    if wait is None or wait != wait:  # missing, unreadable or NaN: back off
        wait = 0.5 * 2 ** attempt
    return min(max(wait, 0.0), MAX_WAIT)


def _decoded(status: int, raw: bytes) -> Any:
    """The JSON of an answer; raises ServerError for an error status."""
    try:
        out = json.loads(raw) if raw else None
    except ValueError:
        out = None
    if status >= 400:
        raise _error(status, out, raw)
    return out


def prf_body(prf: Any) -> Optional[Dict[str, Any]]:
    """``Index.search``'s ``prf`` (``"rm3"``, ``"rocchio(gamma=0.15)"``, a dict, a ``Feedback``) as a
    request's ``"prf"`` object: every parameter of its method, read by the parser Index.search uses (so
    a setting Index.search refuses is the same ParameterError here, before any request). ``"none"`` /
    False / None: no object (a served index has no feedback configured, so none is the same as off)."""
    if prf is None:
        return None
    from retrieval.bm25.prf import parse  # the one parser of feedback settings (lives with BM25, which runs it)

    setting = parse(prf)
    return None if setting is False else {"method": setting.method, **setting.params()}


class Client:
    """``url``: the server (``http://host:port``), optionally ending in ``/v1/NAME``;
    ``index``: the index name (default: the one the URL names, else the server's only
    index). ``retries``: how often a 429 (busy) answer is retried, after its Retry-After."""

    def __init__(self, url: str, token: Optional[str] = None, index: Optional[str] = None, timeout: float = 60.0,
                 retries: int = 3):
        u = urlsplit(url if "://" in url else f"http://{url}")
        if u.scheme not in ("http", "https") or not u.hostname:
            raise InputError(f"not an http(s) URL: {url!r}")
        parts = [p for p in u.path.split("/") if p]
        if len(parts) >= 2 and parts[-2] == "v1":
            index = index or parts[-1]
        self.token, self.timeout, self.retries = token, timeout, retries
        self._lock = threading.Lock()
        self._sync = None                      # httpx.Client, made on the first request
        self._async: Dict[int, tuple] = {}     # id(loop) -> (loop, httpx.AsyncClient): a pool serves one loop
        self.url = f"{u.scheme}://{u.netloc}"
        self.index = index or self._only_index()

    # -- transport --------------------------------------------------------------------------------
    def _http(self):
        if self._sync is None:
            import httpx

            with self._lock:
                if self._sync is None:  # retries=1: a failed connection attempt is made once more
                    self._sync = httpx.Client(base_url=self.url, timeout=self.timeout,
                                              transport=httpx.HTTPTransport(retries=1))
        return self._sync

    def _ahttp(self):
        """The running loop's AsyncClient (an httpx pool's connections belong to the loop that
        opened them, so each loop gets its own; those of closed loops are dropped)."""
        import httpx

        loop = asyncio.get_running_loop()
        with self._lock:
            for key, (lp, _c) in list(self._async.items()):
                if lp.is_closed():
                    del self._async[key]
            held = self._async.get(id(loop))
            if held is None or held[0] is not loop:
                held = self._async[id(loop)] = (loop, httpx.AsyncClient(
                    base_url=self.url, timeout=self.timeout, transport=httpx.AsyncHTTPTransport(retries=1)))
        return held[1]

    def _unreachable(self, e: Exception) -> ServerError:
        return ServerError(0, f"cannot reach {self.url} ({type(e).__name__}: {e})")

    def _send(self, method: str, path: str, data: Optional[bytes], accept: str):
        """One answer, a 429 retried up to ``retries`` times after :func:`retry_wait`."""
        import httpx

        headers = self._headers(accept, data is not None)
        for attempt in range(self.retries + 1):
            try:
                resp = self._http().request(method, path, content=data, headers=headers)
            except httpx.HTTPError as e:
                raise self._unreachable(e) from None
            if resp.status_code != 429 or attempt >= self.retries:
                return resp
            time.sleep(retry_wait(resp.headers.get("Retry-After"), attempt))

    async def _asend(self, method: str, path: str, data: Optional[bytes], accept: str):
        """:meth:`_send` on the running loop (the wait before a retry is ``asyncio.sleep``)."""
        import httpx

        headers = self._headers(accept, data is not None)
        for attempt in range(self.retries + 1):
            try:
                resp = await self._ahttp().request(method, path, content=data, headers=headers)
            except httpx.HTTPError as e:
                raise self._unreachable(e) from None
            if resp.status_code != 429 or attempt >= self.retries:
                return resp
            await asyncio.sleep(retry_wait(resp.headers.get("Retry-After"), attempt))

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One call to the API; returns the decoded JSON, raises ServerError on an error answer."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        resp = self._send(method, path, data, "application/json")
        return _decoded(resp.status_code, resp.content)

    async def arequest(self, method: str, path: str, body: Any = None) -> Any:
        """:meth:`request` for asyncio callers: the event loop keeps running while it waits."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        resp = await self._asend(method, path, data, "application/json")
        return _decoded(resp.status_code, resp.content)

    def _headers(self, accept: str, has_body: bool) -> Dict[str, str]:
        headers = {"Accept": accept}
        if has_body:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _path(self, tail: str = "") -> str:
        return f"/v1/{quote(self.index, safe='')}{tail}"

    def _only_index(self) -> str:
        names = [i["name"] for i in self.request("GET", "/v1/indexes")["indexes"]]
        if len(names) != 1:
            raise InputError(f"the server has {len(names)} indexes ({', '.join(names)}); pass index=NAME")
        return names[0]

    def close(self) -> None:
        """Close the connections (a later call opens new ones). Async pools are dropped; close the
        running loop's with :meth:`aclose`."""
        with self._lock:
            sync, self._sync = self._sync, None
            self._async.clear()
        if sync is not None:
            sync.close()

    async def aclose(self) -> None:
        """Close the running loop's async connections."""
        with self._lock:
            held = self._async.pop(id(asyncio.get_running_loop()), None)
        if held is not None:
            await held[1].aclose()

    # -- the Index API ----------------------------------------------------------------------------
    @staticmethod
    def _hits(rows: List[dict], pipeline: Optional[str], qid: Optional[str] = None) -> Hits:
        """The answer's hits as :class:`Hit` objects equal to what the index gives in-process."""
        return Hits([Hit(docid=r["docid"], score=r["score"], rank=r["rank"], title=r.get("title") or "",
                         text=r.get("text") or "", scores=dict(r.get("scores") or {}), qid=qid,
                         metadata=r.get("metadata"), ranks=r.get("ranks")) for r in rows], pipeline)

    @staticmethod
    def _body(req: SearchRequest, text_chars: Optional[int] = None, one: bool = True) -> Dict[str, Any]:
        """The JSON body of ``req`` (``one``: a single query's, which takes ranks and highlights)."""
        body: Dict[str, Any] = {"k": req.k, "text": req.text}
        for key, v in (("retriever", req.retriever), ("fusion", req.fusion), ("depth", req.depth),
                       ("filter", req.filter), ("text_chars", text_chars)):
            if v is not None:
                body[key] = v
        flags = ("ranks", "highlight", "per_document", "allow_partial") if one else ("per_document", "allow_partial")
        body.update({f: True for f in flags if getattr(req, f)})
        if req.dimsel is not None:
            body["dimsel"] = {"mode": req.dimsel} if isinstance(req.dimsel, str) else dict(req.dimsel)
        feedback = prf_body(req.prf)
        if feedback is not None:
            body["prf"] = feedback
        return body

    def search(self, query: str, k: int = DEFAULT_K, retriever: Optional[str] = None, *,
               text_chars: Optional[int] = None, request: Optional[SearchRequest] = None,
               **options: Unpack[SearchOptions]) -> List[Hit]:
        """As :meth:`retrieval.index.Index.search`, answered by the server (``timings`` is ignored;
        ``prf`` in Index.search's forms, sent as the request's ``"prf"``: :func:`prf_body`;
        ``text_chars``: each hit's text cut to that many characters by the server)."""
        body = self._body(self._request("Client.search", request, k, retriever, options), text_chars)
        body["query"] = query
        out = self.request("POST", self._path("/search"), body)
        return self._hits(out["hits"], out["retriever"])

    async def asearch(self, query: str, k: int = DEFAULT_K, retriever: Optional[str] = None, *,
                      text_chars: Optional[int] = None, request: Optional[SearchRequest] = None,
                      **options: Unpack[SearchOptions]) -> List[Hit]:
        """:meth:`search` for asyncio: the request goes through the loop's ``httpx.AsyncClient`` (a 429
        is retried after its Retry-After with ``asyncio.sleep``), so the event loop keeps running and
        several searches wait on the server at once."""
        body = self._body(self._request("Client.asearch", request, k, retriever, options), text_chars)
        body["query"] = query
        out = await self.arequest("POST", self._path("/search"), body)
        return self._hits(out["hits"], out["retriever"])

    @staticmethod
    def _request(fn: str, request: Optional[SearchRequest], k, retriever: Optional[str],
                 options: dict) -> SearchRequest:
        """The request of a search's keywords (``timings`` has no use here: the server times itself)."""
        return search_request(fn, request, k, retriever, {n: v for n, v in options.items() if n != "timings"})

    def batch_search(self, queries: QueriesArg, qids: Optional[Sequence[str]] = None, k: int = DEFAULT_K,
                     retriever: Optional[str] = None, *, text_chars: Optional[int] = None,
                     request: Optional[SearchRequest] = None, **options: Unpack[BatchOptions]) -> Dict[str, List[Hit]]:
        """As :meth:`retrieval.index.Index.batch_search` (the same forms of ``queries``: Query objects,
        ``{qid: text}``, texts with ``qids``, a topics DataFrame): ``{qid: hits}`` in the order of ``queries``,
        or with ``as_frame`` a PyTerrier-style DataFrame (:mod:`retrieval.frames`)
        (``threads`` and ``quiet`` are the server's business; ``batch_size`` queries per request, 1,000 at
        most, each request streamed back a query at a time; ``prf`` as in :meth:`search`, for every query)."""
        qs, k = as_queries(queries, qids, k)
        req, run = batch_request("Client.batch_search", request, k, retriever,
                                 {n: v for n, v in options.items() if n != "timings"})
        size = min(run["batch_size"] or MAX_BATCH, MAX_BATCH)
        out: Dict[str, List[Hit]] = {}
        base = self._body(req, text_chars, one=False)
        for i in range(0, len(qs), size):
            body = dict(base)
            body["queries"] = [{"qid": q.qid, "query": q.text} for q in qs[i:i + size]]
            # streamed (one line per query), so the server's response budget bounds a query, not the batch
            for r in self._stream(self._path("/batch_search/stream"), body):
                out[r["qid"]] = self._hits(r["hits"], r.get("retriever"), r["qid"])
        return batch_result(out, qs, req.text, run["as_frame"])

    def search_df(self, query: str, k: int = DEFAULT_K, retriever: Optional[str] = None, fusion: Optional[str] = None,
                  qid: str = "1", text: bool = False, **options):
        """As :meth:`retrieval.index.Index.search_df`: :meth:`search` as a PyTerrier-style DataFrame."""
        return search_df(self, query, qid, text, k=k, retriever=retriever, fusion=fusion, **options)

    def _stream(self, path: str, body: dict):
        """POST ``body`` and yield the JSON lines of the answer as they arrive (a 429 is retried as
        :meth:`request` retries it; an error line ends the stream with ServerError)."""
        import httpx

        data = json.dumps(body).encode("utf-8")
        headers = self._headers("application/x-ndjson", True)
        for attempt in range(self.retries + 1):
            try:  # the stream holds its pooled connection until the last line
                with self._http().stream("POST", path, content=data, headers=headers) as resp:
                    if resp.status_code == 429 and attempt < self.retries:
                        resp.read()
                        wait = retry_wait(resp.headers.get("Retry-After"), attempt)
                    else:
                        if resp.status_code >= 400:
                            _decoded(resp.status_code, resp.read())
                        for line in resp.iter_lines():
                            if line.strip():
                                obj = json.loads(line)
                                if "error" in obj:
                                    raise _error(int(obj["error"].get("status", 500)), obj, line.encode("utf-8"))
                                yield obj
                        return
            except httpx.HTTPError as e:
                raise self._unreachable(e) from None
            time.sleep(wait)

    def explain(self, query: str, docid: str, retriever: Optional[str] = None, fusion: Optional[str] = None,
                depth: Optional[int] = None, dimsel=None, filter=None) -> dict:
        """As :meth:`retrieval.index.Index.explain`, answered by the server (a document the index
        lacks: :class:`ServerError` with status 404)."""
        body: Dict[str, Any] = {"query": query, "docid": docid}
        for key, v in (("retriever", retriever), ("fusion", fusion), ("depth", depth), ("filter", filter)):
            if v is not None:
                body[key] = v
        if dimsel is not None:
            body["dimsel"] = {"mode": dimsel} if isinstance(dimsel, str) else dict(dimsel)
        return self.request("POST", self._path("/explain"), body)

    def get(self, docid: str) -> Optional[Document]:
        try:
            d = self.request("GET", self._path(f"/documents/{quote(docid, safe='')}"))
        except ServerError as e:
            if e.status == 404:
                return None
            raise
        return Document(d["docid"], d["text"], d["title"], d.get("metadata") or {})

    def get_many(self, docids: Sequence[str]) -> Dict[str, Document]:
        out: Dict[str, Document] = {}
        ids = list(dict.fromkeys(docids))
        for i in range(0, len(ids), 1000):
            res = self.request("POST", self._path("/documents/get"), {"ids": ids[i:i + 1000]})
            for d in res["documents"]:
                out[d["docid"]] = Document(d["docid"], d["text"], d["title"], d.get("metadata") or {})
        return out

    def info(self) -> dict:
        return self.request("GET", self._path())

    def indexes(self) -> List[dict]:
        return self.request("GET", "/v1/indexes")["indexes"]

    def __len__(self) -> int:
        return int(self.info()["documents"])

    def add_documents(self, docs: Sequence[Document]) -> dict:
        return self.request("POST", self._path("/documents"), {"documents": [
            {"docid": d.docid, "title": d.title, "text": d.text, "metadata": d.metadata or {}} for d in docs]})

    def __repr__(self) -> str:
        return f"Client({self.url!r}, index={self.index!r})"
