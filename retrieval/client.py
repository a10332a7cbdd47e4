"""``retrieval.Client``: a ``retr serve`` index through HTTP, with the search API of
:class:`retrieval.index.Index` (``search``, ``batch_search``, ``get``, ``info``) and the
same :class:`retrieval.types.Hit` objects. Standard library only (``http.client``), one
keep-alive connection per thread, so one Client may be shared by threads. ``asearch`` is the
same search for asyncio callers, through ``httpx.AsyncClient`` (imported when first used), so
it never blocks the event loop.

    c = retrieval.Client("http://127.0.0.1:8080", token=None, index="sf")
    hits = c.search("does aspirin prevent colorectal cancer", k=5, filter={"shard": "odd"})
"""
from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any, Dict, List, Optional, Sequence
from urllib.parse import quote, urlsplit

from indexes.errors import InputError, RetrError
from retrieval.kinds import PRIMARY
from retrieval.types import Document, Hit, QueriesArg, as_queries

MAX_BATCH = 1_000  # queries per request: the server's limit (retrieval.server.schemas.MAX_BATCH, not imported here)


def _error(status: int, answer: Any, raw: bytes) -> "ServerError":
    """The server's one error shape, {"error": {"message"}}, as a ServerError (its raw start otherwise)."""
    msg = (answer or {}).get("error", {}).get("message") if isinstance(answer, dict) else None
    return ServerError(status, msg or raw[:200].decode("utf-8", "replace"))


class ServerError(RetrError):
    """An error answer from the server (``status``: its HTTP status)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"server answered {status}: {message}")
        self.status = status


class Client:
    """``url``: the server (``http://host:port``), optionally ending in ``/v1/NAME``;
    ``index``: the index name (default: the one the URL names, else the server's only
    index). ``retries``: how often a 429 (busy) answer is retried, after its Retry-After."""

    def __init__(self, url: str, token: Optional[str] = None, index: Optional[str] = None, timeout: float = 60.0,
                 retries: int = 3):
        u = urlsplit(url if "://" in url else f"http://{url}")
        if u.scheme not in ("http", "https") or not u.hostname:
            raise InputError(f"not an http(s) URL: {url!r}")
        self._https = u.scheme == "https"
        self._host, self._port = u.hostname, u.port or (443 if self._https else 80)
        parts = [p for p in u.path.split("/") if p]
        if len(parts) >= 2 and parts[-2] == "v1":
            index = index or parts[-1]
        self.token, self.timeout, self.retries = token, timeout, retries
        self._local = threading.local()
        self.url = f"{u.scheme}://{u.netloc}"
        self.index = index or self._only_index()

    # -- transport --------------------------------------------------------------------------------
    def _conn(self) -> http.client.HTTPConnection:
        c = getattr(self._local, "conn", None)
        if c is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            c = self._local.conn = cls(self._host, self._port, timeout=self.timeout)
        return c

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One call to the API; returns the decoded JSON, raises ServerError on an error answer."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = self._headers("application/json", data is not None)
        for attempt in range(self.retries + 1):
            for fresh in (False, True):
                conn = self._conn()
                try:
                    conn.request(method, path, body=data, headers=headers)
                    resp = conn.getresponse()
                    raw = resp.read()
                    break
                except (http.client.HTTPException, ConnectionError, OSError) as e:
                    conn.close()
                    self._local.conn = None
                    if fresh:  # a stale keep-alive connection gets one more try on a new one
                        raise ServerError(0, f"cannot reach {self.url} ({type(e).__name__}: {e})") from None
            if resp.status == 429 and attempt < self.retries:
                time.sleep(float(resp.getheader("Retry-After") or 1))
                continue
            break
        try:
            out = json.loads(raw) if raw else None
        except ValueError:
            out = None
        if resp.status >= 400:
            raise _error(resp.status, out, raw)
        return out

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
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    # -- the Index API ----------------------------------------------------------------------------
    @staticmethod
    def _hits(rows: List[dict], fused: bool, qid: Optional[str] = None) -> List[Hit]:
        return [Hit(docid=r["docid"], score=r["score"], rank=r["rank"], title=r.get("title") or "",
                    text=r.get("text") or "", scores=dict(r["scores"]) if fused else None, qid=qid,
                    metadata=r.get("metadata")) for r in rows]

    @staticmethod
    def _options(k, retriever, fusion, text, depth, dimsel, filter, text_chars) -> Dict[str, Any]:
        body: Dict[str, Any] = {"k": k, "retriever": retriever, "text": text}
        for key, v in (("fusion", fusion), ("depth", depth), ("filter", filter), ("text_chars", text_chars)):
            if v is not None:
                body[key] = v
        if dimsel is not None:
            body["dimsel"] = {"mode": dimsel} if isinstance(dimsel, str) else dict(dimsel)
        return body

    def search(self, query: str, k: int = 10, retriever: str = PRIMARY, fusion: Optional[str] = None,
               text: bool = True, depth: Optional[int] = None, timings=None, dimsel=None, filter=None,
               text_chars: Optional[int] = None) -> List[Hit]:
        """As :meth:`retrieval.index.Index.search`, answered by the server (``timings`` is ignored)."""
        body = self._options(k, retriever, fusion, text, depth, dimsel, filter, text_chars)
        body["query"] = query
        out = self.request("POST", self._path("/search"), body)
        return self._hits(out["hits"], "+" in out["retriever"])

    async def asearch(self, query: str, k: int = 10, retriever: str = PRIMARY, fusion: Optional[str] = None,
                      text: bool = True, depth: Optional[int] = None, timings=None, dimsel=None, filter=None,
                      text_chars: Optional[int] = None) -> List[Hit]:
        """:meth:`search` for asyncio: the request goes through ``httpx.AsyncClient`` (a 429 is
        retried after its Retry-After with ``asyncio.sleep``), so the event loop keeps running."""
        import asyncio

        import httpx

        body = self._options(k, retriever, fusion, text, depth, dimsel, filter, text_chars)
        body["query"] = query
        headers = self._headers("application/json", True)
        async with httpx.AsyncClient(base_url=self.url, timeout=self.timeout) as http:
            for attempt in range(self.retries + 1):
                try:
                    resp = await http.post(self._path("/search"), content=json.dumps(body).encode("utf-8"),
                                           headers=headers)
                except httpx.HTTPError as e:
                    raise ServerError(0, f"cannot reach {self.url} ({type(e).__name__}: {e})") from None
                if resp.status_code == 429 and attempt < self.retries:
                    await asyncio.sleep(float(resp.headers.get("Retry-After") or 1))
                    continue
                break
        try:
            out = resp.json() if resp.content else None
        except ValueError:
            out = None
        if resp.status_code >= 400:
            raise _error(resp.status_code, out, resp.content)
        return self._hits(out["hits"], "+" in out["retriever"])

    def batch_search(self, queries: QueriesArg, qids: Optional[Sequence[str]] = None, k: int = 10,
                     retriever: str = PRIMARY, fusion: Optional[str] = None, threads: int = 1, text: bool = False,
                     quiet: bool = True, depth: Optional[int] = None, batch_size: Optional[int] = None,
                     timings=None, dimsel=None, filter=None, text_chars: Optional[int] = None
                     ) -> Dict[str, List[Hit]]:
        """As :meth:`retrieval.index.Index.batch_search` (the same forms of ``queries``: Query objects,
        ``{qid: text}``, texts with ``qids``): ``{qid: hits}`` in the order of ``queries``
        (``threads`` and ``quiet`` are the server's business; ``batch_size`` queries per request, 1,000 at
        most, each request streamed back a query at a time)."""
        qs, k = as_queries(queries, qids, k)
        size = min(batch_size or MAX_BATCH, MAX_BATCH)
        fused = "+" in retriever
        out: Dict[str, List[Hit]] = {}
        for i in range(0, len(qs), size):
            body = self._options(k, retriever, fusion, text, depth, dimsel, filter, text_chars)
            body["queries"] = [{"qid": q.qid, "query": q.text} for q in qs[i:i + size]]
            # streamed (one line per query), so the server's response budget bounds a query, not the batch
            for r in self._stream(self._path("/batch_search/stream"), body):
                out[r["qid"]] = self._hits(r["hits"], fused, r["qid"])
        return out

    def _stream(self, path: str, body: dict):
        """POST ``body`` and yield the JSON lines of the answer as they arrive (a 429 is retried as
        :meth:`request` retries it; an error line ends the stream with ServerError)."""
        data = json.dumps(body).encode("utf-8")
        headers = self._headers("application/x-ndjson", True)
        for attempt in range(self.retries + 1):
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = cls(self._host, self._port, timeout=self.timeout)  # its own: a stream holds it to the end
            try:
                conn.request("POST", path, body=data, headers=headers)
                resp = conn.getresponse()
                if resp.status == 429 and attempt < self.retries:
                    resp.read()
                    time.sleep(float(resp.getheader("Retry-After") or 1))
                    continue
                if resp.status >= 400:
                    raw = resp.read()
                    try:
                        out = json.loads(raw)
                    except ValueError:
                        out = None
                    raise _error(resp.status, out, raw)
                for line in resp:
                    if line.strip():
                        obj = json.loads(line)
                        if "error" in obj:
                            raise _error(int(obj["error"].get("status", 500)), obj, line)
                        yield obj
                return
            except (http.client.HTTPException, ConnectionError, OSError) as e:
                raise ServerError(0, f"cannot reach {self.url} ({type(e).__name__}: {e})") from None
            finally:
                conn.close()

    def explain(self, query: str, docid: str, retriever: str = PRIMARY, fusion: Optional[str] = None,
                depth: Optional[int] = None, dimsel=None, filter=None) -> dict:
        """As :meth:`retrieval.index.Index.explain`, answered by the server (a document the index
        lacks: :class:`ServerError` with status 404)."""
        body: Dict[str, Any] = {"query": query, "docid": docid, "retriever": retriever}
        for key, v in (("fusion", fusion), ("depth", depth), ("filter", filter)):
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
