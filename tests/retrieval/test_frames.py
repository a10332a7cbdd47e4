"""Issue #29: runs, qrels, topics and search results as pandas DataFrames with PyTerrier's column
names (real Lucene index, real files; PyTerrier's own readers as the oracle for the column layout)."""
from __future__ import annotations

import gzip
import subprocess
import sys

import pandas as pd
import pytest

import eval as E
import retrieval
from eval.errors import EvalError
from indexes.errors import InputError
from retrieval.frames import read_topics, topics_frame
from retrieval.runs import write_run
from tests.conftest import ROOT

QS = {"q1": "aspirin colorectal cancer", "q2": "cerebral white matter newborn", "q3": "statin side effects"}


@pytest.fixture(scope="module")
def topics(small_corpus):
    return read_topics(small_corpus)


@pytest.fixture(scope="module")
def retr_run(small_index, topics, tmp_path_factory):
    """A run as `retr search` writes it (retrieval.runs.write_run, scores %.6f, tag), 20 hits a query."""
    path = tmp_path_factory.mktemp("runs") / "bm25.trec"
    write_run(small_index.batch_search(topics, k=20), path, tag="bm25")
    return path


def test_run_file_frame_run_file_is_byte_identical(retr_run, tmp_path):
    frame = E.read_run_frame(retr_run)
    assert list(frame.columns) == ["qid", "docno", "score", "rank", "name"]
    lines = retr_run.read_text().splitlines()
    assert len(frame) == len(lines)
    assert [int(x.split()[3]) - 1 for x in lines] == list(frame["rank"])      # 0-based, PyTerrier's numbering
    assert set(frame["name"]) == {"bm25"}
    out = tmp_path / "again.trec"
    assert E.write_run_frame(frame, out, digits=6) == len(lines)
    assert out.read_bytes() == retr_run.read_bytes()
    # the evaluator's own writer (scores as repr) round-trips with the default, gzip is read as plain
    plain = tmp_path / "eval.trec"
    E.write_run(E.read_run(retr_run), plain, tag="x")
    gz = tmp_path / "eval.trec.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    E.write_run_frame(E.read_run_frame(gz), out)
    assert out.read_bytes() == plain.read_bytes()


def test_run_frame_matches_pyterriers_reader(retr_run):
    import pyterrier as pt

    ours, theirs = E.read_run_frame(retr_run), pt.io.read_results(str(retr_run))
    for col in ("qid", "docno", "score", "name"):
        assert list(ours[col]) == list(theirs[col])
    assert list(ours["rank"]) == [r - pt.model.FIRST_RANK - 1 for r in theirs["rank"]]  # theirs keeps the file's


def test_qrels_round_trip_and_pyterriers_reader(small_corpus, tmp_path):
    trec = tmp_path / "qrels.trec"
    E.write_qrels(E.read_qrels(small_corpus / "qrels" / "test.tsv"), trec)
    frame = E.read_qrels_frame(trec)
    assert list(frame.columns) == ["qid", "docno", "label"]
    import pyterrier as pt

    theirs = pt.io.read_qrels(str(trec))
    assert frame.astype({"label": "int64"}).values.tolist() == theirs.astype({"label": "int64"}).values.tolist()
    out = tmp_path / "again.trec"
    assert E.write_qrels_frame(frame, out) == len(frame)
    assert out.read_bytes() == trec.read_bytes()
    assert E.read_qrels_frame(small_corpus / "qrels" / "test.tsv").equals(frame)   # BEIR tsv reads the same


def test_search_df_equals_search(small_index):
    for q in QS.values():
        hits = small_index.search(q, k=10)
        df = small_index.search_df(q, k=10)
        assert list(df.columns) == ["qid", "query", "docno", "score", "rank"]
        assert df.values.tolist() == [["1", q, h.docid, h.score, h.rank - 1] for h in hits]
        full = small_index.search_df(q, k=10, qid="x", text=True)
        assert list(full.columns) == ["qid", "query", "docno", "score", "rank", "title", "text"]
        assert full[["title", "text"]].values.tolist() == [[h.title, h.text] for h in hits]
        assert set(full["qid"]) == {"x"}
    with small_index.snapshot() as s:
        assert s.search_df(QS["q1"], k=5).equals(small_index.search_df(QS["q1"], k=5))


def test_batch_search_as_frame_equals_batch_search(small_index, small_corpus, topics):
    hits = small_index.batch_search(QS, k=7)
    df = small_index.batch_search(QS, k=7, as_frame=True)
    assert df.values.tolist() == [[q, QS[q], h.docid, h.score, h.rank - 1] for q, hs in hits.items() for h in hs]
    assert small_index.batch_search(topics_frame(QS), k=7, as_frame=True).equals(df)   # a topics frame as queries
    with small_index.snapshot() as s:
        assert s.batch_search(QS, k=7, as_frame=True).equals(df)
    full = small_index.batch_search(QS, k=7, as_frame=True, text=True)
    assert full[["title", "text"]].values.tolist() == [[h.title, h.text] for hs in
                                                       small_index.batch_search(QS, k=7, text=True).values() for h in hs]
    # a result frame goes to the evaluator as it is, with a qrels frame
    qrels_path = small_corpus / "qrels" / "test.tsv"
    run, frame = small_index.batch_search(topics, k=50), small_index.batch_search(topics, k=50, as_frame=True)
    ms = ["nDCG@10", "AP", "RR@10"]
    assert E.evaluate(E.read_qrels_frame(qrels_path), frame, ms) == E.evaluate(E.read_qrels(qrels_path), run, ms)


def test_topics_frame_reads_every_query_form(small_corpus, topics):
    queries = retrieval.read_queries(small_corpus)
    assert list(topics.columns) == ["qid", "query"]
    assert topics.values.tolist() == [[q.qid, q.text] for q in queries]


def test_run_and_qrels_frames_from_mappings():
    run = {"q1": {"a": 1.0, "b": 3.0, "c": 3.0}, "q2": {"d": 0.5}}
    frame = E.run_frame(run, tag="t")
    # trec_eval's order: score descending, then docid descending
    assert frame.values.tolist() == [["q1", "c", 3.0, 0, "t"], ["q1", "b", 3.0, 1, "t"], ["q1", "a", 1.0, 2, "t"],
                                     ["q2", "d", 0.5, 0, "t"]]
    assert E.as_run(frame) == run
    qrels = {"q1": {"a": 2, "b": 0}, "q2": {"d": 1}}
    assert E.as_qrels(E.qrels_frame(qrels)) == qrels
    theirs = pd.DataFrame({"query_id": ["q1"], "doc_id": ["a"], "relevance": [1]})   # ir_measures' names
    assert E.as_qrels(theirs) == {"q1": {"a": 1}}
    assert E.evaluate(E.qrels_frame(qrels), frame, ["AP", "nDCG@10"]) == E.evaluate(qrels, run, ["AP", "nDCG@10"])


@pytest.mark.parametrize("frame, says", [
    (pd.DataFrame({"qid": ["q"], "docno": ["a"]}), "missing: score"),
    (pd.DataFrame({"query_id": ["q"], "score": [1.0]}), "missing: doc_id"),
    (pd.DataFrame({"qid": ["q", "q"], "docno": ["a", "a"], "score": [1.0, 2.0]}), "listed twice"),
    (pd.DataFrame({"qid": ["q"], "docno": ["a"], "score": ["high"]}), "not a number"),
])
def test_a_bad_run_frame_is_one_clear_error(frame, says, tmp_path):
    for call in (lambda: E.evaluate({"q": {"a": 1}}, frame, ["AP"]), lambda: E.write_run_frame(frame, tmp_path / "r")):
        with pytest.raises(EvalError, match=says) as e:
            call()
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("frame, says", [
    (pd.DataFrame({"qid": ["q"], "docno": ["a"]}), "missing: label"),
    (pd.DataFrame({"qid": ["q", "q"], "docno": ["a", "a"], "label": [1, 0]}), "judged twice"),
    (pd.DataFrame({"qid": ["q"], "docno": ["a"], "label": [0.5]}), "not an integer"),
])
def test_a_bad_qrels_frame_is_one_clear_error(frame, says, tmp_path):
    for call in (lambda: E.evaluate(frame, {"q": {"a": 1.0}}, ["AP"]), lambda: E.write_qrels_frame(frame, tmp_path / "q")):
        with pytest.raises(EvalError, match=says):
            call()


def test_write_run_frame_refuses_what_it_cannot_write(tmp_path):
    ok = pd.DataFrame({"qid": ["q"], "docno": ["a"], "score": [1.0]})
    with pytest.raises(EvalError, match="finite"):
        E.write_run_frame(ok.assign(score=[float("nan")]), tmp_path / "r")
    with pytest.raises(EvalError, match="rank column"):
        E.write_run_frame(ok.assign(rank=[-1]), tmp_path / "r")
    with pytest.raises(EvalError, match="whitespace"):
        E.write_run_frame(ok, tmp_path / "r", tag="two words")
    with pytest.raises(EvalError, match="DataFrame"):
        E.write_run_frame({"q": {"a": 1.0}}, tmp_path / "r")
    E.write_run_frame(ok, tmp_path / "r")            # no rank column: ranked by score, 0-based; tag "retr"
    assert (tmp_path / "r").read_text() == "q Q0 a 1 1.0 retr\n"


def test_a_bad_topics_frame_is_one_clear_error(small_index):
    with pytest.raises(InputError, match="missing: query"):
        small_index.batch_search(pd.DataFrame({"qid": ["1"], "text": ["x"]}), as_frame=True)
    with pytest.raises(InputError, match="repeats qid"):
        small_index.batch_search(pd.DataFrame({"qid": ["1", "1"], "query": ["a", "b"]}))


def test_pandas_stays_out_of_plain_imports_and_retr_help():
    code = ("import sys, retrieval, eval, retrieval.index, retrieval.client, retrieval.frames, eval.frames, cli.main;"
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_query_without_hits_has_no_rows(small_index):
    df = small_index.batch_search({"a": "the of and", "b": "aspirin"}, k=3, as_frame=True)
    assert set(df["qid"]) == {"b"}                                     # "the of and": stopwords only, no hits
    assert df["docno"].tolist() == [h.docid for h in small_index.search("aspirin", k=3)]
    empty = small_index.search_df("the of and", k=3, text=True)
    assert list(empty.columns) == ["qid", "query", "docno", "score", "rank", "title", "text"] and len(empty) == 0
    assert str(empty["rank"].dtype) == "int64" and str(empty["score"].dtype) == "float64"


def test_write_run_frame_refuses_words_a_run_file_would_split(tmp_path):
    ok = pd.DataFrame({"qid": ["q"], "docno": ["a"], "score": [1.0]})
    for frame, says in ((ok.assign(docno=["a b"]), "document ids"), (ok.assign(qid=[""]), "query ids"),
                        (ok.assign(name=["x y"]), "tag"), (ok.assign(score=[float("inf")]), "finite")):
        with pytest.raises(EvalError, match=says):
            E.write_run_frame(frame, tmp_path / "r")
