"""What a search asks for: the default pipeline of a folder, and (below) one search request.

:func:`default_pipeline` is the one place that decides what a search that names no retriever
runs: the folder's tuned pipeline (``retr tune``) when it has one, else the untuned fusion of
every sub-index it holds (BM25 first), else its only sub-index. Every entry point (the CLI,
``Index.search``, a sharded folder, HTTP, MCP, the client and the integrations) leaves the
retriever unset and gets this answer through ``Index.pipeline(None)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Dict, Mapping, Optional, Tuple, TypedDict

from indexes.errors import InputError
from retrieval.kinds import PRIMARY
from retrieval.options import check_keywords

DEFAULT_K = 10     # hits for one query when the caller names no k
RUN_K = 1000       # hits per query of a run (retr search --queries, a PyTerrier retriever)

TUNED, UNTUNED, ONLY = "tuned", "untuned fusion", "only sub-index"


@dataclass(frozen=True)
class DefaultPipeline:
    """The pipeline a folder answers with when a search names none: ``spec`` (a retriever spec,
    its fusion left to the folder: the tuned one or the untuned default) and ``source``, why it is
    the default (``"tuned"``, ``"untuned fusion"`` or ``"only sub-index"``)."""

    spec: str
    source: str

    def __str__(self) -> str:
        return f"{self.spec} ({self.source})"

    def to_dict(self) -> dict:
        return {"spec": self.spec, "source": self.source}


def default_pipeline(subindexes: Mapping[str, Mapping], pipelines: Mapping[str, Mapping]) -> DefaultPipeline:
    """The default pipeline of a folder whose manifest holds ``subindexes`` ({name: entry}) and
    ``pipelines`` ({base: tuning report}, ``retr tune``'s).

    A tuned pipeline wins: the one over every sub-index if tuned, else the tuned one with the most
    members (the first tuned among equals). Otherwise every searchable sub-index (an alias such as
    ``deepct-query`` shares its target's postings and is left out) fused, BM25 first and the rest in
    the manifest's order, with the folder's untuned fusion; one sub-index alone is searched alone."""
    names = [n for n, e in subindexes.items() if not (e or {}).get("alias_of")]
    names = sorted(names, key=lambda n: n != PRIMARY)  # stable: BM25 first, the others as built
    if not names:
        return DefaultPipeline(PRIMARY, ONLY)
    have = set(names)
    tuned = [b for b in pipelines if len(b.split("+")) > 1 and set(b.split("+")) <= have]
    everything = "+".join(names)
    if tuned:
        mine = [b for b in tuned if set(b.split("+")) == have]
        best = mine[0] if mine else max(tuned, key=lambda b: len(b.split("+")))
        return DefaultPipeline(best, TUNED)
    if len(names) == 1:
        return DefaultPipeline(names[0], ONLY)
    return DefaultPipeline(everything, UNTUNED)


# ------------------------------------------------------------------ one search request

class RequestError(InputError, ValueError):
    """A search request with a bad value: one line saying which and why (the CLI prints it, the
    server answers it as a 400)."""


def _positive(name: str, v: Any, optional: bool = False) -> None:
    if optional and v is None:
        return
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise RequestError(f"{name} must be a positive integer, got {v!r}")


@dataclass(frozen=True)
class SearchRequest:
    """What one search asks for, beside its queries, checked once when it is made.

    ``k`` hits per query; ``retriever`` a sub-index or a pipeline spec (None: the folder's default
    pipeline, :func:`default_pipeline`); ``fusion`` for a bare ``a+b``; ``depth`` candidates per
    fused member; ``dimsel`` dimension selection; ``filter`` metadata conditions
    (:mod:`retrieval.filters`); ``prf`` this search's pseudo-relevance feedback; ``text`` title, text
    and metadata with each hit; ``highlight`` and ``ranks`` as the server's request takes them;
    ``per_document`` one hit per document; ``allow_partial`` a sharded answer without the shards that
    did not answer; ``timings`` a dict that gathers seconds per stage (not part of the value)."""

    k: int = DEFAULT_K
    retriever: Optional[str] = None
    fusion: Optional[str] = None
    depth: Optional[int] = None
    dimsel: Any = None
    filter: Any = None
    prf: Any = None
    text: bool = True
    highlight: bool = False
    ranks: bool = False
    per_document: bool = False
    allow_partial: bool = False
    timings: Optional[Dict[str, float]] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _positive("k", self.k)
        _positive("depth", self.depth, optional=True)
        for name in ("retriever", "fusion"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                raise RequestError(f"{name} must be a non-empty string (a pipeline spec), got {v!r}")
        for name in ("text", "highlight", "ranks", "per_document", "allow_partial"):
            if not isinstance(getattr(self, name), bool):
                raise RequestError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.timings is not None and not isinstance(self.timings, dict):
            raise RequestError(f"timings must be a dict (seconds per stage are added to it), got {self.timings!r}")
        if self.filter is not None:
            from retrieval.filters import parse_filter

            try:
                parse_filter(self.filter)
            except InputError as e:
                raise RequestError(str(e)) from None

    @classmethod
    def of(cls, **options) -> "SearchRequest":
        """A request from keyword options (an unknown one is a RequestError naming those there are)."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise RequestError(f"unknown search option(s) {', '.join(unknown)}; a search takes {', '.join(names)}")
        return cls(**options)

    def but(self, **changes) -> "SearchRequest":
        """This request with ``changes`` (checked again)."""
        return replace(self, **changes)

    def options(self) -> Dict[str, Any]:
        """The fields that differ from a default request, as keyword arguments (``timings`` included when set)."""
        base = SearchRequest()
        out = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(base, f.name)}
        return out


def request_of(request: Optional[SearchRequest], text_default: bool = True, **options) -> SearchRequest:
    """``request`` when given (then ``options`` must all be their defaults: one request, not two;
    ``text_default``: the caller's default of ``text``, False for a batch), else a request of
    ``options``: what the public ``search(q, k=..., ..., request=None)`` methods make."""
    if request is None:
        return SearchRequest.of(**options)
    if not isinstance(request, SearchRequest):
        raise RequestError(f"request must be a retrieval.SearchRequest, got {type(request).__name__}")
    if options.get("text") == text_default:
        options.pop("text")
    given = SearchRequest.of(**options).options()
    if given:
        raise RequestError(f"give the search options either as request= or as keywords, not both "
                           f"(keywords given: {', '.join(sorted(given))})")
    return request


# ------------------------------------------------------------------ the keywords of the public search methods

class _Options(TypedDict, total=False):
    fusion: Optional[str]
    text: bool
    depth: Optional[int]
    timings: Optional[Dict[str, float]]
    dimsel: Any
    filter: Any
    prf: Any
    per_document: bool


class SearchOptions(_Options, total=False):
    """The keywords ``search(query, k, retriever, **options)`` takes beside its first three (``Index``,
    a sharded index, a snapshot, the :class:`~retrieval.searcher.Searcher` protocol, the client), each
    a :class:`SearchRequest` field of the same name and default: ``fusion``, ``text`` (True),
    ``depth``, ``timings``, ``dimsel``, ``filter``, ``prf``, ``per_document``, ``ranks``. Declared
    so that editors and type checkers know them (``**options: Unpack[SearchOptions]``, PEP 692)."""

    ranks: bool


class BatchOptions(_Options, total=False):
    """The keywords ``batch_search(queries, qids, k, retriever, **options)`` takes: those of
    :class:`SearchOptions` but ``ranks`` (``text`` False by default), and how the batch runs:
    ``threads`` (1), ``quiet`` (True), ``batch_size`` (None: all at once when quiet) and
    ``as_frame`` (False: ``{qid: hits}``; True: a PyTerrier-style DataFrame)."""

    threads: int
    quiet: bool
    batch_size: Optional[int]
    as_frame: bool


#: how a batch runs, beside its request (:class:`BatchOptions`), with their defaults
BATCH_RUN = {"threads": 1, "quiet": True, "batch_size": None, "as_frame": False}


def search_request(fn: str, request: Optional[SearchRequest], k: Any, retriever: Optional[str],
                   options: Mapping[str, Any]) -> SearchRequest:
    """The request of ``fn(query, k, retriever, request=..., **options)``: ``options`` are
    :class:`SearchOptions` (another keyword is a TypeError naming it, as Python's own for ``fn``), or
    ``request`` whole (then the keywords are left at their defaults)."""
    check_keywords(fn, options, SearchOptions)
    return request_of(request, k=k, retriever=retriever, **options)


def batch_request(fn: str, request: Optional[SearchRequest], k: Any, retriever: Optional[str],
                  options: Mapping[str, Any]) -> Tuple[SearchRequest, Dict[str, Any]]:
    """:func:`search_request` for ``batch_search``: ``options`` are :class:`BatchOptions`; returns the
    request (``text`` False unless asked) and how the batch runs (:data:`BATCH_RUN`'s keys)."""
    check_keywords(fn, options, BatchOptions)
    run = {n: options.get(n, d) for n, d in BATCH_RUN.items()}
    given = {n: v for n, v in options.items() if n not in BATCH_RUN}
    given.setdefault("text", False)
    return request_of(request, False, k=k, retriever=retriever, **given), run
