"""Defaults that hold without training queries (issue #19): leave-one-collection-out.

Every default is chosen on three of the four local collections (SciFact,
NFCorpus, Cranfield, Vaswani) and scored on the fourth, with paired tests;
what ships is then chosen the same way on all four.

    RETR_BENCH_WORK=... python benchmarks/bench_defaults.py [--part fusion] [--render-only]

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
Writes benchmarks/results/defaults.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from common import COLLECTIONS, DATA, RESULTS, machine, md_table, write_results

from eval import evaluate
from eval.io import read_qrels, read_run
from eval.significance import compare
from retrieval.fusion import Fusion, fuse

import defaults_runs

DEPTH = 100            # what Index.search / batch_search fuse for a bare a+b (retrieval.index.DEPTH)
DEPTHS = (100, 1000)   # ... and what `retr search --queries` fuses (k defaults to 1000 there)
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
def local_pair(col, indexes=None) -> Tuple[Lists, dict]:
    if not all(defaults_runs.run_path(col.name, n).exists() for n in defaults_runs.NAMES):
        defaults_runs.dump(col, indexes)
    qrels = col.qrels()
    lists = {n: defaults_runs.load(col.name, n) for n in defaults_runs.NAMES}
    return lists, qrels


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
        res = defaults_runs._open(col, indexes).retriever("bm25").batch_search(qs, 100, 2)
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
    return {p: {q: v["nDCG@10"] for q, v in evaluate(qrels, runs[p], ["nDCG@10"], per_query=True,
                                                      complete=True).items()} for p in PRUNE_PIPES}


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


# ------------------------------------------------------------------ DeepCT part
# bench_deepct.py's TINY body, first 128-token window of each passage only (2 shared, busy cores)
TINY = dict(base="splade-tiny", epochs=3, lr=1e-3, threads=2, max_windows=1)
TITLE_LIMIT = 1000   # title-supervised passages at most (a seeded sample), as `--title-limit`
DEEPCT_COLS = ("scifact", "nfcorpus", "cranfield")
DEEPCT_DIR = defaults_runs.WORK / "defaults-deepct"


def _cranfield_split(col, seed: int = 7):
    """Cranfield has no training split: a seeded half of its judged queries trains the qrels model, and
    every system is scored on the other half."""
    import random

    from eval.io import write_qrels

    qrels = col.qrels()
    qids = sorted(qrels)
    random.Random(seed).shuffle(qids)
    train = {q: qrels[q] for q in qids[: len(qids) // 2]}
    held = {q: qrels[q] for q in qids[len(qids) // 2:]}
    DEEPCT_DIR.mkdir(parents=True, exist_ok=True)
    write_qrels(train, DEEPCT_DIR / f"{col.name}-train-half.tsv")
    return DEEPCT_DIR / f"{col.name}-train-half.tsv", held


def _train(col, folder, qrels_path=None):
    """Train (or reuse) a tiny DeepCT model; ``qrels_path=None`` is `retr train deepct --corpus C` with no
    qrels (title supervision, auto). Returns the model card, or the one-line refusal."""
    from indexes.errors import InputError
    from retrieval.deepct.train import TrainConfig, train_deepct

    out = DEEPCT_DIR / folder
    if (out / "deepct.json").exists():
        return json.loads((out / "deepct.json").read_text())
    print(f"[{col.name}] training {folder} ...", flush=True)
    try:
        with __import__("warnings").catch_warnings():
            __import__("warnings").simplefilter("ignore")
            cfg = TrainConfig(**TINY) if qrels_path else TrainConfig(**TINY, title_limit=TITLE_LIMIT)
            return train_deepct(col.corpus, out, col.queries_path if qrels_path else None, qrels_path, cfg,
                                quiet=True)
    except InputError as e:
        return {"refused": str(e)}


def deepct_part() -> dict:
    import retrieval
    from retrieval.deepct.subindex import DeepCTSpec
    from retrieval.writer import add_deepct

    out = {}
    for col in (c for c in COLLECTIONS if c.name in DEEPCT_COLS):
        res = {"models": {}}
        title = _train(col, f"{col.name}-tiny-title")
        if "refused" in title:
            res["title_refused"] = title["refused"]
            res["models"]["title"] = None
            print(f"[{col.name}] title supervision refused: {title['refused']}", flush=True)
            out[col.name] = res
            continue
        if "train" in defaults_runs.splits(col):
            qrels_path, evalq = col.qrels_path("train"), col.qrels()
            res["evaluated_on"] = "test queries; qrels model trained on qrels/train.tsv (10% of it held out as dev)"
        else:
            qrels_path, evalq = _cranfield_split(col)
            res["evaluated_on"] = (f"a seeded held-out half of the queries ({len(evalq)}); the qrels model trained on "
                                   "the other half (10% of it held out as dev)")
        qmodel = _train(col, f"{col.name}-tiny-qrels", qrels_path)
        path = DEEPCT_DIR / f"index-{col.name}"
        idx = retrieval.open_index(path) if (path / "manifest.json").exists() else \
            retrieval.build_index(col.corpus, path, empty="skip", quiet=True)
        for sub, folder in (("deepct-title", f"{col.name}-tiny-title"), ("deepct-qrels", f"{col.name}-tiny-qrels")):
            if sub not in idx.retrievers:
                print(f"[{col.name}] indexing {sub} ...", flush=True)
                idx = add_deepct(idx, DeepCTSpec(model=str(DEEPCT_DIR / folder), threads=2), name=sub, quiet=True)
        for key, card, sub in (("title", title, "deepct-title"), ("qrels", qmodel, "deepct-qrels")):
            e = idx.manifest["subindexes"][sub]
            res["models"][key] = {"targets": card.get("targets", {}).get("kind"),
                                  "training_passages": card["data"].get("training_passages"),
                                  "train_seconds": card["training"]["seconds"],
                                  "settings": {k: card["training"]["settings"][k] for k in ("base", "epochs", "lr", "title")},
                                  "mode": f"{e['config']['mode']}-{e['config'].get('scale', 'linear')}",
                                  "k1": e["config"]["k1"], "b": e["config"]["b"], "tuned": bool(e.get("tuning")),
                                  "fusion": str(idx.pipeline(f"bm25+{sub}").fusion)}
        from retrieval.collections import read_queries

        qs = [q for q in read_queries(col.queries_path) if q.qid in evalq]
        systems = {"BM25": "bm25", "DeepCT (titles)": "deepct-title", "BM25 + DeepCT (titles)": "bm25+deepct-title",
                   "DeepCT (qrels)": "deepct-qrels", "BM25 + DeepCT (qrels)": "bm25+deepct-qrels"}
        scores = {}
        for label, spec in systems.items():
            run = {q: {h.docid: h.score for h in hs} for q, hs in idx.batch_search(qs, k=1000, retriever=spec,
                                                                                 threads=2).items()}
            pq = evaluate(evalq, run, ["nDCG@10", "R@100"], per_query=True, complete=True)
            scores[label] = pq
        res["queries"] = len(qs)
        res["systems"] = {}
        for m in ("nDCG@10", "R@100"):
            rows = compare({k: {q: v[m] for q, v in s.items()} for k, s in scores.items()}, baseline="BM25",
                           test="perm")
            for r in rows:
                res["systems"].setdefault(r["system"], {})[m] = {"mean": r["mean"], "delta": r.get("delta"),
                                                               "p_holm": r.get("p_holm")}
            tq = compare({k: {q: v[m] for q, v in scores[k].items()} for k in ("DeepCT (qrels)", "DeepCT (titles)")},
                         baseline="DeepCT (qrels)", test="perm")[1]
            res.setdefault("titles_vs_qrels", {})[m] = {"delta": tq["delta"], "p": tq["p_holm"]}
        out[col.name] = res
        print(col.name, {k: round(v["nDCG@10"]["mean"], 4) for k, v in res["systems"].items()}, flush=True)
    return {"tiny": TINY, "title_limit": TITLE_LIMIT, "collections": out}


def render_deepct(f: dict) -> List[str]:
    md = ["## DeepCT without qrels: title supervision", "",
          "`retr train deepct --corpus C` with no `--qrels` trains on titles (HDCT-style: a body term's target is 1 "
          "if the passage's title has it) and says so; a corpus without titles is refused in one line. Both "
          f"models use the tiny body (SPLADE-tiny's BERT, 2 layers; {f['tiny']}: the first 128-token window of "
          f"each passage), not MiniLM; the title model sees at most {f.get('title_limit')} titled passages (a seeded "
          "sample), for the 2 shared CPU cores. The title model has "
          "no dev queries, so it searches with the untuned defaults (mode, k1/b, and the default fusion); the "
          "qrels model's mode, k1/b and fusion are tuned on its 10% dev queries, as `retr index --deepct` does. "
          "Δ and p: paired randomization test against BM25, Holm-corrected; `titles − qrels`: against the qrels "
          "model.", ""]
    for name, r in f["collections"].items():
        md.append(f"### {name}")
        md.append("")
        if r["models"].get("title") is None:
            md += [f"No titles: refused (`retr: error: {r['title_refused']}`).", ""]
            continue
        md += [f"Evaluated on {r['evaluated_on']}; {r['queries']} queries.", "",
               md_table(["system", "nDCG@10 (Δ, p)", "R@100 (Δ, p)"],
                        [[k] + [f"{v[m]['mean']:.4f}" + ("" if v[m]["delta"] is None else
                                                          f" ({v[m]['delta']:+.4f}, p={v[m]['p_holm']:.3f})")
                                for m in ("nDCG@10", "R@100")] for k, v in r["systems"].items()]), "",
               "DeepCT alone, titles − qrels: " + ", ".join(
                   f"{m} {v['delta']:+.4f} (p={v['p']:.3f})" for m, v in r["titles_vs_qrels"].items()) + ".", "",
               md_table(["model", "targets", "passages", "train s", "mode", "k1/b", "tuned", "fusion"],
                        [[k, v["targets"], v["training_passages"], v["train_seconds"], v["mode"],
                          f"{v['k1']}/{v['b']}", v["tuned"], v["fusion"]] for k, v in r["models"].items()]), ""]
    return md


VARIANT_NAMES = {"test": "test queries", "doc": "passages as queries", "typo": "misspelled queries",
                 "long40": "passages behind 40 unrelated words", "long80": "passages behind 80 unrelated words"}


def render_fusion(f: dict) -> List[str]:
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


def render_pruning(f: dict) -> List[str]:
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
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--part", choices=["fusion", "pruning", "deepct"], nargs="*",
                    default=["fusion", "pruning", "deepct"])
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--indexes", type=Path, help="Read the benchmark folders (read-only) from here instead of WORK.")
    args = ap.parse_args()
    old = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
    payload = {"machine": machine(), **{k: v for k, v in old.items() if k != "machine"}}
    if not args.render_only:
        if "fusion" in args.part:
            payload["fusion"] = fusion_part(args.indexes)
        if "pruning" in args.part:
            payload["pruning"] = pruning_part(args.indexes)
        if "deepct" in args.part:
            payload["deepct"] = deepct_part()
    md = ["# Defaults without training queries (leave one collection out)", "",
          "Generated by `benchmarks/bench_defaults.py` (runs cached by `defaults_runs.py` from the "
          "benchmark indexes: BM25 k1=0.9 b=0.4; dense = MiniLM-L6 mean pooling, faiss Flat). Protocol: every "
          "default is chosen on three of SciFact, NFCorpus, Cranfield, Vaswani and scored on the fourth "
          "(test queries); what ships is chosen the same way on all four.", ""]
    if "fusion" in payload:
        md += render_fusion(payload["fusion"])
    if "pruning" in payload:
        md += [""] + render_pruning(payload["pruning"])
    if "deepct" in payload:
        md += [""] + render_deepct(payload["deepct"])
    write_results("defaults", payload, "\n".join(md))


if __name__ == "__main__":
    main()
