"""A sharded index rebuilt in place (`retr index --shards N --overwrite`) against its other writers and
against kill -9 (issue #43, items 3-5): the rebuild holds the sharded index's writer lock, so a paused
`retr add` goes first and the rebuild waits (and an add that comes during the rebuild waits and then
lands in the new index); its switch is one atomic exchange, so a kill at any point leaves the old or
the new index whole at the path; a writer never commits into an index that replaced its own; and the
whole-index copies that killed builds leave beside the path are removed by the next build or write,
those of live processes excepted.

Real `retr` processes stopped at named points (``RETR_TEST_PAUSE``), BM25 only, a few dozen documents."""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import time
from pathlib import Path

import pytest

from indexes import sharded as sh
from tests.conftest import RetrProcess, run_retr

OLD, NEW = 30, 24  # documents of the index before and of the corpus that rebuilds it


class Proc(RetrProcess):
    def wait_line(self, text: str, timeout: float = 120) -> None:
        """Block until stderr says ``text``; fail if the process exits first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                pytest.fail(f"never said {text!r}: {''.join(self.seen)}")
            if line is None:
                self.proc.wait()
                pytest.fail(f"exited ({self.proc.returncode}) before saying {text!r}: {''.join(self.seen)}")
            self.seen.append(line)
            if text in line:
                return

    def finish(self, timeout: float = 300) -> str:
        self.proc.wait(timeout=timeout)
        while (line := self.lines.get(timeout=60)) is not None:
            self.seen.append(line)
        return "".join(self.seen)


def _corpus(path: Path, ids, word: str = "common") -> Path:
    path.write_text("".join(json.dumps({"_id": d, "title": "", "text": f"{d} {word} quokka burrow {i}"}) + "\n"
                            for i, d in enumerate(ids)), encoding="utf-8")
    return path


@pytest.fixture
def setup(tmp_path):
    """S: 2 shards of OLD documents; new.jsonl: the NEW documents that rebuild it with 3 shards; add.jsonl:
    10 documents for an add."""
    from retrieval.sharded.write import build_sharded

    build_sharded(_corpus(tmp_path / "old.jsonl", [f"o-{i}" for i in range(OLD)]), tmp_path / "S", 2,
                  quiet=True).close()
    _corpus(tmp_path / "new.jsonl", [f"n-{i}" for i in range(NEW)])
    _corpus(tmp_path / "add.jsonl", [f"a-{i}" for i in range(10)], word="common added")
    return tmp_path


def _state(path: Path) -> tuple:
    """(shards, documents, ids) of the sharded index at ``path``, after `retr check` passed on it."""
    from retrieval.sharded.index import ShardedIndex

    r = run_retr("check", "--index", path)
    assert r.returncode == 0, r.stdout + r.stderr
    with ShardedIndex.open(path) as idx:
        ids = {h.docid for h in idx.search("common", k=1000, text=False)}
        assert len(ids) == len(idx)
        return sh.read(path)["shards"], len(idx), ids


def _rebuild(tmp: Path, *extra, pause: str = "", seconds: float = 0.0) -> Proc:
    return Proc("index", "--corpus", tmp / "new.jsonl", "--index", tmp / "S", "--shards", "3", "--overwrite",
                *extra, pause=pause, seconds=seconds)


def test_a_rebuild_waits_for_a_paused_add_and_then_replaces_the_index(setup):
    tmp = setup
    rid = sh.read(tmp / "S")["id"]
    add = Proc("add", "--index", tmp / "S", "--corpus", tmp / "add.jsonl", pause="sharded:before-switch", seconds=6)
    add.wait_line("retr-test-paused sharded:before-switch ")
    rebuild = _rebuild(tmp)
    rebuild.wait_line("waiting for another writer")  # the add holds the sharded index's writer lock
    assert add.proc.poll() is None and sh.read(tmp / "S")["id"] == rid  # nothing replaced under the add
    err = add.finish()
    assert add.proc.returncode == 0 and "added 10 documents" in err, err
    err = rebuild.finish()
    assert rebuild.proc.returncode == 0, err
    # one after the other: the add committed into the old index, which the rebuild then replaced
    shards, n, ids = _state(tmp / "S")
    assert (shards, n) == (3, NEW) and ids == {f"n-{i}" for i in range(NEW)}
    assert sh.read(tmp / "S")["id"] != rid
    assert not [p.name for p in tmp.iterdir() if p.name.startswith(".S.")]


def test_an_add_that_comes_during_a_rebuild_lands_in_the_new_index(setup):
    tmp = setup
    rebuild = _rebuild(tmp, "-q", pause="sharded:before-swap", seconds=4)
    rebuild.wait_line("retr-test-paused sharded:before-swap ")
    add = Proc("add", "--index", tmp / "S", "--corpus", tmp / "add.jsonl")
    add.wait_line("waiting for another writer")
    err = rebuild.finish()
    assert rebuild.proc.returncode == 0, err
    err = add.finish()
    assert add.proc.returncode == 0 and "added 10 documents" in err, err
    shards, n, ids = _state(tmp / "S")  # the add's documents went to their shards of the new index's 3
    assert (shards, n) == (3, NEW + 10) and ids == {f"n-{i}" for i in range(NEW)} | {f"a-{i}" for i in range(10)}


def test_a_writer_never_commits_into_an_index_that_replaced_its_own(setup):
    """A replacement that takes no lock (a folder moved by hand) while an add is about to switch: the add
    is refused in one line, and the index now at the path is untouched."""
    from retrieval.sharded.write import build_sharded

    tmp = setup
    build_sharded(tmp / "new.jsonl", tmp / "S2", 3, quiet=True).close()
    add = Proc("add", "--index", tmp / "S", "--corpus", tmp / "add.jsonl", pause="sharded:before-switch", seconds=3)
    add.wait_line("retr-test-paused sharded:before-switch ")
    os.rename(tmp / "S", tmp / "S.moved")
    os.rename(tmp / "S2", tmp / "S")
    err = add.finish()
    assert add.proc.returncode == 2, err
    assert "was replaced by another index while this change was made; nothing was changed" in err, err
    assert "Traceback" not in err and "added" not in err, err
    assert _state(tmp / "S") == (3, NEW, {f"n-{i}" for i in range(NEW)})
    assert _state(tmp / "S.moved")[:2] == (2, OLD)  # the moved one holds no half of the add either


# a kill at each point of a rebuild: is the new index at the path afterwards?
POINTS = [("index:built", False),              # inside the stage: a shard built, not yet swapped in
          ("sharded:before-swap", False),      # every shard built and recorded, the switch next
          ("sharded:after-swap", True)]        # switched; the old index, beside, not yet removed


def test_a_rebuild_killed_anywhere_leaves_the_old_or_the_new_index_and_its_copies_are_removed(setup):
    tmp = setup
    old_ids = {f"o-{i}" for i in range(OLD)}
    new_ids = {f"n-{i}" for i in range(NEW)}
    killed = []
    for point, switched in POINTS:
        if _state(tmp / "S")[0] != 2:
            r = run_retr("index", "--corpus", tmp / "old.jsonl", "--index", tmp / "S", "--shards", "2",
                         "--overwrite", "-q")
            assert r.returncode == 0, r.stderr
        p = _rebuild(tmp, "-q", pause=point)
        p.wait_line(f"retr-test-paused {point} ")
        p.kill()
        killed.append(p.proc.pid)
        want = (3, NEW, new_ids) if switched else (2, OLD, old_ids)
        assert _state(tmp / "S") == want, point
        left = [x for x in tmp.iterdir() if x.name == f".S.sharding-{p.proc.pid}"]
        assert left, (point, os.listdir(tmp))  # a whole copy of an index stays beside it ...
    # ... until the next write of the path, which removes those of dead processes only: not the copy
    # of a live one (this process), and a symbolic link by such a name goes without what it points to
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    os.symlink(outside, tmp / f".S.sharding-{dead}")
    live = tmp / f".S.sharding-{os.getpid()}"
    live.mkdir()
    (live / "busy").write_text("a build in progress")
    r = run_retr("check", "--index", tmp / "S", "--strict")  # (a note without --strict: _state passed)
    assert r.returncode != 0 and f"leftover of dead process {killed[-1]}" in r.stdout + r.stderr, r.stdout
    leftovers = sorted(x.name for x in tmp.iterdir() if x.name.startswith(".S.") and x != live)
    # (each build after a kill removed the copy the kill before had left)
    assert leftovers == sorted([f".S.sharding-{killed[-1]}", f".S.sharding-{dead}"]), leftovers
    r = run_retr("add", "--index", tmp / "S", "--corpus", tmp / "add.jsonl", "-q")
    assert r.returncode == 0, r.stderr
    assert [x.name for x in tmp.iterdir() if x.name.startswith(".S.")] == [live.name]
    assert (live / "busy").read_text() == "a build in progress"
    assert (outside / "keep.txt").read_text() == "mine"
    assert _state(tmp / "S")[1] == NEW + 10  # (the last kill came after the switch)
    # and a build removes them too
    os.symlink(outside, tmp / f".S.sharding-{dead}")
    r = run_retr("index", "--corpus", tmp / "new.jsonl", "--index", tmp / "S", "--shards", "3", "--overwrite", "-q")
    assert r.returncode == 0, r.stderr
    assert [x.name for x in tmp.iterdir() if x.name.startswith(".S.")] == [live.name]
    assert (outside / "keep.txt").read_text() == "mine"
    assert _state(tmp / "S") == (3, NEW, new_ids)
