"""One convention for judged queries with no hits, everywhere: they score 0 (trec_eval -c, ir_measures,
PyTerrier) in `retr eval`, `retr eval significance`, `eval.evaluate` and the report, and `--skip-empty` /
``empty="skip"`` leaves them out and says how many. The runs are NFCorpus-like: made from NFCorpus's test
qrels (judged and unjudged documents in a seeded order), with some queries' lines dropped; the oracle is
pytrec_eval at test time, with the dropped queries given 0."""
from __future__ import annotations

import json
import random

import pytest

import eval as E
from eval.report import compute_report
from tests.conftest import DATA, need, retr_in_process

MEASURES = {"nDCG@10": "ndcg_cut_10", "AP": "map", "P@10": "P_10"}


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """(qrels path, qrels, {name: (path, run)}): run A lacks every 20th query, B every 25th (other ones)."""
    qrels_path = need(DATA / "nfcorpus-preproc") / "qrels" / "test.tsv"
    qrels = E.read_qrels(qrels_path)
    pool = sorted({d for docs in qrels.values() for d in docs})
    tmp = tmp_path_factory.mktemp("empty")
    runs = {}
    for name, seed, every, at in (("A.trec", 0, 20, 3), ("B.trec", 1, 25, 7)):
        rng = random.Random(seed)
        lines, run = [], {}
        for i, q in enumerate(sorted(qrels)):
            if i % every == at:
                continue
            judged = sorted(qrels[q])
            docs = list(dict.fromkeys(rng.sample(judged, min(5, len(judged))) + rng.sample(pool, 15)))
            rng.shuffle(docs)
            run[q] = {d: float(len(docs) - r) for r, d in enumerate(docs)}
            lines += [f"{q} Q0 {d} {r + 1} {len(docs) - r} t\n" for r, d in enumerate(docs)]
        (tmp / name).write_text("".join(lines))
        runs[name] = (tmp / name, run)
    return qrels_path, qrels, runs


def oracle(qrels, run, only=None) -> dict:
    """pytrec_eval's means: over every judged query, those without hits scoring 0; or over ``only``."""
    import pytrec_eval

    per = pytrec_eval.RelevanceEvaluator(qrels, set(MEASURES.values())).evaluate(run)
    qids = sorted(q for q in qrels if qrels[q]) if only is None else sorted(only)
    return {m: sum(per.get(q, {}).get(t, 0.0) for q in qids) / len(qids) for m, t in MEASURES.items()}


def judged(qrels):
    return {q for q, docs in qrels.items() if docs}


def test_retr_eval_scores_them_0_and_skip_empty_leaves_them_out_and_counts_them(case):
    qrels_path, qrels, runs = case
    path, run = runs["A.trec"]
    dropped = len(judged(qrels) - set(run))
    assert 10 <= dropped <= 20
    for flags in ([], ["-c"]):
        r = retr_in_process("eval", "--qrels", qrels_path, path, "-m", ",".join(MEASURES), "--json", *flags)
        assert r.returncode == 0, r.stderr
        rec = json.loads(r.stdout)["runs"][0]
        assert rec["means"] == pytest.approx(oracle(qrels, run), abs=1e-12)
        assert rec["queries"] == len(judged(qrels)) and rec["skipped"] == 0
        assert f"{dropped} judged queries missing from the run score 0 (--skip-empty leaves them out)" in r.stderr
    r = retr_in_process("eval", "--qrels", qrels_path, path, "-m", ",".join(MEASURES), "--json", "--skip-empty")
    rec = json.loads(r.stdout)["runs"][0]
    assert rec["means"] == pytest.approx(oracle(qrels, run, only=set(run)), abs=1e-12)
    assert rec["skipped"] == dropped and rec["queries"] == len(run)
    assert f"{dropped} judged queries missing from the run are left out (--skip-empty)" in r.stderr
    assert "--skip-empty" in retr_in_process("eval", "--help").stdout


def test_the_python_api_agrees_and_skip_warns_with_the_count(case):
    _, qrels, runs = case
    _, run = runs["A.trec"]
    assert E.evaluate(qrels, run, list(MEASURES)) == pytest.approx(oracle(qrels, run), abs=1e-12)
    with pytest.warns(E.SkippedQueries) as w:
        skipped = E.evaluate(qrels, run, list(MEASURES), empty="skip")
    assert skipped == pytest.approx(oracle(qrels, run, only=set(run)), abs=1e-12)
    assert w[0].message.count == len(judged(qrels) - set(run))


def test_significance_agrees_and_skip_empty_leaves_out_what_any_run_lacks(case):
    qrels_path, qrels, runs = case
    (a, run_a), (b, run_b) = runs["A.trec"], runs["B.trec"]
    r = retr_in_process("eval", "significance", "--qrels", qrels_path, "--baseline", a, b, "-m", "nDCG@10,AP",
                        "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for m in ("nDCG@10", "AP"):
        means = [row["mean"] for row in out[m]]
        assert means == pytest.approx([oracle(qrels, run_a)[m], oracle(qrels, run_b)[m]], abs=1e-12)
    shared = set(run_a) & set(run_b)
    r = retr_in_process("eval", "significance", "--qrels", qrels_path, "--baseline", a, b, "-m", "nDCG@10",
                        "--json", "--skip-empty")
    means = [row["mean"] for row in json.loads(r.stdout)["nDCG@10"]]
    assert means == pytest.approx([oracle(qrels, run_a, shared)["nDCG@10"], oracle(qrels, run_b, shared)["nDCG@10"]],
                                  abs=1e-12)
    left = len(judged(qrels) - shared)
    assert f"the tests leave out {left} judged queries that some run has no hits for (--skip-empty)" in r.stderr


def test_the_report_agrees_with_retr_eval_and_significance_in_both_conventions(case, tmp_path):
    qrels_path, qrels, runs = case
    (a, run_a), (b, run_b) = runs["A.trec"], runs["B.trec"]
    both = {"A.trec": run_a, "B.trec": run_b}
    opts = dict(measures=["nDCG@10", "AP"], n_resamples=200)
    data = compute_report(qrels, both, **opts)
    for n, run in both.items():
        assert data["means"][n] == pytest.approx({m: oracle(qrels, run)[m] for m in ("nDCG@10", "AP")}, abs=1e-12)
    assert [row["mean"] for row in data["comparisons"]["nDCG@10"]] == pytest.approx(
        [data["means"]["A.trec"]["nDCG@10"], data["means"]["B.trec"]["nDCG@10"]], abs=1e-12)
    assert data["skipped"] == {"A.trec": 0, "B.trec": 0} and data["queries"] == len(judged(qrels))
    data = compute_report(qrels, both, empty="skip", **opts)
    shared = set(run_a) & set(run_b)
    for n, run in both.items():
        assert data["means"][n]["AP"] == pytest.approx(oracle(qrels, run, only=set(run))["AP"], abs=1e-12)
        assert data["skipped"][n] == len(judged(qrels) - set(run))
    assert [row["mean"] for row in data["comparisons"]["AP"]] == pytest.approx(
        [oracle(qrels, run_a, shared)["AP"], oracle(qrels, run_b, shared)["AP"]], abs=1e-12)
    out = tmp_path / "r.html"
    r = retr_in_process("eval", "report", "--qrels", qrels_path, a, b, "-o", out, "-m", "nDCG@10", "--resamples", "200",
                        "--skip-empty")
    assert r.returncode == 0, r.stderr
    assert "judged queries with no hits left out (--skip-empty)" in out.read_text()
