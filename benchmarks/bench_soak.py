"""Soak: minutes of mixed writes by other processes under long-lived readers (issue #24).

Three writer processes add, update, delete and compact one folder for ``--seconds`` (each its
own documents; tests/soak.py). Two readers stay open the whole time:

- `retr serve` (a real server on 127.0.0.1): four client threads search it with passage text,
  and a follower polls ``GET /v1/soak`` every 50 ms, recording the generation and count it serves;
- an in-process reader (``python -m tests.soak reader``): one Index searched from three threads,
  which checks inside one-generation snapshots that BM25, the store and the manifest agree and
  that a document's text is the one its version word finds.

Reported: searches and failed searches of each reader; whether every count either reader saw is
the count the writers committed for that generation; whether every text the in-process reader
read is the version committed for its generation; how many generations each saw; and how long
the server took to serve a commit (from the writer's commit to the follower's first poll that
shows it: an upper bound by up to one poll, 50 ms). The suite runs the same procedure for
12 seconds (tests/retrieval/test_long_reader.py).

    .venv/bin/python benchmarks/bench_soak.py [--seconds 180] [--docs 2000]

Writes benchmarks/results/soak.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import threading
import time

from common import WORK, machine, md_table, write_results

import httpx

import retrieval
from tests import soak
from tests.server.conftest import Server

CLIENT_QUERIES = ["common retrieval passage", "quokka island", "lucene segment posting", "dense vector query"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=180.0, help="how long the writers write")
    ap.add_argument("--docs", type=int, default=2000, help="seed documents")
    ap.add_argument("--writers", type=int, default=3)
    a = ap.parse_args()
    work = WORK / "soak"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    path = work / "IDX"
    retrieval.build_index(soak.seed_corpus(work / "seed.jsonl", a.docs), path, quiet=True)
    srv = Server("--index", f"soak={path}", tmp=work)
    stop_clients = threading.Event()
    http = {"searches": 0, "failed": 0, "errors": [], "polls": []}
    lock = threading.Lock()

    def client(i):
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            n = 0
            while not stop_clients.is_set():
                n += 1
                try:
                    r = c.post("/v1/soak/search", json={"query": CLIENT_QUERIES[(i + n) % 4], "k": 20, "retriever": "bm25", "text": True})
                    ok = r.status_code == 200 and all("common" in h["text"].split() for h in r.json()["hits"])
                    msg = r.text[:200]
                except httpx.HTTPError as e:
                    ok, msg = False, repr(e)
                with lock:
                    http["searches"] += 1
                    if not ok:
                        http["failed"] += 1
                        if len(http["errors"]) < 20:
                            http["errors"].append(msg)

    def follower():
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            while not stop_clients.is_set():
                try:
                    r = c.get("/v1/soak")
                    if r.status_code == 200:
                        j = r.json()
                        http["polls"].append((time.time(), j.get("generation"), j["documents"]))
                    else:
                        with lock:
                            http["failed"] += 1
                            http["errors"].append(r.text[:200])
                except httpx.HTTPError as e:
                    with lock:
                        http["failed"] += 1
                        http["errors"].append(repr(e))
                time.sleep(0.05)

    stop = work / "stop"
    out = work / "reader.json"
    reader = soak.start_reader(path, stop, out, threads=3)
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(4)]
    threads.append(threading.Thread(target=follower, daemon=True))
    for t in threads:
        t.start()
    logs = [work / f"writer{i}.jsonl" for i in range(a.writers)]
    t0 = time.time()
    try:
        soak.finish(soak.start_writers(path, logs, a.seconds, compact_every=6))
        wrote = time.time() - t0
        time.sleep(1.0)  # let both readers see the last commit
        stop.write_text("")
        soak.finish([reader])
    finally:
        stop.write_text("")
        if reader.poll() is None:
            reader.wait(300)
        stop_clients.set()
        for t in threads:
            t.join(60)
        srv.stop()
    seen = json.loads(out.read_text())
    commits = soak.read_log(logs)
    problems = soak.verify(a.docs, commits, seen)
    count = {0: a.docs, **{r["gen"]: r["documents"] for r in commits}}
    at = {r["gen"]: r["t"] for r in commits}
    polls = http["polls"]
    served_bad = [(g, n) for _, g, n in polls if g is not None and count.get(g) != n]
    gens = [g for _, g, _ in polls if g is not None]
    backwards = sum(1 for x, y in zip(gens, gens[1:]) if y < x)
    lags = []
    for g, tc in at.items():
        shown = next((t for t, pg, _ in polls if pg is not None and pg >= g), None)
        if shown is not None:
            lags.append(max(0.0, shown - tc))
    last = max(count)
    final_served = polls[-1][1:] if polls else None
    ops = {op: sum(1 for r in commits if r["op"] == op) for op in ("add", "update", "delete", "compact")}
    payload = {
        "machine": machine(), "seconds_writing": round(wrote, 1), "seed_docs": a.docs, "writers": a.writers,
        "commits": len(commits), "commits_by_op": ops, "final": {"generation": last, "documents": count[last]},
        "in_process": {"searches": seen["searches"], "failed": len(seen["failures"]), "problems": problems[:20],
                       "generations_seen": len(seen["generations_seen"]), "final": seen["final"]},
        "served": {"searches": http["searches"], "failed": http["failed"], "errors": http["errors"][:20],
                   "polls": len(polls), "generations_seen": len(set(gens)), "counts_not_committed": served_bad[:20],
                   "generation_went_back": backwards, "final": final_served,
                   "lag_s": {"p50": round(statistics.median(lags), 3) if lags else None,
                             "max": round(max(lags), 3) if lags else None, "commits_shown": len(lags)}},
    }
    ok = (not problems and not http["failed"] and not served_bad and not backwards
          and final_served is not None and tuple(final_served) == (last, count[last]))
    payload["ok"] = ok
    rows = [["in-process Index (3 threads)", seen["searches"], len(seen["failures"]),
             f"{len(seen['generations_seen'])} of {len(commits) + 1}", "yes" if not problems else "NO", "–"],
            ["retr serve (4 clients + follower)", http["searches"], http["failed"],
             f"{len(set(gens))} of {len(commits) + 1}", "yes" if not served_bad and not backwards else "NO",
             f"{payload['served']['lag_s']['p50']} / {payload['served']['lag_s']['max']}"]]
    md = "\n".join([
        "# Soak: long-lived readers under outside writes", "",
        f"`python benchmarks/bench_soak.py --seconds {a.seconds:g} --docs {a.docs}` on {machine()['date']}: "
        f"{a.writers} writer processes changed a {a.docs:,}-document BM25 folder for {wrote:.0f} s: "
        f"{len(commits)} commits ({', '.join(f'{v} {k}' for k, v in ops.items())}), ending at generation {last} with "
        f"{count[last]:,} documents. Both readers stayed open the whole time.", "",
        md_table(["reader", "searches and reads", "failed", "generations seen", "counts and texts as committed",
                  "commit → served, s (p50 / max)"], rows), "",
        "A count is *as committed* when every count the reader saw for a generation is the one its writer committed "
        "(the in-process reader also compares BM25's live documents, the store and the manifest inside one "
        "snapshot, and every text it read with the version committed for that generation). The lag is measured "
        "from the writer's commit to the first poll (every 50 ms) that serves it.", "",
        f"Result: {'every search succeeded and every count and text followed the commits' if ok else 'FAILED: see soak.json'}.",
    ])
    write_results("soak", payload, md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
