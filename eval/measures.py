"""Measure names (ir_measures') and evaluation of a run, through ir_measures' providers.

Every value is computed by the provider ir_measures picks for the measure: pytrec_eval (trec_eval 9.x's C
code) for the trec_eval measures, so they equal trec_eval's, and ir_measures' own providers for the rest
(``RR@k`` msmarco, ``Judged@k`` judged, ``ERR@k`` gdeval, ...). What is written here: the measures'
names (retr's, trec_eval's and ir_measures'), trec_eval's order of tied scores for the providers that
order a run otherwise, trec_eval's ``-J`` (condensed lists), ``-c`` (a judged query with no hits scores 0:
the default here, as in ir_measures and PyTerrier; ``empty="skip"`` leaves such queries out) and ``-M``
(depth limit), none of which ir_measures has, and what a provider falls short of (below).

``RBP`` goes to cwl_eval, which needs a threshold: a document counts from the run-wide grade (``-l``,
default 1) unless ``RBP(rel=N)`` sets one; ``RBP@k`` is RBP of the run's top k. The diversity measures
(``alpha_nDCG@k``, ``ERR_IA@k``, ``NRBP``...) go to pyndeval (TREC's ndeval, cut-offs up to 20) and need
subtopic qrels (``eval.io.SubtopicQrels``); ndeval counts a judgment relevant from the same threshold.
"""
from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import ir_measures
import numpy as np

from .errors import EvalError, SkippedQueries
from .io import SubtopicQrels, as_qrels, as_run, ranked

# retr's own families, family -> (cut-off: "optional" | "required" | "none", binary: uses a relevance
# threshold). Any other ir_measures measure (ERR@k, IPrec@r, SetF, NumQ, Compat, ...) goes by its own name.
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
    ``judged_only`` selects the condensed list (unjudged documents dropped first, trec_eval ``-J``);
    ``params`` holds any other ir_measures parameter as (name, value) pairs (``p`` of RBP, ``beta`` of
    SetF, ``recall`` of IPrec, ``dcg`` or ``gains`` of nDCG)."""
    name: str
    cutoff: int | None = None
    rel: int | None = None
    judged_only: bool = False
    params: tuple = ()

    def __str__(self) -> str:
        params = [f"rel={self.rel}"] if self.rel is not None else []
        params += ["judged_only=True"] if self.judged_only else []
        params += [f"{k}={v!r}" for k, v in self.params]
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
    nDCG-prime), a trec_eval name (``ndcg_cut.10``, ``map``, ``P_10``...) or any measure of ir_measures
    (``ERR@20``, ``IPrec@0.5``, ``SetF(beta=2.0)``, ``NumQ``, ``nDCG(dcg='exp-log2')@10``...); an
    ir_measures measure object (``ir_measures.nDCG@10``) is taken as it is."""
    if isinstance(text, Measure):
        return text
    if _is_irm(text):
        return _from_ir(text, str(text))
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
        return _parse_ir(s, text)
    rel, judged_only = None, bool(m.group(2))
    for param in filter(None, (p.strip() for p in (m.group(3) or "").split(","))):
        key, _, value = (x.strip() for x in param.partition("="))
        if key == "rel" and re.fullmatch(r"-?\d+", value):
            rel = int(value)
        elif key == "judged_only" and value in ("True", "False", "true", "false", "1", "0"):
            judged_only = value in ("True", "true", "1")
        else:  # another of ir_measures' parameters (nDCG's dcg=, ...): ir_measures reads the whole name
            return _parse_ir(s, text)
    name = _ALIASES[m.group(1).lower()]
    if name == "NumRet" and rel is not None:  # ir_measures' NumRet(rel=N) is trec_eval's num_rel_ret
        name = "NumRelRet"
    cutoff = int(m.group(4)) if m.group(4) else None
    return _check(Measure(name, cutoff, rel, judged_only), text)


def _parse_ir(s: str, text: str) -> Measure:
    """A name outside retr's own syntax, read by ir_measures' parser (a prime after the name still asks
    for the condensed list)."""
    name = re.match(r"[^\s(@']*", s).group(0)
    prime = s[len(name):].startswith("'")
    body = _ALIASES.get(name.lower(), name) + s[len(name) + prime:]
    try:
        obj = ir_measures.parse_measure(body)
    except Exception:  # ir_measures' parser raises NameError, ValueError, SyntaxError... on what it cannot read
        raise EvalError(f"unknown measure {text!r} (retr's: {', '.join(FAMILIES)}, e.g. nDCG@10, AP(rel=2), RR@10, "
                        "nDCG'@10 for the condensed list; or any of ir_measures', e.g. ERR@20, IPrec@0.5, "
                        "SetF(beta=2.0), NumQ)") from None
    return _from_ir(obj, text, prime)


def _from_ir(obj, text: str, judged_only: bool = False) -> Measure:
    """An ir_measures measure object as a Measure (its parameters checked by ir_measures)."""
    spec = ir_measures.measures.registry.get(obj.NAME)
    unknown = set(obj.params) - set(spec.SUPPORTED_PARAMS) if spec is not None else set()
    if spec is None:
        raise EvalError(f"measure {text!r}: not a measure ir_measures knows")
    if unknown:
        raise EvalError(f"measure {text!r}: unknown parameter {', '.join(sorted(unknown))} ({obj.NAME} takes "
                        f"{', '.join(spec.SUPPORTED_PARAMS) or 'none'})")
    try:
        obj.validate_params()
    except (AssertionError, ValueError, TypeError) as exc:
        raise EvalError(f"measure {text!r}: {exc}") from None
    params = dict(obj.params)
    cutoff, rel = params.pop("cutoff", None), params.pop("rel", None)
    judged_only = bool(params.pop("judged_only", False)) or judged_only
    name = "NumRelRet" if obj.NAME == "NumRet" and rel is not None else obj.NAME
    return _check(Measure(name, cutoff, rel, judged_only, tuple(sorted(params.items()))), text)


def _check(measure: Measure, text: str) -> Measure:
    if measure.name in FAMILIES:
        kind, binary = FAMILIES[measure.name]
        if kind == "required" and measure.cutoff is None:
            raise EvalError(f"measure {text!r} needs a cut-off, e.g. {measure.name}@10")
        if kind == "none" and measure.cutoff is not None:
            raise EvalError(f"measure {text!r} takes no cut-off")
        if measure.rel is not None and not binary:
            raise EvalError(f"measure {text!r}: rel= does not apply ({measure.name} uses graded gains or no relevance)")
    if measure.cutoff is not None and measure.cutoff < 1:
        raise EvalError(f"measure {text!r}: the cut-off must be >= 1")
    return measure


def _ir(m: Measure, level: int):
    """The ir_measures object that computes ``m`` at run-wide threshold ``level`` (applied to every
    measure with a ``rel`` parameter that does not set its own). The condensed list is not a parameter
    here: the Evaluator condenses the run itself, for every measure alike (see Evaluator)."""
    name, params = m.name, dict(m.params)
    if name in ("P", "R") and m.cutoff is None:  # retr's (and trec_eval's) P and R without cut-off: set_P, set_recall
        name = {"P": "SetP", "R": "SetR"}[name]
    if name == "NumRelRet":
        name, params["rel"] = "NumRet", level if m.rel is None else m.rel
    elif name != "NumRet" and "rel" in ir_measures.measures.registry[name].SUPPORTED_PARAMS:
        params["rel"] = level if m.rel is None else m.rel
    if m.cutoff is not None:
        params["cutoff"] = m.cutoff
    return ir_measures.measures.registry[name](**params)


# ir_measures' providers, in the order its DefaultPipeline tries them; those that read a run in an
# order of their own (ties by docid ascending, or in Perl) get it ranked the trec_eval way (see Evaluator).
_PROVIDERS = ir_measures.DefaultPipeline.providers
_TOP_K = {"judged", "msmarco", "gdeval"}  # whose measures read only the top k (the run is cut there for them)
_GDEVAL_MAX_GRADE = 4  # gdeval.pl refuses a qrels file with a higher grade
_NDEVAL_MAX_CUTOFF = 20  # ndeval (pyndeval) computes its measures to depth 20 at most


def _provider(ir, text: str):
    """The first installed provider of ir_measures' pipeline that computes ``ir``; else one EvalError."""
    would = []
    if ir.NAME == "RBP" and "cutoff" in ir.params:  # computed on the top k (see _key)
        ir = ir_measures.measures.registry["RBP"](**{k: v for k, v in ir.params.items() if k != "cutoff"})
    for provider in _PROVIDERS:
        if provider.supports(ir):
            if provider.is_available():
                return provider
            would.append(provider)
    hint = ", ".join(f"{p.NAME} ({p.install_instructions()})" if p.install_instructions() else p.NAME for p in would)
    raise EvalError(f"measure {text!r}: no measure provider installed here computes {ir}"
                    + (f"; ir_measures would use {hint}" if hint else ""))


def _key(ir, text: str, provider: str, condensed: bool, qrels) -> tuple[tuple, object]:
    """(group key, ir_measures object) of a measure computed by ``provider``. The key's third part
    keeps apart what one evaluator must not mix: RBP's cut-offs (cwl_eval has none: ``RBP@k`` is RBP of the
    run cut at k, the definition's sum stopped at k) and pyndeval's settings (ir_measures 0.4 hands the run
    to the first of several ndeval invocations only; the others would score 0)."""
    if ir.NAME == "RBP" and "cutoff" in ir.params:
        params = dict(ir.params)
        k = params.pop("cutoff")
        return (provider, condensed, k), ir_measures.measures.registry["RBP"](**params)
    if provider != "pyndeval":
        return (provider, condensed), ir
    if not isinstance(qrels, SubtopicQrels):
        raise EvalError(f"measure {text!r} is a diversity measure: it needs subtopic qrels, TREC's 'topic subtopic "
                        "docid judgment' (--qrels subtopics:FILE; in Python eval.read_subtopic_qrels)")
    if (ir.params.get("cutoff") or 0) > _NDEVAL_MAX_CUTOFF:
        raise EvalError(f"measure {text!r}: ndeval (pyndeval) computes diversity measures to depth "
                        f"{_NDEVAL_MAX_CUTOFF} at most")
    return (provider, condensed, tuple(ir.params.get(p) for p in ("rel", "alpha", "beta"))), ir


def _top(docs: Mapping[str, float], k: int | None) -> dict[str, float]:
    """The top ``k`` documents (all with ``k`` None) in trec_eval's order (score descending, ties by docid
    descending), rescored k, k-1, ..., 1 so that a provider which breaks ties otherwise (ir_measures' Python
    providers order ties by docid ascending) sees the ranking trec_eval and pytrec_eval see."""
    n = len(docs)
    if k is None or n <= k:
        order = ranked(docs)
    else:  # the k-th largest score; everything above it and the ties at it, then sorted
        scores = np.fromiter(docs.values(), dtype=float, count=n)
        names = list(docs)
        inside = np.flatnonzero(scores >= np.partition(scores, n - k)[n - k])
        order = ranked({names[i]: scores[i] for i in inside})[:k]
    return {d: float(len(order) - i) for i, (d, _) in enumerate(order)}


def _truncate(run: Mapping[str, Mapping[str, float]], depth: int) -> dict[str, dict[str, float]]:
    # Hand-written: ir_measures has no equivalent of trec_eval -M (evaluate only the top `depth`).
    return {q: dict(ranked(docs)[:depth]) if len(docs) > depth else dict(docs) for q, docs in run.items()}


#: what a judged query with no hits does: ``zero`` scores 0 on every measure (trec_eval -c, ir_measures,
#: PyTerrier), ``skip`` leaves it out of the means (trec_eval without -c), saying how many it left out
EMPTY = ("zero", "skip")


def check_empty(empty: str) -> str:
    if empty not in EMPTY:
        raise EvalError(f"empty must be one of {', '.join(map(repr, EMPTY))}, got {empty!r}")
    return empty


def judged_queries(qrels: Mapping[str, Mapping[str, int]]) -> set[str]:
    """The queries with at least one judgment: those every measure averages over."""
    return {q for q, docs in qrels.items() if docs}


def with_hits(run: Mapping[str, Mapping[str, float]]) -> set[str]:
    """The queries of a run that have at least one document."""
    return {q for q, docs in run.items() if docs}


class Evaluator:
    """Qrels and measures prepared once, then ``evaluate(run)`` for any number of runs.
    Arguments as for ``evaluate``; ``skipped`` holds the judged queries the last ``evaluate`` left out
    (``empty="skip"``: those with no hits; always empty with the default ``empty="zero"``)."""

    def __init__(self, qrels: Mapping[str, Mapping[str, int]],
                 measures: Iterable[str | Measure] | str = DEFAULT_MEASURES, rel_threshold: int | None = None,
                 judged_only: bool = False, empty: str = "zero", max_docs: int | None = None):
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
        self.qrels, self.empty, self.max_docs = qrels, check_empty(empty), max_docs
        self.skipped: list[str] = []
        self.level = level = 1 if rel_threshold is None else rel_threshold
        # (text, measure, ir_measures object, group: (provider name, condensed[, what keeps it apart: see _key])
        # or None where computed here)
        self._plan: list[tuple[str, Measure, object, tuple | None]] = []
        groups: dict[tuple, dict[str, object]] = {}
        for text, m in self.measures.items():
            ir = _ir(m, level)
            if ir.NAME == "NumRel" and ir.params["rel"] != 1:
                # Counted here: ir_measures' pytrec_eval provider takes NumRel at rel=1 only (it holds that
                # pytrec_eval ignores the threshold there; pytrec_eval 0.5 does not), and no other provider has it.
                self._plan.append((text, m, ir, None))
                continue
            key, ir = _key(ir, text, _provider(ir, text).NAME, m.judged_only or judged_only, qrels)
            groups.setdefault(key, {})[str(ir)] = ir
            self._plan.append((text, m, ir, key))
        # The providers other than pytrec_eval see queries numbered 0, 1, ... (gdeval.pl takes numeric ids only).
        self._ids = {q: str(i) for i, q in enumerate(q for q in qrels if qrels[q])}
        self._qids = {i: q for q, i in self._ids.items()}
        numbered = {i: qrels[q] for q, i in self._ids.items()}
        self._groups = {key: self._group(key, list(irs.values()), numbered) for key, irs in groups.items()}

    def _group(self, key: tuple, irs: list, numbered: Mapping[str, Mapping[str, int]]):
        """(provider's evaluator, whether it reads the run as given, depth it reads) for measures ``irs``."""
        provider = ir_measures.providers.registry[key[0]]
        if key[0] == "pyndeval":  # the subtopic qrels, as ir_measures passes them on (the subtopic as iteration)
            subs = self.qrels.subtopics
            judged = [ir_measures.Qrel(i, d, g, s) for q, i in self._ids.items()
                      for s, docs in subs.get(q, {}).items() for d, g in docs.items()]
            return provider.evaluator(irs, judged), False, None
        if key[0] == "cwl_eval" and len(key) > 2:  # RBP@k: RBP of the top k
            return provider.evaluator(irs, numbered), False, key[2]
        if key[0] == "pytrec_eval":  # pytrec_eval orders ties as trec_eval does: the run as it is
            return provider.evaluator(irs, self.qrels), True, None
        if key[0] == "gdeval":
            top = max((g for docs in numbered.values() for g in docs.values()), default=0)
            if top > _GDEVAL_MAX_GRADE:
                raise EvalError(f"{', '.join(map(str, irs))}: ir_measures computes these with gdeval, which takes "
                                f"grades up to {_GDEVAL_MAX_GRADE}; the qrels hold grade {top}")
        cutoffs = [ir.params.get("cutoff") for ir in irs]
        depth = max(cutoffs) if key[0] in _TOP_K and None not in cutoffs else None
        return provider.evaluator(irs, numbered), False, depth

    def _values(self, key: tuple, run: Mapping[str, Mapping[str, float]], qids: list[str]) -> dict:
        """{str(ir_measures object): {qid: value}} of one provider's measures over ``qids``."""
        evaluator, as_given, depth = self._groups[key]
        qrels = self.qrels
        if key[1]:  # Hand-written: trec_eval -J (drop unjudged documents), for every measure, which
            # ir_measures offers as judged_only on some measures only (not NumRet, Bpref, RR@k, Judged...).
            docs = {q: {d: s for d, s in run[q].items() if d in qrels[q]} for q in qids}
        else:
            docs = {q: run[q] for q in qids}
        if as_given:
            given = docs
        else:  # a query left without documents is not given: ir_measures scores it 0 for these measures
            given = {self._ids[q]: _top(d, depth) for q, d in docs.items() if d}
        out: dict[str, dict[str, float]] = {}
        qid_of = (lambda q: q) if as_given else self._qids.get
        try:
            for metric in evaluator.iter_calc(given):
                out.setdefault(str(metric.measure), {})[qid_of(metric.query_id)] = metric.value
        except Exception as exc:  # a provider's own failure (gdeval's Perl, a division by zero...): one line
            names = ", ".join(t for t, _, _, k in self._plan if k == key)
            raise EvalError(f"{names}: ir_measures' {key[0]} provider failed on this run "
                            f"({type(exc).__name__}: {str(exc).strip() or 'no message'})") from None
        return out

    def evaluate(self, run: Mapping[str, Mapping[str, float]], per_query: bool = False) -> dict:
        """{measure: mean}, or with ``per_query`` {qid: {measure: value}}. ``run`` in any form
        :func:`eval.io.as_run` takes (a batch_search result, a run DataFrame)."""
        qrels = self.qrels
        run = as_run(run)
        if self.max_docs is not None:
            run = _truncate(run, self.max_docs)
        # the providers compute the queries with hits; a judged query without any is added below (scored 0,
        # or left out with empty="skip")
        qids = sorted(q for q, docs in run.items() if docs and qrels.get(q))
        values = {key: self._values(key, run, qids) for key in self._groups} if qids else {}
        columns = {}
        for text, m, ir, key in self._plan:
            if key is None:  # NumRel at a threshold other than 1
                rel = ir.params["rel"]
                columns[text] = [float(sum(g >= rel for g in qrels[q].values())) for q in qids]
            else:
                columns[text] = [float(values[key][str(ir)][q]) for q in qids]
        table = {q: {text: columns[text][i] for text in columns} for i, q in enumerate(qids)}
        empty = sorted(q for q in qrels.keys() - table.keys() if qrels[q])
        self.skipped = empty if self.empty == "skip" else []
        if self.skipped:
            warnings.warn(SkippedQueries.of(len(self.skipped)), stacklevel=2)
        elif empty:
            for q in empty:  # trec_eval -c: a query without results scores 0 (NumRel still counts judgments)
                table[q] = {text: float(sum(g >= ir.params["rel"] for g in qrels[q].values()))
                            if ir.NAME == "NumRel" else 0.0 for text, m, ir, key in self._plan}
            table = dict(sorted(table.items()))
        return table if per_query else aggregate(table, self.measures)


def evaluate(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
             measures: Iterable[str | Measure] | str = DEFAULT_MEASURES, rel_threshold: int | None = None,
             judged_only: bool = False, per_query: bool = False, empty: str = "zero",
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
    empty: what a judged query with no hits (missing from the run, or without documents) does: ``"zero"``
        (the default) scores it 0 on every measure, averaging over every judged query, as trec_eval ``-c``,
        ir_measures and PyTerrier do; ``"skip"`` leaves it out of the means (trec_eval without ``-c``)
        and warns (:class:`eval.errors.SkippedQueries`) how many it left out.
    max_docs: evaluate only each query's top ``max_docs`` documents (trec_eval ``-M``).
    Returns {measure: mean} or, with ``per_query``, {qid: {measure: value}} (qids sorted as trec_eval).
    Means of the Num* counts are sums, as in trec_eval. With no query to average over, means are 0.0.
    """
    return Evaluator(qrels, measures, rel_threshold, judged_only, empty, max_docs).evaluate(run, per_query)


def aggregate(table: Mapping[str, Mapping[str, float]], measures: Mapping[str, Measure] | None = None) -> dict[str, float]:
    """Mean per measure over the queries of a per-query table (sums for the Num* counts, as trec_eval)."""
    names = list(measures) if measures else list(next(iter(table.values()), {}))
    out: dict[str, float] = {}
    for text in names:
        values = [row[text] for row in table.values()]
        is_count = _sums(measures[text] if measures else parse_measure(text))
        out[text] = float(math.fsum(values)) if is_count else (math.fsum(values) / len(values) if values else 0.0)
    return out


def _sums(m: Measure) -> bool:
    """Whether the measure's mean is a sum (NumRet, NumRel, NumQ...), as ir_measures aggregates it."""
    return isinstance(_ir(m, 1).aggregator(), ir_measures.SumAgg)


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
