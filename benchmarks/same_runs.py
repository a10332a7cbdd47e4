"""Whether a change of the code changed any ranking: SciFact runs and their digests (issue #25).

Builds one SciFact folder with every kind (BM25, dense MiniLM, DeepCT on SPLADE-tiny's body),
writes the test queries' runs of BM25, dense, DeepCT, DeepCT-Query, bm25+dense (the untuned
default fusion) and bm25+deepct at k=1000, the BM25, dense and bm25+dense runs of the same corpus
built as a 3-shard folder, and records each TREC file's sha256. Run it on the
commit before a refactor and on the one after, then compare:

    .venv/bin/python benchmarks/same_runs.py --out work/same/before     # on the old commit
    .venv/bin/python benchmarks/same_runs.py --out work/same/after --model work/same/before/deepct-model
    .venv/bin/python benchmarks/same_runs.py --compare work/same/before work/same/after --write

The DeepCT model is trained once (1 epoch on SciFact's training qrels, --threads 1, seed 13) and
passed to the second run, so both search with the same weights. Everything runs through the
`retr` CLI of the checkout it is started from, with --threads 1 (the same Lucene segments).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from common import DATA, ROOT

SINGLE = ["bm25", "dense", "deepct", "deepct-query", "bm25+dense", "bm25+deepct"]
# the same corpus split into 3 shards (BM25 and dense): the sharded search path's runs
SHARDED = ["bm25", "dense", "bm25+dense"]
RUNS = SINGLE + [f"3-shard {s}" for s in SHARDED]


def run_name(spec: str) -> str:
    return spec.replace("+", "_").replace(" ", "_").replace("-shard", "shard")


def retr(*args) -> None:
    cmd = [sys.executable, "-m", "cli.main", *map(str, args)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")


def make(out: Path, model: Path | None) -> dict:
    sf = DATA / "scifact"
    out.mkdir(parents=True, exist_ok=True)
    if model is None:
        model = out / "deepct-model"
        if not (model / "deepct.json").exists():
            retr("train", "deepct", "--corpus", sf, "--queries", sf / "queries.jsonl", "--qrels",
                 sf / "qrels" / "train.tsv", "-o", model, "--base", "splade-tiny", "--epochs", "1", "--threads", "1",
                 "--seed", "13")
    idx = out / "IDX"
    retr("index", "--corpus", sf, "--index", idx, "--overwrite", "--threads", "1", "--dense", "--deepct", model, "-q")
    sharded = out / "IDX3"
    retr("index", "--corpus", sf, "--index", sharded, "--shards", "3", "--overwrite", "--threads", "1", "--dense",
         "-q")
    digests = {}
    for spec in RUNS:
        folder, retriever = (sharded, spec.split(" ", 1)[1]) if spec.startswith("3-shard ") else (idx, spec)
        run = out / f"{run_name(spec)}.trec"
        retr("search", "--index", folder, "--queries", sf / "queries.jsonl", "--qrels", sf / "qrels" / "test.tsv",
             "--retriever", retriever, "--k", "1000", "-o", run, "-q")
        digests[spec] = hashlib.sha256(run.read_bytes()).hexdigest()
    (out / "digests.json").write_text(json.dumps(digests, indent=2) + "\n")
    head = subprocess.run(["git", "log", "-1", "--format=%h %s"], cwd=ROOT, capture_output=True, text=True).stdout
    # queries' backend override: a checkout whose default query backend changed (--backend auto's onnx-int8 on a
    # CPU) is compared with RETR_QUERY_BACKEND=torch, and the record says so
    env = os.environ.get("RETR_QUERY_BACKEND")
    (out / "commit.txt").write_text(head.strip()[:80] + (f" [RETR_QUERY_BACKEND={env}]" if env else "") + "\n")
    return digests


def compare(a: Path, b: Path, write: bool = False) -> int:
    da, db = (json.loads((p / "digests.json").read_text()) for p in (a, b))
    # A checkout from before the 3-shard runs existed: a sharded folder's run must equal the single folder's
    # run of the same corpus, so that is what the 3-shard runs are held to (marked in the table)
    held = {k: k.split(" ", 1)[1] for k in RUNS if k not in da and k.startswith("3-shard ")}
    da = {**da, **{k: da[s] for k, s in held.items() if s in da}}
    bad = [k for k in RUNS if da.get(k) != db.get(k)]
    for k in RUNS:
        print(f"{k:18s} {'identical' if k not in bad else 'DIFFERENT'}  {da.get(k, '-')[:16]}  {db.get(k, '-')[:16]}")
    if write:
        from common import machine, md_table, write_results

        commits = {p.name: (p / "commit.txt").read_text().strip() if (p / "commit.txt").exists() else "?"
                   for p in (a, b)}
        rows = [[k, "identical" if k not in bad else "DIFFERENT",
                 da.get(k, "-")[:16] + (f" (before's {held[k]}, one folder)" if k in held else ""),
                 db.get(k, "-")[:16]] for k in RUNS]
        md = "\n".join([
            "# Same runs before and after a refactor", "",
            f"`benchmarks/same_runs.py` on {machine()['date']}: SciFact's 300 test queries at k=1000, one folder "
            "built with --threads 1 by each checkout (BM25, dense MiniLM, DeepCT on SPLADE-tiny trained once), "
            "and the same corpus as a 3-shard folder (BM25 and dense); TREC files compared by sha256.", "",
            f"before: {commits[a.name]}; after: {commits[b.name]}", "",
            md_table(["run", "result", "before sha256", "after sha256"], rows), ""])
        write_results("same_runs", {"machine": machine(), "commits": commits, "before": da, "after": db,
                                    "different": bad}, md)
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--model", type=Path, help="an existing DeepCT model folder (the first run's)")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--write", action="store_true", help="with --compare: write results/same_runs.{json,md}")
    a = ap.parse_args()
    if a.compare:
        return compare(*a.compare, write=a.write)
    if not a.out:
        ap.error("give --out DIR (or --compare BEFORE AFTER)")
    print(json.dumps(make(a.out.resolve(), a.model.resolve() if a.model else None), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
