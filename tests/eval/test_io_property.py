"""Property: the qrels and run readers either parse a file or raise EvalError, never anything else,
whatever the bytes (issue #15); what they return is what pytrec_eval can take."""
from __future__ import annotations

import gzip
import math

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from eval.errors import EvalError
from eval.io import read_qrels, read_run

# Random every run; a failure prints its example and a @reproduce_failure blob. No example database.
SETTINGS = settings(max_examples=500, deadline=None, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow])


def weighted(*choices):
    """One of several strategies, each drawn in proportion to its weight (st.one_of drops repeats)."""
    return st.sampled_from([s for s, w in choices for _ in range(w)]).flatmap(lambda s: s)


TEXT = st.text(st.characters(categories=["L", "N", "P", "Z", "Cc", "Cs", "So"]), max_size=8)
ODD = st.sampled_from(["", "#", "#q", "\x00", "\u00a0", "\u3000", "\ud800", "\U0001F600", "query-id", "Q0"])
NAME = weighted((st.integers(0, 9).map(lambda i: f"q{i}"), 4), (st.integers(0, 9).map(lambda i: f"d{i}"), 4),
                (ODD, 1), (TEXT, 1))
NUMBER = weighted((st.integers(-3, 5).map(str), 6), (st.floats().map(repr), 2), (TEXT, 1), (st.sampled_from(
    ["2.0", "2.5", "nan", "inf", "-inf", "1e400", "9" * 5000, "2147483648", "-2147483649", "\u0661", "1_0", "0x1"]), 2))


def _join(rows, sep, end):
    return (end.join(sep.join(r) for r in rows) + end).encode("utf-8", "surrogatepass")


@st.composite
def qrels_files(draw):
    beir = draw(st.booleans())
    row = (st.tuples(NAME, NAME, NUMBER).map(list) if beir else
           st.tuples(NAME, st.sampled_from(["0", "Q0"]), NAME, NUMBER).map(list))
    rows = draw(st.lists(weighted((row, 10), (st.lists(weighted((NAME, 3), (NUMBER, 1)), max_size=6), 1)),
                         max_size=6))
    if beir and draw(st.booleans()):
        rows.insert(0, ["query-id", "corpus-id", "score"])
    return _join(rows, "\t" if beir else draw(st.sampled_from([" ", "\t", "  "])), draw(st.sampled_from(["\n", "\r\n"])))


@st.composite
def run_files(draw):
    row = st.tuples(NAME, st.just("Q0"), NAME, NUMBER, NUMBER, st.sampled_from(["tag", "run1", "#"])).map(list)
    rows = draw(st.lists(weighted((row, 10), (st.lists(weighted((NAME, 3), (NUMBER, 1)), max_size=8), 1)),
                         max_size=8))
    return _join(rows, draw(st.sampled_from([" ", "\t"])), draw(st.sampled_from(["\n", "\r\n"])))


@st.composite
def stored(draw, content):
    """The bytes as they are, gzipped, or gzipped and then damaged (the readers sniff the gzip magic)."""
    data = draw(weighted((content, 6), (st.binary(max_size=200), 1)))
    how = draw(st.sampled_from(["plain"] * 6 + ["gzip", "damaged-gzip"]))
    if how == "plain":
        return data
    packed = bytearray(gzip.compress(data))
    if how == "damaged-gzip":
        packed[draw(st.integers(0, len(packed) - 1))] ^= draw(st.integers(1, 255))
    return bytes(packed)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("property")


def _check_names(table):
    for qid, docs in table.items():
        for name in (qid, *docs):
            assert name and not any(c.isspace() for c in name), repr(name)
            name.encode("utf-8")


@SETTINGS
@given(data=stored(qrels_files()))
def test_qrels_reader_parses_or_raises_eval_error(folder, data):
    path = folder / "qrels.txt"
    path.write_bytes(data)
    try:
        qrels = read_qrels(path)
    except EvalError:
        event("refused")
        return
    event("parsed" if qrels else "parsed, empty")
    _check_names(qrels)
    assert all(type(g) is int and -2**31 <= g < 2**31 for docs in qrels.values() for g in docs.values())


@SETTINGS
@given(data=stored(run_files()), strict=st.booleans())
def test_run_reader_parses_or_raises_eval_error(folder, data, strict):
    path = folder / "run.trec"
    path.write_bytes(data)
    try:
        run = read_run(path, strict=strict)
    except EvalError:
        event("refused")
        return
    event("parsed" if run else "parsed, empty")
    _check_names(run)
    assert all(type(s) is float and math.isfinite(s) for docs in run.values() for s in docs.values())
