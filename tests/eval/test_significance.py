"""Significance tests against scipy and brute-force definitions."""
import itertools

import numpy as np
import pytest
from scipy import stats

from eval.errors import EvalError
from eval.significance import (bootstrap_ci, compare, format_comparison, holm, paired_ttest, pairwise_conclusions,
                               randomization_test, tost)

rng = np.random.default_rng(7)
A = rng.random(40)
B = A + 0.08 + rng.normal(0, 0.05, 40)
C = A + rng.normal(0, 0.01, 40)


def test_ttest_matches_scipy():
    assert paired_ttest(A, B) == pytest.approx(stats.ttest_rel(A, B).pvalue)
    assert paired_ttest(A, A) == 1.0
    assert paired_ttest(A, A + 0.1) == 0.0


def test_randomization_is_exact_for_small_n():
    x, y = A[:8], C[:8]
    d = x - y
    observed = abs(d.mean())
    flips = [abs((d * np.array(s)).mean()) for s in itertools.product([1, -1], repeat=8)]
    brute = np.mean([f >= observed - 1e-12 for f in flips])
    assert randomization_test(x, y, n_resamples=10_000) == pytest.approx(brute)


def test_holm_definition():
    p = [0.01, 0.04, 0.03, 0.005]
    order = np.argsort(p)
    manual = np.empty(4)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (4 - rank) * p[i]))
        manual[i] = running
    assert holm(p) == pytest.approx(manual.tolist())
    assert holm([0.5, 0.9]) == [1.0, 1.0]


def test_bootstrap_ci_covers_the_difference():
    low, high = bootstrap_ci(B, A)
    assert low < (B - A).mean() < high
    assert 0 < low  # B is clearly better
    assert bootstrap_ci([0.3, 0.3, 0.3]) == (0.3, 0.3)


def test_tost():
    assert tost(C, A, margin=0.02) < 0.05  # same system up to noise
    assert tost(B, A, margin=0.02) > 0.05  # clearly different
    assert tost(A, A, margin=0.01) == 0.0
    with pytest.raises(EvalError):
        tost(A, B, margin=0)


def test_compare_table_marks_significance():
    scores = {n: dict(enumerate(v)) for n, v in {"base": A, "better": B, "same": C}.items()}
    rows = compare(scores, "base", margin=0.02)
    by = {r["system"]: r for r in rows}
    assert by["better"]["significant"] and not by["same"]["significant"]
    assert by["same"]["equivalent"] and not by["better"]["equivalent"]
    assert by["better"]["p_holm"] == pytest.approx(min(1.0, 2 * by["better"]["p"])) or \
        by["better"]["p_holm"] >= by["better"]["p"]
    text = format_comparison(rows, "nDCG@10")
    better_line = next(line for line in text.splitlines() if line.startswith("better"))
    assert "*" in better_line and "*" not in next(line for line in text.splitlines() if line.startswith("same"))
    perm = compare(scores, "base", test="perm", n_resamples=2000)
    assert {r["system"]: r.get("significant") for r in perm} == {r["system"]: r.get("significant") for r in rows}
    with pytest.raises(EvalError, match="baseline"):
        compare(scores, "nope")
    with pytest.raises(EvalError, match="other queries"):
        compare({"base": {1: 0.1, 2: 0.2}, "x": {1: 0.3}}, "base")


def test_pairwise_conclusions():
    conc = pairwise_conclusions(np.array([A, B, C]))
    assert conc.tolist() == [-1, 0, 1]
