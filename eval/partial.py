"""Partial versus full annotation (METHODS.md section 5): simulate annotating only some of the relevant
documents, re-evaluate every system, and measure how far the system ranking and the pairwise
significance conclusions move away from those under the full judgments."""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats
from tqdm import tqdm

from .errors import EvalError
from .measures import Evaluator, Measure, parse_measure
from .significance import pairwise_conclusions


@dataclass(frozen=True)
class Budget:
    """How many relevant documents per query stay judged: ``count`` of them, or a ``fraction`` (rounded
    up, so at least one). ``count`` 1 mimics MS MARCO's single known relevant passage."""
    mode: str
    value: float

    def __post_init__(self):
        if self.mode not in ("count", "fraction"):
            raise EvalError(f"budget mode must be 'count' or 'fraction', got {self.mode!r}")
        if self.mode == "count" and (self.value < 1 or not float(self.value).is_integer()):
            raise EvalError(f"a count budget must be a whole number >= 1, got {self.value}")
        if self.mode == "fraction" and not 0 < self.value <= 1:
            raise EvalError(f"a fraction budget must be in (0, 1], got {self.value}")

    @property
    def label(self) -> str:
        return f"keep {int(self.value)}" if self.mode == "count" else f"keep {100 * self.value:g}%"

    def keep(self, n: int) -> int:
        return min(n, int(self.value)) if self.mode == "count" else min(n, math.ceil(self.value * n - 1e-9))


DEFAULT_BUDGETS = tuple([Budget("count", k) for k in (1, 2, 3, 5, 10, 20)] +
                        [Budget("fraction", f) for f in (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)])


def parse_budget(text: str) -> Budget:
    """``3`` -> keep 3 relevant per query; ``0.25`` or ``25%`` -> keep a quarter of them."""
    s = text.strip()
    if re.fullmatch(r"\d+", s):
        return Budget("count", int(s))
    try:
        value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise EvalError(f"budget {text!r}: give a count (3) or a fraction (0.25 or 25%)") from None
    return Budget("fraction", value)


def condensed(measure: str | Measure) -> str:
    """Name of the condensed-list (judged-only) variant: nDCG@10 -> nDCG'@10."""
    m = parse_measure(measure)
    params = [f"rel={m.rel}"] if m.rel is not None else []
    return m.name + "'" + (f"({','.join(params)})" if params else "") + (f"@{m.cutoff}" if m.cutoff else "")


def subsample_qrels(qrels: Mapping[str, Mapping[str, int]], budget: Budget, seed: int, rel_threshold: int = 1,
                    keep_nonrel: bool = True) -> dict[str, dict[str, int]]:
    """Keep ``budget`` of each query's relevant documents (grade >= rel_threshold), chosen at random;
    the others become unjudged. Judged non-relevant documents stay judged unless ``keep_nonrel`` is False
    (then only the kept relevant documents are judged, as in MS MARCO)."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, int]] = {}
    for q in sorted(qrels):
        docs = qrels[q]
        relevant = sorted(d for d, g in docs.items() if g >= rel_threshold)
        kept = {relevant[i] for i in rng.choice(len(relevant), budget.keep(len(relevant)), replace=False)} \
            if relevant else set()
        judged = {d: g for d, g in docs.items() if d in kept or (keep_nonrel and g < rel_threshold)}
        if judged:
            out[q] = judged
    return out


def _compare(full_means: np.ndarray, full_conc: np.ndarray, means: np.ndarray, conc: np.ndarray) -> tuple:
    if np.ptp(full_means) == 0 or np.ptp(means) == 0:
        tau = 1.0 if np.ptp(full_means) == np.ptp(means) == 0 else 0.0
    else:
        tau = float(stats.kendalltau(full_means, means).statistic)
    i, j = np.triu_indices(len(means), 1)
    swapped = int(np.sum((full_means[i] - full_means[j]) * (means[i] - means[j]) < 0))
    flipped = float(np.mean(full_conc != conc)) if len(conc) else 0.0
    return tau, swapped, flipped


def analyse_partial(qrels: Mapping[str, Mapping[str, int]], runs: Mapping[str, Mapping[str, Mapping[str, float]]],
                    measures: Sequence[str] = ("nDCG@10", "AP@100"), budgets: Iterable[Budget] = DEFAULT_BUDGETS,
                    seeds: int = 10, rel_threshold: int | None = None, keep_nonrel: bool = True,
                    alpha: float = 0.05, correction: str | None = None, quiet: bool = True) -> dict:
    """Run the partial-annotation study.

    For every budget and seed the qrels are subsampled (``subsample_qrels``) and every system is scored
    with each measure and its condensed variant (nDCG'@10 ...). Each scoring is compared with the
    reference, the *standard* measure under the full qrels: Kendall's tau between the system rankings,
    the number of swapped system pairs, and the share of system pairs whose paired t-test conclusion
    (better / worse / no significant difference at ``alpha``, optionally Holm-corrected) changes.
    Only queries with at least one relevant document take part; a query a run misses scores 0.
    Returns a JSON-ready dict (systems, queries, full-qrels means, and per budget the mean, std and
    extremes over seeds).
    """
    if len(runs) < 2:
        raise EvalError("the partial-annotation analysis needs at least 2 runs")
    if seeds < 1:
        raise EvalError("seeds must be >= 1")
    threshold = 1 if rel_threshold is None else rel_threshold
    qrels = {q: dict(d) for q, d in qrels.items() if any(g >= threshold for g in d.values())}
    if not qrels:
        raise EvalError(f"no query has a document with grade >= {threshold}")
    budgets = list(budgets)
    names = list(runs)
    variants = {m: [m, condensed(m)] for m in measures}
    all_measures = [v for vs in variants.values() for v in vs]

    def score(q: Mapping[str, Mapping[str, int]]) -> dict[str, np.ndarray]:
        ev = Evaluator(q, all_measures, rel_threshold=threshold)  # a query with no hits scores 0
        tables = [ev.evaluate(runs[n], per_query=True) for n in names]
        qids = sorted(qrels)
        return {m: np.array([[t.get(qid, {}).get(m, 0.0) for qid in qids] for t in tables]) for m in all_measures}

    full = score(qrels)
    reference = {m: (full[m].mean(axis=1), pairwise_conclusions(full[m], alpha, correction)) for m in measures}
    n_rel = np.array([sum(g >= threshold for g in d.values()) for d in qrels.values()])
    out = {"systems": names, "queries": len(qrels), "relevant_per_query": float(n_rel.mean()),
           "rel_threshold": threshold, "keep_nonrel": keep_nonrel, "seeds": seeds, "alpha": alpha,
           "correction": correction or "none", "measures": measures,
           "full": {v: dict(zip(names, full[v].mean(axis=1).tolist())) for v in all_measures},
           "reference": {}, "budgets": []}
    for m, vs in variants.items():  # the full judgments themselves, each variant against the reference
        for v in vs:
            tau, swapped, flipped = _compare(*reference[m], full[v].mean(axis=1),
                                             pairwise_conclusions(full[v], alpha, correction))
            out["reference"][v] = {"tau": tau, "swapped": swapped, "flipped": flipped}
    bar = tqdm(total=len(budgets) * seeds, desc="partial annotation", disable=quiet, unit="sample")
    for budget in budgets:
        rows = {v: {"tau": [], "swapped": [], "flipped": [], "means": []} for v in all_measures}
        for seed in range(seeds):
            sub = subsample_qrels(qrels, budget, seed, threshold, keep_nonrel)
            scores = score(sub)
            for m, vs in variants.items():
                ref_means, ref_conc = reference[m]
                for v in vs:
                    means = scores[v].mean(axis=1)
                    tau, swapped, flipped = _compare(ref_means, ref_conc, means,
                                                     pairwise_conclusions(scores[v], alpha, correction))
                    for key, value in (("tau", tau), ("swapped", swapped), ("flipped", flipped), ("means", means)):
                        rows[v][key].append(value)
            bar.update()
        kept = float(np.mean([budget.keep(n) for n in n_rel]))
        entry = {"mode": budget.mode, "value": budget.value, "label": budget.label, "kept_per_query": kept,
                 "kept_share": float(np.mean([budget.keep(n) / n for n in n_rel])), "results": {}}
        for v, r in rows.items():
            entry["results"][v] = {
                "tau_mean": float(np.mean(r["tau"])), "tau_std": float(np.std(r["tau"])),
                "tau_min": float(np.min(r["tau"])), "swapped_mean": float(np.mean(r["swapped"])),
                "swapped_max": int(np.max(r["swapped"])), "flipped_mean": float(np.mean(r["flipped"])),
                "flipped_max": float(np.max(r["flipped"])),
                "means": dict(zip(names, np.mean(r["means"], axis=0).tolist()))}
        out["budgets"].append(entry)
    bar.close()
    return out


def partial_table(result: Mapping) -> tuple[list[str], list[list[str]], str]:
    """Head, cells and note of `retr eval partial`'s table (one row per budget; Kendall's tau / swapped
    pairs / flipped share per measure) for an ``analyse_partial`` result; the HTML report shows the same."""
    variants = list(result["budgets"][0]["results"])
    head = ["budget", "kept/q"] + [f"{v} {s}" for v in variants for s in ("tau", "swap", "flip")]
    ref = result.get("reference")  # absent from results saved before the reference row was added
    rows = [["full", f"{result['relevant_per_query']:.1f}"] +
            [x for v in variants for x in (f"{ref[v]['tau']:.3f}", f"{ref[v]['swapped']:.1f}",
                                           f"{ref[v]['flipped']:.2f}")]] if ref else []
    rows += [[b["label"], f"{b['kept_per_query']:.1f}"] +
            [x for v in variants for x in (f"{b['results'][v]['tau_mean']:.3f}", f"{b['results'][v]['swapped_mean']:.1f}",
                                           f"{b['results'][v]['flipped_mean']:.2f}")] for b in result["budgets"]]
    note = (f"{len(result['systems'])} systems, {result['queries']} queries, {result['relevant_per_query']:.1f} "
            f"relevant/query, {result['seeds']} seeds; tau/swap/flip vs the standard measure on the full qrels"
            + ("; the first row is the full qrels themselves" if ref else ""))
    return head, rows, note


def full_table(result: Mapping) -> tuple[list[str], list[list[str]]]:
    """Head and cells of the systems' scores under the full judgments (the reference of ``partial_table``):
    one row per system, ranked by the first standard measure, with its rank."""
    variants = list(result["full"])
    first = result["measures"][0] if result.get("measures") else variants[0]
    order = sorted(result["systems"], key=lambda n: -result["full"][first][n])
    head = ["system", "rank"] + variants
    return head, [[n, str(i)] + [f"{result['full'][v][n]:.4f}" for v in variants] for i, n in enumerate(order, 1)]
