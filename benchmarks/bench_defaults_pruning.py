"""The estimator ``retr index --prune P`` uses without ``--quality`` (issue #19), chosen without
in-domain training data by leave-one-collection-out (defaults_report.py: chosen on three of SciFact,
NFCorpus, Cranfield, Vaswani, scored on the fourth; what ships is chosen the same way on all four).

    RETR_BENCH_WORK=... .venv/bin/python benchmarks/bench_defaults_pruning.py [--indexes DIR]

Prune 30% of the passages by each candidate's scores, then search the kept ones: BM25 and dense are
the unpruned top-1000 runs with the pruned passages removed (BM25's collection statistics are not
recomputed), hybrid is min-max CombMNZ of those two lists; nDCG@10 on the test queries, against
random pruning (the per-query mean over five seeds). Choice rule: the highest mean, over the training
collections and the three pipelines, of (candidate - random). Candidates: the estimators the product
has (length, stopwords, the shipped SciFact head ``learned``, never scored on SciFact), a head of the
same kind trained on the pooled qrels of the training collections, and explored ones (centrality and
density of the MiniLM vectors, rank sums, BM25 retrievability over pseudo-queries drawn from the
corpus); the product's default is chosen among the product's estimators only.

Runs come from defaults_runs.py (cached top-1000 per collection, computed on first use), the passages'
MiniLM vectors from the benchmark indexes' dense sub-index (``--indexes DIR``: read the benchmark
folders from DIR, read-only). Writes the "pruning" part of benchmarks/results/defaults.{json,md}
(defaults_report.write).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Dict, List, Tuple

from common import COLLECTIONS, md_table

from eval import evaluate
from eval.significance import compare
from retrieval.fusion import Fusion, fuse

import defaults_runs
from defaults_report import CUT, DEPTH, Lists, mean, write


def local_pair(col, indexes=None) -> Tuple[Lists, dict]:
    if not all(defaults_runs.run_path(col.name, n).exists() for n in defaults_runs.NAMES):
        defaults_runs.dump(col, indexes)
    qrels = col.qrels()
    lists = {n: defaults_runs.load(col.name, n) for n in defaults_runs.NAMES}
    return lists, qrels


# ------------------------------------------------------------------ pruning part
PRUNE = 0.3
RANDOM_SEEDS = (0, 1, 2, 3, 4)
PRUNE_PIPES = ("bm25", "dense", "hybrid")
HYBRID = Fusion("combmnz", norm="minmax")   # the default fusion without its confidence weights
#: candidates that are estimators the product has (retr index --quality NAME): what may ship as the default
PRODUCT_ESTIMATORS = {"length": "length", "stopwords": "stopwords", "learned (shipped, SciFact train)": "learned"}
MAX_POSITIVE_SHARE = 0.7   # a collection whose qrels call nearly every passage relevant (NFCorpus) teaches no quality


def _prune_data(col, indexes):
    """Passages (as the bench index holds them), their stored MiniLM vectors and the learned
    estimator's features, for one collection."""
    import faiss
    import numpy as np

    from retrieval.collections import read_corpus
    from retrieval.dense.encoder import DenseEncoder

    docs = list(read_corpus(col.corpus, empty="skip"))
    folder = (indexes or defaults_runs.WORK) / col.name / "dense"
    ix = faiss.read_index(str(folder / "index.faiss"))
    order = {x: i for i, x in enumerate((folder / "docids.txt").read_text().split("\n")[: ix.ntotal])}
    X = ix.reconstruct_n(0, ix.ntotal)[[order[d.docid] for d in docs]]
    toks = DenseEncoder(None, quiet=True).tokenize([d.contents for d in docs])
    F = np.hstack([X, np.log1p([len(t) for t in toks])[:, None]]).astype(np.float64)
    qrels = {}
    for split in defaults_runs.splits(col):
        for q, rel in col.qrels(split).items():
            qrels.setdefault(f"{split}:{q}", {}).update(rel)
    positives = {d for rel in qrels.values() for d, g in rel.items() if g > 0}
    share = sum(d.docid in positives for d in docs) / len(docs)
    return {"docs": docs, "F": F, "X": X, "qrels": qrels, "positive_share": share}


def centrality(X):
    """Cosine of each (normalised) passage vector to the corpus's mean direction."""
    import numpy as np

    c = X.mean(0)
    return X @ (c / (np.linalg.norm(c) + 1e-12))


def density(X, k: int = 10):
    """Mean cosine of each passage to its k nearest other passages (faiss Flat, exact)."""
    import faiss
    import numpy as np

    ix = faiss.IndexFlatIP(X.shape[1])
    ix.add(np.ascontiguousarray(X, dtype=np.float32))
    sims, _ = ix.search(np.ascontiguousarray(X, dtype=np.float32), k + 1)
    return sims[:, 1:].mean(1)


def _head_scores(head, data):
    from retrieval.quality.learned import _Lexical, _apply

    T = _Lexical(head["lexical"]["vocabulary"], head["lexical"]["idf"])([d.contents for d in data["docs"]])
    return _apply(head, data["F"], T)


def pooled_head(data: dict, train: List[str], name: str = "learned-minilm-pooled"):
    """The learned head (tf-idf + MiniLM, the shipped configuration) trained on the qrels of every
    collection in ``train`` whose qrels leave most passages non-relevant (all splits: these
    collections are not the one scored)."""
    import numpy as np

    from retrieval.quality.learned import train_head

    feats, sources, used = {}, [], []
    for n in train:
        if data[n]["positive_share"] > MAX_POSITIVE_SHARE:
            continue
        for d, f in zip(data[n]["docs"], data[n]["F"]):
            feats[d.contents] = f
        sources.append((data[n]["docs"], data[n]["qrels"]))
        used.append(n)
    head = train_head(sources, neg_ratio=None, l2=1.0, seed=0, name=name,
                      describe_data=[f"{n} qrels (all splits)" for n in used],
                      features=lambda texts: np.stack([feats[t] for t in texts]), feature_set="tfidf+emb",
                      quiet=True)
    return head, used


RETRIEVABILITY_QUERIES = 3   # pseudo-queries per passage


def retrievability(col, docs, indexes=None) -> dict:
    """Explored, not in the product: retrievability (Azzopardi & Vinay, 2008) under BM25 with pseudo-queries
    drawn from the corpus itself: from every passage, RETRIEVABILITY_QUERIES seeded queries of two of its
    words (letters and digits, 3+ characters, not in the stopword list); a passage's score is how often BM25
    ranks it in the top 10 (``retrievability@10``) or top 100 (``@100``) of all those queries, or the sum of
    1/rank over the top 100 (``gravity``). A passage no query finds near the top is one real queries are least
    likely to need. Costs one BM25 search per pseudo-query on the full index (cached under WORK)."""
    import random
    import re

    import numpy as np

    from retrieval.quality.estimators import STOPWORDS
    from retrieval.types import Query

    path = defaults_runs.RUNS / f"{col.name}.retrievability.json"
    if not path.exists():
        word = re.compile(r"[^\W_]{3,}", re.UNICODE)
        rng = random.Random(0)
        qs = []
        for i, d in enumerate(docs):
            words = [w for w in (x.lower() for x in word.findall(d.contents)) if w not in STOPWORDS]
            if len(words) >= 2:
                qs += [Query(f"{i}.{j}", " ".join(rng.sample(words, 2))) for j in range(RETRIEVABILITY_QUERIES)]
        res = defaults_runs._open(col, indexes).snapshot().retriever("bm25").batch_search(qs, 100, 2)
        pos = {d.docid: i for i, d in enumerate(docs)}
        r10, r100, grav = (np.zeros(len(docs)) for _ in range(3))
        for hits in res.values():
            for rank, (d, _s) in enumerate(hits, 1):
                k = pos[d]
                r100[k] += 1
                r10[k] += rank <= 10
                grav[k] += 1 / rank
        path.write_text(json.dumps({"queries": len(qs), "retrievability@10": r10.tolist(),
                                    "retrievability@100": r100.tolist(), "gravity": grav.tolist()}))
    got = json.loads(path.read_text())
    return {k: np.asarray(v) for k, v in got.items() if k != "queries"}


def _rank01(x):
    import numpy as np

    r = np.empty(len(x))
    r[np.argsort(x, kind="stable")] = np.arange(len(x))
    return r / max(1, len(x) - 1)


def _pruned_scores(lists, qrels, keep, fusion) -> Dict[str, Dict[str, float]]:
    """Per-query nDCG@10 of each pipeline over the kept passages: the unpruned top-1000 runs
    with the pruned passages removed (BM25's collection statistics are not recomputed)."""
    qids = sorted(q for q in qrels if any(g > 0 for g in qrels[q].values()))
    qrels = {q: qrels[q] for q in qids}
    kept = {n: {q: [x for x in lists[n].get(q, []) if x[0] in keep] for q in qids} for n in lists}
    runs = {n: {q: dict(kept[n][q][:CUT]) for q in qids} for n in lists}
    runs["hybrid"] = {q: {d: float(CUT - i) for i, (d, _s, _r) in
                          enumerate(fuse({n: kept[n][q][:DEPTH] for n in lists}, fusion)[:CUT])} for q in qids}
    return {p: {q: v["nDCG@10"] for q, v in evaluate(qrels, runs[p], ["nDCG@10"], per_query=True).items()} for p in PRUNE_PIPES}


def pruning_part(indexes=None) -> dict:
    import numpy as np

    from retrieval.quality.estimators import Length, RandomQuality, StopwordShare
    from retrieval.quality.heads import DEFAULT_HEAD
    from retrieval.quality.prune import select_keep

    names = [c.name for c in COLLECTIONS]
    data = {c.name: _prune_data(c, indexes) for c in COLLECTIONS}
    texts = {n: [d.contents for d in data[n]["docs"]] for n in names}
    fixed = {n: {"length": Length().score(texts[n], quiet=True), "stopwords": StopwordShare().score(texts[n], quiet=True),
                 "centrality": centrality(data[n]["X"]), "density": density(data[n]["X"]),
                 "learned (shipped, SciFact train)": _head_scores(DEFAULT_HEAD, data[n])} for n in names}
    for n in names:
        fixed[n]["length + centrality"] = _rank01(fixed[n]["length"]) + _rank01(fixed[n]["centrality"])
        fixed[n]["length + density"] = _rank01(fixed[n]["length"]) + _rank01(fixed[n]["density"])
        for label, sc in retrievability(next(c for c in COLLECTIONS if c.name == n), data[n]["docs"],
                                        indexes).items():
            fixed[n][label] = sc + 1e-6 * fixed[n]["length"]   # ties (never retrieved) drop the shorter passage
    in_domain = {"learned (shipped, SciFact train)": {"scifact"}}   # never scored where it was trained
    heads = {}

    def head_on(train):
        key = tuple(sorted(train))
        if key not in heads:
            heads[key] = pooled_head(data, list(key))
        return heads[key]

    def scores_for(n, train):
        """Every candidate's scores on collection n; the pooled head (and the ensemble that uses it) is
        trained on ``train`` only, which never holds n."""
        h, _ = head_on([t for t in train if t != n])
        pooled = _head_scores(h, data[n])
        out = dict(fixed[n])
        out["learned (pooled)"] = pooled
        out["learned (pooled) + length"] = _rank01(pooled) + _rank01(fixed[n]["length"])
        return out

    cache: Dict[Tuple[str, Tuple[str, ...]], dict] = {}

    def measure(n, train) -> dict:
        """{candidate: {pipe: {qid: nDCG@10}}} plus 'random' (per-query mean over RANDOM_SEEDS)."""
        key = (n, tuple(sorted(t for t in train if t != n)))
        if key in cache:
            return cache[key]
        col = next(c for c in COLLECTIONS if c.name == n)
        lists, qrels = local_pair(col, indexes)
        docids = [d.docid for d in data[n]["docs"]]
        out = {}
        for cand, sc in scores_for(n, train).items():
            out[cand] = _pruned_scores(lists, qrels, select_keep(docids, np.asarray(sc), PRUNE), HYBRID)
        rnd = [_pruned_scores(lists, qrels, select_keep(docids, RandomQuality(s).score(texts[n], quiet=True), PRUNE),
                              HYBRID) for s in RANDOM_SEEDS]
        out["random"] = {p: {q: mean(r[p][q] for r in rnd) for q in rnd[0][p]} for p in PRUNE_PIPES}
        out["unpruned"] = _pruned_scores(lists, qrels, set(docids), HYBRID)
        cache[key] = out
        return out

    def gain(m, cand) -> float:
        """Mean over the pipelines of (candidate - random) nDCG@10."""
        return mean(mean(m[cand][p].values()) - mean(m["random"][p].values()) for p in PRUNE_PIPES)

    cands = list(scores_for(names[0], names[1:]))

    def criterion(train, held=None):
        """Mean gain over the training collections, each candidate scored only out of its own training
        domain (a pooled head is retrained without the collection it is scored on; the shipped SciFact
        head is never scored on SciFact, nor a candidate where SciFact is held out)."""
        out = {}
        for c in cands:
            if held is not None and held in in_domain.get(c, ()):
                continue
            ts = [t for t in train if t not in in_domain.get(c, ())]
            out[c] = mean(gain(measure(t, train), c) for t in ts)
        return out

    def run_protocol(pool: List[str]) -> dict:
        loco = {}
        for held in names:
            train = [n for n in names if n != held]
            crit = {c: v for c, v in criterion(train, held).items() if c in pool}
            chosen = max(crit, key=crit.__getitem__)
            m = measure(held, train)
            entry = {"train": train, "chosen": chosen, "train_criterion": crit, "pipes": {}}
            for p in PRUNE_PIPES:
                rows = compare({"random": m["random"][p], chosen: m[chosen][p]}, baseline="random", test="perm")
                entry["pipes"][p] = {"unpruned": mean(m["unpruned"][p].values()), "random": rows[0]["mean"],
                                     "chosen": rows[1]["mean"], "delta": rows[1]["delta"], "p": rows[1]["p_holm"]}
            entry["pooled_head_trained_on"] = head_on([t for t in train if t != held])[1]
            loco[held] = entry
            print("pruning: held out", held, "->", chosen,
                  {p: round(entry["pipes"][p]["delta"], 4) for p in PRUNE_PIPES}, flush=True)
        crit_all = {c: v for c, v in criterion(names).items() if c in pool}
        return {"pool": pool, "loco": loco, "shipped": max(crit_all, key=crit_all.__getitem__),
                "shipped_criterion": crit_all,
                "held_out_mean_delta": mean(e["pipes"][p]["delta"] for e in loco.values() for p in PRUNE_PIPES)}

    every = {}
    for held in names:
        m = measure(held, [n for n in names if n != held])
        every[held] = {c: {p: mean(m[c][p].values()) for p in PRUNE_PIPES} for c in cands + ["random", "unpruned"]}
    protocols = {"product": run_protocol([c for c in cands if c in PRODUCT_ESTIMATORS]),
                 "explored": run_protocol(cands)}
    return {"prune": PRUNE, "random_seeds": list(RANDOM_SEEDS), "pipes": list(PRUNE_PIPES), "candidates": cands,
            "positive_share": {n: data[n]["positive_share"] for n in names}, "every": every,
            "protocols": protocols, "in_domain": {k: sorted(v) for k, v in in_domain.items()}}


def render(f: dict) -> List[str]:
    """The pruning section of defaults.md."""
    pipes = f["pipes"]

    def loco_table(pr):
        return md_table(["held out", "chosen on the other three"]
                        + [f"{p}: unpruned / random / chosen (Δ, p)" for p in pipes],
                        [[h, e["chosen"]]
                         + [f"{e['pipes'][p]['unpruned']:.4f} / {e['pipes'][p]['random']:.4f} / "
                            f"{e['pipes'][p]['chosen']:.4f} ({e['pipes'][p]['delta']:+.4f}, p={e['pipes'][p]['p']:.3f})"
                            for p in pipes] for h, e in pr["loco"].items()])

    prod, expl = f["protocols"]["product"], f["protocols"]["explored"]
    md = ["## Pruning: the default estimator for `--prune` without in-domain training data", "",
          f"Prune {f['prune']:.0%} of the passages, then search the kept ones; nDCG@10 on the test queries. "
          "Pipelines: `bm25` and `dense` = the unpruned top-1000 runs with the pruned passages removed (BM25's "
          "collection statistics are not recomputed; the dense ranking of the kept passages is exact), `hybrid` = "
          "min-max CombMNZ of those two lists (the default fusion without its per-query confidence weights). `random` = the per-query mean over seeds "
          f"{', '.join(map(str, f['random_seeds']))}. Choice rule: the highest mean, over the training collections "
          "and the three pipelines, of (candidate − random). Candidates with training data are scored only out of "
          "their domain: the shipped SciFact head never on SciFact (nor a candidate when SciFact is held out); "
          "a head of the same kind trained on the pooled qrels (all splits) of the training collections is "
          "retrained without the collection it is scored on. Collections whose qrels call nearly every passage "
          "relevant are left out of head training (positive share: "
          + ", ".join(f"{n} {v:.0%}" for n, v in f["positive_share"].items()) + "). Further candidates: "
          "`centrality` (cosine of the MiniLM vector to the corpus mean direction), `density` (mean cosine to the "
          "10 nearest passages), sums of percentile ranks, and retrievability under BM25 (how often a passage "
          f"ranks in the top 10 or 100, or 1/rank summed, over {RETRIEVABILITY_QUERIES} two-word pseudo-queries "
          "drawn from each passage; ties drop the shorter passage).", "",
          "### Leave one collection out, over the estimators the product has (" + ", ".join(prod["pool"]) + ")", "",
          loco_table(prod), "",
          f"Mean held-out Δ vs random: {prod['held_out_mean_delta']:+.4f}. Chosen on all four: `{prod['shipped']}` "
          "(" + ", ".join(f"{c} {v:+.4f}" for c, v in prod["shipped_criterion"].items()) + ").", "",
          "### Leave one collection out, over every explored candidate", "",
          loco_table(expl), "",
          f"Mean held-out Δ vs random: {expl['held_out_mean_delta']:+.4f}. Chosen on all four: `{expl['shipped']}` "
          "(" + ", ".join(f"{c} {v:+.4f}" for c, v in expl["shipped_criterion"].items()) + ").", "",
          "p: paired randomization test against random (10,000 resamples).", "",
          "### Every candidate on each collection (nDCG@10 at 30% pruned: bm25 / dense / hybrid)", "",
          "A pooled head here is the one trained without that collection; the SciFact head on SciFact is in-domain.",
          "",
          md_table(["candidate"] + list(f["every"]),
                   [[c] + [" / ".join(f"{e[c][p]:.4f}" for p in pipes) for e in f["every"].values()]
                    for c in f["candidates"] + ["random", "unpruned"]])]
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--indexes", type=Path, help="Read the benchmark folders (read-only) from here instead of WORK.")
    args = ap.parse_args()
    write({"pruning": pruning_part(args.indexes)})


if __name__ == "__main__":
    main()
