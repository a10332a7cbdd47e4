"""What every transport checks and shares: ``/v1``, ``/mcp`` and ``retr mcp`` on stdio.

- :class:`Admission`: one count of the searches and other requests being answered, against
  ``--max-inflight``; beyond it ``/v1`` answers 429 and MCP a JSON-RPC error (:class:`Busy`).
- :func:`validate_search`: MCP arguments checked by the HTTP request models
  (:mod:`retrieval.server.schemas`), so query length, ``k`` and the rest have one definition.
- The response budget (``--max-response-chars``): a response counts :data:`HIT_CHARS` per
  hit plus the characters of each hit's title and text. :func:`check_planned` refuses before
  any work what the request itself shows is over (queries x k x (HIT_CHARS + text_chars));
  :func:`check_hits` refuses, before the response is built, what only the hits show (full
  texts).
- :func:`clean_message`: error messages without server paths.
- :func:`describe_index`: a served index as ``GET /v1/NAME`` and the MCP ``list_indexes`` tool show it.
"""
from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

HIT_CHARS = 100                   # a hit's id, rank, scores and JSON around them, in the budget
MAX_RESPONSE_CHARS = 50_000_000   # default budget; retr serve / retr mcp --max-response-chars
BUSY_CODE = -32000                # JSON-RPC "server error" range; fastmcp's rate limiter uses it too


class Busy(Exception):
    """``--max-inflight`` requests are being answered."""

    def __init__(self, limit: int):
        super().__init__(f"server busy: {limit} requests in flight; retry shortly")


class TooLarge(Exception):
    """A response over the budget (HTTP 413)."""


class Admission:
    """Requests being answered, against one limit for every transport. ``enter`` never waits:
    it admits, or raises :class:`Busy`."""

    def __init__(self, limit: int, metrics=None):
        self.limit = limit
        self.metrics = metrics
        self.inflight = 0
        self._lock = threading.Lock()

    def enter(self, endpoint: str) -> None:
        with self._lock:
            if self.inflight >= self.limit:
                if self.metrics is not None:
                    self.metrics.reject(endpoint)
                raise Busy(self.limit)
            self.inflight += 1
            if self.metrics is not None:
                self.metrics.inflight = self.inflight

    def leave(self) -> None:
        with self._lock:
            self.inflight -= 1
            if self.metrics is not None:
                self.metrics.inflight = self.inflight


def _over(chars: int, budget: int, what: str) -> TooLarge:
    return TooLarge(f"the response would hold {what}{chars:,} characters, over this server's limit of {budget:,} "
                    f"(--max-response-chars; each hit counts {HIT_CHARS} plus its title and text): ask for fewer "
                    f"queries or a smaller k, cut the text with text_chars, or set text to false")


def check_planned(queries: int, k: int, text: bool, text_chars: Optional[int], budget: int) -> None:
    """Refuse, before any search, a request whose hits alone are over ``budget``: ``queries`` x
    ``k`` x (HIT_CHARS + text_chars when the text is cut, else HIT_CHARS: full texts are counted
    by :func:`check_hits`)."""
    per_hit = HIT_CHARS + (text_chars if text and text_chars is not None else 0)
    planned = queries * k * per_hit
    if planned > budget:
        extra = f" + {text_chars} text_chars" if text and text_chars is not None else ""
        raise _over(planned, budget, f"up to {queries:,} queries x k={k:,} x ({HIT_CHARS}{extra}) = ")


def hit_chars(title: Optional[str], text: Optional[str], text_chars: Optional[int]) -> int:
    n = len(text or "")
    return HIT_CHARS + len(title or "") + (n if text_chars is None else min(n, text_chars))


def _count(sizes: Iterable[int], budget: int) -> None:
    total = 0
    for n in sizes:
        total += n
        if total > budget:
            raise _over(total, budget, "at least ")


def check_hits(hits: Iterable, text: bool, text_chars: Optional[int], budget: int) -> None:
    """Refuse hits (``Hit`` objects) whose response would be over ``budget``, before it is built."""
    _count((hit_chars(h.title, h.text, text_chars) if text else HIT_CHARS for h in hits), budget)


def check_rows(rows: Iterable, budget: int) -> None:
    """The same for documents by id: (docid, title, text, metadata) rows."""
    _count((hit_chars(r[1], r[2], None) for r in rows), budget)


def validation_message(errors) -> str:
    """Pydantic errors (``ValidationError.errors()``) as one line: ``field: problem; ...``."""
    parts = []
    for err in list(errors)[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        parts.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "request does not match the schema"


def validate_search(model=None, **fields):
    """MCP arguments as the HTTP request ``model`` (default :class:`schemas.SearchRequest`), with the
    HTTP API's limits; raises ValueError with :func:`validation_message`'s text when they break one."""
    from pydantic import ValidationError

    from retrieval.server.schemas import SearchRequest

    try:
        return (model or SearchRequest).model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as e:
        raise ValueError(validation_message(e.errors())) from None


def search_request(body, pipeline=None):
    """A validated HTTP or MCP search body as the library's :class:`retrieval.request.SearchRequest`
    (``pipeline``: the pipeline already parsed from it, passed down as run, its fusion spelled out)."""
    from retrieval.request import DEFAULT_K, SearchRequest
    from retrieval.server.schemas import prf_options

    get = lambda name, default=False: getattr(body, name, default)  # noqa: E731 (batch, explain bodies lack some)
    return SearchRequest(k=get("k", DEFAULT_K), retriever=str(pipeline) if pipeline is not None else body.retriever,
                         fusion=None if pipeline is not None else body.fusion, depth=body.depth,
                         dimsel=dimsel_options(body.dimsel), filter=body.filter,
                         prf=prf_options(get("prf", None)), text=get("text", True),
                         highlight=get("highlight"), ranks=get("ranks"), allow_partial=get("allow_partial"),
                         per_document=get("per_document"))


def check_explanation(size: int, budget: int) -> None:
    """An explanation of ``size`` characters within the response budget, else TooLarge (HTTP and MCP)."""
    if size > budget:
        raise TooLarge(f"the explanation has {size:,} characters, over this server's --max-response-chars "
                       f"({budget:,})")


def dimsel_options(o) -> Optional[dict]:
    """A request's :class:`schemas.DimselOptions` as ``Index.search``'s ``dimsel`` (None: none)."""
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


# A path token: path characters (word characters, . + ~ -) and at least one '/', bounded by
# characters that cannot be part of a path (spaces, quotes, ':', ',', brackets, ...).
_PCH = r"[\w.+~-]"
_PATH_TOKEN = re.compile(rf"(?<![\w.+~/-]){_PCH}*/[\w.+~/-]*")


def clean_message(message: str, served) -> str:
    """``message`` without server paths: a path token that is, or lies under, a served index
    folder (as given or resolved) becomes that index's name (``NAME/manifest.json``); any other
    absolute path its last part. Only whole path tokens change, never parts of words: with
    ``--index mt=meta``, "filter on 'meta'" stays as it is. ``served``: Served objects."""
    forms = []
    for s in served:
        for p in {str(s.path), str(Path(s.path).absolute()), str(Path(s.path).resolve())}:
            p = p.rstrip("/")
            if p and p != ".":
                forms.append((p, s.name))
    forms.sort(key=lambda f: -len(f[0]))

    def one(m: "re.Match") -> str:
        tok = m.group(0)
        for p, name in forms:
            if tok == p or tok.startswith(p + "/"):
                return name + tok[len(p):]
        if tok.startswith("/") and tok.rstrip("/").count("/") > 1:
            return Path(tok).name
        return tok

    return _PATH_TOKEN.sub(one, message)


def _scrub(v):
    """Configs for an index's description: absolute paths reduced to their last part."""
    if isinstance(v, dict):
        return {k: _scrub(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_scrub(x) for x in v]
    if isinstance(v, str) and v.startswith("/"):
        return Path(v).name
    return v


def describe_index(s, writable: bool) -> Dict[str, Any]:
    """The description of a served index (``s``: a registry entry, a folder or a sharded index), the one
    ``GET /v1/NAME`` answers and the MCP ``list_indexes`` tool lists: documents, generation, retrievers
    (kind, documents, config), tuned pipelines, times and metadata fields read from one snapshot, and for
    a sharded index each shard's folder, documents and generation."""
    idx = s.index()
    with idx.snapshot() as snap:  # the count, the manifest and the generation of one generation (or commit)
        m, count, gen = snap.manifest, len(snap), snap.generation
        shards = getattr(snap, "shards", None)  # a sharded index (retrieval.sharded.index.ShardedSnapshot)
    subs = {n: {"kind": e.get("kind", ""), "documents": e.get("doc_count"), "config": _scrub(e.get("config", {}))}
            for n, e in m.get("subindexes", {}).items()}
    pipes = {n: p.get("spec", "") for n, p in (m.get("pipelines") or {}).items()}
    from retrieval.request import default_pipeline

    out = {"name": s.name, "documents": count, "generation": gen, "retrievers": subs, "pipelines": pipes,
           "default_pipeline": default_pipeline(m.get("subindexes", {}), m.get("pipelines") or {}).to_dict(),
           "writable": writable, "created_at": m.get("created_at"), "updated_at": m.get("updated_at"),
           "fields": idx.fields()}
    if shards is not None:
        out["shards"] = shards
    return out
