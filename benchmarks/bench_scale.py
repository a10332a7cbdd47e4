"""Scale-out on Ray (`--executor ray`): what it costs on one machine, the shape of a
multi-node run, the cost curve of a whole `retr index`, and a projection to MS MARCO.

1. Overhead: dense encoding (MiniLM, mean pooling) of the same passages in-process
   (2 torch threads) against Ray with 1 worker (1 CPU, 1 thread) and 2 workers (0.5 CPU
   reserved each, 1 thread), each Ray run on a fresh local cluster. Rounds interleave the
   configurations (A B C, then C B A) because other processes load this machine;
   only ratios within this run are compared.
2. Scaling shape: a two-node cluster simulated on this machine (``ray.cluster_utils.Cluster``,
   1 CPU per node): where the blocks ran, and whether they came back in document order.
3. Cost curve: ``retr index`` (BM25 alone; BM25 + dense on Ray) on corpora synthesised by
   cycling through the four local collections with fresh docids: wall time, peak RSS of
   the ``retr`` process (the driver) and of its whole process tree, index size. Dense at
   100k and 1M is projected from the measured per-worker rate, not run.
4. Projection: MS MARCO passage (8.8M) on N CPU workers and on M GPUs.

    python benchmarks/bench_scale.py [--passages 5000] [--rounds 2] [--skip-cost]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import COLLECTIONS, RESULTS, ROOT, WORK, machine, md_table, write_results

MSMARCO = 8_841_823


def _texts(n):
    out = []
    with open(COLLECTIONS[0].corpus, encoding="utf-8") as f:  # SciFact, in corpus order
        for line in f:
            o = json.loads(line)
            out.append((o["_id"], f"{o['title']} {o['text']}" if o.get("title") else o["text"]))
            if len(out) == n:
                break
    return out


def run_local(pairs):
    import torch

    from retrieval.dense.encoder import DenseEncoder

    torch.set_num_threads(2)
    t0 = time.perf_counter()
    enc = DenseEncoder(quiet=True)
    load = time.perf_counter() - t0
    t1 = time.perf_counter()
    v = enc.encode([t for _d, t in pairs], quiet=True)
    enc_s = time.perf_counter() - t1
    return {"config": "in-process, 2 threads", "load_s": round(load, 2), "encode_s": round(enc_s, 2),
            "wall_s": round(load + enc_s, 2), "rate": round(len(pairs) / (load + enc_s), 2),
            "encode_rate": round(len(pairs) / enc_s, 2)}, v


def run_ray(pairs, workers, cpus, address=None, block_size=None):
    import numpy as np

    from retrieval.dense.encoder import DenseEncoder, DenseStage
    from retrieval.executors import Executor, open_executor

    arrivals = []
    cfg = DenseEncoder(quiet=True).config()
    t0 = time.perf_counter()
    spec = Executor("ray", address=address, workers=workers, cpus_per_worker=cpus, block_size=block_size,
                    on_block=lambda b: arrivals.append((time.perf_counter(), b["docs"], b["node"], b["pid"],
                                                        b["seconds"])))
    with open_executor(spec) as ex:
        opened = time.perf_counter()
        run = ex.map(DenseStage(cfg, 64, "cpu"), pairs, total=len(pairs), quiet=True)
        ids, vs = [], []
        for i, v in run:
            ids.extend(i)
            vs.append(v)
        done = time.perf_counter()
        rec = run.record()
    closed = time.perf_counter()
    first = arrivals[0][0]
    busy = {}
    for _t, n, _nd, pid, secs in arrivals:  # each worker's own time in stage.run
        d, t = busy.get(pid, (0, 0.0))
        busy[pid] = (d + n, t + secs)
    out = {"config": f"ray, {workers} worker{'s' if workers > 1 else ''} x {cpus:g} CPU"
                     + (" (two nodes)" if address else ""),
           "startup_s": round(opened - t0, 2), "job_s": round(done - opened, 2),
           "first_block_s": round(first - opened, 2), "shutdown_s": round(closed - done, 2),
           "wall_s": round(closed - t0, 2), "rate": round(len(pairs) / (done - opened), 2),
           "worker_rate": round(sum(d for d, _t in busy.values()) / sum(t for _d, t in busy.values()), 2),
           "block_size": rec["block_size"], "workers": rec["workers"], "threads": rec["threads"],
           "in_order": ids == [d for d, _t in pairs],
           "blocks_per_node": {}}
    # fixed cost: the cluster's start-up plus the job time the workers did not spend encoding
    out["fixed_s"] = round(out["startup_s"] + max(0.0, out["job_s"] - len(pairs) / (rec["workers"] * out["worker_rate"])), 1)
    for _t, _n, node, _p, _s in arrivals:
        out["blocks_per_node"][node[:8]] = out["blocks_per_node"].get(node[:8], 0) + 1
    return out, np.concatenate(vs)


# ------------------------------------------------------------------------------ cost curve
def synth(n: int, path: Path) -> Path:
    """``n`` passages cycling through the four collections (in corpus order), docid
    ``<collection>-<round>-<id>``; documents without text are skipped."""
    if path.exists() and sum(1 for _ in open(path, "rb")) == n:
        return path
    written = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        r = 0
        while written < n:
            for col in COLLECTIONS:
                with open(col.corpus, encoding="utf-8") as f:
                    for line in f:
                        o = json.loads(line)
                        if not (o.get("title", "") + o.get("text", "")).strip():
                            continue
                        out.write(json.dumps({"_id": f"{col.name}-{r}-{o['_id']}", "title": o.get("title", ""),
                                              "text": o.get("text", "")}) + "\n")
                        written += 1
                        if written == n:
                            break
                if written == n:
                    break
            r += 1
    tmp.replace(path)
    return path


def _rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


def _tree(pid):
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    kids = {}
    for line in out.split("\n"):
        if line.strip():
            p, pp = map(int, line.split())
            kids.setdefault(pp, []).append(p)
    found, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def timed_index(args, index: Path) -> dict:
    """Run `retr index ...` and sample the RSS of the retr process and of its process tree."""
    shutil.rmtree(index, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "cli.main", "index", *map(str, args), "--index", str(index), "--quiet"],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = {"driver": 0, "tree": 0}
    tick = [0]

    def sample():
        while p.poll() is None:
            d = _rss_kb(p.pid)
            peak["driver"] = max(peak["driver"], d)
            if tick[0] % 5 == 0:  # the tree walk costs more: every 5th sample
                peak["tree"] = max(peak["tree"], d + sum(_rss_kb(c) for c in _tree(p.pid)))
            tick[0] += 1
            time.sleep(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _out, err = p.communicate()
    wall = time.perf_counter() - t0
    th.join()
    if p.returncode != 0:
        raise SystemExit(f"retr index failed: {err[-2000:]}")
    m = json.loads((index / "manifest.json").read_text())
    size = sum(f.stat().st_size for f in index.rglob("*") if f.is_file())
    sub = {n: (e.get("encode_seconds"), e.get("encoded_by")) for n, e in m["subindexes"].items()}
    return {"wall_s": round(wall, 1), "driver_peak_mb": round(peak["driver"] / 1024), "tree_peak_mb":
            round(peak["tree"] / 1024), "index_mb": round(size / 2**20, 1), "docs": m["corpus"]["doc_count"],
            "subindexes": sub,
            "bytes_per_doc": {n: sum(f.stat().st_size for f in (index / e["path"]).rglob("*") if f.is_file())
                              / m["corpus"]["doc_count"] for n, e in m["subindexes"].items()}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--passages", type=int, default=5000)
    ap.add_argument("--out", default="scale", help="results stem under benchmarks/results")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--shape-passages", type=int, default=2000)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--dense-sizes", default="10000")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--report-only", action="store_true", help="rewrite the Markdown from the JSON of the last run")
    a = ap.parse_args()
    if a.report_only:
        res = json.loads((RESULTS / f"{a.out}.json").read_text())
        write_results(a.out, res, report(res))
        return
    import numpy as np


    res = {"machine": machine(), "load_average_start": os.getloadavg()}
    prev = json.loads((RESULTS / f"{a.out}.json").read_text()) if (RESULTS / f"{a.out}.json").exists() else {}
    pairs = _texts(a.passages)
    ref = None
    if not a.skip_overhead:
        runs = []
        order = ["local", "ray1", "ray2"]
        for r in range(a.rounds):
            for c in (order if r % 2 == 0 else order[::-1]):
                print(f"round {r + 1}: {c} ...", flush=True)
                if c == "local":
                    out, v = run_local(pairs)
                    ref = v if ref is None else ref
                elif c == "ray1":
                    out, v = run_ray(pairs, 1, 1.0)
                else:
                    out, v = run_ray(pairs, 2, 0.5)
                if ref is not None:
                    out["max_abs_diff_vs_in_process"] = float(np.abs(v - ref).max())
                out["round"] = r + 1
                out["load_average"] = round(os.getloadavg()[0], 1)
                runs.append(out)
                print(json.dumps(out), flush=True)
        res["overhead"] = {"passages": a.passages, "runs": runs}
        # two-node shape
        # A cluster started by `ray start` in Ray 2.60 uses token authentication, and retr's Ray driver
        # joins with its token; cluster_utils starts nodes in the mode of this process's environment,
        # and a driver in token mode rejects the calls of a cluster without it.
        os.environ.setdefault("RAY_AUTH_MODE", "token")
        from ray.cluster_utils import Cluster

        print("two-node cluster ...", flush=True)
        cl = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        cl.add_node(num_cpus=1)
        cl.wait_for_nodes()
        try:
            sub = pairs[:a.shape_passages]
            # 0.6 CPU each: one worker fits a node (1 CPU, and the head keeps 0.25 for the read tasks)
            out, v = run_ray(sub, 2, 0.6, address=cl.address, block_size=128)
            out["max_abs_diff_vs_in_process"] = float(np.abs(v - ref[:len(sub)]).max()) if ref is not None else None
            out["passages"] = len(sub)
            res["two_nodes"] = out
            print(json.dumps(out), flush=True)
        finally:
            cl.shutdown()
    else:
        res["overhead"], res["two_nodes"] = prev.get("overhead"), prev.get("two_nodes")
    if not a.skip_cost:
        cost = []
        for n in map(int, a.sizes.split(",")):
            corpus = synth(n, WORK / f"synth-{n}.jsonl")
            print(f"bm25 {n} ...", flush=True)
            cost.append(dict(timed_index(["--corpus", corpus], WORK / f"scale-bm25-{n}"), what="bm25", passages=n))
            print(json.dumps(cost[-1]), flush=True)
            shutil.rmtree(WORK / f"scale-bm25-{n}", ignore_errors=True)
        for n in map(int, a.dense_sizes.split(",")):
            corpus = synth(n, WORK / f"synth-{n}.jsonl")
            print(f"bm25+dense {n} (ray, 2 workers) ...", flush=True)
            cost.append(dict(timed_index(["--corpus", corpus, "--dense", "--executor", "ray", "--workers", "2",
                                          "--cpus-per-worker", "0.5"], WORK / f"scale-dense-{n}"),
                             what="bm25+dense (ray, 2 workers)", passages=n))
            print(json.dumps(cost[-1], default=str), flush=True)
            shutil.rmtree(WORK / f"scale-dense-{n}", ignore_errors=True)
        res["cost"] = cost
    else:
        res["cost"] = prev.get("cost")
    res["load_average_end"] = os.getloadavg()
    write_results(a.out, res, report(res))


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def report(res) -> str:
    ov = res["overhead"]
    runs = ov["runs"]
    by = {}
    for r in runs:
        by.setdefault(r["config"], []).append(r)
    local = _mean([r["rate"] for r in by["in-process, 2 threads"]])
    lines = [f"# Scale-out on Ray", "",
             f"Machine: {res['machine']['cpus']} CPUs shared with other work (load average "
             f"{res['load_average_start'][0]:.1f} at the start); Ray 2.60.0; MiniLM mean pooling, batch 64; "
             f"{ov['passages']:,} SciFact passages (in corpus order); "
             f"{max(r['round'] for r in runs)} round(s): rounds interleave the configurations "
             "(A B C, then C B A); only ratios within this run mean anything. *rate*: passages/s over the time that "
             "loads the model(s) and encodes (in-process: model load + encode; Ray: the job, from submitting it "
             "to the last block: actors start, load the model, encode; the cluster's start-up is apart). "
             "*per-worker rate*: passages per second of each worker's own time in the encoder. *fixed s*: "
             "start-up plus the job time not spent encoding.", "",
             "## 1. Overhead on one machine", ""]
    rows = []
    for r in runs:
        rows.append([r["round"], r["config"], f"{r.get('load_average', 0):.1f}", r["rate"], r.get("worker_rate", "") or "",
                     r.get("startup_s", r.get("load_s")), r.get("fixed_s", ""), r["wall_s"],
                     f"{r.get('max_abs_diff_vs_in_process', 0):.1e}"])
    lines += [md_table(["round", "config", "load", "rate", "per-worker rate", "start-up s", "fixed s", "wall s",
                        "max |v - in-process|"], rows), ""]
    summ = []
    for cfg, rs in by.items():
        rate = _mean([r["rate"] for r in rs])
        summ.append([cfg, round(rate, 2), f"{rate / local:.2f}x",
                     round(_mean([r.get("worker_rate") or r["rate"] for r in rs]), 2),
                     round(_mean([r.get("startup_s", 0) for r in rs]), 1) if "startup_s" in rs[0] else "-",
                     round(_mean([r.get("fixed_s", 0) for r in rs]), 1) if "fixed_s" in rs[0] else "-"])
    lines += [md_table(["config", "mean rate", "throughput vs in-process", "per-worker rate (own time)",
                        "cluster start-up s", "fixed s"], summ), ""]
    r2 = by.get("ray, 2 workers x 0.5 CPU", [])
    if r2:
        ratio = _mean([r["rate"] for r in r2]) / local
        lines += [f"Target: 2 workers >= 0.9x in-process throughput (job time: actors start, load the model, "
                  f"encode; the cluster start-up is listed apart). Measured: **{ratio:.2f}x** - "
                  f"{'met' if ratio >= 0.9 else 'missed'}.", ""]
    tn = res.get("two_nodes")
    if tn:
        lines += ["## 2. Two nodes (simulated on this machine)", "",
                  f"`ray.cluster_utils.Cluster`: a head and one worker node, 1 CPU each; 2 workers x 0.6 CPU, "
                  f"blocks of {tn['block_size']}, {tn['passages']:,} passages. Blocks per node: "
                  f"{tn['blocks_per_node']}; results in document order: {tn['in_order']}; max |v - in-process| "
                  f"{tn['max_abs_diff_vs_in_process']:.1e}; rate {tn['rate']} passages/s (start-up "
                  f"{tn['startup_s']} s). The two nodes share the same 2 cores, so this shows the shape (blocks "
                  "spread, results gathered in order), not a speed-up.", ""]
    cost = res.get("cost") or []
    if cost:
        lines += ["## 3. Cost of a whole `retr index`", "",
                  "Corpora synthesised by cycling through SciFact, NFCorpus, Cranfield and Vaswani (21,405 "
                  "passages with text) with fresh docids `<collection>-<round>-<id>`: the texts repeat, so term "
                  "statistics are not a real 1M collection's, but every document is read, stored, fingerprinted "
                  "and indexed. Peak RSS sampled every 0.2 s: the `retr` process (driver) and its whole process "
                  "tree (the Anserini JVM, the Ray driver, workers).", ""]
        rows = [[c["what"], f"{c['passages']:,}", c["wall_s"], c["driver_peak_mb"], c["tree_peak_mb"], c["index_mb"],
                 "measured"] for c in cost]
        bm25 = {c["passages"]: c for c in cost if c["what"] == "bm25"}
        dense = [c for c in cost if c["what"].startswith("bm25+dense")]
        rate1 = _mean([r.get("worker_rate") or r["rate"] for r in by.get("ray, 1 worker x 1 CPU", [])])
        if dense and rate1:
            d = dense[0]
            per_doc = d["bytes_per_doc"].get("dense", 0)
            for n in (100_000, 1_000_000):
                if n in bm25 and n not in {c["passages"] for c in dense}:
                    enc = n / (2 * rate1)
                    rows.append(["bm25+dense (ray, 2 workers)", f"{n:,}", round(bm25[n]["wall_s"] + enc, 0),
                                 f"~{d['driver_peak_mb'] + round((n - d['passages']) * 384 * 4 / 2**20)}", "-",
                                 round(bm25[n]["index_mb"] + n * per_doc / 2**20, 0),
                                 f"projected: BM25 measured + {n:,} / (2 x {rate1:.1f}/s)"])
        lines += [md_table(["build", "passages", "wall s", "driver peak MB", "tree peak MB", "index MB", ""], rows), ""]
        if 1_000_000 in bm25:
            b = bm25[1_000_000]
            ok = b["wall_s"] <= 600 and b["tree_peak_mb"] <= 4096
            lines += [f"BM25 at 1M: {b['wall_s']} s, peak {b['tree_peak_mb']} MB for the whole tree "
                      f"(driver {b['driver_peak_mb']} MB); target <= 10 min and 4 GB: {'met' if ok else 'missed'}.",
                      ""]
        lines += ["The driver's memory grows with the corpus only through what it must hold: the docids "
                  "(for order checks and faiss), and a Flat faiss index (N x 384 x 4 bytes, projected above "
                  "for dense); texts and vectors stream through in blocks and shards.", ""]
    lines += projection(by)
    return "\n".join(lines)


def projection(by) -> list:
    rate1 = _mean([r.get("worker_rate") or r["rate"] for r in by.get("ray, 1 worker x 1 CPU", [])])
    start = _mean([r["fixed_s"] for k, rs in by.items() if k.startswith("ray") and "two nodes" not in k for r in rs])
    gpu = None
    g = RESULTS / "gpu-minilm.json"
    if g.exists():
        try:
            gj = json.loads(g.read_text())
            gpu = _find_rate(gj)
        except (ValueError, KeyError):
            gpu = None
    gpu = gpu or 3425.0
    rows = []
    for n in (1, 8, 32, 128, 512):
        rows.append([f"{n} CPU worker{'s' if n > 1 else ''} (1 thread each)", f"{rate1 * n:,.0f}",
                     _hours(MSMARCO / (rate1 * n) + start)])
    for m in (1, 4, 8, 32):
        rows.append([f"{m} GPU{'s' if m > 1 else ''} (H200)", f"{gpu * m:,.0f}", _hours(MSMARCO / (gpu * m) + start)])
    return ["## 4. Projection: MS MARCO passage (8,841,823) dense encoding", "",
            f"From the measured per-worker rate (Ray, 1 worker, 1 thread, SciFact passages: {rate1:.1f} passages/s) "
            f"and the H200 rate measured in-process in `gpu-minilm.md` ({gpu:,.0f} passages/s); plus the measured "
            f"fixed cost (cluster start-up, actor start and model load: {start:.0f} s). The GPU actor itself was not measured: "
            "no GPU was available in this session. MS MARCO passages are about a third as long as SciFact's "
            "(~60-80 vs ~240 tokens), so CPU times are upper bounds; the GPU rate is also SciFact's. Scaling is "
            "assumed linear (the driver only reads the document store, writes shards and adds to faiss; faiss Flat "
            "add of 8.8M x 384 and the 13.6 GB of vectors it holds are not included).", "",
            md_table(["workers", "passages/s", "encoding time"], rows), ""]


def _find_rate(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("passages_per_s", "rate", "encode_rate") and isinstance(v, (int, float)):
                return float(v)
            r = _find_rate(v)
            if r:
                return r
    if isinstance(obj, list):
        for v in obj:
            r = _find_rate(v)
            if r:
                return r
    return None


def _hours(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min"


if __name__ == "__main__":
    main()
