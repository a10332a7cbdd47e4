"""retrieval.Client on httpx (issue #29) against the client it replaced, on one `retr serve`.

SciFact's shared benchmark index (BM25), its 300 test queries, k=10, server and client on 127.0.0.1,
all in one run, each measurement repeated in alternating rounds (the host's load drifts):

- sync: ``Client.search`` one query after another, the httpx client against the previous one
  (stdlib ``http.client``, one keep-alive connection per thread; loaded from git, commit
  ``PREVIOUS``);
- async: the 300 queries through ``asearch`` with at most C in flight (``asyncio.Semaphore``),
  the loop's pooled ``httpx.AsyncClient`` against the previous ``asearch`` (a fresh
  ``httpx.AsyncClient`` per call), and against the sync client one query after another.

    python benchmarks/bench_client.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, RESULTS, bench_index, by_name, machine, md_table, write_results  # noqa: E402

PREVIOUS = "4fbd6d2^"   # the commit before the client moved to httpx
PY = sys.executable


def previous_client(tmp: Path):
    """The Client class as it was at PREVIOUS (its own module, imported from the file git shows)."""
    src = subprocess.run(["git", "show", f"{PREVIOUS}:retrieval/client.py"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    path = tmp / "client_previous.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("client_previous", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Client


def sync_qps(client, queries) -> float:
    t0 = time.perf_counter()
    for q in queries:
        client.search(q, k=10, retriever="bm25", text=False)
    return len(queries) / (time.perf_counter() - t0)


def async_qps(client, queries, conc: int) -> float:
    async def main():
        sem = asyncio.Semaphore(conc)

        async def one(q):
            async with sem:
                await client.asearch(q, k=10, text=False)
        t0 = time.perf_counter()
        await asyncio.gather(*(one(q) for q in queries))
        dt = time.perf_counter() - t0
        if hasattr(client, "aclose"):
            await client.aclose()
        return len(queries) / dt
    return asyncio.run(main())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import retrieval
    from tests.server.conftest import Server

    col = by_name(["scifact"])[0]
    idx = bench_index(col)
    queries = [q.text for q in col.queries()]
    idx.close()
    tmp = ROOT / "work" / "bench_client"
    tmp.mkdir(parents=True, exist_ok=True)
    Old = previous_client(tmp)
    srv = Server("--index", f"sf={idx.path}", tmp=tmp)
    try:
        new, old = retrieval.Client(srv.url, index="sf"), Old(srv.url, index="sf")
        sync_qps(new, queries[:50]), sync_qps(old, queries[:50])   # warm both paths
        res = {k: [] for k in ("sync_new", "sync_old", "a1_new", "a8_new", "a32_new", "a8_old", "a32_old")}
        for _ in range(args.rounds):
            res["sync_new"].append(sync_qps(new, queries))
            res["sync_old"].append(sync_qps(old, queries))
            for c in (1, 8, 32):
                res[f"a{c}_new"].append(async_qps(new, queries, c))
            for c in (8, 32):
                res[f"a{c}_old"].append(async_qps(old, queries, c))
    finally:
        srv.stop()
    med = {k: statistics.median(v) for k, v in res.items()}
    rows = [["sync, one after another", round(med["sync_new"], 1), round(med["sync_old"], 1),
             f"{med['sync_new'] / med['sync_old']:.2f}x"]]
    for c in (8, 32):
        rows.append([f"asearch, {c} in flight", round(med[f"a{c}_new"], 1), round(med[f"a{c}_old"], 1),
                     f"{med[f'a{c}_new'] / med[f'a{c}_old']:.2f}x"])
    md = "\n".join([
        "# retrieval.Client on httpx", "",
        f"Machine: {machine()}. SciFact BM25, {len(queries)} test queries, k=10, `text` off, server and client on "
        f"127.0.0.1; medians of {args.rounds} alternating rounds, requests/s. Written by `benchmarks/bench_client.py`.",
        "", md_table(["calls", "httpx client (req/s)", f"previous client ({PREVIOUS}) (req/s)", "ratio"], rows), "",
        f"asearch with 1 in flight: {med['a1_new']:.1f} req/s; with 8: {med['a8_new'] / med['sync_new']:.2f}x and "
        f"with 32: {med['a32_new'] / med['sync_new']:.2f}x the sync client's one-after-another rate (searches "
        "overlap on the server's worker threads; the 2 cores are shared by client and server).",
        "The previous `asearch` opened a fresh `httpx.AsyncClient` (a new connection) per call; the new one reuses "
        "its event loop's pool. The previous sync client was stdlib `http.client` on one keep-alive connection."])
    write_results("client", {"machine": machine(), "queries": len(queries), "rounds": args.rounds, "runs": res,
                             "median": med, "previous": PREVIOUS}, md)


if __name__ == "__main__":
    main()
