"""Readers: formats, gzip, and one-line file:line errors for bad input."""
import gzip

import pytest

from eval.errors import EvalError
from eval.io import read_qrels, read_run, write_run


def write(tmp_path, name, text, gz=False):
    path = tmp_path / name
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def test_trec_and_beir_qrels_agree_plain_and_gz(tmp_path):
    trec = write(tmp_path, "q.trec", "# comment\nq1 0 d1 2\nq1 0 d2 0\n\nq2 0 d3 1\n")
    beir = write(tmp_path, "q.tsv.gz", "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t0\nq2\td3\t1\n", gz=True)
    expected = {"q1": {"d1": 2, "d2": 0}, "q2": {"d3": 1}}
    assert read_qrels(trec) == expected
    assert read_qrels(beir) == expected


def test_run_plain_gz_and_roundtrip(tmp_path):
    text = "q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 -1e-3 t\nq2 Q0 d1 1 7 t\n"
    expected = {"q1": {"d1": 2.5, "d2": -0.001}, "q2": {"d1": 7.0}}
    assert read_run(write(tmp_path, "r.trec", text)) == expected
    assert read_run(write(tmp_path, "r.trec.gz", text, gz=True)) == expected
    write_run(expected, tmp_path / "out.trec")
    assert read_run(tmp_path / "out.trec") == expected


@pytest.mark.parametrize("text, message", [
    ("q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 1.0\n", "r.trec:2: expected 6 columns"),
    ("q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 high t\n", "r.trec:2: score 'high' is not a number"),
    ("q1 Q0 d1 1 nan t\n", "r.trec:1: score 'nan' is not a finite number"),
    ("q1 Q0 d1 1 2.5 t\nq2 Q0 d1 1 2.5 t\nq1 Q0 d1 3 1.0 t\n", "r.trec:3: document 'd1' listed twice for query 'q1' (first at line 1)"),
])
def test_bad_run_lines(tmp_path, text, message):
    with pytest.raises(EvalError) as err:
        read_run(write(tmp_path, "r.trec", text))
    assert str(err.value).startswith(f"{tmp_path}/{message}")
    assert "\n" not in str(err.value)


def test_trailing_fields_allowed_when_not_strict(tmp_path):
    path = write(tmp_path, "r.trec", "q1 Q0 d1 1 2.5 t extra junk\n")
    with pytest.raises(EvalError, match="expected 6 columns"):
        read_run(path)
    assert read_run(path, strict=False) == {"q1": {"d1": 2.5}}


@pytest.mark.parametrize("text, message", [
    ("q1 0 d1 1\nq1 0 d2\n", "q.txt:2: expected 4 columns"),
    ("q1 0 d1 1\nq1 0 d2 yes\n", "q.txt:2: relevance 'yes' is not an integer"),
    ("q1 0 d1 1\nq1 0 d1 2\n", "q.txt:2: document 'd1' judged twice for query 'q1' (first at line 1)"),
    ("q1 d1\n", "q.txt:1: expected 4 columns"),
    ("query-id\tcorpus-id\tscore\nq1\td1\t1\tx\n", "q.txt:2: expected 3 columns"),
])
def test_bad_qrels_lines(tmp_path, text, message):
    with pytest.raises(EvalError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_qrels(write(tmp_path, "q.txt", text))


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(EvalError, match="cannot read"):
        read_run(tmp_path / "nope.trec")
    bad = tmp_path / "bad.gz"
    bad.write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(EvalError, match="corrupt gzip"):
        read_qrels(bad)
