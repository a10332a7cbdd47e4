"""A sharded index's long-lived reader (issue #30, as tests/retrieval/test_long_reader.py for one
folder): one reader process keeps ``retrieval.open_index(SHARDED)`` open and searches it from a
thread in a loop, while change after change is committed through `retr add/update/delete/compact
--index SHARDED`: the first of each kind in a `retr` process of its own, the repeats through the same
entry point (cli.main.main) in this process, which is not the reader's either. After each commit the reader's runs (TREC
text) equal a freshly opened sharded index's, and its live documents those of one folder that
received the same changes (its runs too once `retr compact` expunged the deleted documents, which
BM25's statistics count until then: see tests/retrieval/test_sharded_kinds.py); no search of the
loop returns a document deleted before it began, or misses one added and not deleted since; the
reader neither fails nor keeps file descriptors of the generations it left; `retr check` passes.

The reader is this module run as a program (``python -m tests.retrieval.test_sharded_long_reader
SHARDED``), driven one JSON line at a time over stdin/stdout."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.conftest import ROOT, retr_in_process, run_retr

QUERIES = {"q1": "common", "q2": "quokka wombat burrow", "q3": "lucene index segment posting",
           "q4": "island ecology soil", "q5": "fusion ranking query"}
EVERY = "common"  # every document holds it: its hits are the live documents


def run_text(idx) -> str:
    from retrieval.runs import write_run

    res = idx.batch_search(QUERIES, k=200)
    with tempfile.TemporaryDirectory() as d:
        write_run(res, Path(d) / "run", tag="t")
        return (Path(d) / "run").read_text()


def live(idx) -> list:
    return sorted(h.docid for h in idx.search(EVERY, k=10_000, text=False))


# ----------------------------------------------------------------------------------- the reader
def reader(path: str) -> None:
    """Answers ``run`` with its held index's runs, live documents and open descriptors, and ``stop``
    with what its search loop saw: per search (start, end, key of the live set) and the sets."""
    import retrieval

    idx = retrieval.open_index(path)
    stop = threading.Event()
    seen, sets, errors = [], {}, []

    def loop():
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                ids = live(idx)
            except Exception as e:  # noqa: BLE001 - recorded and reported: the test fails on any
                errors.append(f"{type(e).__name__}: {e}")
                continue
            key = sets.setdefault(" ".join(ids), len(sets))
            seen.append((t0, time.monotonic(), key))

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "run":
            out = {"run": run_text(idx), "live": live(idx), "count": len(idx),
                   "fds": len(os.listdir("/proc/self/fd"))}
        elif cmd == "stop":
            stop.set()
            t.join()
            out = {"seen": seen, "sets": {v: k.split() for k, v in sets.items()}, "errors": errors}
        else:
            out = {"error": f"unknown command {cmd!r}"}
        print(json.dumps(out), flush=True)
        if cmd == "stop":
            break
    idx.close()


# ------------------------------------------------------------------------------------- the test
def _corpus(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _doc(docid: str, version: str, words: str) -> dict:
    return {"_id": docid, "title": "", "text": f"{docid} common {version} {words}"}


def _changes(tmp: Path):
    """(op, argument) of each commit: a file of documents to add or update, ids to delete, or none."""
    words = ["quokka wombat island", "lucene index segment", "fusion ranking query posting", "soil burrow ecology",
             "island ecology", "wombat posting index"]
    add = lambda n, lo, hi: _corpus(tmp / f"add{n}.jsonl",  # noqa: E731
                                    [_doc(f"a-{i}", f"v1x{i}", words[i % 6]) for i in range(lo, hi)])
    upd = lambda n, ids: _corpus(tmp / f"upd{n}.jsonl",  # noqa: E731
                                 [_doc(d, f"v2x{n}", words[(n + j) % 6] + " quokka") for j, d in enumerate(ids)])
    return [("add", add(1, 0, 6)), ("delete", ["s-0", "s-1", "s-2", "s-7"]), ("update", upd(1, ["s-3", "a-1"])),
            ("add", add(2, 6, 9)), ("delete", ["a-0", "a-6", "s-11"]), ("update", upd(2, ["s-4", "s-5", "a-2"])),
            ("delete", ["s-3", "a-7"]), ("add", add(3, 9, 12)), ("delete", ["a-9", "s-12"]), ("compact", None)]


def _apply_single(path: Path, op: str, arg) -> None:
    from retrieval import writer
    from retrieval.collections import read_corpus

    fn = {"add": writer.add_documents, "update": writer.update_documents}.get(op)
    if fn is not None:
        fn(path, list(read_corpus(arg)), quiet=True).close()
    elif op == "delete":
        writer.delete_documents(path, arg, quiet=True).close()
    else:
        writer.compact(path, quiet=True).close()


def _ask(p: subprocess.Popen, cmd: str) -> dict:
    p.stdin.write(cmd + "\n")
    p.stdin.flush()
    line = p.stdout.readline()
    assert line, f"the reader died: {p.stderr.read()}"
    return json.loads(line)


def _check_loop(stop: dict, states, commits) -> int:
    """Each search of the loop saw no document deleted, and missed none added, by a commit that
    ended before it began, and nothing no commit during it made: its live set lies between the
    intersection and the union of the states it may have seen."""
    assert not stop["errors"], stop["errors"][:5]
    for t0, t1, key in stop["seen"]:
        got = set(stop["sets"][str(key)])
        first = max([i for i, (_s, e) in enumerate(commits, 1) if e <= t0], default=0)
        last = max([i for i, (s, _e) in enumerate(commits, 1) if s <= t1], default=0)
        window = states[first:last + 1]
        assert set.intersection(*window) <= got <= set.union(*window), (first, last, sorted(got ^ window[0]))
    return len(stop["seen"])


def test_a_sharded_reader_follows_commits_of_other_processes(tmp_path):
    import retrieval
    from retrieval.sharded.write import build_sharded
    from tests import soak

    t_start = time.monotonic()
    seed = soak.seed_corpus(tmp_path / "seed.jsonl", 40)
    single, sharded = tmp_path / "ONE", tmp_path / "SHARDED"
    retrieval.build_index(seed, single, quiet=True).close()
    build_sharded(seed, sharded, 2, quiet=True).close()
    p = subprocess.Popen([sys.executable, "-m", "tests.retrieval.test_sharded_long_reader", str(sharded)],
                         cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = _ask(p, "run")
        with retrieval.open_index(single) as one:
            assert first["run"] == run_text(one) and first["live"] == live(one)
            states = [set(first["live"])]
        commits, fds, done = [], [], set()
        for op, arg in _changes(tmp_path):
            args = ["--corpus", arg] if op in ("add", "update") else list(arg or [])
            t0 = time.monotonic()
            r = (retr_in_process if op in done else run_retr)(op, "--index", sharded, *args, "-q")
            done.add(op)
            commits.append((t0, time.monotonic()))
            assert r.returncode == 0, (op, r.stderr)
            _apply_single(single, op, arg)
            got = _ask(p, "run")
            with retrieval.open_index(sharded) as fresh, retrieval.open_index(single) as one:
                assert got["run"] == run_text(fresh), op
                assert got["live"] == live(one) == live(fresh) and got["count"] == len(one), op
                if op == "compact":  # BM25's statistics count deleted documents until they are merged
                    assert got["run"] == run_text(one)  # away, which the folder and each shard do apart
                states.append(set(got["live"]))
            if op == "delete":
                assert not set(arg) & set(got["live"])
            fds.append(got["fds"])
        stop = _ask(p, "stop")
        assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    searches = _check_loop(stop, states, commits)
    assert searches > 20, searches
    assert len({k for _a, _b, k in stop["seen"]}) >= 4  # the loop saw the index change under it
    # the reader leaves the generations it moved from: its open descriptors do not grow with the commits
    assert fds[-1] <= fds[1] + 8, fds
    r = run_retr("check", "--index", sharded, "--full")
    assert r.returncode == 0 and "every document routes to shard 1 of 2" in r.stdout, r.stdout + r.stderr
    assert time.monotonic() - t_start < 240


def test_a_sharded_reader_stays_right_across_writers_and_rebuilds_in_place(tmp_path):
    """The soak's sharded variant (tests/soak.py, issue #43): two writer processes add, update and delete
    through the sharded index while the first also rebuilds it in place (`--overwrite`) every few changes,
    under a reader process that keeps it open from two threads; every count and text the reader saw is
    the one the writers committed in that commit, the reader never moves back, and it ends on the last."""
    from indexes import sharded as sh
    from retrieval.sharded.write import build_sharded
    from tests import soak

    t0 = time.monotonic()
    seed = soak.seed_corpus(tmp_path / "seed.jsonl", 40)
    path = tmp_path / "SHARDED"
    build_sharded(seed, path, 2, quiet=True).close()
    start = sh.read(path)["generations"]
    stop, out = tmp_path / "stop", tmp_path / "reader.json"
    rd = soak.start_sharded_reader(path, stop, out, threads=2)
    logs = [tmp_path / f"writer{i}.jsonl" for i in range(2)]
    try:
        soak.finish(soak.start_sharded_writers(path, logs, 8, seed, rebuild_every=3, min_ops=6), timeout=240)
    finally:
        stop.write_text("")
    soak.finish([rd], timeout=120)
    logs, seen = soak.read_sharded_log(logs), json.loads(out.read_text())
    problems = soak.verify_sharded(40, start, logs, seen)
    assert not problems, "\n".join(problems[:20])
    ops = {r["op"] for r in logs}
    assert {"add", "update", "delete", "rebuild"} <= ops, ops
    assert seen["searches"] > 30, seen["searches"]
    # it read commits before and after a rebuild (two index ids' generations), not only the last
    rebuilds = [sum(r["generations"]) for r in logs if r["op"] == "rebuild"]
    sums = {sum(map(int, g.split())) for g in seen["generations_seen"]}
    assert min(sums) < rebuilds[0] and max(sums) > rebuilds[0], (sorted(sums), rebuilds)
    r = run_retr("check", "--index", path, "--full")
    assert r.returncode == 0, r.stdout + r.stderr
    assert time.monotonic() - t0 < 200  # (about 50 s on an idle machine; a guard against a hang)


if __name__ == "__main__":
    reader(sys.argv[1])
