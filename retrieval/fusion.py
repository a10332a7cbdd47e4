"""Fusion of ranked lists, and the pipeline spec that names a fused search.

A pipeline spec is one short string, used alike by the CLI (``--retriever``),
the Python API (``retriever=``) and the run tag::

    bm25                                    one retriever
    bm25+dense                              fused with the folder's tuned fusion (retr tune), else DEFAULT_FUSION
    bm25+dense:rrf(k=60)                    reciprocal rank fusion
    bm25+dense:combsum(norm=minmax)         CombSUM over normalised scores
    bm25+dense:combmnz(norm=zscore)         CombMNZ
    bm25+dense:weighted(bm25=0.3,dense=0.7,norm=minmax)   convex combination
    bm25+dense:combmnz(confidence=4,centre=-0.3,norm=minmax)  weighted per query by each retriever's confidence

Documents missing from a list (not retrieved by that retriever within the
fusion depth) are handled the same way by every method, explicitly:
- rrf: the missing list contributes nothing (its rank is taken as infinite);
- combsum / weighted: the missing list contributes the lowest normalised
  score it returned for that query (0 under min-max), i.e. the document is
  treated as no better than the worst document that list retrieved;
- combmnz: as combsum, and the multiplier counts only the lists that
  actually retrieved the document.
``Hit.scores`` keeps each retriever's raw score, with ``None`` where missing.

Confidence weighting (``confidence=SLOPE``, combsum / combmnz): per query, each
retriever that can rate its own list says how sure it is on an absolute scale
(BM25: its top score over the query's mass, the most Lucene's BM25 can give a
passage for that query, i.e. the share of the query the best passage matched;
a dense retriever over normalised vectors: its top cosine). List n then weighs
softmax_n(SLOPE * (c_n + offset_n)) times its static weight, where BM25 shares
are offset by ``-centre`` (``centre`` is the BM25 share minus the cosine at which
both weigh the same). With two lists that is a logistic weight,
w_bm25 = 1 / (1 + exp(-SLOPE * (share - cosine - centre))). A query where some
list has no confidence (another kind, or dimension selection) is fused unweighted.

DEFAULT_FUSION, the fusion of a bare ``a+b`` on a folder that was never tuned,
is chosen without training queries by a leave-one-collection-out protocol
(benchmarks/bench_defaults_fusion.py; numbers in benchmarks/results/defaults.md):
chosen on three of SciFact, NFCorpus, Cranfield and Vaswani, each with its test
queries and shifted variants (passages as queries, misspelled queries, passages
behind unrelated text), scored on the fourth. Every fold chose confidence-weighted
CombMNZ over min-max normalised scores (slope 4, centre -0.3); it ties plain CombMNZ
on the test queries and loses far less where one retriever is much weaker.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple

from indexes.errors import InputError, ParameterError
from retrieval.types import Scored

if TYPE_CHECKING:
    from retrieval.kinds import Retriever

METHODS = ("rrf", "combsum", "combmnz", "weighted")
NORMS = ("minmax", "zscore", "none")
_SPEC = re.compile(r"^\s*([A-Za-z0-9_\-+]+)\s*(?::\s*([a-z]+)\s*(?:\((.*)\))?\s*)?$")
_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")


@dataclass(frozen=True)
class Fusion:
    method: str = "rrf"
    k: int = 60                               # rrf constant
    norm: str = "minmax"                      # combsum / combmnz / weighted
    weights: Tuple[Tuple[str, float], ...] = ()   # weighted (and optional for the others)
    confidence: float = 0.0                   # combsum / combmnz: slope of the per-query confidence weights (0: off)
    centre: float = 0.0                       # BM25 share minus dense cosine at which both weigh the same

    def __post_init__(self):
        if self.method not in METHODS:
            raise InputError(f"unknown fusion {self.method!r}; choose one of {', '.join(METHODS)}")
        if self.norm not in NORMS:
            raise InputError(f"unknown normalisation {self.norm!r}; choose one of {', '.join(NORMS)}")
        if self.k < 1:
            raise InputError(f"rrf k must be >= 1, got {self.k}")
        if any(w < 0 or not math.isfinite(w) for _, w in self.weights):
            raise InputError("fusion weights must be finite and >= 0")
        if not (math.isfinite(self.confidence) and 0 <= self.confidence <= 100):
            raise InputError(f"confidence (the slope of the confidence weights) must be in [0, 100], "
                             f"got {self.confidence:g}")
        if not (math.isfinite(self.centre) and -1 <= self.centre <= 1):
            raise InputError(f"centre must be in [-1, 1], got {self.centre:g}")
        if (self.confidence or self.centre) and self.method not in ("combsum", "combmnz"):
            raise InputError("confidence weighting applies to combsum and combmnz only")

    def params(self) -> str:
        if self.method == "rrf":
            ps = [f"k={self.k}"] + [f"{n}={_num(w)}" for n, w in self.weights]
        else:
            ps = [f"{n}={_num(w)}" for n, w in self.weights]
            if self.confidence or self.centre:
                ps += [f"confidence={_num(self.confidence)}", f"centre={_num(self.centre)}"]
            ps.append(f"norm={self.norm}")
        return ",".join(ps)

    def __str__(self) -> str:
        return f"{self.method}({self.params()})"


# The untuned default of a bare a+b (see the module docstring and benchmarks/results/defaults.md).
DEFAULT_FUSION = Fusion("combmnz", norm="minmax", confidence=4.0, centre=-0.3)


@dataclass(frozen=True)
class Pipeline:
    retrievers: Tuple[str, ...]
    fusion: Optional[Fusion] = None

    def __str__(self) -> str:
        base = "+".join(self.retrievers)
        return base if self.fusion is None else f"{base}:{self.fusion}"

    @property
    def fused(self) -> bool:
        return len(self.retrievers) > 1

    @property
    def base(self) -> str:
        return "+".join(self.retrievers)


def _num(x: float) -> str:
    return f"{x:g}"


def parse_fusion(text: str, retrievers: Sequence[str] = ()) -> Fusion:
    """``rrf``, ``rrf(k=20)``, ``weighted(bm25=0.3,dense=0.7,norm=zscore)``, ..."""
    m = re.match(r"^\s*([a-z]+)\s*(?:\((.*)\))?\s*$", text or "")
    if not m:
        raise InputError(f"cannot parse fusion {text!r} (e.g. rrf(k=60), weighted(bm25=0.3,dense=0.7))")
    return _make_fusion(m.group(1), m.group(2) or "", retrievers)


def _make_fusion(method: str, params: str, retrievers: Sequence[str]) -> Fusion:
    kw: Dict[str, object] = {"method": method}
    weights: Dict[str, float] = {}
    for part in filter(None, (p.strip() for p in params.split(","))):
        if "=" not in part:
            raise InputError(f"fusion parameter {part!r} must look like name=value")
        key, val = (s.strip() for s in part.split("=", 1))
        if key == "k":
            try:
                kw["k"] = int(val)
            except ValueError:
                raise InputError(f"rrf k must be an integer, got {val!r}") from None
        elif key == "norm":
            kw["norm"] = val
        elif key in ("confidence", "centre"):
            try:
                kw[key] = float(val)
            except ValueError:
                raise InputError(f"fusion {key} must be a number, got {val!r}") from None
        else:
            if retrievers and key not in retrievers:
                raise InputError(f"fusion weight for {key!r}, which is not one of the fused retrievers "
                                 f"({', '.join(retrievers)})")
            try:
                weights[key] = float(val)
            except ValueError:
                raise InputError(f"weight {key}={val!r} is not a number") from None
    if method == "weighted":
        missing = [r for r in retrievers if r not in weights]
        if missing:
            raise InputError(f"weighted fusion needs a weight for every retriever (missing: {', '.join(missing)})")
    if weights:
        kw["weights"] = tuple((r, weights[r]) for r in (retrievers or sorted(weights)) if r in weights)
    return Fusion(**kw)  # type: ignore[arg-type]


def parse_pipeline(spec: str, fusion: Optional[str] = None, default: Optional[str] = None) -> Pipeline:
    """Parse a pipeline spec (``Index.search``'s ``retriever``, + optional ``fusion``). ``default`` is the
    fusion used for a bare ``a+b`` (the folder's tuned one); without it, DEFAULT_FUSION."""
    m = _SPEC.match(spec or "")
    if not m:
        raise InputError(f"cannot parse retriever spec {spec!r} (e.g. bm25, dense, bm25+dense:rrf(k=60))")
    names = tuple(n for n in m.group(1).split("+"))
    if any(not _NAME.match(n) for n in names) or len(set(names)) != len(names):
        raise InputError(f"invalid retriever list {m.group(1)!r}: names joined by '+', each once")
    inline = m.group(2)
    if inline and fusion:
        raise ParameterError("give the fusion either inside {retriever} (a+b:rrf) or with {fusion}, not both")
    if len(names) == 1:
        if inline or fusion:
            raise InputError("fusion needs at least two retrievers (e.g. bm25+dense)")
        return Pipeline(names)
    if inline:
        f = _make_fusion(inline, m.group(3) or "", names)
    elif fusion:
        f = parse_fusion(fusion, names)
    elif default:
        f = parse_pipeline(default).fusion
    else:
        f = DEFAULT_FUSION
    return Pipeline(names, f)


# ---------------------------------------------------------------- the methods
def _normalise(scores: List[float], norm: str) -> List[float]:
    if norm == "none" or not scores:
        return list(scores)
    if norm == "minmax":
        lo, hi = min(scores), max(scores)
        return [1.0 if hi == lo else (s - lo) / (hi - lo) for s in scores]
    mean = sum(scores) / len(scores)
    sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    return [0.0 if sd == 0 else (s - mean) / sd for s in scores]


def confidence_weights(conf: Mapping[str, Optional[Tuple[str, float]]], fusion: Fusion
                       ) -> Optional[Dict[str, float]]:
    """Per-list weights (summing to 1) from each list's ``(kind, value)`` confidence, or None when
    weighting is off or some list has no confidence. Scales (whatever retriever reports them): ``"share"``,
    the share of the query the best passage matched (offset by -centre: shares sit below cosines), and
    ``"cosine"``."""
    if not fusion.confidence or not conf or any(c is None for c in conf.values()):
        return None
    z = {n: fusion.confidence * (v - (fusion.centre if scale == "share" else 0.0))
         for n, (scale, v) in conf.items()}
    top = max(z.values())
    e = {n: math.exp(x - top) for n, x in z.items()}
    total = sum(e.values())
    return {n: x / total for n, x in e.items()}


def list_confidences(retrievers: Mapping[str, "Retriever"], texts: Sequence[str],
                     lists: Mapping[str, Sequence[Scored]]) -> List[Dict[str, Optional[Tuple[str, float]]]]:
    """Per text, each retriever's ``(kind, value)`` confidence in its list (``lists``: {name: one list
    per text}), from the retriever's ``confidence`` method (None for a kind without one)."""
    per = {name: r.confidence(texts, lists[name]) for name, r in retrievers.items()}
    return [{n: per[n][i] for n in retrievers} for i in range(len(texts))]


def fuse(lists: Mapping[str, Scored], fusion: Fusion,
         confidences: Optional[Mapping[str, Optional[Tuple[str, float]]]] = None
         ) -> List[Tuple[str, float, Dict[str, Optional[float]]]]:
    """Fuse ``{retriever: [(docid, score), ...]}`` (each list best first) into
    one list of ``(docid, fused score, {retriever: raw score or None})``, best first;
    ties are broken by docid for a deterministic order. ``confidences``: each list's
    ``(kind, value)`` for a fusion with confidence weighting (see the module docstring)."""
    names = list(lists)
    w = dict(fusion.weights)
    weight = {n: w.get(n, 1.0) for n in names}
    cw = confidence_weights({n: (confidences or {}).get(n) for n in names}, fusion) if confidences else None
    if cw is not None:
        weight = {n: weight[n] * cw[n] for n in names}
    raw: Dict[str, Dict[str, Optional[float]]] = {}
    fused: Dict[str, float] = {}
    present: Dict[str, int] = {}
    for n in names:
        for d, s in lists[n]:
            raw.setdefault(d, dict.fromkeys(names))[n] = s
    if fusion.method == "rrf":
        for n in names:
            for rank, (d, _s) in enumerate(lists[n], 1):
                fused[d] = fused.get(d, 0.0) + weight[n] / (fusion.k + rank)
    else:
        floor = {}
        norm_scores: Dict[str, Dict[str, float]] = {}
        for n in names:
            docs = [d for d, _ in lists[n]]
            ns = _normalise([s for _, s in lists[n]], fusion.norm)
            norm_scores[n] = dict(zip(docs, ns))
            floor[n] = min(ns) if ns else 0.0
        for d in raw:
            total = 0.0
            for n in names:
                s = norm_scores[n].get(d)
                if s is not None:
                    present[d] = present.get(d, 0) + 1
                total += weight[n] * (floor[n] if s is None else s)
            fused[d] = total * present.get(d, 0) if fusion.method == "combmnz" else total
    order = sorted(fused.items(), key=lambda x: (-x[1], x[0]))
    return [(d, s, raw[d]) for d, s in order]
