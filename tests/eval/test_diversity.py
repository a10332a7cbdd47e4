"""RBP (ir_measures' cwl_eval provider) and the diversity measures on subtopic qrels (its pyndeval provider):
against ir_measures' own computation on real runs, and against the definitions on hand-checked examples."""
import math
import zlib

import ir_measures
import pandas as pd
import pytest
from click.testing import CliRunner

import eval as E
from cli.eval_cmd import eval_cmd
from eval.errors import EvalError
from indexes.errors import InputError

# --- RBP


def rbp(rels, p):
    """Moffat and Zobel's RBP of a ranking's binary relevances: (1 - p) * sum_i rel_i * p^(i-1)."""
    return (1 - p) * sum(r * p**i for i, r in enumerate(rels))


def test_rbp_by_hand():
    qrels = {"q": {"a": 1, "b": 0, "c": 2, "e": 3}}
    run = {"q": {"a": 5.0, "x": 4.0, "c": 3.0, "b": 2.0, "e": 1.0}}   # relevances a, x, c, b, e: 1 0 1 0 1
    got = E.evaluate(qrels, run, ["RBP", "RBP(p=0.5)", "RBP(p=0.5)@2", "RBP(p=0.5)@3", "RBP(rel=2)", "RBP(p=0.9)@4"])
    assert got["RBP"] == pytest.approx(rbp([1, 0, 1, 0, 1], 0.8))   # p defaults to 0.8, rel to 1
    assert got["RBP(p=0.5)"] == pytest.approx(0.5 * (1 + 0.25 + 0.0625))
    assert got["RBP(p=0.5)@2"] == pytest.approx(0.5)           # the sum stops at rank 2
    assert got["RBP(p=0.5)@3"] == pytest.approx(0.5 * 1.25)
    assert got["RBP(rel=2)"] == pytest.approx(rbp([0, 0, 1, 0, 1], 0.8))
    assert got["RBP(p=0.9)@4"] == pytest.approx(rbp([1, 0, 1, 0], 0.9))
    # the run-wide threshold (-l) reaches RBP; its own rel= wins
    at2 = E.evaluate(qrels, run, ["RBP", "RBP(rel=1)"], rel_threshold=2)
    assert at2 == {"RBP": pytest.approx(got["RBP(rel=2)"]), "RBP(rel=1)": pytest.approx(got["RBP"])}
    # ties in trec_eval's order (docid descending), queries with any id; -J drops the unjudged x
    tied = E.evaluate({"topic-a": {"d1": 1}}, {"topic-a": {"d1": 1.0, "d2": 1.0}}, ["RBP(p=0.5)"])
    assert tied["RBP(p=0.5)"] == pytest.approx(0.25)
    assert E.evaluate(qrels, run, ["RBP'"])["RBP'"] == pytest.approx(rbp([1, 1, 0, 1], 0.8))


@pytest.mark.parametrize("system", ["BM25", "D_BERT_KD_TASB"])
def test_rbp_equals_ir_measures_on_a_real_run(msmarco, system):
    qrels = E.read_qrels(msmarco / "qrels" / "dl19.tsv")
    run = E.read_run(msmarco / "runs" / f"{system}.dl19.top100.trec")
    names = ["RBP(p=0.8,rel=1)", "RBP(p=0.5,rel=2)", "RBP(p=0.95,rel=1)"]
    objects = [ir_measures.parse_measure(n) for n in names]
    judged = {q: d for q, d in qrels.items() if q in run}
    theirs = ir_measures.calc_aggregate(objects, judged, run)
    ours = E.evaluate(qrels, run, names + ["RBP", "RBP(p=0.5)@10"], rel_threshold=1)
    for n, m in zip(names, objects):
        assert ours[n] == pytest.approx(theirs[m], abs=1e-12), n
    assert ours["RBP"] == ours["RBP(p=0.8,rel=1)"]
    top10 = {q: dict(E.io.ranked(docs)[:10]) for q, docs in run.items()}   # RBP@10: RBP of the top 10
    cut = ir_measures.calc_aggregate([ir_measures.parse_measure("RBP(p=0.5,rel=1)")], judged, top10)
    assert ours["RBP(p=0.5)@10"] == pytest.approx(next(iter(cut.values())), abs=1e-12)
    assert ours["RBP(p=0.5)@10"] <= E.evaluate(qrels, run, ["RBP(p=0.5)"])["RBP(p=0.5)"]


# --- diversity measures on subtopic qrels

DIVERSITY = "1 1 a 1\n1 2 a 1\n1 2 b 1\n1 3 c 1\n1 1 d 0\n2 1 x 1\n2 2 y 1\n"   # topic subtopic docid judgment
RUN = {"1": {"a": 4.0, "d": 3.0, "b": 2.0, "c": 1.0}, "2": {"y": 2.0, "z": 1.0}}


def alpha_dcg(ranking, subtopics, alpha=0.5, k=5):
    """alpha-DCG (Clarke et al. 2008) of a ranking: a document's gain sums (1 - alpha)^(times its subtopic was
    already seen) over the subtopics it is relevant to, discounted by log2(1 + rank)."""
    seen, total = {s: 0 for s in subtopics}, 0.0
    for rank, d in enumerate(ranking[:k], 1):
        for s, docs in subtopics.items():
            if docs.get(d, 0) > 0:
                total += (1 - alpha) ** seen[s] / math.log2(1 + rank)
                seen[s] += 1
    return total


def greedy_ideal(subtopics, alpha=0.5, k=5):
    """ndeval's ideal ranking: greedily the document of most gain next (the exact ideal is NP-hard)."""
    pool, ranking = {d for docs in subtopics.values() for d, g in docs.items() if g > 0}, []
    while pool and len(ranking) < k:
        best = max(sorted(pool), key=lambda d: alpha_dcg(ranking + [d], subtopics, alpha, k))
        ranking.append(best)
        pool.remove(best)
    return ranking


def test_subtopic_qrels_and_alpha_ndcg_by_hand(tmp_path):
    path = tmp_path / "qrels.diversity"
    path.write_text(DIVERSITY)
    qrels = E.read_qrels(f"subtopics:{path}")
    assert isinstance(qrels, E.SubtopicQrels) and qrels == E.read_subtopic_qrels(path)
    assert qrels.subtopics["1"] == {"1": {"a": 1, "d": 0}, "2": {"a": 1, "b": 1}, "3": {"c": 1}}
    assert dict(qrels) == {"1": {"a": 1, "d": 0, "b": 1, "c": 1}, "2": {"x": 1, "y": 1}}   # highest grade
    names = ["alpha_nDCG@5", "alpha_nDCG(alpha=0.9)@5", "StRecall@2", "P_IA@2", "nDCG@5", "AP"]
    got = E.evaluate(qrels, RUN, names, per_query=True)
    for q, ranking in (("1", ["a", "d", "b", "c"]), ("2", ["y", "z"])):
        subs = qrels.subtopics[q]
        for alpha, name in ((0.5, "alpha_nDCG@5"), (0.9, "alpha_nDCG(alpha=0.9)@5")):
            want = alpha_dcg(ranking, subs, alpha) / alpha_dcg(greedy_ideal(subs, alpha), subs, alpha)
            assert got[q][name] == pytest.approx(want, abs=1e-12), (q, name)
    assert got["1"]["alpha_nDCG@5"] == pytest.approx((2 + 0.5 / 2 + 1 / math.log2(5)) / (2 + 1 / math.log2(3) + 0.5 / 2))
    assert got["1"]["StRecall@2"] == pytest.approx(2 / 3) and got["2"]["StRecall@2"] == 0.5   # subtopics covered
    assert got["1"]["P_IA@2"] == pytest.approx((1 / 2 + 1 / 2 + 0) / 3) and got["2"]["P_IA@2"] == 0.25
    # the other measures read each document's highest grade
    assert got["1"]["AP"] == E.evaluate(dict(qrels), RUN, ["AP"], per_query=True)["1"]["AP"]


def diversity_frame(qrels):
    return pd.DataFrame([(q, s, d, g) for q, subs in qrels.subtopics.items() for s, docs in subs.items()
                         for d, g in docs.items()], columns=["query_id", "iteration", "doc_id", "relevance"])


DIVERSITY_MEASURES = ["alpha_nDCG@10", "alpha_nDCG@20", "alpha_nDCG(alpha=0.8)@20", "alpha_DCG@10", "ERR_IA@20",
                      "nERR_IA@10", "NRBP", "nNRBP", "NRBP(alpha=0.3,beta=0.8)", "AP_IA", "P_IA@10", "StRecall@20",
                      "alpha_nDCG(rel=2)@10"]


@pytest.mark.parametrize("system", ["BM25", "SPLADE_P_P_ENSEMBLE_DISTIL"])
def test_diversity_measures_equal_ir_measures_on_a_real_run(msmarco, tmp_path, system):
    """TREC DL 2019's judgments spread over 3 subtopics per query (by a hash of the docid; a document may fall
    under two), a real run: every pyndeval measure equals ir_measures' own computation. Measures of several
    alpha/beta/rel together: ir_measures 0.4.3 alone scores all but the first setting 0 (issue noted in
    eval.measures._key), so each is computed alone there."""
    adhoc = E.read_qrels(msmarco / "qrels" / "dl19.tsv")
    lines = []
    for q, docs in adhoc.items():
        for d, g in docs.items():
            h = zlib.crc32(d.encode())
            lines += [f"{q} {1 + h % 3} {d} {g}"] + ([f"{q} {1 + (h // 3) % 3} {d} {g}"] if h % 5 == 0 and
                                                      (h // 3) % 3 != h % 3 else [])
    (tmp_path / "div.qrels").write_text("\n".join(lines) + "\n")
    qrels = E.read_qrels(f"subtopics:{tmp_path / 'div.qrels'}")
    run = E.read_run(msmarco / "runs" / f"{system}.dl19.top100.trec")
    # no tied scores: ndeval (ir_measures direct) orders ties by docid ascending, retr as trec_eval (descending)
    run = {q: {d: s + 1e-7 * i for i, (d, s) in enumerate(reversed(E.io.ranked(docs)))} for q, docs in run.items()}
    ours = E.evaluate(qrels, run, DIVERSITY_MEASURES + ["nDCG@10"], per_query=True)
    frame = diversity_frame(qrels)
    frame = frame[frame.query_id.isin(run)]
    for name in DIVERSITY_MEASURES:
        m = ir_measures.parse_measure(name)
        theirs = {x.query_id: x.value for x in ir_measures.iter_calc([m], frame, run)}
        assert set(theirs) == set(ours), name
        for q, value in theirs.items():
            assert ours[q][name] == pytest.approx(value, abs=1e-12), (name, q)
    assert 0 < sum(r["alpha_nDCG@10"] for r in ours.values()) < len(ours)
    # the ad hoc measures see each document's highest grade: DL 2019's own (each docid under one grade)
    assert {q: r["nDCG@10"] for q, r in ours.items()} == {q: r["nDCG@10"] for q, r in E.evaluate(
        adhoc, run, ["nDCG@10"], per_query=True).items()}


def test_diversity_condensed_and_depth(tmp_path):
    path = tmp_path / "qrels.diversity"
    path.write_text(DIVERSITY)
    qrels = E.read_subtopic_qrels(path)
    run = {"1": {"a": 4.0, "u": 3.5, "d": 3.0, "v": 2.5, "b": 2.0, "c": 1.0}, "2": {"w": 3.0, "y": 2.0}}
    condensed = {q: {d: s for d, s in docs.items() if d in qrels[q]} for q, docs in run.items()}
    assert E.evaluate(qrels, run, ["alpha_nDCG'@5", "ERR_IA@5"], judged_only=True) == pytest.approx(
        E.evaluate(qrels, condensed, ["alpha_nDCG'@5", "ERR_IA@5"]))
    tied = E.evaluate(E.SubtopicQrels({"t": {"1": {"x": 1}}}), {"t": {"x": 1.0, "y": 1.0}}, ["alpha_nDCG@5"])
    assert tied["alpha_nDCG@5"] == pytest.approx(1 / math.log2(3))   # trec_eval's order of ties: y, then x
    assert E.evaluate(qrels, run, ["alpha_nDCG@5"])["alpha_nDCG@5"] < E.evaluate(
        qrels, condensed, ["alpha_nDCG@5"])["alpha_nDCG@5"]


@pytest.mark.parametrize("text, message", [
    ("1 1 a 1\n1 1 b\n", "q.div:2: expected 4 columns 'topic subtopic docid judgment' (TREC diversity qrels), got 3"),
    ("1 1 a 1\n1 Q0 b 1\n", "q.div:2: subtopic 'Q0' is not a positive integer"),
    ("1 0 a 1\n", "q.div:1: subtopic '0' is not a positive integer (diversity qrels number subtopics from 1; "
                  "'qid 0 docid rel' is the ad hoc form"),
    ("1 1 a 1\n1 2 a 1\n1 1 a 0\n", "q.div:3: document 'a' judged twice for query '1', subtopic 1 (first at line 1)"),
    ("1 1 a yes\n", "q.div:1: judgment 'yes' is not an integer"),
])
def test_bad_subtopic_qrels_lines(tmp_path, text, message):
    (tmp_path / "q.div").write_text(text)
    with pytest.raises(EvalError) as err:
        E.read_qrels(f"subtopics:{tmp_path / 'q.div'}")
    assert str(err.value).startswith(f"{tmp_path / 'q.div'}:") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_diversity_and_its_errors(tmp_path):
    (tmp_path / "q.div").write_text(DIVERSITY)
    (tmp_path / "r.trec").write_text("".join(f"{q} Q0 {d} {i} {s} t\n" for q, docs in RUN.items()
                                             for i, (d, s) in enumerate(docs.items(), 1)))

    def invoke(*args):
        return CliRunner().invoke(eval_cmd, [str(a) for a in args], prog_name="retr eval")

    ok = invoke("--qrels", f"subtopics:{tmp_path / 'q.div'}", tmp_path / "r.trec", "-m", "alpha_nDCG@5,RBP,nDCG@5",
                "--json")
    assert ok.exit_code == 0, ok.output
    means = __import__("json").loads(ok.stdout)["runs"][0]["means"]
    assert means == pytest.approx(E.evaluate(E.read_subtopic_qrels(tmp_path / "q.div"), RUN,
                                             ["alpha_nDCG@5", "RBP", "nDCG@5"]))
    # the diversity file read as ad hoc qrels, a diversity measure on ad hoc qrels, a cut-off ndeval lacks
    for args, message in (
        (("--qrels", tmp_path / "q.div", "-m", "nDCG@5"),
         "document 'a' judged twice for query '1' (first at line 1); diversity qrels 'topic subtopic docid "
         "judgment'? read them as subtopics:FILE"),
        (("--qrels", tmp_path / "q.div", "-m", "alpha_nDCG@5"), "judged twice"),
        (("--qrels", f"subtopics:{tmp_path / 'q.div'}", "-m", "alpha_nDCG@21"), "to depth 20 at most"),
        (("--qrels", f"subtopics:{tmp_path / 'none'}", "-m", "alpha_nDCG@5"), "cannot read"),
    ):
        bad = invoke(*args, tmp_path / "r.trec")
        # the qrels go through the library's reader (retrieval.datasets.qrels), which makes the evaluator's error
        # an InputError: one line either way
        assert bad.exit_code != 0 and isinstance(bad.exception, (EvalError, InputError)), bad.output
        assert message in str(bad.exception) and "\n" not in str(bad.exception)
    (tmp_path / "adhoc.txt").write_text("1 0 a 1\n1 0 b 0\n")
    bad = invoke("--qrels", tmp_path / "adhoc.txt", tmp_path / "r.trec", "-m", "alpha_nDCG@5")
    assert str(bad.exception) == ("measure 'alpha_nDCG@5' is a diversity measure: it needs subtopic qrels, TREC's "
                                  "'topic subtopic docid judgment' (--qrels subtopics:FILE; in Python "
                                  "eval.read_subtopic_qrels)")
