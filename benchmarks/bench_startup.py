"""A one-off `retr search`'s start-up, before and after, and the query-time encoding thread policy.

Same machine, same run. SciFact's first 300 passages, indexed once into a temporary folder (BM25, and
BM25 + bundled MiniLM dense).

- One-off searches: `retr search --index IDX --retriever bm25|bm25+dense --k 10 TEXT` as a fresh
  process, wall time and peak RSS (os.wait4), REPEATS runs each, medians; "before" runs the code of a
  base commit (a temporary `git worktree` of BASE, removed after), "after" this checkout's.
- Thread policy: warm hybrid searches (bm25+dense, k=10, SciFact's first 60 queries after 5 warm-up
  ones), p50/p95 latency and queries/s, one and four at a time (threads), with torch's default thread
  count and with RETR_QUERY_THREADS=1: in-process (Index.search) and over HTTP (`retr serve` on
  127.0.0.1, POST /v1/{index}/search, one keep-alive connection per client thread).

    python benchmarks/bench_startup.py [--repeats 5] [--base da990b1]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import DATA, machine, md_table, write_results  # noqa: E402

QUERY = "vitamin D deficiency and bone health"
N_DOCS, N_QUERIES, WARM = 300, 60, 5


def one_off(code_dir: Path, index: Path, retriever: str) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one fresh `retr search` process run from ``code_dir``."""
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "cli.main", "search", "--index", str(index), "--retriever",
                          retriever, "--k", "10", QUERY], cwd=code_dir,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"retr search failed in {code_dir}: {p.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def queries() -> list[str]:
    with open(DATA / "scifact" / "queries.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f][:N_QUERIES + WARM]


def drive(search, concurrency: int) -> dict:
    """p50/p95 ms and queries/s of the queries split over ``concurrency`` threads (each calls ``search(q)``
    after its own warm-up)."""
    qs = queries()
    for q in qs[:WARM]:
        search(q)
    qs = qs[WARM:]
    lat, lock = [], threading.Lock()

    def worker(part):
        for q in part:
            t = time.perf_counter()
            search(q)
            with lock:
                lat.append(time.perf_counter() - t)

    threads = [threading.Thread(target=worker, args=(qs[i::concurrency],)) for i in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    return {"p50_ms": 1000 * statistics.median(lat), "p95_ms": 1000 * lat[max(0, int(0.95 * len(lat)) - 1)],
            "qps": len(lat) / wall}


def in_process(index: str) -> dict:
    """(Run in a child process: --in-process IDX.) The table's in-process rows for this process's env."""
    import retrieval

    idx = retrieval.open_index(index)
    return {c: drive(lambda q: idx.search(q, k=10, retriever="bm25+dense"), c) for c in (1, 4)}


def served(index: Path, env: dict) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--index", f"h={index}", "--port", str(port)],
                           cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 180
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline or srv.poll() is not None:
                raise SystemExit("retr serve did not become ready")
            time.sleep(0.5)
        local = threading.local()

        def search(q):
            if not hasattr(local, "c"):
                local.c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            body = json.dumps({"query": q, "k": 10, "retriever": "bm25+dense"})
            local.c.request("POST", "/v1/h/search", body, {"Content-Type": "application/json"})
            r = local.c.getresponse()
            r.read()
            if r.status != 200:
                raise SystemExit(f"search answered {r.status}")

        return {c: drive(search, c) for c in (1, 4)}
    finally:
        srv.terminate()
        srv.wait(30)


def build(work: Path) -> tuple[Path, Path]:
    corpus = work / "corpus.jsonl"
    with open(DATA / "scifact" / "corpus.jsonl", encoding="utf-8") as f, open(corpus, "w", encoding="utf-8") as out:
        for i, line in zip(range(N_DOCS), f):
            out.write(line)
    bm25, hyb = work / "bm25", work / "hybrid"
    for path, extra in ((bm25, []), (hyb, ["--dense"])):
        subprocess.run([sys.executable, "-m", "cli.main", "index", "--corpus", str(corpus), "--index", str(path),
                        "-q", *extra], cwd=ROOT, check=True)
    return bm25, hyb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--base", default="da990b1", help="Commit measured as 'before'.")
    ap.add_argument("--in-process", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.in_process:
        print(json.dumps(in_process(args.in_process)))
        return
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    base = work / "base"
    try:
        bm25, hyb = build(work)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base], check=True,
                       stdout=subprocess.DEVNULL)
        one = {}
        for _ in range(args.repeats):  # interleaved, so machine load falls on both alike
            for name, code in (("before", base), ("after", ROOT)):
                for kind, index, retriever in (("bm25", bm25, "bm25"), ("hybrid", hyb, "bm25+dense")):
                    one.setdefault(f"{kind}/{name}", []).append(one_off(code, index, retriever))
        oneoff = {k: {"wall_s": statistics.median(w for w, _ in v), "rss_mb": statistics.median(m for _, m in v),
                      "runs": [{"wall_s": w, "rss_mb": m} for w, m in v]} for k, v in one.items()}
        threads = {}
        for policy, value in (("torch default", None), ("RETR_QUERY_THREADS=1", "1")):
            env = dict(os.environ)
            env.pop("RETR_QUERY_THREADS", None)
            if value:
                env["RETR_QUERY_THREADS"] = value
            r = subprocess.run([sys.executable, __file__, "--in-process", str(hyb)], cwd=ROOT, env=env,
                               check=True, capture_output=True, text=True)
            threads[f"in-process/{policy}"] = json.loads(r.stdout.strip().splitlines()[-1])
            threads[f"http/{policy}"] = served(hyb, env)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
    m = machine()
    rows = []
    for kind in ("bm25", "hybrid"):
        b, a = oneoff[f"{kind}/before"], oneoff[f"{kind}/after"]
        rows.append([kind, f"{b['wall_s']:.2f}", f"{a['wall_s']:.2f}", f"{a['wall_s'] / b['wall_s']:.2f}",
                     f"{b['rss_mb']:.0f}", f"{a['rss_mb']:.0f}", f"{a['rss_mb'] / b['rss_mb']:.2f}"])
    trows = [[where, policy, str(c), f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}", f"{r['qps']:.1f}"]
             for key, res in threads.items() for where, policy in [key.split("/", 1)]
             for c, r in sorted(res.items(), key=lambda kv: int(kv[0]))]
    md = "\n\n".join([
        f"# Start-up and query-time threads\n\nMachine: {m['cpus']} CPUs, {m['platform']}, Python {m['python']}, "
        f"{m['date']} (shared with other work: medians of {args.repeats} interleaved runs). SciFact's first "
        f"{N_DOCS} passages; `python benchmarks/bench_startup.py`.",
        f"## One-off `retr search` (a fresh process, k=10): before = {args.base}, after = this checkout",
        md_table(["search", "before s", "after s", "after/before", "before MB", "after MB", "after/before"], rows),
        f"## Warm hybrid searches (bm25+dense, k=10, {N_QUERIES} queries) by torch thread count",
        md_table(["where", "threads", "concurrent", "p50 ms", "p95 ms", "queries/s"], trows),
    ])
    write_results("startup", {"machine": m, "base": args.base, "repeats": args.repeats, "one_off": oneoff,
                              "threads": threads}, md)
    print(md)


if __name__ == "__main__":
    main()
