"""Manifest-only changes are generations too (issue #25): `retr tune` and `retr train dimsel` commit
generation N+1 under the writer lock instead of rewriting the current manifest, so a reader that
holds N (a snapshot, or an Index opened with auto_refresh=False) keeps N's results until it moves on,
and the files of N are left as they were."""
from __future__ import annotations

import hashlib
import json
import shutil

import retrieval
from retrieval.check import check_index
from retrieval.collections import read_queries
from tests.conftest import run_retr


def trec(results):
    return [f"{q} {h.docid} {h.rank} {h.score:.6f}" for q, hits in results.items() for h in hits]


def tree_digest(folder):
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def test_tune_and_dimsel_training_commit_a_generation_readers_take_only_when_they_move_on(
        tmp_path, small_dense_index, small_corpus):
    path = tmp_path / "IDX"
    shutil.copytree(small_dense_index.path, path)
    queries = small_corpus / "queries.jsonl"
    train = tmp_path / "train.tsv"  # the tiny corpus's only labels, under a training name
    train.write_text((small_corpus / "qrels" / "test.tsv").read_text())
    qs = read_queries(queries)
    pinned = retrieval.open_index(path, auto_refresh=False)
    live = retrieval.open_index(path)
    g0 = pinned.generation
    fused0 = trec(pinned.batch_search(qs, k=20, retriever="bm25+dense"))
    spec0 = str(pinned.pipeline("bm25+dense"))
    dense0 = tree_digest(path / pinned.manifest["subindexes"]["dense"]["path"])

    with live.snapshot() as snap:
        r = run_retr("tune", "--index", path, "--queries", queries, "--qrels", train, "--retriever", "bm25+dense",
                     "-q")
        assert r.returncode == 0, r.stderr
        m = json.loads((path / "manifest.json").read_text())
        assert m["generation"] == g0 + 1 and "bm25+dense" in m["pipelines"]
        tuned = m["pipelines"]["bm25+dense"]["spec"]
        assert tuned != spec0
        # both readers still answer from generation g0, with its (untuned) default
        assert snap.generation == g0 and trec(snap.batch_search(qs, k=20, retriever="bm25+dense")) == fused0
        assert pinned.generation == g0 and str(pinned.pipeline("bm25+dense")) == spec0
        assert trec(pinned.batch_search(qs, k=20, retriever="bm25+dense")) == fused0
    assert pinned.refresh() and pinned.generation == g0 + 1 and str(pinned.pipeline("bm25+dense")) == tuned
    assert str(live.pipeline("bm25+dense")) == spec0  # (no search yet)
    live.search("fever", k=1)
    assert live.generation == g0 + 1 and str(live.pipeline("bm25+dense")) == tuned

    r = run_retr("train", "dimsel", "--index", path, "--queries", queries, "--qrels", train, "--epochs", "2",
                 "--hidden", "16", "--dev-share", "0", "--alpha", "0.5")
    assert r.returncode == 0, r.stderr
    m = json.loads((path / "manifest.json").read_text())
    entry = m["subindexes"]["dense"]
    assert m["generation"] == g0 + 2 and entry["dimsel"]["path"].startswith(entry["path"] + "/")
    assert (path / entry["dimsel"]["path"] / "selector.json").is_file()
    # the selector went into generation g0+2's own copy of the dense folder; g0's folder is as it was
    assert tree_digest(path / small_dense_index.manifest["subindexes"]["dense"]["path"]) == dense0
    dense_run = trec(pinned.batch_search(qs, k=20, retriever="dense"))
    assert pinned.generation == g0 + 1
    assert pinned.refresh() and pinned.generation == g0 + 2
    assert trec(pinned.batch_search(qs, k=20, retriever="dense")) == dense_run  # the dense rows are the same
    learned = pinned.batch_search(qs, k=20, retriever="dense", dimsel="learned")
    assert trec(learned) != dense_run and len(learned) == len(qs)
    pinned.close()
    live.close()
    rep = check_index(path, full=True, strict=True)
    assert rep.ok, rep.problems
