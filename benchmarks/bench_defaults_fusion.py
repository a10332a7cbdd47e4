"""The untuned fusion of a bare ``a+b`` (issue #19), chosen without training queries by
leave-one-collection-out (defaults_report.py: chosen on three of SciFact, NFCorpus, Cranfield,
Vaswani, scored on the fourth; what ships is chosen the same way on all four).

    RETR_BENCH_WORK=... .venv/bin/python benchmarks/bench_defaults_fusion.py [--indexes DIR]

Fusion: the candidates are the untuned fusions the product implements
(rrf over k; combsum / combmnz under min-max and z-score normalisation; an
agreement-weighted combsum whose per-query weights come from how much of
each list's top 10 the other list also retrieved; combmnz weighted per query
by each retriever's own confidence, over a grid of slope and centre). Each is
run as a bare ``bm25+dense`` search runs it: both retrievers return their top
100 (``Index.search``'s fusion depth for k <= 100), fused, top 10 scored, on
each collection's test queries and on three shifts of them with the same
judgments (passages as queries, misspelled queries, passages behind unrelated
text: defaults_runs.VARIANTS). Choice rule: the highest mean over the three
training collections and their variants of (fused nDCG@10 minus the better
single retriever's). The test queries alone are also fused at depth 1000
(``retr search --queries``, whose k defaults to 1000). As a robustness check
that plays no part in the choice, every plain candidate is also scored on
real runs of a weak and a strong retriever (TREC DL 2019/2020 and
TREC-COVID: BM25 against TAS-B and SPLADE++, top-100 runs shipped in the
datasets folder).

Runs come from defaults_runs.py (cached top-1000 per collection, computed on first use;
``--indexes DIR`` reads existing benchmark folders from DIR, read-only).
Writes the "fusion" part of benchmarks/results/defaults.{json,md} (defaults_report.write).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from common import COLLECTIONS, DATA, md_table

from eval import evaluate
from eval.io import read_qrels, read_run
from eval.significance import compare
from retrieval.fusion import Fusion, fuse

import defaults_runs
from defaults_report import CUT, DEPTH, Lists, mean, write

DEPTHS = (100, 1000)   # DEPTH, and what `retr search --queries` fuses (k defaults to 1000 there)
BASELINE = "rrf(k=60)"


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


SLOPES = (1, 2, 4, 8, 16)
CENTRES = (-0.5, -0.4, -0.3, -0.2, -0.1, 0.0)


def candidates() -> Dict[str, Callable]:
    """label -> f(lists, confidences of the query or None). The confidence-weighted CombMNZ grid is the
    product's fusion (``retrieval.fusion``; the confidences are what the retrievers report, cached by
    defaults_runs); without confidences (the external runs) it fuses unweighted."""
    cands: Dict[str, Callable] = {}
    for k in (5, 10, 20, 40, 60, 100):
        f = Fusion("rrf", k)
        cands[str(f)] = lambda ls, c=None, f=f: fuse(ls, f)
    for norm in ("minmax", "zscore"):
        for method in ("combsum", "combmnz"):
            f = Fusion(method, norm=norm)
            cands[str(f)] = lambda ls, c=None, f=f: fuse(ls, f)
        cands[f"agreement-combsum(norm={norm})"] = (
            lambda ls, c=None, norm=norm: fuse(ls, Fusion("combsum", norm=norm, weights=agreement_weights(ls))))
    for a in SLOPES:
        for centre in CENTRES:
            f = Fusion("combmnz", norm="minmax", confidence=a, centre=centre)
            cands[str(f)] = lambda ls, c=None, f=f: fuse(ls, f, c)
    return cands


def is_confidence(label: str) -> bool:
    return "confidence=" in label


# ------------------------------------------------------------------ data
def variant_data(col, variant: str, indexes=None):
    """(lists, qrels, confidences) of one of defaults_runs.VARIANTS ("test": the top-1000 runs)."""
    return defaults_runs.load_variant(col, variant, indexes)


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


def per_query_scores(lists: Lists, qrels: dict, cands: Dict[str, Callable], depth: int = DEPTH,
                     conf: Optional[dict] = None) -> Dict[str, Dict[str, float]]:
    """{system: {qid: nDCG@10}} for each single retriever and each candidate, on the judged queries."""
    names = list(lists)
    qids = sorted(q for q in qrels if any(g > 0 for g in qrels[q].values()))
    qrels = {q: qrels[q] for q in qids}
    top = {n: {q: lists[n].get(q, [])[:depth] for q in qids} for n in names}
    runs = {n: {q: dict(top[n][q][:CUT]) for q in qids} for n in names}
    for label, f in cands.items():
        run = {}
        for q in qids:
            fused = f({n: top[n][q] for n in names}, (conf or {}).get(q))[:CUT]
            # scores from ranks: evaluation must see the fused order, ties included
            run[q] = {d: float(CUT - i) for i, (d, _s, _r) in enumerate(fused)}
        runs[label] = run
    return {name: {q: v["nDCG@10"] for q, v in evaluate(qrels, run, ["nDCG@10"], per_query=True).items()}
            for name, run in runs.items()}


def summarise(scores: Dict[str, Dict[str, float]], singles: List[str]) -> dict:
    means = {s: mean(v.values()) for s, v in scores.items()}
    best = max(singles, key=means.__getitem__)
    return {"queries": len(scores[best]), "means": means, "best_single": best,
            "delta_vs_best": {s: means[s] - means[best] for s in scores if s not in singles}}


# ------------------------------------------------------------------ fusion part
PREVIOUS = "combmnz(norm=minmax)"   # the untuned default before the variants joined the protocol


def fusion_part(indexes=None) -> dict:
    out = {d: fusion_at(d, indexes) for d in DEPTHS}
    main = out[DEPTH]
    main["by_depth"] = {str(d): {"shipped": out[d]["shipped"], "loco": out[d]["loco"], "local": out[d]["local"]}
                        for d in DEPTHS if d != DEPTH}
    return main


def fusion_at(depth: int, indexes=None) -> dict:
    """At the product's fusion depth every collection is scored on its test queries and on the shifted
    variants (defaults_runs.VARIANTS); at depth 1000 on its test queries (the variants hold 100 per query).
    The choice rule: the highest mean of (fused - better single retriever) over the training collections
    and their variants."""
    cands = candidates()
    variants = defaults_runs.VARIANTS if depth == DEPTH else ("test",)
    local, scores = {}, {}   # {collection: {variant: summary}}, {collection: {variant: per-query scores}}
    for col in COLLECTIONS:
        local[col.name], scores[col.name] = {}, {}
        for v in variants:
            lists, qrels, conf = variant_data(col, v, indexes)
            s = per_query_scores(lists, qrels, cands, depth, conf)
            scores[col.name][v] = s
            local[col.name][v] = summarise(s, list(defaults_runs.NAMES))
            d = local[col.name][v]["delta_vs_best"]
            print(depth, col.name, v, {k: round(d[k], 4) for k in (PREVIOUS, BASELINE)},
                  "best", max(d, key=d.__getitem__), round(max(d.values()), 4), flush=True)

    def criterion(train: List[str], vs=variants) -> Dict[str, float]:
        return {c: mean(local[t][v]["delta_vs_best"][c] for t in train for v in vs) for c in cands}

    def choose(train: List[str], vs=variants) -> Tuple[str, float]:
        crit = criterion(train, vs)
        best = max(cands, key=lambda c: (round(crit[c], 6), c == BASELINE))  # order of the grid breaks ties
        return best, crit[best]

    loco = {}
    for held in (c.name for c in COLLECTIONS):
        train = [c.name for c in COLLECTIONS if c.name != held]
        chosen, crit = choose(train)
        s = scores[held]["test"]
        lt = local[held]["test"]
        best_single = lt["best_single"]
        rows = compare({k: s[k] for k in dict.fromkeys((best_single, chosen, BASELINE))},
                       baseline=best_single, test="perm")
        vs_single = next(r for r in rows if r["system"] == chosen)
        entry = {"train": train, "chosen": chosen, "train_criterion": crit, "best_single": best_single,
                 "best_single_ndcg": lt["means"][best_single], "chosen_ndcg": lt["means"][chosen],
                 "rrf60_ndcg": lt["means"][BASELINE],
                 "delta_vs_best_single": vs_single["delta"], "p_vs_best_single": vs_single["p_holm"],
                 "test_only_choice": choose(train, ("test",))[0],
                 "variants": {v: {"chosen": local[held][v]["delta_vs_best"][chosen],
                                  "previous": local[held][v]["delta_vs_best"][PREVIOUS],
                                  "rrf60": local[held][v]["delta_vs_best"][BASELINE],
                                  "bm25": local[held][v]["means"]["bm25"], "dense": local[held][v]["means"]["dense"],
                                  "queries": local[held][v]["queries"]} for v in variants}}
        if chosen != BASELINE:
            r2 = compare({k: s[k] for k in (BASELINE, chosen)}, baseline=BASELINE, test="perm")[1]
            entry.update(delta_vs_rrf60=r2["delta"], p_vs_rrf60=r2["p_holm"])
        else:
            entry.update(delta_vs_rrf60=0.0, p_vs_rrf60=1.0)
        if chosen != PREVIOUS:
            r3 = compare({k: s[k] for k in (PREVIOUS, chosen)}, baseline=PREVIOUS, test="perm")[1]
            entry.update(delta_vs_previous=r3["delta"], p_vs_previous=r3["p_holm"])
        loco[held] = entry
        print("held out", held, "->", chosen, f"{entry['delta_vs_best_single']:+.4f} vs best single,",
              f"{entry['delta_vs_rrf60']:+.4f} vs rrf60;",
              {v: round(e["chosen"], 4) for v, e in entry["variants"].items()}, flush=True)
    names = [c.name for c in COLLECTIONS]
    shipped, crit = choose(names)

    external = {}
    plain = {c: f for c, f in cands.items() if not is_confidence(c)}   # other systems' scores: no confidence
    for label, topics, a, b in EXTERNAL:
        lists, qrels = external_pair(topics, a, b)
        s = per_query_scores(lists, qrels, plain, depth)   # these runs hold 100 per query
        external[label] = summarise(s, [a, b])
        show = PREVIOUS if is_confidence(shipped) else shipped
        rows = compare({k: s[k] for k in dict.fromkeys((external[label]["best_single"], show, BASELINE))},
                       baseline=external[label]["best_single"], test="perm")
        external[label]["tests_vs_best_single"] = {r["system"]: {"delta": r["delta"], "p_holm": r["p_holm"]}
                                                   for r in rows[1:]}
    return {"depth": depth, "candidates": list(cands), "slopes": list(SLOPES), "centres": list(CENTRES),
            "baseline": BASELINE, "previous": PREVIOUS,
            "variants": list(variants), "local": local, "loco": loco, "shipped": shipped,
            "shipped_criterion": crit, "shipped_test_only": choose(names, ("test",))[0],
            "criterion_all": criterion(names), "external": external}


VARIANT_NAMES = {"test": "test queries", "doc": "passages as queries", "typo": "misspelled queries",
                 "long40": "passages behind 40 unrelated words", "long80": "passages behind 80 unrelated words"}


def render(f: dict) -> List[str]:
    """The fusion section of defaults.md."""
    cands, shipped, prev, base = f["candidates"], f["shipped"], f["previous"], f["baseline"]
    cols, vs = list(f["local"]), f["variants"]
    loco = f["loco"]
    md = ["## Fusion: the untuned default for a bare `a+b`", "",
          f"Each bare `bm25+dense` search fuses both retrievers' top {f['depth']} (the product's fusion depth) "
          "and is scored by nDCG@10. Every collection is scored on its test queries and on three shifts of "
          "them, each with the collection's real judgments, that change which retriever is stronger: "
          "**passages as queries** (for each test query with at least two relevant passages, its first relevant "
          f"passage, first {defaults_runs.DOC_WORDS} words, is the query and its other relevant passages the "
          "answers; the query's own passage is removed from both runs: long, ArguAna-like queries), "
          "**misspelled queries** (half the words of 5+ letters get two inner letters swapped) and **passages "
          "behind 40 or 80 unrelated words** (taken from other passages: the dense encoder, which reads 256 "
          "word pieces, sees less of each passage, as with long documents; BM25 reads everything). Candidates "
          "are the untuned fusions the product implements: rrf over k, CombSUM/CombMNZ under min-max and "
          "z-score, an agreement-weighted CombSUM (per query, each list weighs (0.05 + share of its top 10 that "
          "the other list retrieved)²), and CombMNZ weighted per query by each retriever's confidence "
          "(`confidence=SLOPE,centre=C`: BM25's top score over the query's mass, i.e. the share of the query "
          "the best passage matched, against dense's top cosine; the BM25 list weighs 1 / (1 + exp(−SLOPE · "
          f"(share − cosine − C))); slopes {f.get('slopes', list(SLOPES))}, centres {f.get('centres', list(CENTRES))}). "
          "Choice rule: the highest mean, over the training collections and their variants, of (fused − better "
          "single retriever).", "",
          "### Leave one collection out", "",
          md_table(["held out", "chosen on the other three", "best single (test)", "nDCG@10 best single",
                    "nDCG@10 chosen", "Δ vs best single (p)", "Δ vs rrf(k=60) (p)", f"Δ vs {prev} (p)"],
                   [[h, e["chosen"], e["best_single"], e["best_single_ndcg"], e["chosen_ndcg"],
                     f"{e['delta_vs_best_single']:+.4f} (p={e['p_vs_best_single']:.3f})",
                     f"{e['delta_vs_rrf60']:+.4f} (p={e['p_vs_rrf60']:.3f})",
                     f"{e.get('delta_vs_previous', 0.0):+.4f} (p={e.get('p_vs_previous', 1.0):.3f})"]
                    for h, e in loco.items()]),
          "", "Test queries; p: paired randomization test (10,000 resamples), Holm-corrected over the "
          "comparisons in the cell's test.", "",
          f"Mean Δ over the held-out collections (test queries): chosen "
          f"{mean(e['delta_vs_best_single'] for e in loco.values()):+.4f} vs best single, "
          f"{mean(e['delta_vs_rrf60'] for e in loco.values()):+.4f} vs rrf(k=60).", "",
          "Held out, every variant (Δ nDCG@10 vs the better single retriever there: chosen / "
          f"`{prev}` / `{base}`):", "",
          md_table(["held out"] + [VARIANT_NAMES.get(v, v) for v in vs],
                   [[h] + [f"{e['variants'][v]['chosen']:+.4f} / {e['variants'][v]['previous']:+.4f} / "
                           f"{e['variants'][v]['rrf60']:+.4f}" for v in vs] for h, e in loco.items()]), "",
          "Single retrievers there (bm25 / dense nDCG@10; queries): " + "; ".join(
              f"{h}: " + ", ".join(f"{v} {e['variants'][v]['bm25']:.3f}/{e['variants'][v]['dense']:.3f} "
                                   f"({e['variants'][v]['queries']})" for v in vs)
              for h, e in loco.items()) + ".", "",
          "Held-out variants more than 0.005 below the better single retriever: chosen "
          f"{sum(e['variants'][v]['chosen'] < -0.005 for e in loco.values() for v in vs)}, `{prev}` "
          f"{sum(e['variants'][v]['previous'] < -0.005 for e in loco.values() for v in vs)}, `{base}` "
          f"{sum(e['variants'][v]['rrf60'] < -0.005 for e in loco.values() for v in vs)} (of "
          f"{len(loco) * len(vs)}); mean Δ over them: chosen "
          f"{mean(e['variants'][v]['chosen'] for e in loco.values() for v in vs):+.4f}, `{prev}` "
          f"{mean(e['variants'][v]['previous'] for e in loco.values() for v in vs):+.4f}, `{base}` "
          f"{mean(e['variants'][v]['rrf60'] for e in loco.values() for v in vs):+.4f}.", "",
          f"**Shipped** (chosen on all four with their variants): `{shipped}` (mean Δ vs best single "
          f"{f['shipped_criterion']:+.4f}). On the test queries alone the same rule chooses "
          f"`{f['shipped_test_only']}`; folds' test-only choices: "
          + ", ".join(f"{h} `{e['test_only_choice']}`" for h, e in loco.items()) + ".",
          ""] + sum(([f"The same protocol on the test queries with both retrievers' top {d} fused (`retr search "
                      f"--queries`, k=1000): chosen on all four `{g['shipped']}`; held out:", "",
                      md_table(["held out", "chosen", "Δ vs best single (p)", "Δ vs rrf(k=60) (p)"],
                               [[h, e["chosen"], f"{e['delta_vs_best_single']:+.4f} (p={e['p_vs_best_single']:.3f})",
                                 f"{e['delta_vs_rrf60']:+.4f} (p={e['p_vs_rrf60']:.3f})"] for h, e in g["loco"].items()]),
                      "", f"Mean Δ: {mean(e['delta_vs_best_single'] for e in g['loco'].values()):+.4f} vs best single, "
                      f"{mean(e['delta_vs_rrf60'] for e in g['loco'].values()):+.4f} vs rrf(k=60). The shipped "
                      f"`{shipped}` at this depth: " + ", ".join(
                          f"{n} {g['local'][n]['test']['delta_vs_best'][shipped]:+.4f}" for n in g["local"])
                      + f" (`{prev}`: " + ", ".join(
                          f"{n} {g['local'][n]['test']['delta_vs_best'][prev]:+.4f}" for n in g["local"]) + ")."]
                     for d, g in f.get("by_depth", {}).items()), [])
    crit = f["criterion_all"]
    shown = [c for c in cands if not is_confidence(c)] + sorted(
        [c for c in cands if is_confidence(c)], key=lambda c: -crit[c])[:8]
    cells = [(n, v) for n in cols for v in vs]
    md += ["", "### Candidates, Δ nDCG@10 vs the better single retriever", "",
           "Every plain candidate and the 8 best confidence-weighted ones (all of them in defaults.json); columns: "
           "collection / variant.", "",
           md_table(["candidate"] + [f"{n} {v}" for n, v in cells] + ["mean", "min"],
                    [[c] + [f["local"][n][v]["delta_vs_best"][c] for n, v in cells]
                     + [mean(f["local"][n][v]["delta_vs_best"][c] for n, v in cells),
                        min(f["local"][n][v]["delta_vs_best"][c] for n, v in cells)] for c in shown]), "",
           "Single retrievers on the test queries (nDCG@10): " + "; ".join(
               f"{n}: bm25 {f['local'][n]['test']['means']['bm25']:.4f}, dense {f['local'][n]['test']['means']['dense']:.4f}"
               for n in cols) + ".", "",
           "### Robustness check: a weak and a strong retriever (not used for the choice)", "",
           "Real top-100 runs shipped with the datasets (TREC DL 2019/2020 passage, TREC-COVID); the strong "
           "run beats the weak one by 0.13–0.24 nDCG@10. These are other systems' scores, with no confidence on "
           "retr's scale, so a confidence-weighted fusion is plain CombMNZ here.", ""]
    ext = f["external"]
    plain = [c for c in cands if not is_confidence(c)]
    show = prev if is_confidence(shipped) else shipped
    md.append(md_table(["pair", "weak", "strong", "best single"] + ["Δ " + c for c in dict.fromkeys((show, base))]
                       + ["best candidate here"],
                       [[k, min(e["means"][x] for x in e["means"] if x not in plain),
                         max(e["means"][x] for x in e["means"] if x not in plain), e["best_single"]]
                        + [f"{e['delta_vs_best'][c]:+.4f}" for c in dict.fromkeys((show, base))]
                        + [max(plain, key=lambda c: e["delta_vs_best"][c])
                           + f" ({max(e['delta_vs_best'].values()):+.4f})"] for k, e in ext.items()]))
    md += ["", "Every candidate on those pairs (Δ vs the strong run):", "",
           md_table(["candidate"] + list(ext) + ["mean"],
                    [[c] + [ext[k]["delta_vs_best"][c] for k in ext] + [mean(ext[k]["delta_vs_best"][c] for k in ext)]
                     for c in plain])]
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--indexes", type=Path, help="Read the benchmark folders (read-only) from here instead of WORK.")
    args = ap.parse_args()
    write({"fusion": fusion_part(args.indexes)})


if __name__ == "__main__":
    main()
