"""Measure names (ir_measures style) and evaluation of a run, by wrapping pytrec_eval (trec_eval 9.x).

Every value comes from pytrec_eval's C implementation of trec_eval, so it equals trec_eval's.
pytrec_eval lacks a few things, which are derived here from its outputs (and say so below):
``RR@k`` (trec_eval's recip_rank has no cut-off), ``Judged@k`` (not in trec_eval), trec_eval's ``-c``
(average over all judged queries) and ``-M`` (depth limit).
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pytrec_eval

from .errors import EvalError
from .io import as_qrels, as_run, ranked

# family -> (cut-off: "optional" | "required" | "none", binary: uses a relevance threshold)
FAMILIES: dict[str, tuple[str, bool]] = {
    "nDCG": ("optional", False), "RR": ("optional", True), "AP": ("optional", True),
    "P": ("optional", True), "R": ("optional", True), "Success": ("required", True),
    "Judged": ("optional", False), "Bpref": ("none", True), "infAP": ("none", True),
    "Rprec": ("none", True), "NumRet": ("none", False), "NumRel": ("none", True),
    "NumRelRet": ("none", True),
}
_ALIASES = {name.lower(): name for name in FAMILIES} | {"mrr": "RR", "map": "AP", "recall": "R"}
# trec_eval's own names, accepted too.
_TREC_CUT = {"ndcg_cut": "nDCG", "map_cut": "AP", "p": "P", "recall": "R", "success": "Success"}
_TREC_PLAIN = {"ndcg": "nDCG", "map": "AP", "recip_rank": "RR", "bpref": "Bpref", "infap": "infAP",
               "rprec": "Rprec", "num_ret": "NumRet", "num_rel": "NumRel", "num_rel_ret": "NumRelRet",
               "set_p": "P", "set_recall": "R"}
_IRM = re.compile(r"^([A-Za-z_]+)(')?(?:\(([^()]*)\))?(?:@(\d+))?$")
_TREC = re.compile(r"^([A-Za-z_]+)[._](\d+)$")
DEFAULT_MEASURES = ("nDCG@10", "RR@10", "AP", "R@100", "P@10", "Judged@10")


@dataclass(frozen=True)
class Measure:
    """A parsed measure. ``rel`` overrides the run-wide relevance threshold for binary measures;
    ``judged_only`` selects the condensed list (unjudged documents dropped first, trec_eval ``-J``)."""
    name: str
    cutoff: int | None = None
    rel: int | None = None
    judged_only: bool = False

    def __str__(self) -> str:
        params = [f"rel={self.rel}"] if self.rel is not None else []
        params += ["judged_only=True"] if self.judged_only else []
        text = self.name + (f"({','.join(params)})" if params else "")
        return text + (f"@{self.cutoff}" if self.cutoff is not None else "")


def _is_irm(m) -> bool:
    """An ir_measures measure object (``ir_measures.nDCG@10``, ``ir_measures.parse_measure("P@5")``),
    known by its attributes so that ir_measures need not be imported; its ``str`` is our syntax."""
    return not isinstance(m, (str, Measure)) and hasattr(m, "NAME") and hasattr(m, "params")


def split_measures(measures) -> list:
    """Measures as a flat list: a string may hold several, comma-separated (``"nDCG@10,P@5"``;
    commas inside parentheses, as in ``AP(rel=2,judged_only=True)``, stay); a Measure or an
    ir_measures object is one; any iterable of these is flattened."""
    if isinstance(measures, str):
        parts, depth, cur = [], 0, ""
        for c in measures:
            depth += (c == "(") - (c == ")")
            if c == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += c
        parts.append(cur)
        return [p.strip() for p in parts if p.strip()]
    if isinstance(measures, Measure) or _is_irm(measures):
        return [measures]
    if not isinstance(measures, Iterable):
        raise EvalError(f"measures: expected a name, a list of names or measure objects, got {type(measures).__name__}")
    return [m for x in measures for m in split_measures(x)]


def parse_measure(text: str | Measure) -> Measure:
    """Parse ``nDCG@10``, ``AP(rel=2)@100``, ``nDCG(judged_only=True)@10``, ``nDCG'@10`` (condensed,
    nDCG-prime) or a trec_eval name (``ndcg_cut.10``, ``map``, ``P_10``...); an ir_measures
    measure object (``ir_measures.nDCG@10``) is read through its name."""
    if isinstance(text, Measure):
        return text
    if _is_irm(text):
        text = str(text)
    if not isinstance(text, str):
        raise EvalError(f"a measure is a name such as nDCG@10 or an ir_measures measure, got {type(text).__name__}")
    s = text.strip()
    trec = _TREC.match(s)
    if trec and trec.group(1).lower() in _TREC_CUT and "@" not in s:
        return _check(Measure(_TREC_CUT[trec.group(1).lower()], int(trec.group(2))), text)
    if s.lower() in _TREC_PLAIN and s.lower() not in _ALIASES:
        return Measure(_TREC_PLAIN[s.lower()])
    m = _IRM.match(s)
    if not m or m.group(1).lower() not in _ALIASES:
        raise EvalError(f"unknown measure {text!r} (known: {', '.join(FAMILIES)}; e.g. nDCG@10, AP(rel=2), "
                        "RR@10, nDCG'@10 for the condensed list)")
    rel, judged_only = None, bool(m.group(2))
    for param in filter(None, (p.strip() for p in (m.group(3) or "").split(","))):
        key, _, value = (x.strip() for x in param.partition("="))
        if key == "rel" and re.fullmatch(r"-?\d+", value):
            rel = int(value)
        elif key == "judged_only" and value in ("True", "False", "true", "false", "1", "0"):
            judged_only = value in ("True", "true", "1")
        else:
            raise EvalError(f"measure {text!r}: unknown parameter {param!r} (use rel=N or judged_only=True)")
    cutoff = int(m.group(4)) if m.group(4) else None
    return _check(Measure(_ALIASES[m.group(1).lower()], cutoff, rel, judged_only), text)


def _check(measure: Measure, text: str) -> Measure:
    kind, binary = FAMILIES[measure.name]
    if kind == "required" and measure.cutoff is None:
        raise EvalError(f"measure {text!r} needs a cut-off, e.g. {measure.name}@10")
    if kind == "none" and measure.cutoff is not None:
        raise EvalError(f"measure {text!r} takes no cut-off")
    if measure.cutoff is not None and measure.cutoff < 1:
        raise EvalError(f"measure {text!r}: the cut-off must be >= 1")
    if measure.rel is not None and not binary:
        raise EvalError(f"measure {text!r}: rel= does not apply ({measure.name} uses graded gains or no relevance)")
    return measure


def _requests(m: Measure) -> list[tuple[str, str]]:
    """(pytrec_eval request, result key) pairs that measure ``m`` is computed from."""
    k = m.cutoff
    if m.name == "Judged":  # computed by _judged, not pytrec_eval
        return []
    if m.name == "RR":
        return [("recip_rank", "recip_rank")] + ([(f"success.{k}", f"success_{k}")] if k else [])
    cut = {"nDCG": "ndcg_cut", "AP": "map_cut", "P": "P", "R": "recall", "Success": "success"}
    plain = {"nDCG": "ndcg", "AP": "map", "P": "set_P", "R": "set_recall", "Bpref": "bpref", "infAP": "infAP",
             "Rprec": "Rprec", "NumRet": "num_ret", "NumRel": "num_rel", "NumRelRet": "num_rel_ret"}
    if k is not None:
        return [(f"{cut[m.name]}.{k}", f"{cut[m.name]}_{k}")]
    return [(plain[m.name], plain[m.name])]


def _value(m: Measure, r: Mapping[str, float]) -> float:
    if m.name == "RR" and m.cutoff:
        # Hand-written: trec_eval's recip_rank has no cut-off. The first relevant document is within
        # the top k exactly when success@k is 1, so RR@k = recip_rank * success@k.
        return r["recip_rank"] if r[f"success_{m.cutoff}"] > 0 else 0.0
    return r[_requests(m)[0][1]]


def _judged(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]], qids: list[str],
            cutoff: int | None, condensed: bool) -> dict[str, float]:
    """Judged@k per query. Hand-written: trec_eval has no judgment rate. Like ir_measures we divide by
    min(k, documents retrieved); unlike ir_measures, ties are ordered as trec_eval orders them (score
    descending, then docid descending), so the top k is the same set the other measures see."""
    out = {}
    for q in qids:
        docs, judged = run[q], qrels[q]
        hits = [(docs[d], d) for d in judged if d in docs]
        n = len(docs)
        if condensed:  # the condensed list holds judged documents only
            out[q] = 1.0 if hits else 0.0
        elif cutoff is None or n <= cutoff:
            out[q] = len(hits) / n
        elif not hits:
            out[q] = 0.0
        else:  # the k-th largest score; judged documents above it are in, those tied with it by docid
            scores = np.fromiter(docs.values(), dtype=float, count=n)
            kth = np.partition(scores, n - cutoff)[n - cutoff]
            inside = sum(1 for s, _ in hits if s > kth)
            if any(s == kth for s, _ in hits):
                slots = cutoff - int((scores > kth).sum())
                tied = set(sorted((d for d, s in docs.items() if s == kth), reverse=True)[:slots])
                inside += sum(1 for s, d in hits if s == kth and d in tied)
            out[q] = inside / cutoff
    return out


def _truncate(run: Mapping[str, Mapping[str, float]], depth: int) -> dict[str, dict[str, float]]:
    # Hand-written: pytrec_eval has no equivalent of trec_eval -M (evaluate only the top `depth`).
    return {q: dict(ranked(docs)[:depth]) if len(docs) > depth else dict(docs) for q, docs in run.items()}


class Evaluator:
    """Qrels and measures prepared once, then ``evaluate(run)`` for any number of runs.
    Arguments as for ``evaluate``."""

    def __init__(self, qrels: Mapping[str, Mapping[str, int]],
                 measures: Iterable[str | Measure] | str = DEFAULT_MEASURES, rel_threshold: int | None = None,
                 judged_only: bool = False, complete: bool = False, max_docs: int | None = None):
        self.measures: dict[str, Measure] = {}
        for text in split_measures(measures):
            self.measures.setdefault(text.strip() if isinstance(text, str) else str(text), parse_measure(text))
        if not self.measures:
            raise EvalError("no measure given")
        if rel_threshold is not None and (isinstance(rel_threshold, bool) or not isinstance(rel_threshold, int)):
            raise EvalError(f"rel_threshold must be an integer, got {rel_threshold!r}")
        if max_docs is not None and max_docs < 1:
            raise EvalError("max_docs must be >= 1")
        qrels = as_qrels(qrels)
        self.qrels, self.complete, self.max_docs = qrels, complete, max_docs
        level = 1 if rel_threshold is None else rel_threshold
        groups: dict[tuple[int, bool], set[str]] = {}
        self._plan: list[tuple[str, Measure, tuple[int, bool]]] = []
        for text, m in self.measures.items():
            key = (m.rel if m.rel is not None else level, m.judged_only or judged_only)
            if m.name != "Judged":
                groups.setdefault(key, set()).update(req for req, _ in _requests(m))
            self._plan.append((text, m, key))
        self._evaluators = {key: pytrec_eval.RelevanceEvaluator(qrels, requests, relevance_level=key[0],
                                                                judged_docs_only_flag=key[1])
                            for key, requests in groups.items()}

    def evaluate(self, run: Mapping[str, Mapping[str, float]], per_query: bool = False) -> dict:
        """{measure: mean}, or with ``per_query`` {qid: {measure: value}}. ``run`` in any form
        :func:`eval.io.as_run` takes (a batch_search result, a run DataFrame)."""
        qrels = self.qrels
        run = as_run(run)
        if self.max_docs is not None:
            run = _truncate(run, self.max_docs)
        # trec_eval cannot see a query without result lines; pytrec_eval would score it, so drop it.
        run = {q: docs for q, docs in run.items() if docs}
        qids = sorted(q for q in run if qrels.get(q))
        results = {key: ev.evaluate(run) if qids else {} for key, ev in self._evaluators.items()}
        columns = {}
        for text, m, key in self._plan:
            if m.name == "Judged":
                values = _judged(qrels, run, qids, m.cutoff, key[1])
                columns[text] = [values[q] for q in qids]
            else:
                columns[text] = [_value(m, results[key][q]) for q in qids]
        table = {q: {text: columns[text][i] for text in columns} for i, q in enumerate(qids)}
        if self.complete:
            for q in qrels.keys() - table.keys():
                if qrels[q]:  # trec_eval -c: a query without results scores 0 (NumRel still counts judgments)
                    table[q] = {text: float(sum(g >= key[0] for g in qrels[q].values())) if m.name == "NumRel"
                                else 0.0 for text, m, key in self._plan}
            table = dict(sorted(table.items()))
        return table if per_query else aggregate(table, self.measures)


def evaluate(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
             measures: Iterable[str | Measure] | str = DEFAULT_MEASURES, rel_threshold: int | None = None,
             judged_only: bool = False, per_query: bool = False, complete: bool = False,
             max_docs: int | None = None) -> dict:
    """Evaluate one run against qrels; values equal trec_eval's.

    run: {qid: {docid: score}}, or a batch_search result {qid: [hits with .docid, .score]}, or a run
        DataFrame (PyTerrier's qid, docno, score or ir_measures' query_id, doc_id, score): see
        ``eval.io.as_run``. qrels: {qid: {docid: grade}} or a DataFrame (qid, docno, label or
        query_id, doc_id, relevance): see ``eval.io.as_qrels``.
    measures: ir_measures-style names (see ``parse_measure``), a comma-separated string of them, or
        ir_measures measure objects (``ir_measures.nDCG@10``); results are keyed by the text given
        (an object's ``str``).
    rel_threshold: minimum grade counted relevant by binary measures (trec_eval ``-l``; TREC DL uses 2).
        nDCG always uses the graded gains and Judged@k any judgment.
    judged_only: condensed lists for every measure (trec_eval ``-J``).
    complete: average over every query in the qrels, missing ones scoring 0 (trec_eval ``-c``); by
        default, like trec_eval, over the queries present in both run and qrels.
    max_docs: evaluate only each query's top ``max_docs`` documents (trec_eval ``-M``).
    Returns {measure: mean} or, with ``per_query``, {qid: {measure: value}} (qids sorted as trec_eval).
    Means of the Num* counts are sums, as in trec_eval. With no query to average over, means are 0.0.
    """
    return Evaluator(qrels, measures, rel_threshold, judged_only, complete, max_docs).evaluate(run, per_query)


def aggregate(table: Mapping[str, Mapping[str, float]], measures: Mapping[str, Measure] | None = None) -> dict[str, float]:
    """Mean per measure over the queries of a per-query table (sums for the Num* counts, as trec_eval)."""
    names = list(measures) if measures else list(next(iter(table.values()), {}))
    out: dict[str, float] = {}
    for text in names:
        values = [row[text] for row in table.values()]
        is_count = (measures[text] if measures else parse_measure(text)).name.startswith("Num")
        out[text] = float(math.fsum(values)) if is_count else (math.fsum(values) / len(values) if values else 0.0)
    return out


def evaluate_runs(qrels: Mapping[str, Mapping[str, int]], runs: Mapping[str, Mapping[str, Mapping[str, float]]],
                  measures: Iterable[str | Measure] | str = DEFAULT_MEASURES, **kwargs) -> dict[str, dict]:
    """``evaluate`` for several runs: {run name: result}; ``per_query`` goes with the other keywords."""
    per_query = kwargs.pop("per_query", False)
    evaluator = Evaluator(qrels, measures, **kwargs)
    return {name: evaluator.evaluate(run, per_query) for name, run in runs.items()}


def unjudged_report(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
                    k: int = 10) -> dict[str, float]:
    """How much of a run's top k is unjudged, over the queries in both run and qrels: mean Judged@k,
    unjudged documents among all top-k documents, and queries with at least one unjudged one."""
    if k < 1:
        raise EvalError("k must be >= 1")
    run = as_run(run)
    name = f"Judged@{k}"
    per_q = evaluate(qrels, run, [name, "NumRet"], per_query=True)
    shown = {q: min(k, int(row["NumRet"])) for q, row in per_q.items()}
    unjudged = {q: round(shown[q] * (1.0 - row[name])) for q, row in per_q.items()}
    return {"queries": len(per_q),
            name: math.fsum(row[name] for row in per_q.values()) / len(per_q) if per_q else 0.0,
            f"unjudged@{k}": sum(unjudged.values()), f"retrieved@{k}": sum(shown.values()),
            "queries_with_unjudged": sum(1 for v in unjudged.values() if v > 0)}
