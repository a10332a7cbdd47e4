"""Cached first-stage runs for the defaults benchmark (bench_defaults.py).

Each collection's BM25 and dense (MiniLM, mean pooling) top-1000 for every
judged query (all splits) is computed once from the benchmark index and kept
under WORK/defaults-runs/<collection>.<retriever>.json.gz, so that choosing
defaults never searches (or encodes) again.

    RETR_BENCH_WORK=... python eval/benchmarks/defaults_runs.py [--indexes DIR] [--collections ...]

``--indexes DIR`` reads the benchmark folders from DIR (opened read-only,
e.g. another checkout's WORK) instead of building them under WORK.
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Dict, List, Tuple

from common import DATA, WORK, COLLECTIONS, bench_index, by_name

DEPTH = 1000
NAMES = ("bm25", "dense")
RUNS = WORK / "defaults-runs"
Scored = List[Tuple[str, float]]


def splits(col) -> List[str]:
    return sorted(p.stem for p in (col.root / "qrels").glob("*.tsv") if p.stem in ("train", "dev", "test"))


def run_path(col_name: str, name: str) -> Path:
    return RUNS / f"{col_name}.{name}.json.gz"


def load(col_name: str, name: str) -> Dict[str, Scored]:
    with gzip.open(run_path(col_name, name), "rt") as f:
        return {q: [(d, s) for d, s in v] for q, v in json.load(f).items()}


def dump(col, indexes: Path | None) -> None:
    import retrieval

    idx = retrieval.open_index(indexes / col.name) if indexes else bench_index(col, dense=("mean",))
    qs, seen = [], set()
    for split in splits(col):
        for q in col.queries(split):
            if q.qid not in seen:
                seen.add(q.qid)
                qs.append(q)
    RUNS.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        out = run_path(col.name, name)
        if out.exists():
            continue
        res = idx.retriever(name).batch_search(qs, DEPTH, 2)
        tmp = out.with_suffix(".tmp")
        with gzip.open(tmp, "wt") as f:
            json.dump({q: [[d, float(s)] for d, s in v] for q, v in res.items()}, f)
        tmp.rename(out)
        print(f"[{col.name}] {name}: {len(res)} queries", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--indexes", type=Path)
    ap.add_argument("--collections", nargs="*")
    args = ap.parse_args()
    for col in by_name(args.collections):
        dump(col, args.indexes)


if __name__ == "__main__":
    main()
