import json

import pytest


@pytest.fixture(scope="module")
def built(tmp_path_factory, small_corpus):
    from tests.conftest import run_retr

    path = tmp_path_factory.mktemp("cli") / "IDX"
    r = run_retr("index", "--corpus", small_corpus, "--index", path, "--quiet")
    assert r.returncode == 0, r.stderr
    return path


def test_search_writes_trec_run_for_split(retr, built, small_corpus, tmp_path):
    run = tmp_path / "run.trec"
    r = retr("search", "--index", built, "--queries", small_corpus / "queries.jsonl", "--split", "test",
             "--output", run, "--k", "50", "--quiet")
    assert r.returncode == 0, r.stderr
    lines = [l.split() for l in run.read_text().splitlines()]
    assert all(len(p) == 6 and p[1] == "Q0" and p[5] == "bm25" for p in lines)
    qids = {p[0] for p in lines}
    qrels_q = {l.split("\t")[0] for l in (small_corpus / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    assert qids == qrels_q
    ranks = [int(p[3]) for p in lines if p[0] == lines[0][0]]
    assert ranks == list(range(1, len(ranks) + 1)) and len(ranks) <= 50


def test_search_jsonl_carries_text(retr, built, small_corpus, tmp_path):
    out = tmp_path / "hits.jsonl"
    r = retr("search", "--index", built, "--queries", small_corpus / "queries.jsonl", "--output", out,
             "--format", "jsonl", "--k", "3", "--quiet")
    assert r.returncode == 0, r.stderr
    hits = [json.loads(l) for l in out.read_text().splitlines()]
    assert hits and all(h["text"] and h["qid"] and h["rank"] in (1, 2, 3) for h in hits)


def test_free_text_and_info(retr, built):
    r = retr("search", "--index", built, "cerebral white matter newborn", "--k", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.lstrip().startswith("1.") and "2." in r.stdout
    r = retr("info", "--index", built, "--json")
    info = json.loads(r.stdout)
    assert info["documents"] == 400 and info["subindexes"]["bm25"]["size_bytes"] > 0


BAD = {
    "malformed": b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "x"\n',
    "missing_id": b'{"_id": "a", "text": "ok"}\n{"title": "t", "text": "x"}\n',
    "duplicate": b'{"_id": "a", "text": "ok"}\n{"_id": "a", "text": "x"}\n',
    "empty_text": b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": ""}\n',
    "bad_utf8": b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "\xff\xfe"}\n',
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_corpus_fails_cleanly(retr, tmp_path, case):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(BAD[case])
    idx = tmp_path / "IDX"
    r = retr("index", "--corpus", corpus, "--index", idx, "--quiet")
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("retr: error: ") and "corpus.jsonl:2:" in err[0], r.stderr
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl"]  # nothing half-written


def test_missing_paths_and_unknown_options(retr, tmp_path, built):
    r = retr("index", "--corpus", tmp_path / "nope", "--index", tmp_path / "IDX")
    assert r.returncode != 0 and "no such file" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = retr("search", "--index", tmp_path / "nope", "x")
    assert r.returncode != 0 and "does not exist" in r.stderr
    r = retr("search", "--index", built, "x", "--bogus")
    assert r.returncode == 2 and "No such option" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = retr("search", "--index", built, "x", "--retriever", "dense")
    assert r.returncode == 2 and "no 'dense' sub-index" in r.stderr
    r = retr("index", "--corpus", tmp_path / "nope", "--index", built)
    assert r.returncode != 0
