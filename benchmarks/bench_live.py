"""Live index benchmark: what adding, deleting and compacting cost on a 100k-passage folder
(BM25 + dense), against a fresh build of the same corpus, and a reader's latency while a
writer adds passages. Timings are ratios within this one run.

    .venv/bin/python benchmarks/bench_live.py [--n 100000] [--queries 400]

The corpus is synthetic (no 100k-passage collection is local): passage i (id ``live-<i>``)
joins a random 60-word window of one passage to a random 40-word window of another, both
drawn at random (seed 0) from the four local collections (SciFact, NFCorpus, Cranfield,
Vaswani; title and text), so the vocabulary and term statistics are those of real text and
passages are about MS MARCO's length. The dense sub-index uses SPLADE-tiny's 2-layer BERT
body (mean pooling, 128 tokens, faiss Flat), about 10x faster to encode than MiniLM here.

Writes benchmarks/results/live.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import COLLECTIONS, ROOT, WORK, machine, write_results

import retrieval
from retrieval.dense.subindex import DenseSpec
from retrieval.types import Document
from retrieval.writer import add_documents, compact, delete_documents

ENCODER = "splade-tiny"


# ----------------------------------------------------------------------------------------- corpus
def synthetic(n: int, out: Path, seed: int = 0) -> Path:
    meta = {"n": n, "seed": seed, "sources": [c.folder for c in COLLECTIONS], "recipe": "60+40 word windows, v1"}
    meta_path = out.with_name(out.name + ".meta.json")
    if out.exists() and meta_path.exists() and json.loads(meta_path.read_text()) == meta:
        return out
    pool = []
    for c in COLLECTIONS:
        for line in open(c.corpus, encoding="utf-8"):
            d = json.loads(line)
            t = " ".join(x for x in (d.get("title") or "", d.get("text") or "") if x.strip())
            if t.strip():
                pool.append(t)
    pool = [p.split() for p in pool]
    rng = random.Random(seed)
    out.parent.mkdir(parents=True, exist_ok=True)

    def window(words, size):
        s = rng.randrange(max(1, len(words) - size + 1))
        return words[s:s + size]

    with open(out, "w", encoding="utf-8") as f:
        for i in range(n):
            words = window(pool[rng.randrange(len(pool))], 60) + window(pool[rng.randrange(len(pool))], 40)
            f.write(json.dumps({"_id": f"live-{i:06d}", "title": "", "text": " ".join(words)}) + "\n")
    meta_path.write_text(json.dumps(meta) + "\n")
    return out


def write_jsonl(docs, path: Path) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"_id": d.docid, "title": d.title, "text": d.text}) + "\n")
    return path


# ----------------------------------------------------------------------------------------- measuring
def inodes(path: Path, skip: str = "\0") -> dict:
    """inode -> bytes of every file under ``path`` (a hard-linked file counts once), leaving out
    files whose name starts with ``skip``."""
    out = {}
    for root, _dirs, files in os.walk(path):
        for f in files:
            if f.startswith(skip):
                continue
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            out[(st.st_dev, st.st_ino)] = st.st_size
    return out


def folder_bytes(path: Path) -> int:
    return sum(inodes(path).values())


def io_written() -> int:
    """Bytes this process and its finished children sent to storage (Linux I/O accounting,
    counted when pages are dirtied; temporary files included)."""
    own = 0
    try:
        for line in open("/proc/self/io"):
            if line.startswith("write_bytes:"):
                own = int(line.split()[1])
    except OSError:
        pass
    return own + resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock * 512


def measure(path: Path, fn) -> dict:
    """Run ``fn`` while a reader holds the current generation (so nothing of it is collected
    meanwhile) and report its seconds, the bytes written, and the new data it left in the folder."""
    holder = retrieval.open_index(path, auto_refresh=False)
    store = Path(path) / holder.manifest["docstore"]["path"]
    before = inodes(path, skip=store.name)
    store_sizes = lambda: sum(p.stat().st_size for p in (store, Path(f"{store}-wal")) if p.exists())  # noqa: E731
    s0 = store_sizes()
    w0 = io_written()
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    written = io_written() - w0
    after = inodes(path, skip=store.name)
    new_files = sum(size for key, size in after.items() if key not in before)
    kept = new_files + max(0, store_sizes() - s0)
    holder.close()
    return {"seconds": round(seconds, 3), "written_bytes": written, "new_bytes": kept}

def latencies(idx, queries, retrievers, until=None, limit=None):
    """Per-search seconds over ``queries`` (cycled), alternating ``retrievers``; runs until
    ``until()`` is false (or ``limit`` searches)."""
    out = {r: [] for r in retrievers}
    i = 0
    while (until is None or until()) and (limit is None or i < limit):
        r = retrievers[i % len(retrievers)]
        q = queries[i % len(queries)]
        t0 = time.perf_counter()
        idx.search(q, k=10, retriever=r)
        out[r].append(time.perf_counter() - t0)
        i += 1
    return out


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


# ----------------------------------------------------------------------------------------- run
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=400, help="searches per idle window")
    ap.add_argument("--work", type=Path, default=WORK / "live")
    ap.add_argument("--keep", action="store_true", help="reuse a built folder of the same size")
    args = ap.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    extra_n = 10 + 100 + 1000 + 100 + 2000
    corpus = synthetic(args.n + extra_n, work / f"synthetic-{args.n + extra_n}.jsonl")
    all_docs = list(retrieval.read_corpus(corpus))
    base, extra = all_docs[:args.n], all_docs[args.n:]
    base_file = write_jsonl(base, work / "base.jsonl")
    spec = DenseSpec(model=ENCODER, max_length=128)
    path = work / "IDX"
    out = {"machine": machine(), "n": args.n, "encoder": ENCODER, "factory": spec.factory,
           "corpus": "synthetic: a random 60-word window of one passage of SciFact, NFCorpus, Cranfield or Vaswani "
                     "joined to a 40-word window of another (seed 0)"}
    print(f"building {args.n:,} passages (bm25 + dense {ENCODER}) ...", flush=True)
    if not (args.keep and (path / "manifest.json").exists() and len(retrieval.open_index(path)) == args.n):
        if path.exists():
            shutil.rmtree(path)
        t0 = time.perf_counter()
        retrieval.build_index(base_file, path, subindexes={"dense": spec}, quiet=True)
        out["initial_build_seconds"] = round(time.perf_counter() - t0, 1)
    out["folder_bytes"] = folder_bytes(path)
    print(f"folder {out['folder_bytes'] / 1e6:.1f} MB", flush=True)

    ops = []
    adds = [extra[:10], extra[10:110], extra[110:1110]]
    later = extra[1110:]  # added by the writer process while a reader searches
    rng = random.Random(1)
    victims = rng.sample([d.docid for d in base], 1001)
    for docs in adds:
        r = measure(path, lambda d=docs: add_documents(path, d, quiet=True))
        ops.append(dict(r, op=f"add {len(docs):,}"))
        print(ops[-1], flush=True)
    r = measure(path, lambda: delete_documents(path, victims[:1], quiet=True))
    ops.append(dict(r, op="delete 1"))
    r = measure(path, lambda: delete_documents(path, victims[1:], quiet=True))
    ops.append(dict(r, op="delete 1,000"))
    print(ops[-2:], flush=True)
    # the CLI, as a separate process (imports, the JVM, the encoder load count too)
    cli_file = write_jsonl(later[:100], work / "cli-100.jsonl")
    r = measure(path, lambda: subprocess.run([sys.executable, "-m", "cli.main", "add", "--index", str(path), "--corpus",
                                              str(cli_file), "-q", "--nice", "0"], cwd=ROOT, check=True))
    ops.append(dict(r, op="add 100 (retr add, new process)"))
    print(ops[-1], flush=True)

    # reader latency: idle, while `retr add` of 1,000 passages runs in another process, idle again;
    # the writer at retr's default priority (nice 10), then at full priority (--nice 0)
    qs = [q.text for c in COLLECTIONS[:2] for q in c.queries()]
    random.Random(2).shuffle(qs)
    reader = retrieval.open_index(path)
    rs = ["bm25", "dense"]
    latencies(reader, qs, rs, limit=50)  # warm: JVM, encoder, page cache
    out["reader"] = []
    for k, nice in enumerate((10, 0)):
        idle1 = latencies(reader, qs, rs, limit=args.queries)
        writer_file = write_jsonl(later[100 + 1000 * k:1100 + 1000 * k], work / f"writer-{k}.jsonl")
        g0 = reader.generation
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", "add", "--index", str(path), "--corpus",
                                 str(writer_file), "-q", "--nice", str(nice)], cwd=ROOT)
        t0 = time.perf_counter()
        during = latencies(reader, qs, rs, until=lambda: proc.poll() is None)
        writer_s = time.perf_counter() - t0
        assert proc.returncode == 0
        idle2 = latencies(reader, qs, rs, limit=args.queries)
        lat = {}
        for r in rs:
            idle = idle1[r] + idle2[r]
            lat[r] = {"idle_p50_ms": round(1000 * pct(idle, 50), 2), "idle_p99_ms": round(1000 * pct(idle, 99), 2),
                      "during_p50_ms": round(1000 * pct(during[r], 50), 2),
                      "during_p99_ms": round(1000 * pct(during[r], 99), 2),
                      "idle_searches": len(idle), "during_searches": len(during[r])}
            lat[r]["p99_ratio"] = round(lat[r]["during_p99_ms"] / lat[r]["idle_p99_ms"], 2)
        out["reader"].append({"writer_nice": nice, "latency": lat, "writer_seconds": round(writer_s, 1),
                              "generation_before": g0, "generation_after": reader.generation,
                              "writer": f"retr add --nice {nice} of 1,000 passages (separate process)"})
        print(out["reader"][-1], flush=True)
    reader.close()

    r = measure(path, lambda: compact(path, quiet=True))
    ops.append(dict(r, op="compact"))
    print(ops[-1], flush=True)
    compact(path, quiet=True)  # nothing left to compact: removes the generations nobody holds any more
    idx = retrieval.open_index(path)
    out["final_documents"] = len(idx)
    out["final_folder_bytes"] = folder_bytes(path)

    # a fresh build of the same final corpus, for time and for the results
    final_file = write_jsonl([Document(d, text, title) for d, title, text, _m in idx.docstore.iter_docs()],
                             work / "final.jsonl")
    fresh_path = work / "FRESH"
    if fresh_path.exists():
        shutil.rmtree(fresh_path)
    w0 = io_written()
    t0 = time.perf_counter()
    fresh = retrieval.build_index(final_file, fresh_path, subindexes={"dense": spec}, quiet=True)
    out["rebuild_seconds"] = round(time.perf_counter() - t0, 1)
    out["rebuild_written_bytes"] = io_written() - w0
    out["rebuild_folder_bytes"] = folder_bytes(fresh_path)
    probe = qs[:200]
    same_bm25 = all([(h.docid, round(h.score, 4)) for h in idx.search(q, k=100, retriever="bm25", text=False)]
                    == [(h.docid, round(h.score, 4)) for h in fresh.search(q, k=100, retriever="bm25", text=False)] for q in probe)
    dense_diff = 0.0
    for q in probe[:50]:
        a = {h.docid: h.score for h in idx.search(q, k=10, retriever="dense", text=False)}
        b = {h.docid: h.score for h in fresh.search(q, k=10, retriever="dense", text=False)}
        dense_diff = max([dense_diff] + [abs(a[d] - b[d]) for d in set(a) & set(b)])
    out["after_compaction"] = {"bm25_top100_equal_fresh": same_bm25, "dense_max_score_diff": dense_diff,
                               "queries": len(probe)}
    for o in ops:
        o["time_vs_rebuild"] = round(o["seconds"] / out["rebuild_seconds"], 4)
        o["written_vs_folder"] = round(o["written_bytes"] / out["folder_bytes"], 4)
        o["new_vs_folder"] = round(o["new_bytes"] / out["folder_bytes"], 4)
    out["operations"] = ops
    a100 = next(o for o in ops if o["op"] == "add 100")
    out["targets"] = {
        "add_100_time_under_5pct_of_rebuild": a100["time_vs_rebuild"] < 0.05,
        "add_100_writes_under_5pct_of_folder": a100["written_vs_folder"] < 0.05,
        "reader_p99_within_2x_while_adding_1000": all(v["p99_ratio"] <= 2.0
                                                      for v in out["reader"][0]["latency"].values()),
    }
    write_results("live", out, markdown(out))
    shutil.rmtree(fresh_path, ignore_errors=True)


def markdown(o: dict) -> str:
    mb = lambda b: f"{b / 1e6:.2f} MB"  # noqa: E731
    rows = [[x["op"], f"{x['seconds']:.2f}", f"{100 * x['time_vs_rebuild']:.2f}%", mb(x["written_bytes"]),
             f"{100 * x['written_vs_folder']:.2f}%", mb(x["new_bytes"])] for x in o["operations"]]
    lrows = [[f"nice {x['writer_nice']}", r, v["idle_p50_ms"], v["idle_p99_ms"], v["during_p50_ms"], v["during_p99_ms"],
              f"{v['p99_ratio']}x", f"{v['idle_searches']} / {v['during_searches']}", x["writer_seconds"]]
             for x in o["reader"] for r, v in x["latency"].items()]
    t = o["targets"]
    yes = lambda b: "met" if b else "missed"  # noqa: E731
    return f"""# Live index: the cost of a change (`bench_live.py`)

{o['n']:,} passages, {o['corpus']}; sub-indexes BM25 and dense ({o['encoder']} BERT body, mean pooling, faiss
{o['factory']}). Folder {mb(o['folder_bytes'])} as built; {mb(o['final_folder_bytes'])} after the changes, compaction and the
removal of old generations. Reference: a fresh build of the final corpus ({o['final_documents']:,} passages) took
{o['rebuild_seconds']} s, wrote {mb(o['rebuild_written_bytes'])} and made a {mb(o['rebuild_folder_bytes'])} folder.
Changes run through the Python API in a process that has the JVM up, except the `retr add` row (a new process:
imports, JVM start and encoder load included). "written" is the Linux I/O accounting of the writer (and its Java
child), temporary files included; "new data" is what the change left in the folder (new files, document-store
growth) while the old generation was still held. Machine: {o['machine']['cpus']} CPUs shared with other work, so
only ratios within this run mean anything.

| change | seconds | vs rebuild | written | vs folder | new data kept |
|---|---|---|---|---|---|
""" + "\n".join("| " + " | ".join(map(str, r)) + " |" for r in rows) + f"""

**Reader latency** (ms per search, k=10 with text; SciFact and NFCorpus test queries, bm25 and dense alternating)
in this process, idle and while `retr add` of 1,000 passages ran in another process, at retr's default priority for
changes (`--nice 10`) and at full priority (`--nice 0`). The reader moved to each new generation on its own.

| writer | retriever | idle p50 | idle p99 | during p50 | during p99 | p99 ratio | searches idle / during | writer s |
|---|---|---|---|---|---|---|---|---|
""" + "\n".join("| " + " | ".join(map(str, r)) + " |" for r in lrows) + f"""

After compaction the BM25 top 100 of {o['after_compaction']['queries']} queries equals the fresh build's:
{o['after_compaction']['bm25_top100_equal_fresh']}; largest dense score difference (top 10, 50 queries):
{o['after_compaction']['dense_max_score_diff']:.2e}.

Targets: adding 100 passages under 5% of a rebuild's time: **{yes(t['add_100_time_under_5pct_of_rebuild'])}**;
writing under 5% of the folder: **{yes(t['add_100_writes_under_5pct_of_folder'])}**; reader p99 within 2x of idle
while 1,000 passages are added: **{yes(t['reader_p99_within_2x_while_adding_1000'])}**.
"""


if __name__ == "__main__":
    main()
