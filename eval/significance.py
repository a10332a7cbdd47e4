"""Paired significance tests over per-query scores: t-test, randomization test, Holm correction,
bootstrap confidence intervals and TOST equivalence. The tests and intervals come from scipy.stats, Holm's
correction and TOST from statsmodels (``multipletests``, ``ttost_paired``); what is written here are the
cases those libraries leave undefined (no variance, no comparison at all)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_paired

from .errors import EvalError
from .tables import format_table


def _pair(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise EvalError(f"paired test needs two score vectors of equal length, got {x.shape} and {y.shape}")
    if len(x) < 2:
        raise EvalError("paired test needs at least 2 queries")
    return x, y


def _constant(d: np.ndarray) -> bool:
    """All values equal up to float rounding (a t statistic would be meaningless)."""
    return bool(np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())))


def paired_ttest(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test (scipy.stats.ttest_rel); 1.0 when all differences are 0."""
    x, y = _pair(a, b)
    d = x - y
    if _constant(d):  # no variance: identical (p = 1) or a constant non-zero shift (p = 0)
        return 1.0 if np.all(d == 0) else 0.0
    p = stats.ttest_rel(x, y).pvalue
    return 1.0 if math.isnan(p) else float(p)


def randomization_test(a: Sequence[float], b: Sequence[float], n_resamples: int = 10_000, seed: int = 0) -> float:
    """Two-sided p-value of the paired randomization (sign-flip permutation) test on the mean difference
    (scipy.stats.permutation_test; exact when 2**n <= n_resamples)."""
    x, y = _pair(a, b)
    if np.all(x == y):
        return 1.0
    res = stats.permutation_test((x, y), lambda u, v, axis: np.mean(u - v, axis=axis), vectorized=True,
                                 permutation_type="samples", n_resamples=n_resamples,
                                 alternative="two-sided", rng=np.random.default_rng(seed))
    return float(res.pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in input order (statsmodels' ``multipletests(method="holm")``)."""
    p = np.asarray(pvalues, dtype=float)
    if not len(p):  # multipletests has nothing to adjust and fails on an empty list
        return []
    return multipletests(p, method="holm")[1].tolist()


def bootstrap_ci(a: Sequence[float], b: Sequence[float] | None = None, confidence: float = 0.95,
                 n_resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Bootstrap (BCa, scipy.stats.bootstrap) confidence interval of the mean of ``a`` or, with ``b``,
    of the mean paired difference a - b."""
    x = np.asarray(a, dtype=float) if b is None else np.subtract(*_pair(a, b))
    if len(x) < 2:
        raise EvalError("bootstrap needs at least 2 queries")
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    res = stats.bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=n_resamples, method="BCa",
                          rng=np.random.default_rng(seed))
    low, high = res.confidence_interval
    if math.isnan(low) or math.isnan(high):  # BCa can fail on very skewed data; fall back to percentiles
        res = stats.bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                              method="percentile", rng=np.random.default_rng(seed))
        low, high = res.confidence_interval
    return float(low), float(high)


def tost(a: Sequence[float], b: Sequence[float], margin: float) -> float:
    """p-value of the paired TOST equivalence test (statsmodels' ``ttost_paired`` with bounds -margin,
    +margin): H0 is |mean(a - b)| >= margin (an absolute margin in the measure's units, e.g. 0.01 nDCG@10).
    p < alpha means a and b are equivalent within the margin."""
    if margin <= 0:
        raise EvalError(f"equivalence margin must be > 0, got {margin}")
    x, y = _pair(a, b)
    d = x - y
    if _constant(d):  # no variance: ttost_paired's t statistics are undefined (nan), decided by the mean alone
        return 0.0 if abs(d.mean()) < margin else 1.0
    return float(ttost_paired(x, y, -margin, margin)[0])


def shared_queries(tables: Mapping[str, Mapping[str, Mapping[str, float]]]) -> dict[str, dict]:
    """Per-query tables ({system: {qid: row}}) cut to the queries every system scores: what the paired tests
    take when ``empty="skip"`` left each run's queries with no hits out of its table."""
    keep = set.intersection(*(set(t) for t in tables.values())) if tables else set()
    return {name: {q: row for q, row in t.items() if q in keep} for name, t in tables.items()}


def compare(scores: Mapping[str, Mapping[str, float]], baseline: str, test: str = "t", alpha: float = 0.05,
            margin: float | None = None, n_resamples: int = 10_000, seed: int = 0) -> list[dict]:
    """Compare every system with ``baseline`` on one measure.

    scores: {system: {qid: value}}; every system must score the same queries (evaluate with the default
    ``empty="zero"``, a query with no hits scoring 0, or cut ``empty="skip"``'s tables with
    :func:`shared_queries`). test: "t" (paired t-test) or "perm" (randomization).
    p-values are Holm-corrected across the comparisons. Returns one row per system (baseline first):
    system, mean, delta, ci_low/ci_high (bootstrap CI of the delta), p, p_holm, significant, and with a
    margin the TOST p-value and ``equivalent``.
    """
    if baseline not in scores:
        raise EvalError(f"baseline {baseline!r} is not among the systems: {', '.join(scores)}")
    if test not in ("t", "perm"):
        raise EvalError(f"unknown test {test!r} (use 't' or 'perm')")
    qids = sorted(scores[baseline])
    for name, per_q in scores.items():
        if sorted(per_q) != qids:
            raise EvalError(f"system {name!r} scores other queries than the baseline {baseline!r}; "
                            "evaluate with empty='zero' (the default) or cut the tables with shared_queries")
    base = np.array([scores[baseline][q] for q in qids])
    rows = [{"system": baseline, "mean": float(base.mean()) if len(base) else 0.0, "baseline": True}]
    others = [name for name in scores if name != baseline]
    for name in others:
        x = np.array([scores[name][q] for q in qids])
        p = paired_ttest(x, base) if test == "t" else randomization_test(x, base, n_resamples, seed)
        low, high = bootstrap_ci(x, base, 1 - alpha, n_resamples, seed)
        row = {"system": name, "mean": float(x.mean()), "delta": float((x - base).mean()),
               "ci_low": low, "ci_high": high, "p": p}
        if margin is not None:
            row["tost_p"] = tost(x, base, margin)
            row["equivalent"] = row["tost_p"] < alpha
        rows.append(row)
    for row, adjusted in zip(rows[1:], holm([r["p"] for r in rows[1:]])):
        row["p_holm"] = adjusted
        row["significant"] = adjusted < alpha
    return rows


def pairwise_conclusions(matrix: np.ndarray, alpha: float = 0.05, correction: str | None = None) -> np.ndarray:
    """For systems x queries scores, the paired t-test conclusion for every pair i < j (in
    itertools.combinations order): +1 (i significantly better), -1 (j better) or 0 (no difference)."""
    m = np.asarray(matrix, dtype=float)
    pairs = [(i, j) for i in range(len(m)) for j in range(i + 1, len(m))]
    pvals = [paired_ttest(m[i], m[j]) for i, j in pairs]
    if correction == "holm":
        pvals = holm(pvals)
    elif correction is not None:
        raise EvalError(f"unknown correction {correction!r} (use 'holm' or none)")
    sign = [np.sign(m[i].mean() - m[j].mean()) for i, j in pairs]
    return np.array([int(s) if p < alpha else 0 for s, p in zip(sign, pvals)], dtype=int)


def comparison_table(rows: list[dict], measure: str, alpha: float = 0.05) -> tuple[list[str], list[list[str]]]:
    """Head and cells of ``compare`` rows as `retr eval significance` prints them (also the HTML report's)."""
    head = ["system", measure, "delta", f"{100 * (1 - alpha):g}% CI", "p", "p(Holm)", "sig"]
    if any("tost_p" in r for r in rows):
        head += ["TOST p", "equiv"]
    body = []
    for r in rows:
        if r.get("baseline"):
            line = [r["system"] + " (baseline)", f"{r['mean']:.4f}", "", "", "", "", ""]
            line += ["", ""] if len(head) > 7 else []
        else:
            line = [r["system"], f"{r['mean']:.4f}", f"{r['delta']:+.4f}", ci_text(r), f"{r['p']:.4f}",
                    f"{r['p_holm']:.4f}", "*" if r["significant"] else ""]
            if len(head) > 7:
                line += [f"{r['tost_p']:.4f}", "yes" if r["equivalent"] else "no"]
        body.append(line)
    return head, body


def ci_text(row: dict) -> str:
    """A ``compare`` row's confidence interval of the delta, as printed: ``[-0.0123, +0.0456]``."""
    return f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]"


def format_comparison(rows: list[dict], measure: str, alpha: float = 0.05) -> str:
    """Aligned text table of ``compare`` rows; ``*`` marks a significant difference after Holm."""
    head, body = comparison_table(rows, measure, alpha)
    return format_table(head, body) + f"\n* significant at alpha={alpha} after Holm correction"
