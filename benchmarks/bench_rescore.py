"""What the exact rescoring of dense candidates costs (indexes.faiss_index.FaissIndex._rescored).

A Flat index takes k + max(16, k/8) candidates from faiss and scores them again (float64 sums,
ties by docid) so that rankings do not depend on the index's size or row order. This measures one
query at a time (as `retr serve` searches) on random unit vectors, with and without the rescoring,
in one run, rounds interleaved; it also checks that the rescored top k holds the same documents as
faiss's own top k up to last-bit ties.

    python benchmarks/bench_rescore.py [--docs 50000] [--dim 384] [--queries 200]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import machine, md_table, write_results  # noqa: E402


def _unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype("float32")
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def main(argv=None) -> int:
    from indexes.faiss_index import FaissIndex

    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=50_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    ix = FaissIndex.build(_unit(rng, a.docs, a.dim), [f"d{i}" for i in range(a.docs)], quiet=True)
    queries = _unit(rng, a.queries, a.dim)
    rows = []
    for k in (10, 100, 1000):
        times = {"faiss": [], "rescored": []}
        same = 0
        for _ in range(a.rounds):
            for mode in ("faiss", "rescored"):
                if mode == "faiss":  # the plain faiss path: no exact storage to rescore from
                    ix._exact_storage = lambda: None
                else:
                    ix.__dict__.pop("_exact_storage", None)
                t0 = time.perf_counter()
                for q in queries:
                    ix.search(q[None], k)
                times[mode].append((time.perf_counter() - t0) / len(queries) * 1000)
        ix.__dict__.pop("_exact_storage", None)
        for q in queries:
            _, a_names = ix.search(q[None], k)
            ix._exact_storage = lambda: None
            _, b_names = ix.search(q[None], k)
            ix.__dict__.pop("_exact_storage", None)
            same += set(a_names[0]) == set(b_names[0])
        f, r = statistics.median(times["faiss"]), statistics.median(times["rescored"])
        rows.append([k, round(f, 3), round(r, 3), round(r / f, 2), f"{same}/{len(queries)}"])
    md = "\n".join([
        "# Exact rescoring of dense candidates", "",
        f"`python benchmarks/bench_rescore.py`: a Flat index of {a.docs:,} random unit vectors of dimension {a.dim}, "
        f"{a.queries} queries one at a time, median of {a.rounds} interleaved rounds (ms per query). `same set`: "
        "queries whose rescored top k holds the same documents as faiss's own top k.", "",
        md_table(["k", "faiss ms", "rescored ms", "ratio", "same set"], rows), ""])
    write_results("rescore", {"docs": a.docs, "dim": a.dim, "queries": a.queries, "rows": rows,
                              "machine": machine()}, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
