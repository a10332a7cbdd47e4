"""One write through a sharded index, one commit (issue #30): a multi-shard add becomes visible to the
sharded index's readers at once, a real ``retr`` writer killed (SIGKILL) anywhere leaves the old or the
new state, a reader that stays open never sees part of a batch, and two writers take turns.

Real Lucene and SQLite on 2 shards of 100 SciFact passages; writers are real ``retr add`` processes
stopped at named points (``RETR_TEST_PAUSE``; with ``RETR_TEST_PAUSE_SECONDS`` they go on again)."""
from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest

from indexes import manifest as mf
from indexes import sharded as sh
from tests.conftest import RetrProcess, run_retr

WORD = "qqbatch{}"  # one word per batch, in no SciFact passage


class Writer(RetrProcess):
    """A real ``retr`` process; :meth:`wait_for` blocks until it prints that it paused at ``point``."""

    def wait_for(self, point: str, timeout: float = 120) -> None:
        super().wait_for(point, timeout)

    def kill(self, sig=signal.SIGKILL, timeout: float = 60):
        return super().kill(sig, timeout)

    def finish(self) -> str:
        """Wait for the exit; all of stderr."""
        self.proc.wait(timeout=300)
        while (line := self.lines.get(timeout=60)) is not None:
            self.seen.append(line)
        return "".join(self.seen)


def _batch(tmp: Path, k: int, n: int = 6) -> list:
    """``n`` new documents (half of them routed to each shard) carrying the batch's word, as a corpus file."""
    ids, i = [], 0
    while len(ids) < n:
        d = f"b{k}-{i}"
        if sum(1 for x in ids if sh.shard_of(x, 2) == sh.shard_of(d, 2)) < n // 2:
            ids.append(d)
        i += 1
    rows = [{"_id": d, "title": f"batch {k}", "text": f"{WORD.format(k)} protein folding note {d}"} for d in ids]
    (tmp / f"batch{k}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return ids


def _seen(idx, k: int, ids) -> set:
    """The batch's documents a reader sees, by search and by id (both must agree)."""
    found = {h.docid for h in idx.search(WORD.format(k), k=50, text=False)}
    got = {d for d in ids if idx.get(d) is not None}
    assert found == got, (found, got)
    return found


def _check(path) -> None:
    r = run_retr("check", "--index", path)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture
def sharded(tmp_path, small_corpus):
    """2 shards over the first 100 passages of the SciFact sample."""
    from retrieval.sharded.write import build_sharded

    lines = (small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:100]
    (tmp_path / "corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    build_sharded(tmp_path / "corpus.jsonl", tmp_path / "S", 2, quiet=True).close()
    return tmp_path / "S"


# a kill at each point: is the batch there afterwards? (the switch of shards.json is the commit)
POINTS = [("write:after-docstore", False),          # inside shard 0's change: its store rows written
          ("write:after-subindexes", False),        # inside shard 0's change: its Lucene copy changed
          ("sharded:prepared:shard-000", False),    # between the shards: shard 0 prepared, shard 1 not
          ("sharded:before-switch", False),         # both prepared
          ("sharded:after-switch", True),           # committed; no shard's own manifest moved yet
          ("sharded:rolled:shard-000", True)]       # shard 0's own manifest moved, shard 1's not


def test_a_killed_multi_shard_write_leaves_all_or_none(sharded, tmp_path):
    from retrieval.sharded.index import ShardedIndex

    live = ShardedIndex.open(sharded)  # a reader open through every kill
    n = len(live)
    for k, (point, committed) in enumerate(POINTS):
        ids = _batch(tmp_path, k)
        assert {sh.shard_of(d, 2) for d in ids} == {0, 1}
        w = Writer("add", "--index", sharded, "--corpus", tmp_path / f"batch{k}.jsonl", "-q", pause=point)
        w.wait_for(point)
        want = set(ids) if committed else set()
        n += len(want)
        assert _seen(live, k, ids) == want and len(live) == n, point  # while it is stopped there
        w.kill()
        with ShardedIndex.open(sharded) as fresh:
            assert _seen(fresh, k, ids) == want and len(fresh) == n, point
        assert _seen(live, k, ids) == want and len(live) == n, point
        _check(sharded)
    # the next write finishes or removes what the last kill left, and succeeds
    ids = _batch(tmp_path, 99)
    r = run_retr("add", "--index", sharded, "--corpus", tmp_path / "batch99.jsonl", "-q")
    assert r.returncode == 0, r.stderr
    assert _seen(live, 99, ids) == set(ids) and len(live) == n + len(ids)
    r = run_retr("check", "--index", sharded, "--full", "--strict")  # no leftovers: every shard was written
    assert r.returncode == 0, r.stdout + r.stderr
    record = sh.read(sharded)
    for i, p in enumerate(sh.shard_paths(sharded, record)):
        assert record["generations"][i] == mf.read_manifest(p)["generation"]
        assert not list(p.glob("manifest.g*.json"))
    live.close()


def test_a_reader_open_during_a_write_sees_the_batch_whole_or_not_at_all(sharded, tmp_path):
    """The writer stops 1 s at three points (shard 0 prepared, shards.json switched, shard 0's own manifest
    moved) while a thread searches and counts, each time holding one commit of every shard."""
    from retrieval.sharded.index import ShardedIndex

    ids = _batch(tmp_path, 0)
    live = ShardedIndex.open(sharded)
    n = len(live)
    points = ["sharded:prepared:shard-000", "sharded:after-switch", "sharded:rolled:shard-000"]
    seen, done = [], threading.Event()

    def poll():
        while not done.is_set():
            with live.snapshot() as s:  # one commit of every shard for the count, the search and the gets
                seen.append((len(s), frozenset(_seen(s, 0, ids))))

    t = threading.Thread(target=poll)
    t.start()
    w = Writer("add", "--index", sharded, "--corpus", tmp_path / "batch0.jsonl", "-q", pause=",".join(points),
               seconds=1)
    try:
        err = w.finish()
    finally:
        time.sleep(0.3)
        done.set()
        t.join(timeout=60)
    assert w.proc.returncode == 0, err
    assert all(f"retr-test-paused {p} " in err for p in points), err
    states = set(seen)
    assert states <= {(n, frozenset()), (n + len(ids), frozenset(ids))}, states - {(n, frozenset())}
    assert states == {(n, frozenset()), (n + len(ids), frozenset(ids))}, states  # it read before and after
    assert len(seen) > 20
    live.close()


def test_two_writers_take_turns(sharded, tmp_path):
    """A second `retr add` waits for the sharded writer lock while the first is half-way (paused between
    shards), then both commit, one after the other; a third waits for a writer that is then killed,
    and goes on from the old state."""
    from retrieval.sharded.index import ShardedIndex

    a, b, c = _batch(tmp_path, 0), _batch(tmp_path, 1), _batch(tmp_path, 2)
    with ShardedIndex.open(sharded) as idx:
        n = len(idx)
    g0 = sh.read(sharded)["generations"]
    first = Writer("add", "--index", sharded, "--corpus", tmp_path / "batch0.jsonl", "-q",
                   pause="sharded:prepared:shard-000", seconds=3)
    first.wait_for("sharded:prepared:shard-000")
    second = Writer("add", "--index", sharded, "--corpus", tmp_path / "batch1.jsonl")
    time.sleep(1.5)
    assert second.proc.poll() is None  # still waiting for the first
    assert first.finish() and first.proc.returncode == 0
    err = second.finish()
    assert second.proc.returncode == 0, err
    assert "waiting for another writer" in err, err
    assert sh.read(sharded)["generations"] == [g + 2 for g in g0]  # two commits, each on both shards
    # a writer killed while another waits: the waiting one goes on from the old state
    third = Writer("add", "--index", sharded, "--corpus", tmp_path / "batch2.jsonl", "-q",
                   pause="sharded:before-switch")
    third.wait_for("sharded:before-switch")
    ids = _batch(tmp_path, 3)
    fourth = Writer("add", "--index", sharded, "--corpus", tmp_path / "batch3.jsonl", "-q")
    time.sleep(1)
    assert fourth.proc.poll() is None
    third.kill()
    err = fourth.finish()
    assert fourth.proc.returncode == 0, err
    with ShardedIndex.open(sharded) as idx:
        assert _seen(idx, 0, a) == set(a) and _seen(idx, 1, b) == set(b)
        assert _seen(idx, 2, c) == set() and _seen(idx, 3, ids) == set(ids)
        assert len(idx) == n + len(a) + len(b) + len(ids)
    r = run_retr("check", "--index", sharded, "--full", "--strict")
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_in_process_server_writes_one_commit(sharded, tmp_path):
    """`retr serve --index SHARDED --writable` (shards in the server process): an add over both shards is one
    commit of shards.json, and its searches see it whole."""
    from retrieval.server.guard import describe_index
    from retrieval.server.sharded import ShardedServed
    from retrieval.types import Document

    ids = _batch(tmp_path, 0)
    g0 = sh.read(sharded)["generations"]
    served = ShardedServed.local("sh", sharded)
    try:
        n = len(served.sharded_index)
        docs = [Document(d, f"{WORD.format(0)} served {d}") for d in ids]
        assert served.write("add", docs) == len(ids)
        assert sh.read(sharded)["generations"] == [g + 1 for g in g0]
        assert describe_index(served, True)["documents"] == n + len(ids)  # GET /v1/NAME's count, before any search
        assert _seen(served.sharded_index, 0, ids) == set(ids) and len(served.sharded_index) == n + len(ids)
        assert served.write("delete", ids[:4] + ["not-there"]) == 4
        assert sh.read(sharded)["generations"] == [g + 2 for g in g0]
        assert _seen(served.sharded_index, 0, ids) == set(ids[4:])
    finally:
        served.close()
    _check(sharded)


def test_auto_refresh_off_reads_one_commit_until_refresh(sharded, tmp_path):
    """``open(path, auto_refresh=False)`` means the same for a sharded folder as for a folder: searches
    keep reading the commit opened until ``refresh()`` moves every shard to the newest; the default
    moves on each call."""
    import retrieval
    from retrieval import ops
    from retrieval.collections import read_corpus
    from retrieval.sharded.index import ShardedIndex

    still, moving = retrieval.open_index(sharded, auto_refresh=False), ShardedIndex.open(sharded)
    n, ids = len(still), _batch(tmp_path, 0)
    ops.add(sharded, list(read_corpus(tmp_path / "batch0.jsonl")), ops.WriteOptions(quiet=True))
    assert _seen(moving, 0, ids) == set(ids) and len(moving) == n + len(ids)
    assert _seen(still, 0, ids) == set() and len(still) == n  # the commit it opened, every shard
    assert still.refresh() is True
    assert _seen(still, 0, ids) == set(ids) and len(still) == n + len(ids)
    assert still.refresh() is False
    still.close(), moving.close()
