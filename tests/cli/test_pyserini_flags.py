"""`retr search` takes the flags of Pyserini's `python -m pyserini.search.lucene` as other names of
its own options (issue #29): --topics, --hits, --output-format, --bm25 --k1 --b, --batch-size give
byte for byte what retr's own flags give; --rm3 / --rocchio are BM25 with Anserini's feedback;
msmarco and jsonl output parse; a wrong combination is one error line. Real Lucene; `retr` runs
in this process (one JVM for all) except where the exit status and stderr of the real command
are the point."""
from __future__ import annotations

import json

import pytest

import retrieval
from cli.main import main
from retrieval.bm25 import BM25Spec
from tests.cli.test_bad_input import one_error
from tests.conftest import run_retr


@pytest.fixture(scope="module")
def dv(tmp_path_factory, small_corpus):
    return retrieval.build_index(small_corpus, tmp_path_factory.mktemp("pyflags") / "IDX",
                                 subindexes={"bm25": BM25Spec(store_docvectors=True)}, quiet=True).path


def out_of(capsys, *args):
    capsys.readouterr()
    rc = main([str(a) for a in ("search", *args)])
    got = capsys.readouterr()
    assert rc == 0, got.err
    return got.out


@pytest.mark.parametrize("pyserini,ours", [
    (["--topics", "Q", "--hits", "7", "--output-format", "trec"], ["--queries", "Q", "--k", "7", "--format", "trec"]),
    (["--topics", "Q", "--hits", "5", "--bm25", "--k1", "1.2", "--b", "0.75"],
     ["--queries", "Q", "--k", "5", "--retriever", "bm25", "--k1", "1.2", "--b", "0.75"]),
    (["--topics", "Q", "--hits", "5", "--batch-size", "3"], ["--queries", "Q", "--k", "5"]),
    (["--topics", "Q", "--hits", "4", "--output-format", "msmarco"],
     ["--queries", "Q", "--k", "4", "--format", "msmarco"]),
    (["--topics", "Q", "--hits", "6", "--bm25", "--rm3"], ["--queries", "Q", "--k", "6", "--rm3"]),
], ids=["topics-hits-format", "bm25-k1-b", "batch-size", "msmarco", "rm3"])
def test_pyserini_flags_give_what_retrs_own_give(dv, small_corpus, capsys, pyserini, ours):
    q = str(small_corpus / "queries.jsonl")
    fill = lambda args: [q if a == "Q" else a for a in args]  # noqa: E731
    theirs = out_of(capsys, "--index", dv, "-q", *fill(pyserini))
    assert theirs and theirs == out_of(capsys, "--index", dv, "-q", *fill(ours))


def test_output_formats_parse_and_agree(dv, small_corpus, capsys, tmp_path):
    q = small_corpus / "queries.jsonl"
    trec = [line.split() for line in out_of(capsys, "--index", dv, "--topics", q, "--hits", "5", "-q").splitlines()]
    marco = out_of(capsys, "--index", dv, "--topics", q, "--hits", "5", "--output-format", "msmarco", "-q")
    marco = [line.split("\t") for line in marco.splitlines()]
    # Pyserini's MsMarcoWriter: qid, docid, rank; the same ranking as the TREC run
    assert [(t[0], t[2], t[3]) for t in trec] == [tuple(m) for m in marco]
    out = tmp_path / "run.tsv"
    assert main(["search", "--index", str(dv), "--topics", str(q), "--hits", "5", "--output-format", "msmarco",
                 "-o", str(out), "-q"]) == 0
    assert [line.split("\t") for line in out.read_text().splitlines()] == marco
    hits = [json.loads(line) for line in
            out_of(capsys, "--index", dv, "--topics", q, "--hits", "5", "--output-format", "jsonl", "-q").splitlines()]
    assert [(h["docid"], str(h["rank"])) for h in hits] == [(t[2], t[3]) for t in trec]
    assert all(h["text"] for h in hits)


def test_rm3_and_rocchio_runs_are_tagged(dv, small_corpus, capsys):
    q = small_corpus / "queries.jsonl"
    tags = {line.split()[5] for line in out_of(capsys, "--index", dv, "--topics", q, "--hits", "3", "--rm3",
                                                 "--fb-terms", "20", "-q").splitlines()}
    assert tags == {"bm25+rm3(fb_terms=20)"}
    tags = {line.split()[5] for line in out_of(capsys, "--index", dv, "--topics", q, "--hits", "3", "--rocchio",
                                                 "--rocchio-use-negative", "-q").splitlines()}
    assert tags == {"bm25+rocchio(gamma=0.15,use_negative=true)"}


@pytest.mark.parametrize("args,needle", [
    (["--fb-terms", "5"], "--fb-terms needs --rm3 or --rocchio"),
    (["--rm3", "--rocchio"], "--rm3 and --rocchio are alternatives"),
    (["--rm3", "--rocchio-gamma", "0.2"], "--rocchio-gamma does not apply to --rm3"),
    (["--rocchio", "--original-query-weight", "0.2"], "--original-query-weight does not apply to --rocchio"),
    (["--rm3", "--fb-docs", "0"], "'--fb-docs': 0 is not in the range"),
    (["--output-format", "kilt"], "'--output-format': 'kilt' is not one of"),
    (["--hits", "0"], "'--hits': 0 is not in the range"),
    (["--hits", "3", "--k", "4"], "--k and --hits name the same option"),
    (["--bm25", "--retriever", "dense"], "--retriever dense and the flag asking for bm25 disagree"),
])
def test_bad_pyserini_flags_are_one_line(dv, capsys, args, needle):
    capsys.readouterr()
    assert main(["search", "--index", str(dv), "aspirin", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("retr: error: ") and needle in err[0], err


def test_feedback_without_document_vectors_is_one_line_naming_the_rebuild(small_index):
    one_error(run_retr("search", "--index", small_index.path, "aspirin", "--rm3"),
              "--rm3/--rocchio reads the feedback documents' term vectors",
              "rebuild the folder with `retr index --docvectors`")
