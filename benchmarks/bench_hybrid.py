"""Hybrid search benchmark: BM25, dense (MiniLM mean) and their fusion on four
collections, with paired tests; per-stage latency; RAG-style API latency.

    .venv/bin/python benchmarks/bench_hybrid.py [--collections ...] [--skip-latency]

Fusion is tuned on training queries only: SciFact and NFCorpus on their
train split; Cranfield and Vaswani have none, so they use 2-fold cross-
validation over their queries (tune on one half, score the other, swap).
Writes benchmarks/results/hybrid.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from common import COLLECTIONS, RESULTS, bench_index, by_name, machine, md_table, write_results

from eval import evaluate
from eval.significance import compare
from retrieval.fusion import DEFAULT_FUSION, Fusion, Pipeline, list_confidences
from retrieval import tune

MEASURES = ["nDCG@10", "R@100", "R@1000"]
RESULTS_JSON = RESULTS / "hybrid.json"
DEPTH = 1000
NAMES = ("bm25", "dense")
TRAIN = {"scifact": ["train"], "nfcorpus": ["train", "dev"]}


def lists_for(idx, qs):
    """Each retriever's top DEPTH per query, and under "conf" each list's confidence (the retrievers'
    ``confidence``), which the confidence-weighted fusions of the grid (and the untuned default) use."""
    out = {n: idx.snapshot().retriever(n).batch_search(qs, DEPTH, 2) for n in NAMES}
    out["conf"] = dict(zip((q.qid for q in qs), list_confidences(
        {n: idx.snapshot().retriever(n) for n in NAMES}, [q.text for q in qs], {n: [out[n][q.qid] for q in qs] for n in NAMES})))
    return out


def fused_run(lists, qids, f: Fusion):
    return tune.fused_run({n: lists[n] for n in NAMES}, lists["conf"], qids, f, DEPTH)


def best_fusion(lists, qrels, qids):
    f, v, _ = tune.best_fusion({n: lists[n] for n in NAMES}, lists["conf"], qrels, qids, "nDCG@10", DEPTH)
    return f, v


def per_query(qrels, run):
    return evaluate(qrels, run, MEASURES, per_query=True)


def effectiveness(col):
    idx = bench_index(col, dense=("mean",))
    qrels = col.qrels()
    qs = col.queries()
    lists = lists_for(idx, qs)
    qids = [q.qid for q in qs]
    runs = {n: {q: dict(lists[n][q]) for q in qids} for n in NAMES}
    runs["rrf(k=60)"] = fused_run(lists, qids, Fusion("rrf", 60))
    runs["untuned default"] = fused_run(lists, qids, DEFAULT_FUSION)
    tuned_note = []
    if col.name in TRAIN:
        tq, tr = [], {}
        for split in TRAIN[col.name]:
            tr.update(col.qrels(split))
            tq += col.queries(split)
        tl = lists_for(idx, tq)
        f, v = best_fusion(tl, tr, [q.qid for q in tq])
        runs["tuned"] = fused_run(lists, qids, f)
        tuned_note.append(f"{f} (train nDCG@10 {v:.4f}, {len(tq)} queries of {'+'.join(TRAIN[col.name])})")
    else:
        folds = tune.split_folds(qids, 2, seed=0)  # as `retr tune --folds 2` (retrieval.tune.cross_validate)
        runs["tuned"] = {}
        for a, b in ((0, 1), (1, 0)):
            f, v = best_fusion(lists, qrels, folds[a])
            runs["tuned"].update(fused_run(lists, folds[b], f))
            tuned_note.append(f"fold {b}: {f} (chosen on fold {a}, nDCG@10 {v:.4f})")
    scores = {name: per_query(qrels, run) for name, run in runs.items()}
    means = {name: {m: statistics.fmean(v[m] for v in s.values()) for m in MEASURES} for name, s in scores.items()}
    best_single = max(NAMES, key=lambda n: means[n]["nDCG@10"])
    tests = {}
    for m in ("nDCG@10", "R@100"):
        rows = compare({n: {q: v[m] for q, v in s.items()} for n, s in scores.items()}, baseline=best_single,
                       test="perm")
        tests[m] = {r["system"]: {k: r.get(k) for k in ("delta", "p", "p_holm", "significant", "ci_low", "ci_high")}
                    for r in rows if not r.get("baseline")}
    return {"queries": len(qs), "means": means, "best_single": best_single, "tuned": tuned_note, "tests": tests}


def latency(col, n_queries=1000):
    idx = bench_index(col, dense=("mean",))
    from retrieval.collections import read_queries

    qs = read_queries(col.queries_path)[:n_queries]
    spec = "bm25+dense:rrf(k=60)"
    for q in qs[:20]:  # warm up: JVM, model, caches
        idx.search(q.text, k=5, retriever=spec)
    dense = idx.snapshot().retriever("dense")
    stages = {"query encoding": [], "dense search (faiss)": [], "bm25": [], "fusion": [], "text": []}
    total = []
    for q in qs:
        t = {}
        t0 = time.perf_counter()
        idx.search(q.text, k=5, retriever=spec, timings=t)
        total.append(time.perf_counter() - t0)
        t1 = time.perf_counter()
        v = dense.encode_queries([q.text])
        t2 = time.perf_counter()
        dense.search_vectors(v, 100)
        t3 = time.perf_counter()
        stages["query encoding"].append(t2 - t1)
        stages["dense search (faiss)"].append(t3 - t2)
        stages["bm25"].append(t["bm25"])
        stages["fusion"].append(t["fusion"])
        stages["text"].append(t["text"])
    ms = lambda xs: 1e3 * statistics.median(xs)
    single = {k: ms(v) for k, v in stages.items()}
    q99 = lambda xs: 1e3 * sorted(xs)[int(0.99 * (len(xs) - 1))]
    rag = {"queries": len(qs), "k": 5, "spec": spec, "p50_ms": ms(total), "p99_ms": q99(total),
           "mean_ms": 1e3 * statistics.fmean(total)}
    # batched: whole query set at once, per stage
    t = {}
    t0 = time.perf_counter()
    idx.batch_search(qs, k=5, retriever=spec, text=True, timings=t)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    dense.encode_queries([q.text for q in qs])
    enc = time.perf_counter() - t1
    batched = {"total_ms_per_query": 1e3 * wall / len(qs), "query encoding": 1e3 * enc / len(qs),
               "dense (encode + faiss)": 1e3 * t["dense"] / len(qs), "bm25": 1e3 * t["bm25"] / len(qs),
               "fusion": 1e3 * t["fusion"] / len(qs), "text": 1e3 * t["text"] / len(qs)}
    return {"collection": col.name, "single_p50_ms": single, "rag": rag, "batched_ms_per_query": batched}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--collections", nargs="*")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--render-only", action="store_true", help="Rewrite the Markdown from the committed JSON.")
    ap.add_argument("--latency-only", action="store_true", help="Measure latency; keep committed effectiveness.")
    args = ap.parse_args()
    cols = [] if args.render_only or args.latency_only else by_name(args.collections)
    # A run over some collections (or --skip-latency) keeps the other results of the committed file.
    old = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
    eff = dict(old.get("effectiveness", {}))
    for c in cols:
        eff[c.name] = effectiveness(c)
        print(c.name, {k: round(v["nDCG@10"], 4) for k, v in eff[c.name]["means"].items()}, flush=True)
    eff = {c.name: eff[c.name] for c in COLLECTIONS if c.name in eff}
    lat = old.get("latency") if args.skip_latency or args.render_only else latency(COLLECTIONS[0])
    payload = {"machine": machine(), "depth": DEPTH, "effectiveness": eff, "latency": lat}
    rows = []
    for name, e in eff.items():
        for sysname, m in e["means"].items():
            t = e["tests"]["nDCG@10"].get(sysname)
            mark = "" if t is None else (f"{t['delta']:+.4f}{' *' if t['significant'] else ''} (p={t['p_holm']:.3f})")
            rows.append([name, sysname, m["nDCG@10"], m["R@100"], m["R@1000"],
                         "(best single)" if sysname == e["best_single"] else mark])
    md = ["# Hybrid search: BM25 + dense (MiniLM-L6, mean pooling)", "",
          "Generated by `benchmarks/bench_hybrid.py`. Test queries; each retriever returns 1000 candidates. "
          "`tuned` is the fusion chosen on training queries only (SciFact: train; NFCorpus: train+dev; "
          "Cranfield/Vaswani: 2-fold cross-validation over queries); `untuned default` is what a bare `bm25+dense` "
          f"fuses with on a folder never tuned (`{DEFAULT_FUSION}`). Δ and p: paired randomization test against "
          "the best single retriever, Holm-corrected; * = significant at 0.05.", "",
          md_table(["collection", "system", "nDCG@10", "R@100", "R@1000", "Δ nDCG@10 vs best single"], rows), ""]
    for name, e in eff.items():
        md.append(f"- {name} tuned fusion: " + "; ".join(e["tuned"]))
    if lat:
        md += ["", f"## Latency ({lat['collection']}, one query at a time, k=5, `{lat['rag']['spec']}`)", "",
               md_table(["stage", "p50 ms"], [[k, v] for k, v in lat["single_p50_ms"].items()]), "",
               f"RAG API (`idx.search(q, k=5, retriever=...)` with passage text) over {lat['rag']['queries']} "
               f"queries: p50 {lat['rag']['p50_ms']:.2f} ms, p99 {lat['rag']['p99_ms']:.2f} ms.", "",
               "Batched (all queries in one call), ms per query:", "",
               md_table(["stage", "ms/query"], [[k, v] for k, v in lat["batched_ms_per_query"].items()])]
    write_results("hybrid", payload, "\n".join(md))


if __name__ == "__main__":
    main()
