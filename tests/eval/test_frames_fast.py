"""eval.read_run_frame's two paths (#29): pandas' C parser for plain six-field run files, and
eval.io.read_run line by line for anything else. Both must give the same frame, to the bit, on real
runs (trec_eval's fixtures, the shipped TREC DL / TREC-COVID runs) and on files written to stress
the parser; what the fast path cannot take must fall back, with read_run's own file:line errors."""
from __future__ import annotations

import gzip

import pandas as pd
import pytest

import eval as E
from eval.errors import EvalError
from eval.frames import _fast_run_frame, _slow_run_frame
from tests.conftest import DATA, need

REAL = ["trec-eval-fixtures/results.test", "trec-eval-fixtures/results-302.test",
        "msmarco-passage-eval/runs/BM25.dl19.top100.trec", "msmarco-passage-eval/runs/BM25_RM3.covid.top100.trec",
        "msmarco-passage-eval/runs/SPLADE_P_P_ENSEMBLE_DISTIL.dl20.top100.trec"]


def same(a, b) -> None:
    """Equal frames: columns, dtypes, values and scores to the bit (-0.0 included)."""
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert (a["score"].to_numpy().view("u8") == b["score"].to_numpy().view("u8")).all()


@pytest.mark.parametrize("name", REAL)
def test_real_runs_read_the_same_both_ways(name):
    path = need(DATA / name)
    fast = _fast_run_frame(pd, path)
    assert fast is not None                       # plain run files take the fast path
    same(fast, _slow_run_frame(pd, path, True))
    same(E.read_run_frame(path), fast)


STRESS = {
    # ties (ranked in file order), one query's lines apart, scores in every form float() reads
    "ties": "q1 Q0 a 1 2.5 t\nq2 Q0 a 1 3 t\nq1 Q0 b 2 2.5 t\nq1 Q0 c 3 2.50 t\nq1 Q0 d 4 -0 t\n"
            "q1 Q0 e 5 1e-3 t\nq1 Q0 f 6 .5 t\nq1 Q0 g 7 5. t\nq1 Q0 h 8 +1E5 t\n"
            "q1 Q0 i 9 0.1000000000000000055511151231257827 t\nq1 Q0 j 10 2.2250738585072011e-308 t\n"
            "q1 Q0 k 11 1e-400 t\nq1 Q0 l 12 -0.000000 t\n",
    # tabs, runs of spaces, leading and trailing blanks, CRLF, blank and blank-looking lines
    "spacing": "  q1\tQ0  a\t\t1   2.5 t  \r\nq1 Q0 b 2 1.5 t\r\n\r\n   \n\t\nq2\tQ0\tc\t1\t0.25\tt\n\n",
    # words pandas would read as missing values, quotes, a '#' qid with six fields (data to read_run)
    "words": 'NA Q0 null 1 1 NaN\nn/a Q0 "x 2 0.5 ""\n#q Q0 \'a 1 1 -\nNone Q0 nan 1 2 N/A\n',
    "no final newline": "q1 Q0 a 1 2.5 t\nq1 Q0 b 2 1.5 t",
    "old mac line ends": "q1 Q0 a 1 2.5 t\rq1 Q0 b 2 1.5 t\r",
    "ids that look like numbers": "001 Q0 1 1 3 t\n1 Q0 1.0 1 2 t\n1.0 Q0 001 1 1 1\n1e3 Q0 -0 1 1 0\n",
    "unicode ids": "q\u00e9 Q0 \u6587\u66f8 1 1.5 \u00fc\nq\u00e9 Q0 d\u00e9 2 1.25 \u00fc\n",
}
# files the fast path must leave to read_run (which reads them): its result is still the frame
FALLBACK = {
    "comments": "# a comment\nq1 Q0 a 1 2.5 t\n# another one, longer than six fields: a b c d\nq1 Q0 b 2 1 t\n",
    "a no-break space between fields": "q1 Q0 a\u00a01 2.5 t\nq1 Q0 c 2 1 t\n",
    "a vertical tab between fields": "q1 Q0 a\x0b1 2.5 t\n",
    "byte-order mark": "\ufeffq1 Q0 a 1 2.5 t\n",
    "a boolean word": "q1 Q0 true 1 2.5 t\nq1 Q0 b 2 1 t\n",
    "underscored score": "q1 Q0 a 1 1_000 t\n",
    "other digits": "q1 Q0 a 1 \u0661 t\n",
    "empty": "",
}


def write(tmp_path, name, text, gz=False):
    path = tmp_path / ("r.trec.gz" if gz else "r.trec")
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("name", list(STRESS))
def test_stress_files_read_the_same_both_ways(tmp_path, name, gz):
    path = write(tmp_path, name, STRESS[name], gz)
    fast = _fast_run_frame(pd, path)
    assert fast is not None
    same(fast, _slow_run_frame(pd, path, True))


@pytest.mark.parametrize("name", list(FALLBACK))
def test_what_the_fast_path_cannot_take_falls_back(tmp_path, name):
    path = write(tmp_path, name, FALLBACK[name])
    assert _fast_run_frame(pd, path) is None
    same(E.read_run_frame(path), _slow_run_frame(pd, path, True))


def test_ranks_follow_scores_with_ties_in_file_order(tmp_path):
    frame = E.read_run_frame(write(tmp_path, "ties", STRESS["ties"]))
    q1 = frame[frame["qid"] == "q1"]
    assert q1["docno"].tolist()[:4] == ["a", "b", "c", "d"]
    by_doc = dict(zip(q1["docno"], q1["rank"]))
    assert [by_doc[d] for d in "hgabcf"] == [0, 1, 2, 3, 4, 5]     # by score; the three 2.5s in file order
    assert [by_doc[d] for d in "dkl"] == [9, 10, 11]               # -0, 0 and -0.000000 tie, in file order


@pytest.mark.parametrize("text, message", [
    ("q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 1.0\n", "r.trec:2: expected 6 columns"),
    ("q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 high t\n", "r.trec:2: score 'high' is not a number"),
    ("q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 True t\n", "r.trec:2: score 'True' is not a number"),
    ("q1 Q0 d1 1 inf t\n", "r.trec:1: score 'inf' is not a finite number"),
    ("q1 Q0 d1 1 2.5 t\nq2 Q0 d1 1 2.5 t\nq1 Q0 d1 3 1.0 t\n", "r.trec:3: document 'd1' listed twice"),
    ("q1 Q0 d1 1 2.5 t extra\n", "r.trec:1: expected 6 columns"),
])
def test_bad_files_keep_read_runs_errors(tmp_path, text, message):
    with pytest.raises(EvalError) as err:
        E.read_run_frame(write(tmp_path, "bad", text))
    assert str(err.value).startswith(f"{tmp_path}/{message}") and "\n" not in str(err.value)


def test_trailing_fields_when_not_strict_and_corrupt_gzip(tmp_path):
    path = write(tmp_path, "extra", "q1 Q0 d1 1 2.5 t extra\nq1 Q0 d2 2 1.5 t\n")
    frame = E.read_run_frame(path, strict=False)
    assert frame["docno"].tolist() == ["d1", "d2"] and frame["name"].tolist() == ["t", "t"]
    bad = tmp_path / "r.trec.gz"
    bad.write_bytes(gzip.compress(b"q1 Q0 d1 1 2.5 t\n" * 100)[:40])
    with pytest.raises(EvalError, match="corrupt gzip"):
        E.read_run_frame(bad)


def test_ranks_of_sorted_blocks_equal_the_groupby_ranks():
    """_sorted_ranks (positions in each query's block) against PyTerrier's groupby rule, on runs with
    ties, one-line queries and -0.0; and None where a query's lines are apart or a score rises."""
    import random

    from eval.frames import _ranks, _sorted_ranks

    rng = random.Random(7)
    for _ in range(50):
        qids, scores = [], []
        for q in range(rng.randint(1, 8)):
            s = rng.choice([0.0, -0.0, 5.0])
            for _ in range(rng.randint(1, 30)):
                s -= rng.choice([0.0, 0.0, 0.5, 1.0])
                qids.append(f"q{q}")
                scores.append(s)
        codes, uniq = pd.factorize(pd.Series(qids, dtype="str"))
        got = _sorted_ranks(codes, len(uniq), pd.Series(scores).to_numpy())
        assert got is not None and got.tolist() == _ranks(pd, pd.Series(qids), pd.Series(scores)).tolist()
    codes, uniq = pd.factorize(pd.Series(["a", "b", "a"]))
    assert _sorted_ranks(codes, len(uniq), pd.Series([3.0, 2.0, 1.0]).to_numpy()) is None
    codes, uniq = pd.factorize(pd.Series(["a", "a", "b"]))
    assert _sorted_ranks(codes, len(uniq), pd.Series([1.0, 2.0, 9.0]).to_numpy()) is None
    assert _sorted_ranks(codes, len(uniq), pd.Series([2.0, 1.0, 9.0]).to_numpy()).tolist() == [0, 1, 0]
