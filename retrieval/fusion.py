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
def _norm_params(scores: List[float], norm: str) -> Dict[str, float]:
    """What a normalisation needs of a list's scores: min-max its lowest and highest, z-score
    the mean and the standard deviation (none for "none" or an empty list)."""
    if norm == "none" or not scores:
        return {}
    if norm == "minmax":
        return {"min": min(scores), "max": max(scores)}
    mean = sum(scores) / len(scores)
    return {"mean": mean, "sd": math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))}


def _normalise(scores: List[float], norm: str, p: Optional[Dict[str, float]] = None) -> List[float]:
    p = _norm_params(scores, norm) if p is None else p
    if not p:
        return list(scores)
    if norm == "minmax":
        lo, hi = p["min"], p["max"]
        return [1.0 if hi == lo else (s - lo) / (hi - lo) for s in scores]
    mean, sd = p["mean"], p["sd"]
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


class Prepared:
    """What a fusion makes of each list of one query before any document is scored: each list's
    weight (its static weight times its confidence weight), and per document its rank (RRF) or
    normalised score (the others), with the normalised score a document the list lacks takes.
    :func:`fuse` scores every document with it, and :func:`explain_fusion` shows it for one."""

    def __init__(self, lists: Mapping[str, Scored], fusion: Fusion,
                 confidences: Optional[Mapping[str, Optional[Tuple[str, float]]]] = None):
        self.fusion = fusion
        self.names = list(lists)
        w = dict(fusion.weights)
        self.static = {n: w.get(n, 1.0) for n in self.names}
        self.confidence = {n: (confidences or {}).get(n) for n in self.names}
        self.confidence_weights = confidence_weights(self.confidence, fusion) if confidences else None
        cw = self.confidence_weights
        self.weight = self.static if cw is None else {n: self.static[n] * cw[n] for n in self.names}
        self.ranks: Dict[str, Dict[str, int]] = {}
        self.norm_params: Dict[str, Dict[str, float]] = {}
        self.normalised: Dict[str, Dict[str, float]] = {}
        self.floor: Dict[str, float] = {}
        for n in self.names:
            if fusion.method == "rrf":
                self.ranks[n] = {d: rank for rank, (d, _s) in enumerate(lists[n], 1)}
                continue
            scores = [s for _, s in lists[n]]
            self.norm_params[n] = _norm_params(scores, fusion.norm)
            ns = _normalise(scores, fusion.norm, self.norm_params[n])
            self.normalised[n] = dict(zip((d for d, _ in lists[n]), ns))
            self.floor[n] = min(ns) if ns else 0.0

    def term(self, name: str, docid: str) -> Optional[float]:
        """What list ``name`` adds to the fused score of ``docid`` (before CombMNZ's multiplier); None
        where RRF adds nothing (a document the list lacks)."""
        if self.fusion.method == "rrf":
            rank = self.ranks[name].get(docid)
            return None if rank is None else self.weight[name] / (self.fusion.k + rank)
        s = self.normalised[name].get(docid)
        return self.weight[name] * (self.floor[name] if s is None else s)

    def present(self, docid: str) -> int:
        """How many lists returned ``docid``."""
        held = self.ranks if self.fusion.method == "rrf" else self.normalised
        return sum(docid in held[n] for n in self.names)

    def score(self, docid: str) -> float:
        """The fused score of ``docid``: its lists' terms summed in the lists' order, times the
        number of lists that returned it under CombMNZ."""
        total = 0.0
        for n in self.names:
            t = self.term(n, docid)
            if t is not None:
                total += t
        return total * self.present(docid) if self.fusion.method == "combmnz" else total


def fuse(lists: Mapping[str, Scored], fusion: Fusion,
         confidences: Optional[Mapping[str, Optional[Tuple[str, float]]]] = None
         ) -> List[Tuple[str, float, Dict[str, Optional[float]]]]:
    """Fuse ``{retriever: [(docid, score), ...]}`` (each list best first) into
    one list of ``(docid, fused score, {retriever: raw score or None})``, best first;
    ties are broken by docid for a deterministic order. ``confidences``: each list's
    ``(kind, value)`` for a fusion with confidence weighting (see the module docstring)."""
    return _ranked(Prepared(lists, fusion, confidences), lists)


def _ranked(p: Prepared, lists: Mapping[str, Scored]) -> List[Tuple[str, float, Dict[str, Optional[float]]]]:
    raw: Dict[str, Dict[str, Optional[float]]] = {}
    for n in p.names:
        for d, s in lists[n]:
            raw.setdefault(d, dict.fromkeys(p.names))[n] = s
    # the arithmetic of Prepared.score (same operations, same order, so explain_fusion's numbers are
    # these), inlined: a method call per document and list made fusion at depth 1000 ~30% slower
    fused: Dict[str, float] = {}
    if p.fusion.method == "rrf":
        k = p.fusion.k
        fused = dict.fromkeys(raw, 0.0)
        for n in p.names:
            w = p.weight[n]
            for d, rank in p.ranks[n].items():
                fused[d] += w / (k + rank)
    else:
        mnz = p.fusion.method == "combmnz"
        per = [(p.weight[n], p.normalised[n], p.floor[n]) for n in p.names]
        for d in raw:
            total, present = 0.0, 0
            for w, ns, floor in per:
                s = ns.get(d)
                if s is None:
                    total += w * floor
                else:
                    total += w * s
                    present += 1
            fused[d] = total * present if mnz else total
    order = sorted(fused.items(), key=lambda x: (-x[1], x[0]))
    return [(d, s, raw[d]) for d, s in order]


def explain_fusion(lists: Mapping[str, Scored], fusion: Fusion, docid: str,
                   confidences: Optional[Mapping[str, Optional[Tuple[str, float]]]] = None) -> Dict[str, object]:
    """The arithmetic that gives ``docid`` its fused score and rank: per list its raw score and rank
    (None: the list lacks it), its normalised score (or what a missing document takes) or RRF's
    1/(k + rank), the list's static and confidence weights and what it adds; then the sum, CombMNZ's
    multiplier, the fused score and the rank among every document of the lists (None, with both
    score and rank, where no list returned it: the fusion never saw it)."""
    p = Prepared(lists, fusion, confidences)
    per: Dict[str, Dict[str, object]] = {}
    for n in p.names:
        pos = next((i for i, (d, _s) in enumerate(lists[n], 1) if d == docid), None)
        e: Dict[str, object] = {"rank": pos, "raw": lists[n][pos - 1][1] if pos else None, "length": len(lists[n]),
                                "static_weight": p.static[n], "confidence": p.confidence[n],
                                "confidence_weight": p.confidence_weights[n] if p.confidence_weights else None,
                                "weight": p.weight[n], "contribution": p.term(n, docid)}
        if fusion.method == "rrf":
            e["rrf"] = 1.0 / (fusion.k + pos) if pos else None
        else:
            e.update(norm=dict(p.norm_params[n]), normalised=p.normalised[n].get(docid), floor=p.floor[n])
        per[n] = e
    present = p.present(docid)
    out: Dict[str, object] = {"spec": str(fusion), "method": fusion.method, "lists": per, "present": present,
                              "sum": sum(t for t in (p.term(n, docid) for n in p.names) if t is not None)}
    if fusion.method == "rrf":
        out["k"] = fusion.k
    else:
        out["norm"] = fusion.norm
    if fusion.confidence:
        out["confidence"] = {"slope": fusion.confidence, "centre": fusion.centre,
                             "weighted": p.confidence_weights is not None}
    if fusion.method == "combmnz":
        out["multiplier"] = present
    if not present:
        out.update(score=None, rank=None)
        return out
    ranked = _ranked(p, lists)
    out["rank"] = next(i for i, (d, _s, _r) in enumerate(ranked, 1) if d == docid)
    out["score"] = ranked[out["rank"] - 1][1]
    out["of"] = len(ranked)
    return out
