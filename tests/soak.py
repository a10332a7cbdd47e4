"""Long-lived readers under outside writes: the processes of the soak (issue #24).

Writers (``python -m tests.soak writer``) add, update, delete and compact their own documents
of one folder in a loop, each change through the library in a process of its own, and log every
commit they make: its generation, the document count readers of it must see, and what became of
each document it touched. A reader (``python -m tests.soak reader``) keeps one Index open from
several threads for the whole run, searching as a served index does, and checks inside snapshots
of one generation that the parts agree (BM25's live documents, the store's count, the manifest's
count, a document's text and the postings that find it); it records what it saw, so the caller
can compare every observation with the writers' logs afterwards (:func:`verify`).

Every document holds the word ``common`` (a search for it returns every live document) and a
version word ``v<writer>x<n>`` unique to the text it was written with.

The suite runs it for seconds (tests/retrieval/test_long_reader.py), the benchmark for minutes
(benchmarks/bench_soak.py).

The sharded variant (``sharded-writer``, ``sharded-reader``; issue #43): writers change a sharded
index through :mod:`retrieval.sharded.write`, and writer 0 also rebuilds it from the seed corpus
(``retr index --shards N --overwrite``'s :func:`~retrieval.sharded.write.build_sharded`) every few
changes; each writer logs the commit it made by the sharded record it committed (``generations``:
every shard's generation only grows, across rebuilds too, so their sum orders the commits). The
reader keeps one ``ShardedIndex`` open and checks inside one held commit (``reading()``) what it
checks in one generation of a folder; :func:`verify_sharded` replays the logs (a rebuild resets
the documents to the seed corpus) and compares.
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Dict, List, Optional

WORDS = ("retrieval passage sparse dense lucene index segment posting vector query ranking fusion store "
         "generation writer reader commit snapshot quokka wombat island ecology marsupial burrow soil").split()


def text_of(docid: str, version: str, rnd: random.Random) -> str:
    return f"{docid} common {version} " + " ".join(rnd.choice(WORDS) for _ in range(12))


def seed_corpus(path: Path, n: int, seed: int = 0) -> Path:
    """A BEIR-style corpus of ``n`` seed documents (``s-<i>``, version ``v0x<i>``)."""
    rnd = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            d = f"s-{i}"
            f.write(json.dumps({"_id": d, "title": "", "text": text_of(d, f"v0x{i}", rnd)}) + "\n")
    return path


def version_in(text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    return text.split()[2]


# ------------------------------------------------------------------------------------------ writer
def writer(index: Path, wid: int, seconds: float, log: Path, seed: int, compact_every: int, min_ops: int = 0) -> int:
    from retrieval.types import Document
    from retrieval.writer import add_documents, compact, delete_documents, update_documents

    rnd = random.Random(seed)
    mine: List[str] = []      # this writer's live documents
    n = 0                     # versions written
    ops = 0
    deadline = time.monotonic() + seconds
    with open(log, "a", encoding="utf-8") as out:
        while time.monotonic() < deadline or ops < min_ops:  # (at least min_ops changes on a slow machine)
            ops += 1
            rep: dict = {}
            touched: Dict[str, Optional[str]] = {}
            if compact_every and ops % compact_every == 0:
                op = "compact"
                compact(index, quiet=True, report=rep)
            else:
                op = rnd.choice(["add", "add", "update", "delete"] if mine else ["add"])
                if op == "add":
                    docs = []
                    for _ in range(rnd.randint(1, 4)):
                        n += 1
                        d, v = f"w{wid}-{n}", f"v{wid + 1}x{n}"
                        docs.append(Document(d, text_of(d, v, rnd)))
                        touched[d] = v
                    add_documents(index, docs, quiet=True, report=rep)
                    mine += list(touched)
                elif op == "update":
                    docs = []
                    for d in rnd.sample(mine, min(len(mine), rnd.randint(1, 3))):
                        n += 1
                        v = f"v{wid + 1}x{n}"
                        docs.append(Document(d, text_of(d, v, rnd)))
                        touched[d] = v
                    update_documents(index, docs, quiet=True, report=rep)
                else:
                    d = rnd.choice(mine)
                    delete_documents(index, [d], quiet=True, report=rep)
                    mine.remove(d)
                    touched[d] = None
            if "generation" in rep:  # a compaction with nothing to drop commits nothing
                out.write(json.dumps({"gen": rep["generation"], "documents": rep["documents"], "op": op,
                                      "writer": wid, "docs": touched, "t": time.time()}) + "\n")
                out.flush()
    return 0


# ------------------------------------------------------------------------------------------ reader
class Reader:
    """One open Index searched from ``threads`` threads until ``stop`` appears."""

    def __init__(self, index: Path, threads: int, stop: Path, seed: int):
        import retrieval

        self.idx = retrieval.open_index(index)
        self.stop, self.threads, self.seed = stop, threads, seed
        self.lock = threading.Lock()
        self.searches = 0
        self.failures: List[str] = []
        self.counts: Dict[int, List[int]] = {}        # generation -> the counts its parts gave
        self.texts: List[tuple] = []                  # (generation, docid, version seen or None)
        self.generations: List[int] = []              # each thread's generations, in order seen
        self.backwards = 0

    def fail(self, what: str) -> None:
        with self.lock:
            if len(self.failures) < 50:
                self.failures.append(what)
            else:
                self.failures[-1] = f"... and more; last: {what}"

    def loop(self, t: int) -> None:
        rnd = random.Random(self.seed * 100 + t)
        last = -1
        while not self.stop.exists():
            try:
                if t == 0:  # one thread moves on explicitly, so that a generation it cannot open is an error
                    self.idx.refresh()
                self.once(rnd)
                g = self.idx.generation
                if g < last:
                    with self.lock:
                        self.backwards += 1
                last = g
            except Exception as e:  # every failure is counted and reported, none stops the run
                self.fail(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")

    def once(self, rnd: random.Random) -> None:
        # as a server does: a plain search on the Index, which moves to the newest generation
        hits = self.idx.search("common " + rnd.choice(WORDS), k=10, text=True)
        for h in hits:
            if h.text is None or "common" not in h.text.split():
                self.fail(f"hit {h.docid} without its text")
        with self.idx.snapshot() as s:
            g = s.generation
            every = s.search("common", k=100_000, text=False)
            stored = len(s.docstore)
            parts = [len(s), stored, len(every)]
            if len(set(parts)) != 1:
                self.fail(f"generation {g}: manifest / store / BM25 counts {parts}")
            sample = rnd.sample(every, min(3, len(every)))
            seen = []
            for h in sample:
                doc = s.get(h.docid)
                v = version_in(doc.text if doc else None)
                seen.append((g, h.docid, v))
                if v is None:
                    self.fail(f"generation {g}: {h.docid} is in BM25 but not in the store")
                    continue
                top = s.search(v, k=3, text=True)
                if not top or top[0].docid != h.docid or v not in top[0].text.split():
                    self.fail(f"generation {g}: the version word {v} of {h.docid} finds "
                              f"{[x.docid for x in top]}")
        with self.lock:
            self.searches += 3 + len(sample)
            self.counts.setdefault(g, []).append(parts[0])
            self.texts.extend(seen)
            self.generations.append(g)

    def run(self) -> dict:
        t0 = time.monotonic()
        ts = [threading.Thread(target=self.loop, args=(i,), daemon=True) for i in range(self.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        try:
            self.idx.refresh()
        except Exception as e:
            self.fail(f"the last refresh: {type(e).__name__}: {e}")
        final = {"generation": self.idx.generation, "documents": len(self.idx), "store": len(self.idx.docstore)}
        return {"seconds": round(time.monotonic() - t0, 1), "searches": self.searches, "failures": self.failures,
                "backwards": self.backwards, "counts": {str(g): sorted(set(v)) for g, v in self.counts.items()},
                "texts": self.texts, "generations_seen": sorted(set(self.generations)), "final": final}


# ------------------------------------------------------------------------------------------ sharded variant
def sharded_writer(index: Path, wid: int, seconds: float, log: Path, seed: int, rebuild_every: int,
                   corpus: Optional[Path], min_ops: int = 0) -> int:
    """Changes of the sharded index ``index`` in a loop, each under its writer lock (re-entrant: the
    change takes it again) so that the record read afterwards is this writer's own commit; with
    ``rebuild_every``, every that many changes a rebuild from ``corpus`` with the same shards."""
    from indexes import generations as gens
    from indexes import sharded as sh
    from retrieval.sharded.write import build_sharded, delete_documents, write_documents
    from retrieval.types import Document

    rnd = random.Random(seed)
    mine: List[str] = []
    first = ["add", "delete", "add", "update"]
    n = ops = 0
    deadline = time.monotonic() + seconds
    with open(log, "a", encoding="utf-8") as out:
        while time.monotonic() < deadline or ops < min_ops:
            ops += 1
            touched: Dict[str, Optional[str]] = {}
            if rebuild_every and ops % rebuild_every == 0:
                op = "rebuild"
                rep: dict = {}
                shards = sh.read(index)["shards"]
                build_sharded(corpus, index, shards, overwrite=True, quiet=True, report=rep).close()
                record = rep["record"]
                mine = []
            else:
                # the first changes are one of each kind (a loaded machine may leave time for only min_ops, and
                # a chance draw of them can miss one); the rebuilding writer's documents are deleted or
                # rebuilt away by no other writer, so its delete always commits
                op = first.pop(0) if first and (mine or first[0] == "add") else \
                    rnd.choice(["add", "add", "update", "delete"] if mine else ["add"])
                with gens.writer_lock(index):
                    before = sh.read(index)
                    if op in ("add", "update"):
                        docs = []
                        ids = [None] * rnd.randint(1, 4) if op == "add" else \
                            rnd.sample(mine, min(len(mine), rnd.randint(1, 3)))
                        for d in ids:
                            n += 1
                            d = d or f"w{wid}-{n}"
                            v = f"v{wid + 1}x{n}"
                            docs.append(Document(d, text_of(d, v, rnd)))
                            touched[d] = v
                        # (an update of a document a rebuild removed adds it again)
                        write_documents(index, docs, op, quiet=True)
                        mine += [d for d in touched if d not in mine]
                    else:
                        d = rnd.choice(mine)
                        delete_documents(index, [d], quiet=True, missing_ok=True)  # (gone if rebuilt since)
                        mine.remove(d)
                        touched[d] = None
                    record = sh.read(index)
                if (record["id"], record["generations"]) == (before["id"], before["generations"]):
                    continue  # nothing committed (a delete of a document a rebuild removed)
            out.write(json.dumps({"generations": record["generations"], "id": record["id"], "op": op,
                                  "writer": wid, "docs": touched, "t": time.time()}) + "\n")
            out.flush()
    return 0


class ShardedReader(Reader):
    """One open ShardedIndex searched from ``threads`` threads; each observation inside one commit of
    every shard (``reading()``), named by the shards' generations (a tuple, as the writers log it)."""

    def generation_now(self) -> tuple:
        return tuple(s.index.generation for s in self.idx.shards)

    def loop(self, t: int) -> None:
        rnd = random.Random(self.seed * 100 + t)
        last = -1
        while not self.stop.exists():
            try:
                g = self.once(rnd)
                if sum(g) < last:
                    with self.lock:
                        self.backwards += 1
                last = sum(g)
            except Exception as e:  # every failure is counted and reported, none stops the run
                self.fail(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")

    def once(self, rnd: random.Random) -> tuple:
        idx = self.idx
        with idx._reading():  # one commit of every shard for all that follows
            g = self.generation_now()
            hits = idx.search("common " + rnd.choice(WORDS), k=10, text=True)
            for h in hits:
                if h.text is None or "common" not in h.text.split():
                    self.fail(f"hit {h.docid} without its text")
            every = idx.search("common", k=100_000, text=False)
            parts = [len(idx), len(every)]
            if len(set(parts)) != 1:
                self.fail(f"commit {g}: shards' count / BM25 count {parts}")
            sample = rnd.sample(every, min(3, len(every)))
            seen = []
            for h in sample:
                doc = idx.get(h.docid)
                v = version_in(doc.text if doc else None)
                seen.append((list(g), h.docid, v))
                if v is None:
                    self.fail(f"commit {g}: {h.docid} is in BM25 but not in the store")
                    continue
                top = idx.search(v, k=3, text=True)
                if not top or top[0].docid != h.docid or v not in top[0].text.split():
                    self.fail(f"commit {g}: the version word {v} of {h.docid} finds {[x.docid for x in top]}")
        with self.lock:
            self.searches += 3 + len(sample)
            self.counts.setdefault(" ".join(map(str, g)), []).append(parts[0])
            self.texts.extend(seen)
            self.generations.append(list(g))
        return g

    def run(self) -> dict:
        t0 = time.monotonic()
        ts = [threading.Thread(target=self.loop, args=(i,), daemon=True) for i in range(self.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        final: dict = {}
        try:
            with self.idx._reading():
                final = {"generations": list(self.generation_now()), "documents": len(self.idx)}
        except Exception as e:
            self.fail(f"the last read: {type(e).__name__}: {e}")
        return {"seconds": round(time.monotonic() - t0, 1), "searches": self.searches, "failures": self.failures,
                "backwards": self.backwards, "counts": {g: sorted(set(v)) for g, v in self.counts.items()},
                "texts": self.texts, "generations_seen": sorted({" ".join(map(str, g)) for g in self.generations}),
                "final": final}


def read_sharded_log(paths) -> List[dict]:
    out = [json.loads(line) for p in paths for line in Path(p).read_text(encoding="utf-8").splitlines()]
    return sorted(out, key=lambda r: sum(r["generations"]))


def verify_sharded(seed_docs: int, start: List[int], logs: List[dict], seen: dict) -> List[str]:
    """Every way the sharded reader's observations disagree with the writers' commits (empty: none).
    ``start``: the shards' generations of the index the reader opened (the seed corpus)."""
    problems = list(seen["failures"])
    seed_state = {f"s-{i}": f"v0x{i}" for i in range(seed_docs)}
    states = {" ".join(map(str, start)): dict(seed_state)}
    order = [" ".join(map(str, start))]
    state = dict(seed_state)
    last = start
    for r in logs:
        g = r["generations"]
        if not all(b >= a for a, b in zip(last, g)) or sum(g) <= sum(last):
            problems.append(f"commit {g} ({r['op']}) does not move on from {last}")
        last = g
        if r["op"] == "rebuild":
            state = dict(seed_state)
        for d, v in r["docs"].items():
            if v is None:
                state.pop(d, None)
            else:
                state[d] = v
        key = " ".join(map(str, g))
        if key in states:
            problems.append(f"two commits named {key}")
        states[key] = dict(state)
        order.append(key)
    for key, ns in seen["counts"].items():
        if key not in states:
            problems.append(f"the reader read commit {key}, which no writer made")
        elif ns != [len(states[key])]:
            problems.append(f"commit {key}: the reader counted {ns}, the writers committed {len(states[key])}")
    for g, d, v in seen["texts"]:
        key = " ".join(map(str, g))
        if key in states and states[key].get(d) != v:
            problems.append(f"commit {key}: {d} read as {v}, committed as {states[key].get(d)}")
    if seen["backwards"]:
        problems.append(f"a thread's commit went backwards {seen['backwards']} times")
    final = seen["final"]
    if " ".join(map(str, final.get("generations", []))) != order[-1] or final.get("documents") != len(state):
        problems.append(f"after the writers: the reader is at {final}, the last commit is {order[-1]} with "
                        f"{len(state)} documents")
    return problems


# ------------------------------------------------------------------------------------------ processes
ROOT = Path(__file__).resolve().parents[1]
_PY = [sys.executable, "-m", "tests.soak"]


def start_reader(index: Path, stop: Path, out: Path, threads: int = 3) -> subprocess.Popen:
    """A reader process, returned once it holds ``index`` open; it writes ``out`` after ``stop`` appears."""
    p = subprocess.Popen([*_PY, "reader", "--index", str(index), "--threads", str(threads), "--stop", str(stop),
                          "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.stdout.readline().strip() != "reader-ready":
        raise RuntimeError(f"the reader did not start: {p.stderr.read()}")
    return p


def start_writers(index: Path, logs, seconds: float, compact_every: int, min_ops: int = 0) -> List[subprocess.Popen]:
    """One writer process per log file (writer i seeded i; writer 0 also compacts every ``compact_every``
    changes)."""
    return [subprocess.Popen([*_PY, "writer", "--index", str(index), "--id", str(i), "--seconds", str(seconds),
                              "--log", str(log), "--seed", str(i), "--compact-every",
                              str(compact_every if i == 0 else 0), "--min-ops", str(min_ops)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i, log in enumerate(logs)]


def start_sharded_reader(index: Path, stop: Path, out: Path, threads: int = 2) -> subprocess.Popen:
    """:func:`start_reader` of the sharded reader."""
    p = subprocess.Popen([*_PY, "sharded-reader", "--index", str(index), "--threads", str(threads), "--stop",
                          str(stop), "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    if p.stdout.readline().strip() != "reader-ready":
        raise RuntimeError(f"the reader did not start: {p.stderr.read()}")
    return p


def start_sharded_writers(index: Path, logs, seconds: float, corpus: Path, rebuild_every: int,
                          min_ops: int = 0) -> List[subprocess.Popen]:
    """One sharded writer process per log file (writer i seeded i; writer 0 also rebuilds the index from
    ``corpus`` every ``rebuild_every`` changes)."""
    return [subprocess.Popen([*_PY, "sharded-writer", "--index", str(index), "--id", str(i), "--seconds",
                              str(seconds), "--log", str(log), "--seed", str(i), "--rebuild-every",
                              str(rebuild_every if i == 0 else 0), "--corpus", str(corpus), "--min-ops",
                              str(min_ops)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i, log in enumerate(logs)]


def finish(procs, timeout: Optional[float] = None) -> None:
    """Wait for each process; one that failed raises with its stderr."""
    for p in procs:
        _, err = p.communicate(timeout=timeout)
        if p.returncode:
            raise RuntimeError(f"{' '.join(p.args[3:5])} exited {p.returncode}: {err}")


# ------------------------------------------------------------------------------------------ checks
def read_log(paths) -> List[dict]:
    out = []
    for p in paths:
        for line in Path(p).read_text(encoding="utf-8").splitlines():
            out.append(json.loads(line))
    return sorted(out, key=lambda r: r["gen"])


def verify(seed_docs: int, logs: List[dict], seen: dict) -> List[str]:
    """Every way the reader's observations disagree with the writers' commits (empty: none)."""
    problems = list(seen["failures"])
    gens = [r["gen"] for r in logs]
    if len(set(gens)) != len(gens):
        problems.append(f"two commits made the same generation: {gens}")
    if gens and gens != list(range(1, len(gens) + 1)):
        problems.append(f"the committed generations are not 1..{len(gens)}: {gens}")
    count = {0: seed_docs, **{r["gen"]: r["documents"] for r in logs}}
    for g, ns in seen["counts"].items():
        if int(g) in count and ns != [count[int(g)]]:
            problems.append(f"generation {g}: the reader counted {ns}, the writer committed {count[int(g)]}")
    history: Dict[str, List[tuple]] = {}
    for r in logs:
        for d, v in r["docs"].items():
            history.setdefault(d, []).append((r["gen"], v))
    for g, d, v in seen["texts"]:
        want = f"v0x{d[2:]}" if d.startswith("s-") else None
        for hg, hv in history.get(d, []):
            if hg <= g:
                want = hv
        if v != want:
            problems.append(f"generation {g}: {d} read as {v}, committed as {want}")
    if seen["backwards"]:
        problems.append(f"a thread's generation went backwards {seen['backwards']} times")
    last = max(gens, default=0)
    final = seen["final"]
    if final["generation"] != last or final["documents"] != count[last] or final["store"] != count[last]:
        problems.append(f"after the writers: the reader is at {seen['final']}, the last commit is "
                        f"generation {last} with {count[last]} documents")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.soak")
    sub = ap.add_subparsers(dest="role", required=True)
    w = sub.add_parser("writer")
    w.add_argument("--index", type=Path, required=True)
    w.add_argument("--id", type=int, required=True)
    w.add_argument("--seconds", type=float, required=True)
    w.add_argument("--log", type=Path, required=True)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--compact-every", type=int, default=0)
    w.add_argument("--min-ops", type=int, default=0, help="changes to make at least, however long they take")
    r = sub.add_parser("reader")
    r.add_argument("--index", type=Path, required=True)
    r.add_argument("--threads", type=int, default=3)
    r.add_argument("--stop", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--seed", type=int, default=0)
    w = sub.add_parser("sharded-writer")
    w.add_argument("--index", type=Path, required=True)
    w.add_argument("--id", type=int, required=True)
    w.add_argument("--seconds", type=float, required=True)
    w.add_argument("--log", type=Path, required=True)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--rebuild-every", type=int, default=0)
    w.add_argument("--corpus", type=Path, default=None, help="the corpus a rebuild indexes")
    w.add_argument("--min-ops", type=int, default=0)
    r = sub.add_parser("sharded-reader")
    r.add_argument("--index", type=Path, required=True)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--stop", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.role == "writer":
        return writer(a.index, a.id, a.seconds, a.log, a.seed, a.compact_every, a.min_ops)
    if a.role == "sharded-writer":
        return sharded_writer(a.index, a.id, a.seconds, a.log, a.seed, a.rebuild_every, a.corpus, a.min_ops)
    rd = (ShardedReader if a.role == "sharded-reader" else Reader)(a.index, a.threads, a.stop, a.seed)
    print("reader-ready", flush=True)
    a.out.write_text(json.dumps(rd.run()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
