"""A reader that stays open while other processes write (issue #24, item 1).

One reader process searches one open Index from three threads while two writer processes add,
update, delete and compact the folder, each committing generation after generation. Every search
must succeed, and what the reader saw in each generation (counts, texts) must be what the writers
committed in it (tests/soak.py holds both sides and the comparison)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import retrieval
from retrieval.check import check_index
from tests import soak
from tests.conftest import ROOT

SEED_DOCS = 200


def run_soak(tmp_path, seconds: float, writers: int = 2, threads: int = 3):
    corpus = soak.seed_corpus(tmp_path / "seed.jsonl", SEED_DOCS)
    path = tmp_path / "IDX"
    retrieval.build_index(corpus, path, quiet=True)
    stop, out = tmp_path / "stop", tmp_path / "reader.json"
    reader = soak.start_reader(path, stop, out, threads)
    logs = [tmp_path / f"writer{i}.jsonl" for i in range(writers)]
    try:
        soak.finish(soak.start_writers(path, logs, seconds, compact_every=3, min_ops=6), timeout=seconds + 300)
    finally:
        stop.write_text("")  # the reader stops either way
    soak.finish([reader], timeout=300)
    return path, soak.read_log(logs), json.loads(out.read_text())


def test_a_reader_open_across_many_commits_by_other_processes_stays_right(tmp_path):
    t0 = time.monotonic()
    path, logs, seen = run_soak(tmp_path, seconds=12, writers=3)
    problems = soak.verify(SEED_DOCS, logs, seen)
    assert not problems, "\n".join(problems[:20])
    ops = {r["op"] for r in logs}
    assert {"add", "update", "delete", "compact"} <= ops, ops  # every kind of change happened under the reader
    assert len(logs) >= 8 and seen["searches"] > 100, (len(logs), seen["searches"])
    # it followed the commits: it saw most generations (not only the first and the last)
    assert len(seen["generations_seen"]) >= len(logs) // 2, (seen["generations_seen"], len(logs))
    rep = check_index(path, full=True, strict=True)
    assert rep.ok, rep.problems
    fresh = retrieval.open_index(path)
    assert len(fresh) == seen["final"]["documents"] == len(fresh.docstore)
    assert time.monotonic() - t0 < 90


def _commit_in_another_process(path, docid):
    """A commit by another process, then another process's SQLite connection to the store (read-write,
    as a writer's is) that it closes: the moment SQLite decides whether it was the last one."""
    code = ("import sys; from retrieval.writer import add_documents; from retrieval.types import Document; "
            "add_documents(sys.argv[1], [Document(sys.argv[2], sys.argv[2] + ' common fresh passage')], quiet=True)")
    r = subprocess.run([sys.executable, "-c", code, str(path), docid], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "print(c.execute('SELECT COUNT(*) FROM docs').fetchone()[0]); c.close()")
    r = subprocess.run([sys.executable, "-c", code, str(path / "docs.sqlite")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_reader_keeps_its_sqlite_locks_so_writers_never_remove_the_wal_under_it(tmp_path):
    """The mechanism behind item 1, step by step. The reader holds a snapshot (a store connection) and
    moves to a new generation (which checks the new generation's store); then another process
    commits and closes its connection. That writer must not take itself for the store's last
    connection: if the reader's check had opened docs.sqlite outside SQLite, closing that descriptor
    would have dropped every POSIX lock the reader held on it, the writer would have checkpointed and
    removed -wal and -shm under the reader's live connections, and the reader would keep reading
    its stale copy of the log (or a malformed mix)."""
    path = tmp_path / "IDX"
    retrieval.build_index(soak.seed_corpus(tmp_path / "seed.jsonl", 50), path, quiet=True)
    idx = retrieval.open_index(path)
    held = idx.snapshot()
    assert held.get("s-1") is not None  # a live connection of generation 0
    for i in range(1, 4):
        _commit_in_another_process(path, f"fresh-{i}")
        hits = idx.search("common", k=1000, text=True)  # moves to the new generation
        assert idx.generation == i and len(hits) == 50 + i == len(idx.docstore) == len(idx)
        assert (path / "docs.sqlite-wal").exists() and (path / "docs.sqlite-shm").exists()
        assert idx.get(f"fresh-{i}").text.startswith(f"fresh-{i} common")
    _commit_in_another_process(path, "fresh-4")
    assert (path / "docs.sqlite-wal").exists()  # that writer closed, and knew it was not the last
    assert len(idx.search("common", k=1000, text=False)) == 54 == len(idx.docstore)
    assert idx.get("fresh-4") is not None
    assert len(held) == 50 == len(held.docstore) and held.get("fresh-1") is None  # the snapshot kept its own
    held.close()
    idx.close()


def test_a_reader_that_cannot_open_the_newest_generation_says_so_instead_of_staying_behind(
        tmp_path, small_index, monkeypatch):
    """A newer manifest whose generation cannot be opened (here: a sub-index missing on disk) is
    tolerated for FOLLOW_GRACE seconds, then every search fails naming it; once the folder is whole
    again the reader moves on."""
    import shutil

    import retrieval.index as ri
    from indexes.errors import IndexFormatError

    path = tmp_path / "IDX"
    shutil.copytree(small_index.path, path)
    monkeypatch.setattr(ri, "FOLLOW_GRACE", 0.3)
    idx = retrieval.open_index(path)
    assert idx.search("cell", k=3, text=False)
    good = (path / "manifest.json").read_text()
    m = json.loads(good)
    m["generation"] = 1
    m["subindexes"]["bm25"] = dict(m["subindexes"]["bm25"], path="bm25.g1")  # not on disk
    (path / "manifest.json").write_text(json.dumps(m))
    assert idx.search("cell", k=3, text=False) and idx.generation == 0  # within the grace: the held generation
    time.sleep(0.4)
    try:
        idx.search("cell", k=3, text=False)
        raise AssertionError("a reader stuck on an old generation answered in silence")
    except IndexFormatError as e:
        assert "missing on disk" in str(e) and "stopped answering from generation 0" in str(e)
    (path / "manifest.json").write_text(json.dumps(dict(json.loads(good), generation=2)))  # whole again
    assert idx.search("cell", k=3, text=False) and idx.generation == 2
    idx.close()
