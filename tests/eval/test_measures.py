"""Measures against the oracles: pytrec_eval (computed here), ir_measures, and trec_eval's own outputs."""
import math
import re

import ir_measures
import numpy as np
import pytest
import pytrec_eval

import eval as E
from eval.errors import EvalError
from eval.io import ranked

# ours -> trec_eval name of the same value
TREC_NAMES = {"AP": "map", "nDCG": "ndcg", "nDCG@10": "ndcg_cut_10", "nDCG@5": "ndcg_cut_5", "RR": "recip_rank",
              "P@10": "P_10", "P@5": "P_5", "R@100": "recall_100", "R@1000": "recall_1000", "Bpref": "bpref",
              "infAP": "infAP", "Rprec": "Rprec", "AP@100": "map_cut_100", "NumRet": "num_ret",
              "NumRel": "num_rel", "NumRelRet": "num_rel_ret", "Success@10": "success_10"}


def trec_output(path):
    """trec_eval -q output as {(measure, qid): value}."""
    out = {}
    for line in path.read_text().splitlines():
        measure, qid, value = line.split()
        if not value.startswith("'") and measure != "runid":
            out[measure, qid] = float(value)
    return out


def pytrec(qrels, run, names, level=1, judged_only=False):
    reqs = {re.sub(r"_(\d+)$", r".\1", n) for n in names}
    res = pytrec_eval.RelevanceEvaluator(qrels, reqs, relevance_level=level, judged_docs_only_flag=judged_only).evaluate(run)
    return {q: {n: v[n] for n in names} for q, v in res.items()}


def random_case(seed, n_q=25, n_docs=60, tie_rate=0.3):
    rng = np.random.default_rng(seed)
    qrels, run = {}, {}
    for q in range(n_q):
        docs = [f"d{rng.integers(0, 400)}" for _ in range(n_docs)]
        docs = list(dict.fromkeys(docs))
        scores = np.round(rng.normal(size=len(docs)), 1 if rng.random() < tie_rate else 6)  # ties
        if q % 7 != 3:  # some queries unretrieved
            run[f"q{q}"] = {d: float(s) for d, s in zip(docs, scores)}
        judged = rng.choice(400, 40, replace=False)
        qrels[f"q{q}"] = {f"d{d}": int(rng.choice([0, 0, 0, 1, 2, 3])) for d in judged}
    run["only_in_run"] = {"d1": 1.0}
    return qrels, run


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("judged_only", [False, True])
def test_per_query_equals_pytrec_eval(seed, level, judged_only):
    qrels, run = random_case(seed)
    # trec_eval's per-query values are those of the queries the run holds: the others are left out here
    ours = E.evaluate(qrels, run, list(TREC_NAMES), rel_threshold=level, judged_only=judged_only, per_query=True,
                      empty="skip")
    ref = pytrec(qrels, run, list(TREC_NAMES.values()), level, judged_only)
    assert set(ours) == set(ref) and "only_in_run" not in ours
    for q in ref:
        for m, t in TREC_NAMES.items():
            assert ours[q][m] == pytest.approx(ref[q][t], abs=1e-12), (q, m)
    skipped = E.evaluate(qrels, run, list(TREC_NAMES), rel_threshold=level, judged_only=judged_only, empty="skip")
    means = E.evaluate(qrels, run, list(TREC_NAMES), rel_threshold=level, judged_only=judged_only)
    judged = [q for q in qrels if qrels[q]]
    assert set(judged) > set(ref)  # the case has judged queries the run lacks: they score 0 by default
    for m, t in TREC_NAMES.items():
        agg = sum if t.startswith("num") else np.mean
        assert skipped[m] == pytest.approx(agg([ref[q][t] for q in ref]), abs=1e-12)
        if not t.startswith("num"):
            assert means[m] == pytest.approx(sum(ref[q][t] for q in ref) / len(judged), abs=1e-12)


def test_rel_param_and_prime_are_per_measure():
    qrels, run = random_case(5)
    ours = E.evaluate(qrels, run, ["AP(rel=2)", "AP", "nDCG'@10", "nDCG(judged_only=True)@10", "R(rel=3)@100"],
                      per_query=True)
    ref2 = pytrec(qrels, run, ["map", "recall_100"], 2)
    ref1 = pytrec(qrels, run, ["map"], 1)
    refj = pytrec(qrels, run, ["ndcg_cut_10"], 1, True)
    ref3 = pytrec(qrels, run, ["recall_100"], 3)
    for q in ref1:
        assert ours[q]["AP(rel=2)"] == pytest.approx(ref2[q]["map"])
        assert ours[q]["AP"] == pytest.approx(ref1[q]["map"])
        assert ours[q]["nDCG'@10"] == ours[q]["nDCG(judged_only=True)@10"] == pytest.approx(refj[q]["ndcg_cut_10"])
        assert ours[q]["R(rel=3)@100"] == pytest.approx(ref3[q]["recall_100"])


def test_ndcg_keeps_graded_gains_under_threshold():
    qrels, run = random_case(6)
    a = E.evaluate(qrels, run, ["nDCG@10"], rel_threshold=1)
    b = E.evaluate(qrels, run, ["nDCG@10"], rel_threshold=3)
    assert a == b


@pytest.mark.parametrize("seed", [0, 1])
def test_rr_at_k_and_judged_at_k_against_hand_computation(seed):
    qrels, run = random_case(seed, tie_rate=0.8)
    ours = E.evaluate(qrels, run, ["RR@5", "RR(rel=2)@3", "Judged@10", "Judged@5", "Judged", "Judged'@10"],
                      per_query=True, empty="skip")
    for q, row in ours.items():
        order = [d for d, _ in ranked(run[q])]  # trec_eval order: score desc, docid desc
        first = next((i + 1 for i, d in enumerate(order) if qrels[q].get(d, 0) >= 1), None)
        first2 = next((i + 1 for i, d in enumerate(order) if qrels[q].get(d, 0) >= 2), None)
        assert row["RR@5"] == (1 / first if first and first <= 5 else 0.0)
        assert row["RR(rel=2)@3"] == (1 / first2 if first2 and first2 <= 3 else 0.0)
        for k in (5, 10):
            top = order[:k]
            assert row[f"Judged@{k}"] == pytest.approx(sum(d in qrels[q] for d in top) / len(top))
        assert row["Judged"] == pytest.approx(sum(d in qrels[q] for d in order) / len(order))
        assert row["Judged'@10"] == (1.0 if any(d in qrels[q] for d in order) else 0.0)


def test_rr_at_k_and_judged_equal_ir_measures_without_ties():
    qrels, run = random_case(3, tie_rate=0.0)
    ours = E.evaluate(qrels, run, ["RR@10", "Judged@10", "Judged@20", "nDCG@10", "P@5"], per_query=True)
    ref = {}
    for m in ir_measures.iter_calc([ir_measures.RR @ 10, ir_measures.Judged @ 10, ir_measures.Judged @ 20,
                                    ir_measures.nDCG @ 10, ir_measures.P @ 5], qrels, run):
        ref.setdefault(m.query_id, {})[str(m.measure)] = m.value
    for q, row in ours.items():
        for name, value in row.items():
            assert value == pytest.approx(ref[q][name], abs=1e-9), (q, name)


def test_trec_eval_ordering_of_ties():
    qrels = {"q": {"a": 1, "c": 1}}
    run = {"q": {"a": 1.0, "b": 1.0, "c": 1.0}}  # trec_eval ranks c, b, a
    row = E.evaluate(qrels, run, ["RR", "P@1", "Judged@2", "RR@1"], per_query=True)["q"]
    assert row == {"RR": 1.0, "P@1": 1.0, "Judged@2": 0.5, "RR@1": 1.0}
    ref = pytrec(qrels, run, ["recip_rank", "P_1"])
    assert ref["q"] == {"recip_rank": row["RR"], "P_1": row["P@1"]}


def test_queries_with_no_hits_score_0_by_default_and_skip_leaves_them_out():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}
    run = {"q1": {"a": 2.0, "x": 1.0}, "q9": {"z": 1.0}}
    assert E.evaluate(qrels, run, ["AP", "NumRel"]) == {"AP": pytest.approx(1 / 3), "NumRel": 2.0}  # trec_eval -c
    with pytest.warns(E.SkippedQueries, match="2 judged queries with no hits left out") as w:
        assert E.evaluate(qrels, run, ["AP", "NumRel"], empty="skip") == {"AP": 1.0, "NumRel": 1.0}
    assert w[0].message.count == 2
    assert E.evaluate(qrels, {}, ["AP", "nDCG@10", "Judged@10"]) == {"AP": 0.0, "nDCG@10": 0.0, "Judged@10": 0.0}
    assert E.evaluate(qrels, {"q1": {}}, ["AP"], per_query=True) == {"q1": {"AP": 0.0}, "q2": {"AP": 0.0},
                                                                       "q3": {"AP": 0.0}}
    with pytest.warns(E.SkippedQueries):
        assert E.evaluate(qrels, {"q1": {}}, ["AP"], per_query=True, empty="skip") == {}
    ev = E.Evaluator(qrels, ["AP"], empty="skip")
    with pytest.warns(E.SkippedQueries):
        ev.evaluate(run)
    assert ev.skipped == ["q2", "q3"]
    with pytest.raises(E.EvalError, match="empty must be one of 'zero', 'skip'"):
        E.Evaluator(qrels, ["AP"], empty="drop")


@pytest.mark.parametrize("name", ["foo", "nDCG@", "Success", "Bpref@10", "AP(gain=2)", "nDCG(rel=2)@10", "P@0"])
def test_bad_measure_names(name):
    with pytest.raises(EvalError, match=re.escape(repr(name))):
        E.evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, [name])


def test_trec_eval_names_accepted():
    qrels, run = random_case(4)
    a = E.evaluate(qrels, run, ["ndcg_cut.10", "map", "P_5", "recip_rank", "recall.100"])
    b = E.evaluate(qrels, run, ["nDCG@10", "AP", "P@5", "RR", "R@100"])
    assert list(a.values()) == list(b.values())


def test_trec_eval_fixture_all_measures_per_query(fixtures):
    """out.test.aq: trec_eval -m all_trec -q qrels.test results.test."""
    expected = trec_output(fixtures / "out.test.aq")
    qrels, run = E.read_qrels(fixtures / "qrels.test"), E.read_run(fixtures / "results.test")
    ours = E.evaluate(qrels, run, list(TREC_NAMES), per_query=True)
    ours["all"] = E.evaluate(qrels, run, list(TREC_NAMES))
    checked = 0
    for q, row in ours.items():
        for m, t in TREC_NAMES.items():
            assert round(row[m], 4) == pytest.approx(expected[t, q], abs=1e-9), (q, m)
            checked += 1
    assert checked == 4 * len(TREC_NAMES)


def test_trec_eval_fixture_default_output(fixtures):
    expected = trec_output(fixtures / "out.test")
    means = E.evaluate(E.read_qrels(fixtures / "qrels.test"), E.read_run(fixtures / "results.test"),
                       ["AP", "Rprec", "Bpref", "RR", "P@10", "NumRelRet"])
    for m, t in [("AP", "map"), ("Rprec", "Rprec"), ("Bpref", "bpref"), ("RR", "recip_rank"), ("P@10", "P_10"),
                 ("NumRelRet", "num_rel_ret")]:
        assert round(means[m], 4) == expected[t, "all"]


def test_trec_eval_fixture_rel_level(fixtures):
    """out.test.aql: trec_eval -l2 on graded qrels."""
    expected = trec_output(fixtures / "out.test.aql")
    ours = E.evaluate(E.read_qrels(fixtures / "qrels.rel_level"), E.read_run(fixtures / "results.test"),
                      list(TREC_NAMES), rel_threshold=2, per_query=True)
    for q, row in ours.items():
        for m, t in TREC_NAMES.items():
            assert round(row[m], 4) == pytest.approx(expected[t, q], abs=1e-9), (q, m)


@pytest.mark.parametrize("out, depth", [("out.test.aqc", None), ("out.test.aqcM", 100)])
def test_trec_eval_fixture_complete_and_depth(fixtures, out, depth):
    """trec_eval -c [-M100] on results.trunc, which lacks query 302 and has trailing junk on its lines."""
    expected = trec_output(fixtures / out)
    qrels, run = E.read_qrels(fixtures / "qrels.test"), E.read_run(fixtures / "results.trunc", strict=False)
    ours = E.evaluate(qrels, run, list(TREC_NAMES), max_docs=depth, per_query=True)
    assert set(ours) == {"301", "302", "303"}
    ours["all"] = E.aggregate(ours)
    for q, row in ours.items():
        for m, t in TREC_NAMES.items():
            assert round(row[m], 4) == pytest.approx(expected[t, q], abs=1e-9), (q, m)


def test_trec_eval_fixture_parameterised_measures(fixtures):
    expected = trec_output(fixtures / "out.test.meas_params")
    ours = E.evaluate(E.read_qrels(fixtures / "qrels.test"), E.read_run(fixtures / "results.test"),
                      ["P@3", "P@7", "R@20", "R@2000", "nDCG@20", "nDCG@23", "Success@2", "Success@20"], per_query=True)
    for q, row in ours.items():
        for m, t in [("P@3", "P_3"), ("P@7", "P_7"), ("R@20", "recall_20"), ("R@2000", "recall_2000"),
                     ("nDCG@20", "ndcg_cut_20"), ("nDCG@23", "ndcg_cut_23"), ("Success@2", "success_2"),
                     ("Success@20", "success_20")]:
            assert round(row[m], 4) == expected[t, q], (q, m)


def test_comment_fixture_docids_with_hash(fixtures):
    expected = trec_output(fixtures / "out.comment.test")
    means = E.evaluate(E.read_qrels(fixtures / "qrels.comment.test"), E.read_run(fixtures / "results.comment.test"),
                       ["AP", "NumRet", "P@10", "nDCG"] if ("ndcg", "all") in expected else ["AP", "NumRet", "P@10"])
    assert round(means["AP"], 4) == expected["map", "all"]
    assert means["NumRet"] == expected["num_ret", "all"]
    assert round(means["P@10"], 4) == expected["P_10", "all"]


def test_unjudged_report():
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"c": 1}}
    run = {"q1": {"a": 3.0, "x": 2.0, "b": 1.0}, "q2": {"c": 1.0}}
    rep = E.unjudged_report(qrels, run, k=2)
    assert rep == {"queries": 2, "Judged@2": pytest.approx(0.75), "unjudged@2": 1, "retrieved@2": 3,
                   "queries_with_unjudged": 1}
    assert math.isclose(rep["Judged@2"], E.evaluate(qrels, run, ["Judged@2"])["Judged@2"])


# --- issue #29: a batch_search result, a run DataFrame and ir_measures objects, as they come

class _Hit:  # what retr's Hit offers the evaluator (eval imports no retrieval: duck-typed)
    def __init__(self, docid, score):
        self.docid, self.score = docid, score


def test_evaluate_takes_hit_lists_pairs_and_a_dataframe():
    import pandas as pd
    import pytrec_eval

    qrels = {"q1": {"a": 2, "b": 1, "c": 0}, "q2": {"d": 1}}
    plain = {"q1": {"a": 3.0, "z": 2.0, "b": 1.0}, "q2": {"d": 5.0, "y": 4.0}}
    hits = {q: [_Hit(d, s) for d, s in docs.items()] for q, docs in plain.items()}
    pairs = {q: list(docs.items()) for q, docs in plain.items()}
    frame = pd.DataFrame([(q, d, s) for q, docs in plain.items() for d, s in docs.items()],
                         columns=["query_id", "doc_id", "score"])
    want = E.evaluate(qrels, plain, ["nDCG@10", "AP", "Judged@2"])
    with pytest.raises(TypeError, match="Unable to extract"):   # what pytrec_eval says of hits as they are
        pytrec_eval.RelevanceEvaluator(qrels, {"map"}).evaluate(hits)
    for run in (hits, pairs, frame):
        assert E.evaluate(qrels, run, ["nDCG@10", "AP", "Judged@2"]) == want
    assert E.unjudged_report(qrels, hits, k=2) == E.unjudged_report(qrels, plain, k=2)
    with pytest.raises(EvalError, match="listed twice"):
        E.evaluate(qrels, {"q1": [_Hit("a", 1.0), _Hit("a", 0.5)]}, ["AP"])
    pyterrier_frame = frame.rename(columns={"query_id": "qid", "doc_id": "docno"})   # PyTerrier's names too
    assert E.evaluate(qrels, pyterrier_frame, ["nDCG@10", "AP", "Judged@2"]) == want
    with pytest.raises(EvalError, match="qid, docno, score .PyTerrier's. or query_id, doc_id, score"):
        E.evaluate(qrels, pd.DataFrame({"qid": ["q1"], "doc": ["a"], "score": [1.0]}), ["AP"])


def test_ir_measures_objects_and_comma_lists():
    import ir_measures

    qrels = {"q1": {"a": 2, "b": 1, "c": 0}, "q2": {"d": 1}}
    run = {"q1": {"a": 3.0, "z": 2.0, "b": 1.0}, "q2": {"d": 5.0, "y": 4.0}}
    ms = [ir_measures.nDCG@10, ir_measures.parse_measure("P@5"), ir_measures.AP(rel=2), ir_measures.RR@10]
    got = E.evaluate(qrels, run, ms)
    assert list(got) == ["nDCG@10", "P@5", "AP(rel=2)", "RR@10"]
    assert got == E.evaluate(qrels, run, "nDCG@10, P@5,AP(rel=2),RR@10")
    theirs = ir_measures.calc_aggregate(ms, qrels, run)
    for m in ms:
        assert got[str(m)] == pytest.approx(theirs[m])
    assert E.evaluate(qrels, run, ir_measures.nDCG@10) == {"nDCG@10": got["nDCG@10"]}
    assert E.parse_measure(ir_measures.AP(rel=2)) == E.Measure("AP", rel=2)


# --- issue #29: ir_measures' whole vocabulary, computed by its providers

IR_VOCABULARY = ["ERR@20", "IPrec@0.5", "SetF(beta=2.0)", "SetP", "SetR", "SetAP", "NumQ", "NumRet", "NumRel",
                 "NumRet(rel=2)", "Rprec", "Bpref", "infAP(rel=2)", "P@10", "P(rel=2)@5", "RR(rel=2)@10", "RR",
                 "Judged@10", "nDCG(dcg='exp-log2')@10", "Compat(p=0.8)", "Success@5", "AP(rel=2)@100", "R@100",
                 "nDCG@10"]


@pytest.mark.parametrize("system", ["BM25", "D_BERT_KD_TASB"])
def test_ir_measures_vocabulary_equals_ir_measures(msmarco, system):
    """Every measure the installed providers compute, by name and as objects, equals ir_measures' own
    calc_aggregate (over the queries both hold: ir_measures scores a query the run lacks 0)."""
    qrels = E.read_qrels(msmarco / "qrels" / "dl19.tsv")
    run = E.read_run(msmarco / "runs" / f"{system}.dl19.top100.trec")
    objects = [ir_measures.parse_measure(m) for m in IR_VOCABULARY]
    theirs = ir_measures.calc_aggregate(objects, {q: d for q, d in qrels.items() if q in run}, run)
    by_name, by_object = E.evaluate(qrels, run, IR_VOCABULARY), E.evaluate(qrels, run, objects)
    assert list(by_object) == [str(m) for m in objects]
    for name, m in zip(IR_VOCABULARY, objects):
        assert by_name[name] == by_object[str(m)] == pytest.approx(theirs[m], abs=1e-12), name
    assert by_name["NumQ"] == len(run) and 0 < by_name["NumRet(rel=2)"] < by_name["NumRet"]


def test_ir_measures_names_with_retr_conventions():
    """The run-wide threshold reaches every measure with a rel parameter; a prime condenses any measure;
    P and R without a cut-off stay trec_eval's set_P and set_recall."""
    qrels, run = random_case(8)
    ours = E.evaluate(qrels, run, ["SetP", "P", "SetR", "R", "IPrec@0.3", "SetF(beta=1.0)", "NumRelRet", "NumQ",
                                   "RR'@5", "Judged'@10"], rel_threshold=2, per_query=True, empty="skip")
    ref = pytrec(qrels, run, ["set_P", "set_recall", "iprec_at_recall_0.30", "set_F", "num_rel_ret"], level=2)
    condensed = {q: {d: s for d, s in docs.items() if d in qrels[q]} for q, docs in run.items() if q in qrels}
    rr = E.evaluate(qrels, condensed, ["RR@5"], rel_threshold=2, per_query=True)
    for q, row in ours.items():
        assert row["SetP"] == row["P"] == pytest.approx(ref[q]["set_P"]) and row["SetR"] == row["R"]
        assert row["R"] == pytest.approx(ref[q]["set_recall"]) and row["NumQ"] == 1.0
        assert row["IPrec@0.3"] == pytest.approx(ref[q]["iprec_at_recall_0.30"])
        assert row["SetF(beta=1.0)"] == pytest.approx(ref[q]["set_F"]) and row["NumRelRet"] == ref[q]["num_rel_ret"]
        assert row["RR'@5"] == rr[q]["RR@5"] and row["Judged'@10"] == (1.0 if condensed[q] else 0.0)


def test_err_follows_trec_eval_order_of_ties_and_any_query_ids():
    """gdeval.pl takes numeric query ids and orders ties its own way: neither shows."""
    qrels = {"topic-a": {"d1": 2, "d3": 1}, "topic-b": {"x": 4}}
    run = {"topic-a": {"d1": 1.0, "d2": 1.0, "d3": 1.0}, "topic-b": {"x": 0.5, "y": 0.7}}  # trec_eval: d3, d2, d1
    row = E.evaluate(qrels, run, ["ERR@2", "ERR@3"], per_query=True)
    r1, r2 = (2**1 - 1) / 16, (2**2 - 1) / 16  # gdeval's ERR: gain (2^g - 1) / 2^4, stop probability
    assert row["topic-a"]["ERR@2"] == pytest.approx(r1)
    assert row["topic-a"]["ERR@3"] == pytest.approx(r1 + (1 - r1) * r2 / 3, abs=1e-5)  # gdeval prints 5 decimals
    assert row["topic-b"]["ERR@2"] == pytest.approx((2**4 - 1) / 16 / 2)
    with pytest.raises(EvalError, match="grades up to 4; the qrels hold grade 5"):
        E.evaluate({"1": {"a": 5}}, {"1": {"a": 1.0}}, ["ERR@10"])


@pytest.mark.parametrize("name, message", [
    ("alpha_nDCG@10", "'alpha_nDCG@10' is a diversity measure: it needs subtopic qrels"),
    ("α_nDCG(alpha=0.5)@20", "diversity measure: it needs subtopic qrels"),
    ("ERR_IA@10", "diversity measure"),
    ("alpha_nDCG@30", "diversity measure: it needs subtopic qrels"),  # test_diversity.py: RBP, the subtopic qrels
    ("nDCG@ten", "unknown measure 'nDCG@ten'"),
    ("Foo@3", "unknown measure 'Foo@3'"),
    ("SetF(beta=2)", "measure 'SetF(beta=2)': invalid param beta=2"),
    ("ERR(rel=2)@10", "measure 'ERR(rel=2)@10': unknown parameter rel (ERR takes cutoff)"),
])
def test_measures_no_provider_here_computes_are_one_error(name, message):
    with pytest.raises(EvalError, match=re.escape(message)):
        E.evaluate({"1": {"a": 1}}, {"1": {"a": 1.0}}, [name])
