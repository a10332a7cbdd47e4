"""Collections by name through the real ir_datasets (`irds:beir/scifact`), offline: each test lays out
ir_datasets' cache itself, as a download would have left it (IR_DATASETS_HOME/beir/scifact/source.zip, the
BEIR zip holding scifact/corpus.jsonl, queries.jsonl and qrels/test.tsv), from the small SciFact folder.
ir_datasets fixes its cache paths when it is imported, so everything runs in child processes (`retr`, or
`python -c`) with IR_DATASETS_HOME set; an HTTP(S) proxy on loopback records any attempt to download."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, retr_in_process, run_retr


def lay_out_cache(home: Path, beir: Path, corpus_lines=None) -> Path:
    """IR_DATASETS_HOME with beir/scifact/source.zip made from a BEIR folder (optionally other corpus lines)."""
    target = home / "beir" / "scifact"
    target.mkdir(parents=True, exist_ok=True)
    corpus = "".join(corpus_lines) if corpus_lines is not None else (beir / "corpus.jsonl").read_text(encoding="utf-8")
    with zipfile.ZipFile(target / "source.zip", "w") as z:
        z.writestr("scifact/corpus.jsonl", corpus)
        z.writestr("scifact/queries.jsonl", (beir / "queries.jsonl").read_text(encoding="utf-8"))
        z.writestr("scifact/qrels/test.tsv", (beir / "qrels" / "test.tsv").read_text(encoding="utf-8"))
        z.writestr("scifact/qrels/train.tsv", train_qrels(beir))
    return home


def train_qrels(beir: Path) -> str:
    """A 'train' split for the fixture: the first 30 judgments of its test qrels (tuning refuses test qrels)."""
    return "".join((beir / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines(True)[:31])


def test_the_proxy_counts_a_download_and_not_a_bare_connection(offline_env):
    """The guard of the tests below: a child's download through the proxy variables is counted, with its
    request line; a connection that sends nothing is not."""
    socket.create_connection(("127.0.0.1", int(offline_env.url.rsplit(":", 1)[1]))).close()
    code = "import urllib.request\ntry:\n    urllib.request.urlopen('https://example.invalid/x', timeout=5)\nexcept Exception:\n    pass"
    subprocess.run([sys.executable, "-c", code], env=dict(os.environ), timeout=60)
    deadline = time.monotonic() + 5
    while offline_env.hits < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert offline_env.hits == 1 and offline_env.requests[0].startswith("CONNECT example.invalid:443"), \
        offline_env.requests


@pytest.fixture(scope="module")
def irds_home(tmp_path_factory, small_corpus):
    return lay_out_cache(tmp_path_factory.mktemp("irds-home"), small_corpus)


def python(code: str, home: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, IR_DATASETS_HOME=str(home))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_evaluator_refuses_a_collection_name_in_one_line():
    """eval/ reads qrels files only; the prefixes it refuses are the library's."""
    from eval.errors import EvalError
    from eval.io import COLLECTION_PREFIXES, read_qrels
    from retrieval import datasets

    assert COLLECTION_PREFIXES == datasets.PREFIXES
    with pytest.raises(EvalError) as e:
        read_qrels("irds:beir/scifact/test")
    assert "\n" not in str(e.value) and "retrieval.datasets.qrels.read_qrels" in str(e.value)


def test_documents_queries_and_qrels_equal_the_files(irds_home, small_corpus, offline_env):
    code = f"""
import json
from retrieval.collections import read_corpus, read_queries
from retrieval.datasets.qrels import read_qrels
def docs(src): return [[d.docid, d.title, d.text, d.metadata] for d in read_corpus(src)]
def qs(src): return [[q.qid, q.text] for q in read_queries(src)]
print(json.dumps({{
  "docs": docs("irds:beir/scifact") == docs({str(small_corpus)!r}),
  "n": len(docs("irds:beir/scifact")),
  "queries": qs("irds:beir/scifact/test") == qs({str(small_corpus / 'queries.jsonl')!r}),
  "qrels": read_qrels("irds:beir/scifact/test") == read_qrels({str(small_corpus / 'qrels' / 'test.tsv')!r}),
}}))
"""
    r = python(code, irds_home)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == {"docs": True, "n": 400, "queries": True, "qrels": True}
    assert offline_env.hits == 0, offline_env.requests


def _run(path: Path):
    return [line.split() for line in path.read_text().splitlines()]


def test_index_search_and_eval_by_name_equal_those_from_the_files(irds_home, small_corpus, small_index, tmp_path,
                                                                  monkeypatch, offline_env):
    monkeypatch.setenv("IR_DATASETS_HOME", str(irds_home))
    idx = tmp_path / "IDX"
    r = run_retr("index", "--corpus", "irds:beir/scifact", "--index", idx, "-q")
    assert r.returncode == 0, r.stderr
    built = json.loads((idx / "manifest.json").read_text())["corpus"]
    assert built["source"] == "irds:beir/scifact"
    assert built["fingerprint"] == small_index.manifest["corpus"]["fingerprint"]
    assert built["doc_count"] == small_index.manifest["corpus"]["doc_count"] == 400

    by_name, from_files = tmp_path / "name.trec", tmp_path / "files.trec"
    r = run_retr("search", "--index", idx, "--queries", "irds:beir/scifact/test", "-o", by_name, "--k", "100", "-q")
    assert r.returncode == 0, r.stderr
    # the runs from the files (the references, no ir_datasets involved) through retr's entry point in this process
    r = retr_in_process("search", "--index", small_index.path, "--queries", small_corpus / "queries.jsonl", "-o",
                        from_files, "--k", "100", "-q")
    assert r.returncode == 0, r.stderr
    assert _run(by_name) == _run(from_files) and len(_run(by_name)) > 1000

    split = tmp_path / "split.trec"  # --split test beside irds:beir/scifact means irds:beir/scifact/test's queries
    r = run_retr("search", "--index", idx, "--queries", "irds:beir/scifact", "--split", "test", "-o", split, "--k",
                 "100", "-q")
    assert r.returncode == 0, r.stderr
    assert _run(split) == _run(by_name)

    def means(qrels):
        r = run_retr("eval", "--qrels", qrels, from_files, "--json", "-m", "nDCG@10,AP,R@100,P@10")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["runs"][0]["means"]

    assert means("irds:beir/scifact/test") == means(small_corpus / "qrels" / "test.tsv")

    other = tmp_path / "other.trec"  # a second system, so that the report shows queries it gains and loses on
    r = retr_in_process("search", "--index", small_index.path, "--queries", small_corpus / "queries.jsonl", "-o",
                        other, "--k", "100", "--k1", "0.3", "--b", "0.1", "-q")
    assert r.returncode == 0, r.stderr

    def report(qrels, queries):
        html = tmp_path / "report.html"
        r = run_retr("eval", "report", "--qrels", qrels, from_files, other, "--queries", queries, "--resamples", "100",
                     "-o", html)
        assert r.returncode == 0, r.stderr
        return html.read_text(encoding="utf-8")

    page = report("irds:beir/scifact/test", "irds:beir/scifact/test")
    assert page == report("irds:beir/scifact/test", small_corpus / "queries.jsonl")
    assert page.replace("irds:beir/scifact/test", "test.tsv") == report(small_corpus / "qrels" / "test.tsv",
                                                                         small_corpus / "queries.jsonl")
    texts = [json.loads(line)["text"] for line in (small_corpus / "queries.jsonl").read_text().splitlines()]
    assert sum(t[:40] in page for t in texts) >= 2
    assert offline_env.hits == 0, offline_env.requests


def test_the_cache_ir_datasets_leaves_works_without_the_zip(irds_home, tmp_path, monkeypatch, offline_env):
    """Once ir_datasets has built its docstore and cached queries and qrels, the download may go."""
    home = tmp_path / "home"
    import shutil

    shutil.copytree(irds_home, home)
    monkeypatch.setenv("IR_DATASETS_HOME", str(home))
    run = tmp_path / "r.trec"
    assert run_retr("index", "--corpus", "irds:beir/scifact", "--index", tmp_path / "A", "-q").returncode == 0
    assert run_retr("search", "--index", tmp_path / "A", "--queries", "irds:beir/scifact/test", "-o", run,
                    "-q").returncode == 0
    assert run_retr("eval", "--qrels", "irds:beir/scifact/test", run).returncode == 0
    cached = home / "beir" / "scifact"
    assert (cached / "docs.pklz4").is_dir() and (cached / "queries.json").is_file() and (cached / "test.qrels").is_file()
    (cached / "source.zip").unlink()
    r = run_retr("index", "--corpus", "irds:beir/scifact", "--index", tmp_path / "B", "-q")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "B" / "manifest.json").read_text())["corpus"]["doc_count"] == 400
    r = run_retr("eval", "--qrels", "irds:beir/scifact/test", run, "--json")
    assert r.returncode == 0, r.stderr
    assert offline_env.hits == 0, offline_env.requests


def test_tuning_reads_its_queries_and_qrels_by_name(irds_home, small_corpus, small_dense_index, tmp_path,
                                                    monkeypatch, offline_env):
    monkeypatch.setenv("IR_DATASETS_HOME", str(irds_home))
    (tmp_path / "train.tsv").write_text(train_qrels(small_corpus), encoding="utf-8")

    def tune(queries, qrels):
        r = run_retr("tune", "--index", small_dense_index.path, "--queries", queries, "--qrels", qrels, "--depth", "50",
                     "--dry-run", "-q")
        assert r.returncode == 0, r.stderr
        return r.stdout

    by_name = tune("irds:beir/scifact/train", "irds:beir/scifact/train")
    assert by_name.startswith("best bm25+dense") and by_name == tune(small_corpus / "queries.jsonl",
                                                                      tmp_path / "train.tsv")
    line = _one_error_line(run_retr("tune", "--index", small_dense_index.path, "--queries", "irds:beir/scifact/test",
                                    "--qrels", "irds:beir/scifact/test", "--dry-run"))
    assert "irds:beir/scifact/test: refusing to tune on what looks like test qrels" in line
    assert offline_env.hits == 0, offline_env.requests


def _one_error_line(r) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.startswith("retr:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize("argv,part", [
    (["index", "--corpus", "irds:beir/scifact", "--index", "{tmp}/IDX", "-q"], "docs"),
    (["search", "--index", "{idx}", "--queries", "irds:beir/scifact/test", "-o", "{tmp}/r.trec"], "queries"),
    (["eval", "--qrels", "irds:beir/scifact/test", "{run}"], "qrels"),
    (["eval", "partial", "--qrels", "irds:beir/scifact/test", "--run", "{run}", "--run", "{run}"], "qrels"),
])
def test_a_dataset_not_in_the_cache_fails_at_once_with_how_to_fetch_it(argv, part, tmp_path, monkeypatch,
                                                                     offline_env, small_index):
    home = tmp_path / "empty-home"
    monkeypatch.setenv("IR_DATASETS_HOME", str(home))
    run = tmp_path / "x.trec"
    run.write_text("1 Q0 d 1 1.0 t\n")
    args = [a.format(tmp=tmp_path, idx=small_index.path, run=run) for a in argv]
    line = _one_error_line(run_retr(*args, timeout=120))
    name = "irds:beir/scifact" if part == "docs" else "irds:beir/scifact/test"
    assert line.startswith(f"retr: error: {name}: the {part} are not in ir_datasets' cache {home} "), line
    assert str(home / "beir" / "scifact" / "source.zip") in line and "ir_datasets export" in line
    assert offline_env.hits == 0, offline_env.requests                    # refused before any connection, not after a timeout
    assert not (tmp_path / "IDX").exists()


def test_names_and_parts_the_dataset_lacks_are_one_line(irds_home, tmp_path, monkeypatch, offline_env):
    monkeypatch.setenv("IR_DATASETS_HOME", str(irds_home))
    run = tmp_path / "x.trec"
    run.write_text("1 Q0 d 1 1.0 t\n")
    line = _one_error_line(run_retr("eval", "--qrels", "irds:beir/scifakt/test", run))
    assert "irds:beir/scifakt/test: ir_datasets 0.6.3 has no dataset of that name (did you mean beir/scifact/test" in line
    line = _one_error_line(run_retr("eval", "--qrels", "irds:beir/scifact", run))
    assert "irds:beir/scifact: this dataset has no qrels (name a split" in line
    line = _one_error_line(run_retr("eval", "--qrels", "irds:", run))
    assert "give a dataset after 'irds:'" in line
    assert offline_env.hits == 0, offline_env.requests


@pytest.mark.parametrize("bad,needle", [
    ('{"_id": "a", "title": "", "text": "  "}\n', "document 'a' has empty text"),
    ('{"_id": "31715818", "title": "t", "text": "again"}\n', "duplicate document id '31715818'"),
    ('{"_id": "has space", "title": "t", "text": "x"}\n', "contains whitespace"),
])
def test_bad_documents_get_the_file_reader_s_error_with_their_position(bad, needle, small_corpus, tmp_path,
                                                                      monkeypatch, offline_env):
    lines = (small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(True)
    lines = lines[:5] + [bad] + lines[5:]
    (tmp_path / "c.jsonl").write_text("".join(lines), encoding="utf-8")
    home = lay_out_cache(tmp_path / "home", small_corpus, lines)
    monkeypatch.setenv("IR_DATASETS_HOME", str(home))
    named = _one_error_line(run_retr("index", "--corpus", "irds:beir/scifact", "--index", tmp_path / "A", "-q"))
    from_file = _one_error_line(run_retr("index", "--corpus", tmp_path / "c.jsonl", "--index", tmp_path / "B", "-q"))
    assert needle in named
    # the same words, and the document's position in the collection where the file has its line number
    assert named.replace("irds:beir/scifact:", "FILE:") == from_file.replace(f"{tmp_path / 'c.jsonl'}:", "FILE:")


def test_a_damaged_cache_is_one_line(small_corpus, tmp_path, monkeypatch, offline_env):
    home = tmp_path / "home"
    (home / "beir" / "scifact").mkdir(parents=True)
    (home / "beir" / "scifact" / "source.zip").write_bytes(b"not a zip file at all")
    monkeypatch.setenv("IR_DATASETS_HOME", str(home))
    line = _one_error_line(run_retr("index", "--corpus", "irds:beir/scifact", "--index", tmp_path / "A", "-q"))
    assert "irds:beir/scifact: ir_datasets could not read the docs from its cache" in line and "BadZipFile" in line


def test_help_starts_without_ir_datasets():
    code = "import sys; from cli.main import main\ntry:\n main(['--help'])\nexcept SystemExit: pass\n" \
           "print('ir_datasets' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "False"
