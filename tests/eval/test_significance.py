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


# --- issue #29: Holm and TOST through statsmodels, with the numbers of the hand-written versions they replaced

def test_holm_and_tost_are_statsmodels():
    from statsmodels.stats.multitest import multipletests
    from statsmodels.stats.weightstats import ttost_paired

    p = [0.01, 0.04, 0.03, 0.005, 0.5]
    assert holm(p) == multipletests(p, method="holm")[1].tolist()
    assert holm([]) == []
    assert tost(C, A, margin=0.02) == ttost_paired(C, A, -0.02, 0.02)[0]


def test_statsmodels_equals_the_hand_written_numbers_on_trec_dl(msmarco):
    """The recorded numbers came from the hand-written Holm and TOST (see the file's "about")."""
    import json
    from pathlib import Path

    import eval as E

    recorded = json.loads((Path(__file__).parent / "data" / "significance_hand_written.json").read_text())["cases"]
    names = ["BM25", "BM25_RM3", "D_BERT_KD_TASB", "SPLADE_P_P_ENSEMBLE_DISTIL"]
    pairs = list(itertools.combinations(range(len(names)), 2))
    for case, want in recorded.items():
        year, measure = case.split(" ", 1)
        qrels = E.read_qrels(msmarco / "qrels" / f"{year}.tsv")
        ev = E.Evaluator(qrels, [measure])
        tables = {n: ev.evaluate(E.read_run(msmarco / "runs" / f"{n}.{year}.top100.trec"), per_query=True)
                  for n in names}
        scores = {n: {q: row[measure] for q, row in t.items()} for n, t in tables.items()}
        qids = sorted(scores["BM25"])
        mat = np.array([[scores[n][q] for q in qids] for n in names])
        p = [paired_ttest(mat[i], mat[j]) for i, j in pairs]
        assert p == pytest.approx(want["p"], abs=1e-12), case
        assert holm(p) == pytest.approx(want["holm"], abs=1e-12), case
        for margin, values in want["tost"].items():
            assert [tost(mat[i], mat[j], float(margin)) for i, j in pairs] == pytest.approx(values, abs=1e-12), case
        assert pairwise_conclusions(mat, 0.05, "holm").tolist() == want["conclusions_holm"], case
        rows = compare(scores, "BM25", margin=0.05, n_resamples=1000)
        for row, old in zip(rows, want["compare"], strict=True):
            assert row["system"] == old["system"]
            for key in ("p", "p_holm", "tost_p"):
                assert (key in row) == (key in old) and row.get(key) == pytest.approx(old.get(key), abs=1e-12), case
