"""Defaults that hold without training queries (issue #19): leave-one-collection-out.

Every default is chosen on three of the four local collections (SciFact,
NFCorpus, Cranfield, Vaswani) and scored on the fourth, with paired tests;
what ships is then chosen the same way on all four.

    RETR_BENCH_WORK=... python eval/benchmarks/bench_defaults.py [--part fusion] [--render-only]

Fusion: the candidates are the untuned fusions the product implements
(rrf over k; combsum / combmnz under min-max and z-score normalisation; an
agreement-weighted combsum whose per-query weights come from how much of
each list's top 10 the other list also retrieved). Each is run as a bare
``bm25+dense`` search runs it: both retrievers return their top DEPTH=100
(``Index.search``'s fusion depth), fused, top 10 scored. Choice rule: the
highest mean over the three training collections of (fused nDCG@10 minus the
better single retriever's), test queries. As a robustness check that plays
no part in the choice, every candidate is also scored on real runs of a weak
and a strong retriever (TREC DL 2019/2020 and TREC-COVID: BM25 against TAS-B
and SPLADE++, top-100 runs shipped in the datasets folder).

Runs come from defaults_runs.py (cached top-1000 per collection, computed on first use;
``--indexes DIR`` reads existing benchmark folders from DIR, read-only).
Writes eval/results/defaults.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from common import COLLECTIONS, DATA, RESULTS, machine, md_table, write_results

from eval import evaluate
from eval.io import read_qrels, read_run
from eval.significance import compare
from retrieval.fusion import Fusion, fuse

import defaults_runs

DEPTH = 100            # what Index.search / batch_search fuse for a bare a+b (retrieval.index.DEPTH)
CUT = 10
RESULTS_JSON = RESULTS / "defaults.json"
BASELINE = "rrf(k=60)"

Lists = Dict[str, Dict[str, List[Tuple[str, float]]]]   # {retriever: {qid: [(docid, score)]}}


# ------------------------------------------------------------------ candidates
def agreement_weights(ls: Dict[str, List[Tuple[str, float]]], top: int = 10, power: float = 2.0):
    """Per query: each list's weight is (0.05 + the share of its top ``top`` that the other list
    retrieved at all) ** power."""
    out = []
    for n in ls:
        other = set().union(*[{d for d, _ in ls[m]} for m in ls if m != n])
        head = [d for d, _ in ls[n][:top]]
        out.append((n, (0.05 + sum(d in other for d in head) / max(1, len(head))) ** power))
    return tuple(out)


def candidates() -> Dict[str, Callable]:
    cands: Dict[str, Callable] = {}
    for k in (5, 10, 20, 40, 60, 100):
        f = Fusion("rrf", k)
        cands[str(f)] = lambda ls, f=f: fuse(ls, f)
    for norm in ("minmax", "zscore"):
        for method in ("combsum", "combmnz"):
            f = Fusion(method, norm=norm)
            cands[str(f)] = lambda ls, f=f: fuse(ls, f)
        cands[f"agreement-combsum(norm={norm})"] = (
            lambda ls, norm=norm: fuse(ls, Fusion("combsum", norm=norm, weights=agreement_weights(ls))))
    return cands


# ------------------------------------------------------------------ data
def local_pair(col, indexes=None) -> Tuple[Lists, dict]:
    if not all(defaults_runs.run_path(col.name, n).exists() for n in defaults_runs.NAMES):
        defaults_runs.dump(col, indexes)
    qrels = col.qrels()
    lists = {n: defaults_runs.load(col.name, n) for n in defaults_runs.NAMES}
    return lists, qrels


EXTERNAL = [  # (name, topics, weak run, strong run)
    ("dl19: BM25 + TAS-B", "dl19", "BM25", "D_BERT_KD_TASB"),
    ("dl20: BM25 + TAS-B", "dl20", "BM25", "D_BERT_KD_TASB"),
    ("dl19: BM25 + SPLADE++", "dl19", "BM25", "SPLADE_P_P_ENSEMBLE_DISTIL"),
    ("dl20: BM25 + SPLADE++", "dl20", "BM25", "SPLADE_P_P_ENSEMBLE_DISTIL"),
    ("trec-covid: BM25 + SPLADE++", "covid", "BM25", "SPLADE_P_P_ENSEMBLE_DISTIL"),
    ("trec-covid: BM25+RM3 + SPLADE++", "covid", "BM25_RM3", "SPLADE_P_P_ENSEMBLE_DISTIL"),
]


def external_pair(topics: str, a: str, b: str) -> Tuple[Lists, dict]:
    qpath = {"dl19": "msmarco-passage-eval/qrels/dl19.tsv", "dl20": "msmarco-passage-eval/qrels/dl20.tsv",
             "covid": "trec-covid-eval/qrels/test.tsv"}[topics]
    qrels = read_qrels(DATA / qpath)
    lists = {}
    for name in (a, b):
        run = read_run(DATA / "msmarco-passage-eval" / "runs" / f"{name}.{topics}.top100.trec")
        lists[name] = {q: sorted(docs.items(), key=lambda x: (-x[1], x[0])) for q, docs in run.items()}
    return lists, qrels


def per_query_scores(lists: Lists, qrels: dict, cands: Dict[str, Callable]) -> Dict[str, Dict[str, float]]:
    """{system: {qid: nDCG@10}} for each single retriever and each candidate, on the judged queries."""
    names = list(lists)
    qids = sorted(q for q in qrels if any(g > 0 for g in qrels[q].values()))
    qrels = {q: qrels[q] for q in qids}
    top = {n: {q: lists[n].get(q, [])[:DEPTH] for q in qids} for n in names}
    runs = {n: {q: dict(top[n][q][:CUT]) for q in qids} for n in names}
    for label, f in cands.items():
        run = {}
        for q in qids:
            fused = f({n: top[n][q] for n in names})[:CUT]
            # scores from ranks: evaluation must see the fused order, ties included
            run[q] = {d: float(CUT - i) for i, (d, _s, _r) in enumerate(fused)}
        runs[label] = run
    return {name: {q: v["nDCG@10"] for q, v in evaluate(qrels, run, ["nDCG@10"], per_query=True,
                                                          complete=True).items()}
            for name, run in runs.items()}


def mean(xs) -> float:
    xs = list(xs)
    return statistics.fmean(xs) if xs else 0.0


def summarise(scores: Dict[str, Dict[str, float]], singles: List[str]) -> dict:
    means = {s: mean(v.values()) for s, v in scores.items()}
    best = max(singles, key=means.__getitem__)
    return {"queries": len(scores[best]), "means": means, "best_single": best,
            "delta_vs_best": {s: means[s] - means[best] for s in scores if s not in singles}}


# ------------------------------------------------------------------ fusion part
def fusion_part(indexes=None) -> dict:
    cands = candidates()
    local, scores = {}, {}
    for col in COLLECTIONS:
        lists, qrels = local_pair(col, indexes)
        scores[col.name] = per_query_scores(lists, qrels, cands)
        local[col.name] = summarise(scores[col.name], list(defaults_runs.NAMES))
        print(col.name, {k: round(v, 4) for k, v in local[col.name]["delta_vs_best"].items()}, flush=True)

    def choose(train: List[str]) -> Tuple[str, float]:
        crit = {c: mean(local[t]["delta_vs_best"][c] for t in train) for c in cands}
        best = max(cands, key=lambda c: (round(crit[c], 6), c == BASELINE))  # order of the grid breaks ties
        return best, crit[best]

    loco = {}
    for held in (c.name for c in COLLECTIONS):
        train = [c.name for c in COLLECTIONS if c.name != held]
        chosen, crit = choose(train)
        s = scores[held]
        best_single = local[held]["best_single"]
        rows = compare({k: s[k] for k in (best_single, chosen, BASELINE)} if chosen != BASELINE
                       else {k: s[k] for k in (best_single, chosen)}, baseline=best_single, test="perm")
        vs_single = next(r for r in rows if r["system"] == chosen)
        entry = {"train": train, "chosen": chosen, "train_criterion": crit, "best_single": best_single,
                 "best_single_ndcg": local[held]["means"][best_single], "chosen_ndcg": local[held]["means"][chosen],
                 "rrf60_ndcg": local[held]["means"][BASELINE],
                 "delta_vs_best_single": vs_single["delta"], "p_vs_best_single": vs_single["p_holm"]}
        if chosen != BASELINE:
            r2 = compare({k: s[k] for k in (BASELINE, chosen)}, baseline=BASELINE, test="perm")[1]
            entry.update(delta_vs_rrf60=r2["delta"], p_vs_rrf60=r2["p_holm"])
        else:
            entry.update(delta_vs_rrf60=0.0, p_vs_rrf60=1.0)
        loco[held] = entry
        print("held out", held, "->", chosen, f"{entry['delta_vs_best_single']:+.4f} vs best single,",
              f"{entry['delta_vs_rrf60']:+.4f} vs rrf60", flush=True)
    shipped, crit = choose([c.name for c in COLLECTIONS])

    external = {}
    for label, topics, a, b in EXTERNAL:
        lists, qrels = external_pair(topics, a, b)
        s = per_query_scores(lists, qrels, cands)
        external[label] = summarise(s, [a, b])
        rows = compare({k: s[k] for k in (external[label]["best_single"], shipped, BASELINE)}
                       if shipped != BASELINE else {k: s[k] for k in (external[label]["best_single"], shipped)},
                       baseline=external[label]["best_single"], test="perm")
        external[label]["tests_vs_best_single"] = {r["system"]: {"delta": r["delta"], "p_holm": r["p_holm"]}
                                                   for r in rows[1:]}
        print(label, {k: round(v, 4) for k, v in external[label]["delta_vs_best"].items()}, flush=True)
    return {"depth": DEPTH, "candidates": list(cands), "baseline": BASELINE, "local": local, "loco": loco,
            "shipped": shipped, "shipped_criterion": crit, "external": external}


def render_fusion(f: dict) -> List[str]:
    cands = f["candidates"]
    cols = list(f["local"])
    md = ["## Fusion: the untuned default for a bare `a+b`", "",
          f"Each bare `bm25+dense` search fuses both retrievers' top {f['depth']} (the product's fusion depth) "
          "and is scored by nDCG@10 on the test queries. Candidates are the untuned fusions the product "
          "implements, plus an agreement-weighted CombSUM (per query, each list weighs (0.05 + share of its top "
          "10 that the other list retrieved)²). Choice rule: the highest mean, over the training collections, of "
          "(fused − better single retriever).", "",
          "### Leave one collection out", "",
          md_table(["held out", "chosen on the other three", "best single", "nDCG@10 best single",
                    "nDCG@10 chosen", "Δ vs best single (p)", "nDCG@10 rrf(k=60)", "Δ vs rrf(k=60) (p)"],
                   [[h, e["chosen"], e["best_single"], e["best_single_ndcg"], e["chosen_ndcg"],
                     f"{e['delta_vs_best_single']:+.4f} (p={e['p_vs_best_single']:.3f})", e["rrf60_ndcg"],
                     f"{e['delta_vs_rrf60']:+.4f} (p={e['p_vs_rrf60']:.3f})"] for h, e in f["loco"].items()]),
          "", "p: paired randomization test (10,000 resamples), Holm-corrected over the two comparisons with "
          "the best single retriever.", "",
          f"Mean Δ over the held-out collections: chosen {mean(e['delta_vs_best_single'] for e in f['loco'].values()):+.4f} "
          f"vs best single, {mean(e['delta_vs_rrf60'] for e in f['loco'].values()):+.4f} vs rrf(k=60).", "",
          f"**Shipped** (chosen on all four): `{f['shipped']}` (mean Δ vs best single {f['shipped_criterion']:+.4f}).",
          "", "### Every candidate, Δ nDCG@10 vs the better single retriever", "",
          md_table(["candidate"] + cols + ["mean", "min"],
                   [[c] + [f["local"][n]["delta_vs_best"][c] for n in cols]
                    + [mean(f["local"][n]["delta_vs_best"][c] for n in cols),
                       min(f["local"][n]["delta_vs_best"][c] for n in cols)] for c in cands]), "",
          "Single retrievers (nDCG@10): " + "; ".join(
              f"{n}: bm25 {f['local'][n]['means']['bm25']:.4f}, dense {f['local'][n]['means']['dense']:.4f}"
              for n in cols) + ".", "",
          "### Robustness check: a weak and a strong retriever (not used for the choice)", "",
          "Real top-100 runs shipped with the datasets (TREC DL 2019/2020 passage, TREC-COVID); the strong "
          "run beats the weak one by 0.13–0.24 nDCG@10, more than any local pair.", ""]
    ext = f["external"]
    md.append(md_table(["pair", "weak", "strong", "best single"] + ["Δ " + c for c in (f["shipped"], f["baseline"])]
                       + ["best candidate here"],
                       [[k, min(e["means"][x] for x in e["means"] if x not in cands),
                         max(e["means"][x] for x in e["means"] if x not in cands), e["best_single"],
                         f"{e['delta_vs_best'][f['shipped']]:+.4f}", f"{e['delta_vs_best'][f['baseline']]:+.4f}",
                         max(cands, key=lambda c: e["delta_vs_best"][c])
                         + f" ({max(e['delta_vs_best'].values()):+.4f})"] for k, e in ext.items()]))
    md += ["", "Every candidate on those pairs (Δ vs the strong run):", "",
           md_table(["candidate"] + list(ext) + ["mean"],
                    [[c] + [ext[k]["delta_vs_best"][c] for k in ext] + [mean(ext[k]["delta_vs_best"][c] for k in ext)]
                     for c in cands])]
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--part", choices=["fusion"], nargs="*", default=["fusion"])
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--indexes", type=Path, help="Read the benchmark folders (read-only) from here instead of WORK.")
    args = ap.parse_args()
    old = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
    payload = {"machine": machine(), **{k: v for k, v in old.items() if k != "machine"}}
    if not args.render_only:
        if "fusion" in args.part:
            payload["fusion"] = fusion_part(args.indexes)
    md = ["# Defaults without training queries (leave one collection out)", "",
          "Generated by `eval/benchmarks/bench_defaults.py` (runs cached by `defaults_runs.py` from the "
          "benchmark indexes: BM25 k1=0.9 b=0.4; dense = MiniLM-L6 mean pooling, faiss Flat). Protocol: every "
          "default is chosen on three of SciFact, NFCorpus, Cranfield, Vaswani and scored on the fourth "
          "(test queries); what ships is chosen the same way on all four.", ""]
    if "fusion" in payload:
        md += render_fusion(payload["fusion"])
    write_results("defaults", payload, "\n".join(md))


if __name__ == "__main__":
    main()
