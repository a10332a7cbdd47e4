"""Typed records that flow through retr: documents, queries and hits."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from indexes.errors import InputError

Scored = List[Tuple[str, float]]  # a ranking: (docid, score), best first
PREVIEW = 60  # characters of title (else text) a Hit's repr shows


def finite_number(v: Any) -> float:
    """``v``, a JSON number (an int or a float, not a bool), as a float; ``ValueError`` saying why
    when it is NaN, infinite or an integer beyond a double's range (about 1.8e308).

    The one rule for numbers retr stores or compares: document metadata (checked by
    :func:`retrieval.collections.check_metadata` on every write) and filter values
    (:func:`retrieval.filters.parse_filter`) must pass it, so a filter never meets a number it
    cannot compare and the store never holds one that JSON cannot write."""
    try:
        f = float(v)
    except OverflowError:
        raise ValueError("an integer beyond the range of a double (about ±1.8e308)") from None
    if not math.isfinite(f):
        raise ValueError(f"{'NaN' if math.isnan(f) else 'Infinity' if f > 0 else '-Infinity'} "
                         f"(numbers must be finite)")
    return f


def contents(title: str, text: str) -> str:
    """A document's title and text as one string: what the sparse and dense encoders see, and
    what Lucene's length limit counts. The one place that joins them."""
    return f"{title} {text}" if title else text


@dataclass(frozen=True)
class Document:
    docid: str
    text: str
    title: str = ""
    metadata: Dict[str, Any] = field(default_factory=dict)

    @property
    def contents(self) -> str:
        """Title and text as one string: what the sparse and dense encoders see."""
        return contents(self.title, self.text)


@dataclass(frozen=True)
class Query:
    qid: str
    text: str


@dataclass(slots=True)
class Hit:
    """One ranked result. ``title``/``text`` are filled from the document store
    (empty when the caller asked for ids only), and so is ``metadata`` (None
    then); ``scores`` holds each retriever's own score ({name: score}, one entry for a single
    retriever, several when results were fused)."""

    docid: str
    score: float
    rank: int
    title: str = ""
    text: str = ""
    scores: Optional[Dict[str, float]] = None
    qid: Optional[str] = None
    metadata: Optional[Dict[str, Any]] = None
    ranks: Optional[Dict[str, Optional[int]]] = None   # each retriever's rank of it (search(ranks=True))

    def __repr__(self) -> str:
        # Short: a list of hits is read in a REPL or a log, and the full text made ten hits 22 KB
        # (to_dict() and the attributes keep everything).
        preview = " ".join((self.title or self.text or "").split())
        if len(preview) > PREVIEW:
            preview = preview[:PREVIEW - 1].rstrip() + "…"
        qid = f"qid={self.qid!r}, " if self.qid is not None else ""
        score = f"{self.score:.4f}" if isinstance(self.score, (int, float)) else repr(self.score)
        return f"Hit({qid}rank={self.rank}, docid={self.docid!r}, score={score}, {preview!r})"

    def to_dict(self, text: bool = True, text_chars: Optional[int] = None) -> Dict[str, Any]:
        """The hit as JSON: :func:`hit_dict` (what HTTP and MCP answer, with ``qid`` when set)."""
        return hit_dict(self, text, text_chars, qid=True)


def hit_dict(h: Hit, text: bool = True, text_chars: Optional[int] = None, qid: bool = False) -> Dict[str, Any]:
    """A hit's public dict, the one form every transport gives (``Hit.to_dict``, JSONL runs, HTTP,
    MCP): ``docid, rank, score`` (a non-finite score, which JSON cannot carry, as 0.0), ``scores``
    ({retriever: score}), ``title, text, metadata`` (all None with ``text=False``; ``text`` cut at
    ``text_chars`` characters when given), ``ranks`` where the search gave them, and with ``qid``
    the hit's query id first (when it has one)."""
    score = float(h.score)
    d: Dict[str, Any] = {"qid": h.qid} if qid and h.qid is not None else {}
    d.update(docid=h.docid, rank=h.rank, score=score if math.isfinite(score) else 0.0,
             scores=dict(h.scores) if h.scores else {})
    if text:
        d.update(title=h.title, text=h.text if text_chars is None else h.text[:text_chars],
                 metadata=dict(h.metadata) if h.metadata is not None else {})
    else:
        d.update(title=None, text=None, metadata=None)
    if h.ranks is not None:
        d["ranks"] = dict(h.ranks)
    return d


class Hits(list):
    """The hits of one query, best first (a list of :class:`Hit`), and ``pipeline``: the pipeline
    that ran, its fusion spelled out (what a search that named no retriever defaulted to, see
    :func:`retrieval.request.default_pipeline`)."""

    __slots__ = ("pipeline",)

    def __init__(self, hits=(), pipeline: Optional[str] = None):
        super().__init__(hits)
        self.pipeline = pipeline

    def __reduce__(self):
        return (Hits, (list(self), self.pipeline))


QueriesArg = Union[Sequence[Union[Query, str]], Mapping[str, str]]


def frame_queries(frame) -> List[Query]:
    """A topics DataFrame (PyTerrier's columns ``qid``, ``query``; others are ignored) as queries,
    in row order. One InputError when a column is missing, a query is not text or a qid repeats."""
    missing = [c for c in ("qid", "query") if c not in set(map(str, frame.columns))]
    if missing:
        raise InputError(f"a topics DataFrame needs the columns qid, query (PyTerrier's); missing: "
                         f"{', '.join(missing)}")
    out, seen = [], set()
    for qid, text in zip(frame["qid"], frame["query"]):
        qid = str(qid)
        if qid in seen:
            raise InputError(f"the topics DataFrame repeats qid {qid!r}; each query needs its own")
        if not isinstance(text, str):
            raise InputError(f"the topics DataFrame's query {qid!r} is not text (got {text!r})")
        seen.add(qid)
        out.append(Query(qid, text))
    return out


def as_queries(queries: QueriesArg, qids: Optional[Sequence[str]] = None, k: int = 10) -> Tuple[List[Query], int]:
    """The queries of :meth:`Index.batch_search` in any of its forms (Query objects, ``{qid: text}``,
    texts with or without ``qids``, a topics DataFrame) as a list of :class:`Query`, and ``k``
    (``qids`` given as an int is the ``k`` of the older positional form)."""
    if isinstance(qids, int) and not isinstance(qids, bool):
        qids, k = None, qids
    if isinstance(queries, (str, bytes)):
        raise InputError("batch_search takes a list of queries (or {qid: text}), not one string: use search()")
    if hasattr(queries, "columns") and hasattr(queries, "itertuples"):  # a DataFrame, pandas not imported
        if qids is not None:
            raise InputError("batch_search: give qids with a list of texts, not with a topics DataFrame")
        return frame_queries(queries), k
    if isinstance(queries, Mapping):
        if qids is not None:
            raise InputError("batch_search: give qids with a list of texts, not with a {qid: text} mapping")
        return [Query(str(q), t) for q, t in queries.items()], k
    queries = list(queries)
    if qids is None:
        return [q if isinstance(q, Query) else Query(str(i), q) for i, q in enumerate(queries)], k
    if isinstance(qids, (str, bytes)):
        raise InputError("batch_search: qids must be a list of ids, one per query")
    qids = [str(q) for q in qids]
    if len(qids) != len(queries):
        raise InputError(f"batch_search: {len(queries)} queries but {len(qids)} qids")
    if any(isinstance(q, Query) for q in queries):
        raise InputError("batch_search: qids go with plain query texts, not Query objects (they have ids)")
    if len(set(qids)) != len(qids):
        raise InputError("batch_search: qids repeat an id; each query needs its own")
    return [Query(i, t) for i, t in zip(qids, queries)], k
