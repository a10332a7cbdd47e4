"""Query-aware dimension selection on the MiniLM dense retriever (issue 7, METHODS.md §3).

    .venv/bin/python benchmarks/bench_dimsel.py [--collections scifact ...] [--quick]

On each collection's shared benchmark index (``common.bench_index(col, dense=("mean",))``):
full dimensions, DIME-PRF (alpha 0.1..1.0 x k in {2, 5, 10}), the learned selector (fixed
alpha and adaptive, both chosen on held-out TRAINING queries), a no-learning q*q magnitude
baseline, and the label oracle (upper bound). nDCG@10 and R@100 on the test queries, paired
t-tests (Holm) against full dims and against PRF, added latency as a ratio to full-dimension
search in the same run, and a cross-collection generalisation matrix.

Training queries: SciFact train; NFCorpus train+dev; Cranfield and Vaswani have one qrels
file, so their queries are split by a seeded permutation of the sorted query ids (seed 0):
the first half trains, the second half is the held-out test set every method is scored on.

Writes benchmarks/results/dimsel.{json,md} and dimsel_alpha.png.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from common import RESULTS, WORK, by_name, machine, md_table, write_results

from eval import Evaluator
from eval.significance import holm, paired_ttest
from retrieval.dense.dimsel.masks import apply_mask, top_mask
from retrieval.dense.dimsel.search import DimSel
from retrieval.dense.dimsel.selector import Selector, SelectorConfig
from retrieval.dense.dimsel.training import fit, training_data

MEASURES = ["nDCG@10", "R@100"]
ALPHAS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
PRF_KS = [2, 5, 10]
TRAIN_SPLITS = {"scifact": ["train"], "nfcorpus": ["train", "dev"]}
SPLIT_SEED = 0


def query_split(col):
    """(train queries, train qrels, test queries, test qrels) for a collection."""
    if col.name in TRAIN_SPLITS:
        trqr = {}
        for s in TRAIN_SPLITS[col.name]:
            trqr.update(col.qrels(s))
        from retrieval.collections import read_queries

        trq = [q for q in read_queries(col.queries_path) if q.qid in trqr]
        return trq, trqr, col.queries("test"), col.qrels("test")
    qs = col.queries("test")
    qr = col.qrels("test")
    qids = sorted(q.qid for q in qs)
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(qids))
    train_ids = {qids[i] for i in perm[: len(qids) // 2]}
    trq = [q for q in qs if q.qid in train_ids]
    teq = [q for q in qs if q.qid not in train_ids]
    return trq, {q.qid: qr[q.qid] for q in trq}, teq, {q.qid: qr[q.qid] for q in teq}


def run_of(results):
    return {qid: {d: s for d, s in r} for qid, r in results.items()}


class Bench:
    """One collection: encoded test queries and runs for every method."""

    def __init__(self, col, with_train=True):
        self.col = col
        self.idx = ds_index(col)
        self.dense = self.idx.snapshot().retriever("dense")
        self.trq, self.trqr, self.teq, self.teqr = query_split(col)
        t0 = time.perf_counter()
        self.Qte = self.dense.encode_queries([q.text for q in self.teq])
        self.Qtr = self.dense.encode_queries([q.text for q in self.trq]) if with_train else None
        self.encode_s = time.perf_counter() - t0
        self.ev = Evaluator(self.teqr, MEASURES)
        self.qids = [q.qid for q in self.teq]
        self.runs, self.per_query, self.means = {}, {}, {}

    def search(self, name, dimsel_obj=None, Q=None, k=100):
        Q = self.Qte if Q is None else Q
        r = (dimsel_obj or DimSel(self.dense, "none")).search_vectors(Q, k, self.qids)
        run = {qid: dict(x) for qid, x in zip(self.qids, r)}
        pq = self.ev.evaluate(run, per_query=True)
        self.per_query[name] = {m: {q: pq.get(q, {}).get(m, 0.0) for q in self.teqr} for m in MEASURES}
        self.means[name] = {m: float(np.mean(list(self.per_query[name][m].values()))) for m in MEASURES}
        return self.means[name]


def ds_index(col):
    from common import bench_index

    return bench_index(col, dense=("mean",))


def train(b: Bench, cfg: SelectorConfig):
    data = training_data(b.dense, b.trq, b.trqr, cfg, Q=b.Qtr)
    data.source = {"collection": b.col.name, "train_queries": len(data.qids)}
    t0 = time.perf_counter()
    sel = fit(data, cfg)
    sel.config["training"]["seconds"] = round(time.perf_counter() - t0, 2)
    sel.save(WORK / "dimsel" / b.col.name)
    return sel, data


def tune_prf_on_train(b: Bench):
    """PRF's (alpha, k) picked on the training queries (the same data the selector may see)."""
    ev = Evaluator(b.trqr, ["nDCG@10"])
    ids = [q.qid for q in b.trq]
    best = None
    for k in PRF_KS:
        for a in ALPHAS:
            r = DimSel(b.dense, "prf", alpha=a, prf_k=k).search_vectors(b.Qtr, 10)
            v = ev.evaluate({q: dict(x) for q, x in zip(ids, r)})["nDCG@10"]
            if best is None or v > best[0] + 1e-12:
                best = (v, a, k)
    return {"train_ndcg10": best[0], "alpha": best[1], "k": best[2]}


def tests(b: Bench, names, baseline):
    """Paired t-tests of ``names`` against ``baseline``, Holm-corrected within the family."""
    out = {}
    for m in MEASURES:
        base = np.array([b.per_query[baseline][m][q] for q in sorted(b.teqr)])
        ps, deltas = [], []
        for n in names:
            x = np.array([b.per_query[n][m][q] for q in sorted(b.teqr)])
            ps.append(paired_ttest(x, base))
            deltas.append(float((x - base).mean()))
        for n, p, ph, d in zip(names, ps, holm(ps), deltas):
            out.setdefault(n, {})[m] = {"delta": d, "p": p, "p_holm": ph, "significant": ph < 0.05}
    return out


def latency(b: Bench, methods, n=100, repeats=3, n_encode=30):
    """Seconds per query, one query at a time, for the search stage given the query vector
    (methods interleaved query by query so machine drift hits all alike), plus the same with
    the query encoding, which every method shares: encoding is timed once per query and added
    (timing it again per method would only add noise on this shared machine)."""
    Q = b.Qte[:n]
    ids = b.qids[:n]
    stage = {m: [] for m in methods}
    for _ in range(repeats):
        for i in range(len(Q)):
            for m, obj in methods.items():
                t0 = time.perf_counter()
                obj.search_vectors(Q[i:i + 1], 100, ids[i:i + 1])
                stage[m].append(time.perf_counter() - t0)
    enc = []
    for q in b.teq[:n_encode]:
        t0 = time.perf_counter()
        b.dense.encode_queries([q.text])
        enc.append(time.perf_counter() - t0)
    med = {m: statistics.median(v) for m, v in stage.items()}
    e = statistics.median(enc)
    return {m: {"search_ms": 1e3 * med[m], "ratio_search": med[m] / med["full"], "encode_ms": 1e3 * e,
                "end_to_end_ms": 1e3 * (e + med[m]), "ratio_end_to_end": (e + med[m]) / (e + med["full"])}
            for m in methods}


def overlap(b: Bench):
    """Test queries split by whether one of their relevant documents is also relevant to a training
    query (a selector can learn such documents' dimensions): learned vs full on each part."""
    seen_docs = {d for v in b.trqr.values() for d, g in v.items() if g > 0}
    seen = sorted(q for q, v in b.teqr.items() if any(g > 0 and d in seen_docs for d, g in v.items()))
    unseen = sorted(q for q in b.teqr if q not in set(seen))
    out = {"share_seen": len(seen) / max(len(b.teqr), 1)}
    for part, qs in (("seen", seen), ("unseen", unseen)):
        if len(qs) < 2:
            out[part] = {"queries": len(qs)}
            continue
        f = np.array([b.per_query["full"]["nDCG@10"][q] for q in qs])
        row = {"queries": len(qs), "full": float(f.mean())}
        for m in ("learned", "prf"):
            x = np.array([b.per_query[m]["nDCG@10"][q] for q in qs])
            row[m] = float(x.mean())
            row[f"{m}_p"] = paired_ttest(x, f)
        out[part] = row
    return out


def dev_ablation(b: Bench, variants, base_cfg):
    """Selector variants scored on the held-out TRAINING queries only (what chose the defaults)."""
    out = {}
    for name, kw in variants.items():
        cfg = SelectorConfig(**{**base_cfg.__dict__, **kw})
        data = training_data(b.dense, b.trq, b.trqr, cfg, Q=b.Qtr)
        sel = fit(data, cfg)
        t = sel.config["training"]
        out[name] = {"config": kw, "dev_full": t["dev_full_ndcg10"], "alpha": sel.config["alpha"],
                     "dev_at_alpha": t["dev_ndcg10_by_alpha"][str(sel.config["alpha"])],
                     "best_epoch": t["best_epoch"], "final_loss": t["final_train_loss"]}
        print(f"  [{b.col.name}] dev ablation {name}: full {t['dev_full_ndcg10']:.4f} -> "
              f"{out[name]['dev_at_alpha']:.4f} at alpha {sel.config['alpha']}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--collections", nargs="*")
    ap.add_argument("--quick", action="store_true", help="fewer epochs, no ablation (smoke run)")
    ap.add_argument("--ablation", default="scifact", help="collections for the dev ablation (comma-separated)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the other collections already in benchmarks/results/dimsel.json (their selectors are "
                         "reloaded from work/bench/dimsel/ for the generalisation matrix)")
    args = ap.parse_args()
    cfg = SelectorConfig(epochs=8 if args.quick else SelectorConfig.epochs)
    payload = {"machine": machine(), "selector_config": cfg.__dict__, "split_seed": SPLIT_SEED,
               "collections": {}, "generalisation": {}}
    benches, selectors = {}, {}
    for col in by_name(args.collections):
        print(f"[{col.name}] ...", flush=True)
        b = Bench(col)
        benches[col.name] = b
        res = {"train_queries": len(b.trq), "test_queries": len(b.teq), "documents": len(b.idx)}
        b.search("full")
        # DIME-PRF sweep
        prf_sweep = {}
        for k in PRF_KS:
            for a in ALPHAS:
                prf_sweep[f"k={k},a={a}"] = b.search(f"prf k={k} a={a}", DimSel(b.dense, "prf", alpha=a, prf_k=k))
        tuned = tune_prf_on_train(b)
        b.per_query["prf"] = b.per_query[f"prf k={tuned['k']} a={tuned['alpha']}"]
        b.means["prf"] = b.means[f"prf k={tuned['k']} a={tuned['alpha']}"]
        # learned
        sel, data = train(b, cfg)
        selectors[col.name] = sel
        learned_sweep = {a: b.search(f"learned a={a}", DimSel(b.dense, "learned", alpha=a, selector=sel))
                         for a in ALPHAS}
        b.search("learned", DimSel(b.dense, "learned", selector=sel))
        ad = DimSel(b.dense, "learned", selector=sel, adaptive=True)
        b.search("learned-adaptive", ad)
        ad.search_vectors(b.Qte, 10, b.qids)
        kept_adaptive = ad.last_kept.astype(float)
        # q*q magnitude (the selector's prior, no learning): alpha picked on the training queries
        trev = Evaluator(b.trqr, ["nDCG@10"])
        trids = [q.qid for q in b.trq]

        def mag(Q, a):
            return apply_mask(Q, top_mask(Q * Q, a))

        mag_train = {a: trev.evaluate({q: dict(x) for q, x in zip(trids, b.dense.search_vectors(mag(b.Qtr, a), 10))})
                     ["nDCG@10"] for a in ALPHAS}
        mag_a = max(mag_train, key=lambda a: (mag_train[a], a))
        mag_sweep = {}
        for a in ALPHAS:
            name = f"magnitude a={a}"
            b.search(name, DimSel(b.dense, "none"), Q=mag(b.Qte, a))  # mask applied before a plain search
            mag_sweep[a] = b.means[name]
        b.per_query["magnitude"], b.means["magnitude"] = b.per_query[f"magnitude a={mag_a}"], b.means[f"magnitude a={mag_a}"]
        # oracle (labels of the test queries: an upper bound, not a method)
        oracle_sweep = {a: b.search(f"oracle a={a}", DimSel(b.dense, "oracle", alpha=a, qrels=b.teqr)) for a in ALPHAS}
        best_oa = max(oracle_sweep, key=lambda a: oracle_sweep[a]["nDCG@10"])
        b.per_query["oracle"], b.means["oracle"] = b.per_query[f"oracle a={best_oa}"], b.means[f"oracle a={best_oa}"]
        res.update({
            "full": b.means["full"], "prf_sweep": prf_sweep,
            "prf_tuned_on_train": {**tuned, **b.means["prf"]},
            "prf_best_on_test": max(({"setting": s, **v} for s, v in prf_sweep.items()), key=lambda x: x["nDCG@10"]),
            "learned": {"alpha": sel.config["alpha"], **b.means["learned"]},
            "learned_adaptive": {"threshold": sel.config["threshold"], "mean_kept": float(kept_adaptive.mean()),
                                 "min_kept": int(kept_adaptive.min()), "max_kept": int(kept_adaptive.max()),
                                 **b.means["learned-adaptive"]},
            "learned_sweep": {str(a): v for a, v in learned_sweep.items()},
            "magnitude": {"alpha": mag_a, **b.means["magnitude"]},
            "magnitude_sweep": {str(a): v for a, v in mag_sweep.items()},
            "oracle_sweep": {str(a): v for a, v in oracle_sweep.items()}, "oracle_best_alpha": best_oa,
            "selector": {k: v for k, v in sel.config.items() if k != "training"},
            "selector_training": {k: v for k, v in sel.config["training"].items() if k != "history"},
            "selector_history": sel.config["training"]["history"],
        })
        res["tests_vs_full"] = tests(b, ["prf", "learned", "learned-adaptive", "magnitude", "oracle"], "full")
        res["tests_vs_prf"] = tests(b, ["learned", "learned-adaptive"], "prf")
        methods = {"full": DimSel(b.dense, "none"), "prf": DimSel(b.dense, "prf", alpha=tuned["alpha"],
                                                                         prf_k=tuned["k"]),
                   "learned": DimSel(b.dense, "learned", selector=sel),
                   "learned-adaptive": DimSel(b.dense, "learned", selector=sel, adaptive=True)}
        res["latency"] = latency(b, methods, n=50 if args.quick else 100)
        res["train_test_overlap"] = overlap(b)
        if not args.quick and col.name in args.ablation.split(","):
            res["dev_ablation"] = dev_ablation(b, {
                "kl+rank qv h256 (default)": {},
                "kl only": {"loss": "kl"},
                "rank only": {"loss": "rank"},
                "free MLP (no q*q prior)": {"arch": "free"},
                "hidden 64": {"hidden": 64},
                "oracle beta=0 (relevant mean only)": {"beta": 0.0},
            }, cfg)
        payload["collections"][col.name] = res
        print(f"[{col.name}] full {b.means['full']}  prf {b.means['prf']}  learned {b.means['learned']}  "
              f"adaptive {b.means['learned-adaptive']}  oracle {b.means['oracle']}", flush=True)
    if args.merge and (RESULTS / "dimsel.json").exists():
        old = json.loads((RESULTS / "dimsel.json").read_text())
        payload["collections"] = {**{c: v for c, v in old["collections"].items() if c not in payload["collections"]},
                                  **payload["collections"]}
        payload["runs"] = old.get("runs", []) + [payload["machine"]]
    order = [c.name for c in by_name(None) if c.name in payload["collections"]]
    payload["collections"] = {c: payload["collections"][c] for c in order}
    # generalisation: selector trained on A (its dev-chosen alpha), tested on B's test queries
    for src in order:
        sel = selectors.get(src) or Selector.load(WORK / "dimsel" / src)
        for dst in order:
            if dst not in benches:
                benches[dst] = Bench(next(c for c in by_name([dst])), with_train=False)
                benches[dst].search("full")
            b = benches[dst]
            v = DimSel(b.dense, "learned", selector=sel).search_vectors(b.Qte, 100, b.qids)
            m = b.ev.evaluate({q: dict(x) for q, x in zip(b.qids, v)})
            payload["generalisation"][f"{src}->{dst}"] = {**m, "full": b.means["full"]}
    write_results("dimsel", payload, markdown(payload))
    plot(payload, RESULTS / "dimsel_alpha.png")


def _sig(t, m="nDCG@10"):
    x = t[m]
    return f"{x['delta']:+.4f}{'*' if x['significant'] else ''} (p={x['p_holm']:.3f})"


def markdown(p):
    out = ["# Query-aware dimension selection (MiniLM mean pooling, flat faiss)", "",
           "Test queries only; selectors and PRF's (alpha, k) are chosen on training queries "
           "(SciFact train, NFCorpus train+dev, Cranfield/Vaswani: seeded half split). "
           "Oracle = label upper bound at its best alpha on the test labels. "
           "`*` = significant paired t-test after Holm (alpha 0.05). Produced by "
           "benchmarks/bench_dimsel.py.", ""]
    rows = []
    for c, r in p["collections"].items():
        t, tp = r["tests_vs_full"], r["tests_vs_prf"]
        rows.append([c, f"{r['test_queries']}", r["full"]["nDCG@10"],
                     f"{r['prf_tuned_on_train']['nDCG@10']:.4f} (k={r['prf_tuned_on_train']['k']}, a={r['prf_tuned_on_train']['alpha']})",
                     f"{r['learned']['nDCG@10']:.4f} (a={r['learned']['alpha']})",
                     f"{r['learned_adaptive']['nDCG@10']:.4f} (~{r['learned_adaptive']['mean_kept']:.0f} dims)",
                     f"{r['magnitude']['nDCG@10']:.4f} (a={r['magnitude']['alpha']})",
                     f"{r['oracle_sweep'][str(r['oracle_best_alpha'])]['nDCG@10']:.4f} (a={r['oracle_best_alpha']})",
                     _sig(t["learned"]), _sig(tp["learned"]), _sig(t["prf"])])
    out += ["## nDCG@10", "", md_table(["collection", "test q", "full", "PRF (tuned on train)", "learned fixed",
                                         "learned adaptive", "q*q magnitude", "oracle", "learned vs full",
                                         "learned vs PRF", "PRF vs full"], rows), ""]
    rows = []
    for c, r in p["collections"].items():
        t = r["tests_vs_full"]
        rows.append([c, r["full"]["R@100"], r["prf_tuned_on_train"]["R@100"], r["learned"]["R@100"],
                     r["learned_adaptive"]["R@100"], r["oracle_sweep"][str(r["oracle_best_alpha"])]["R@100"],
                     _sig(t["learned"], "R@100"), _sig(r["tests_vs_prf"]["learned"], "R@100")])
    out += ["## R@100", "", md_table(["collection", "full", "PRF", "learned fixed", "learned adaptive", "oracle",
                                       "learned vs full", "learned vs PRF"], rows), ""]
    rows = []
    for c, r in p["collections"].items():
        best = r["prf_best_on_test"]
        rows.append([c, r["full"]["nDCG@10"], f"{best['nDCG@10']:.4f} ({best['setting']})",
                     min(v["nDCG@10"] for v in r["prf_sweep"].values())])
    out += ["## DIME-PRF sweep (alpha 0.1-1.0, k 2/5/10) on test", "",
            md_table(["collection", "full", "best PRF setting on test (optimistic)", "worst PRF setting"], rows), ""]
    rows = []
    for c, r in p["collections"].items():
        for m, v in r["latency"].items():
            rows.append([c, m, f"{v['search_ms']:.2f}", f"{v['ratio_search']:.2f}x", f"{v['end_to_end_ms']:.1f}",
                         f"{v['ratio_end_to_end']:.2f}x"])
    out += ["## Latency per query (one query at a time, median; ratios to full dims in the same run)", "",
            "Search stage = from the query vector to the top 100 (PRF includes its first pass, learned its "
            "MLP); 'with encoding' adds the median MiniLM query-encoding time, which all methods share.", "",
            md_table(["collection", "method", "search ms", "search ratio", "with encoding ms", "ratio"], rows), ""]
    rows = []
    for c, r in p["collections"].items():
        o = r["train_test_overlap"]
        for part in ("seen", "unseen"):
            x = o[part]
            if "full" in x:
                rows.append([c, part, x["queries"], x["full"], f"{x['learned']:.4f} (p={x['learned_p']:.3f})",
                             f"{x['prf']:.4f} (p={x['prf_p']:.3f})"])
            else:
                rows.append([c, part, x["queries"], "–", "–", "–"])
    out += ["## Test queries whose relevant documents were / were not relevant to a training query", "",
            "'seen': at least one relevant document of the test query is also relevant to some training query. "
            "Unadjusted paired t-test p-values against full dims.", "",
            md_table(["collection", "part", "queries", "full", "learned", "PRF"], rows), ""]
    names = list(p["collections"])
    rows = [[f"trained on {s}"] + [f"{p['generalisation'][f'{s}->{d}']['nDCG@10']:.4f}" for d in names] for s in names]
    rows.append(["full dims"] + [f"{p['collections'][d]['full']['nDCG@10']:.4f}" for d in names])
    out += ["## Generalisation: nDCG@10 of a selector trained on one collection, tested on another", "",
            md_table(["selector \\ test"] + names, rows), ""]
    for c, r in p["collections"].items():
        if "dev_ablation" in r:
            rows = [[n, f"{v['dev_full']:.4f}", f"{v['dev_at_alpha']:.4f}", v["alpha"], v["best_epoch"]]
                    for n, v in r["dev_ablation"].items()]
            out += [f"## What was tried on {c} (held-out TRAINING queries only)", "",
                    md_table(["variant", "dev full", "dev selector", "alpha", "best epoch"], rows), ""]
    return "\n".join(out)


def plot(p, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = list(p["collections"])
    fig, axes = plt.subplots(1, len(cols), figsize=(4.2 * len(cols), 3.6), squeeze=False)
    for ax, c in zip(axes[0], cols):
        r = p["collections"][c]
        xs = ALPHAS
        for k in PRF_KS:
            ax.plot(xs, [r["prf_sweep"][f"k={k},a={a}"]["nDCG@10"] for a in xs], "--", lw=1, label=f"PRF k={k}")
        ax.plot(xs, [r["learned_sweep"][str(a)]["nDCG@10"] for a in xs], "o-", label="learned")
        ax.plot(xs, [r["magnitude_sweep"][str(a)]["nDCG@10"] for a in xs], ":", label="q*q")
        ax.plot(xs, [r["oracle_sweep"][str(a)]["nDCG@10"] for a in xs], "-", c="grey", alpha=0.6, label="oracle")
        ax.axhline(r["full"]["nDCG@10"], c="k", lw=0.8, label="full")
        ax.set_title(c)
        ax.set_xlabel("alpha (share of dims kept)")
        ax.set_ylabel("nDCG@10")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
