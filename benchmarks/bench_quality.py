"""Static pruning by passage quality (METHODS.md §4): pruning curves per estimator
vs random, TOST equivalence, and savings of one real pruned build.

    .venv/bin/python benchmarks/bench_quality.py [--collections scifact ...] [--ship-head] [--select-features]
        -> benchmarks/results/quality.{json,md}, quality_curves.png (and quality_features.{json,md})

Effectiveness curves reuse the shared benchmark index of each collection (BM25 +
MiniLM dense, `common.bench_index`) and never re-encode a corpus:
  * BM25: a real pruned Lucene index per (estimator, p) (cheap);
  * dense: a faiss Flat index rebuilt from the stored vectors of the kept rows
    (exactly what a pruned build would encode: passages are encoded independently);
  * hybrid: RRF(k=60) of the two top-100 lists.
Estimator scores are cached under WORK/quality/<collection>/<estimator>.tsv. The learned
head (tf-idf + MiniLM features) is trained from the stored vectors of the training collection
(SciFact train qrels; NFCorpus is left out since nearly all its passages are training positives);
--ship-head writes it to retrieval/quality/default_head.json.gz, and --select-features reruns the
cross-validated choice of its features on SciFact's training queries.
Savings: one real end-to-end build (BM25 + dense, with encoding and quality scoring),
unpruned vs pruned, on one collection (--savings-collection), as ratios in one run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

import common  # noqa: E402  (puts the repo root on sys.path)

from eval import evaluate
from eval.significance import tost

PS = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
MARGIN = 0.01   # TOST margin, absolute nDCG@10
ALPHA = 0.05
PIPES = ["bm25", "dense", "hybrid", "deepct"]  # deepct only where the bench index has a DeepCT sub-index
ESTS = ["learned", "dense-norm", "pseudo-ppl", "deepct-mass", "deepct-max", "length", "stopwords", "random"]
DEEPCT_ESTS = ("deepct-mass", "deepct-max")  # only where the bench index has a DeepCT sub-index
EXPENSIVE = ("dense-norm", "pseudo-ppl")  # need a model pass over the whole corpus
TRAIN_COLS = ["scifact"]  # NFCorpus: nearly every passage has a relevant training query
QDIR = common.WORK / "quality"


def _docs(col):
    from retrieval.collections import read_corpus
    return list(read_corpus(col.corpus, empty="skip"))   # the bench index skips empty documents


def _vectors(idx, docids):
    import faiss
    d = idx.path / "dense"
    ix = faiss.read_index(str(d / "index.faiss"))
    X = ix.reconstruct_n(0, ix.ntotal)
    order = {x: i for i, x in enumerate((d / "docids.txt").read_text().split("\n")[: ix.ntotal])}
    return X[[order[x] for x in docids]]


def _features(idx, docs, X):
    """The learned estimator's features, from the stored (normalised MiniLM) vectors."""
    from retrieval.dense.encoder import DenseEncoder
    enc = DenseEncoder(None, quiet=True)
    toks = enc.tokenize([d.contents for d in docs])
    return np.hstack([X, np.log1p([len(t) for t in toks])[:, None]]).astype(np.float64)


def train_shipped_head(data, seed=0):
    """The shipped head: tf-idf + MiniLM features, every non-positive passage a negative
    (the configuration --select-features chose), trained on TRAIN_COLS' training qrels."""
    from retrieval.quality.learned import train_head
    feats, sources, described = {}, [], []
    for name in TRAIN_COLS:
        col, docs, F = data[name]["col"], data[name]["docs"], data[name]["F"]
        for d, f in zip(docs, F):
            feats[d.contents] = f
        sources.append((docs, col.qrels("train")))
        described.append(f"{col.folder} qrels/train.tsv")
    head = train_head(sources, neg_ratio=None, l2=1.0, seed=seed, name="learned-minilm-scifact-v2",
                      describe_data=described, features=lambda texts: np.stack([feats[t] for t in texts]),
                      feature_set="tfidf+emb", quiet=True)
    head["card"]["trained_by"] = "benchmarks/bench_quality.py --ship-head (body features = stored bench vectors)"
    return head


def select_features(data, folds=2, seeds=(0, 1), ps=(0.2, 0.3), l2s=(0.3, 1.0, 3.0)):
    """Choose the learned estimator's features on TRAINING queries only: split SciFact's training
    queries into folds; fit on the positives of the other folds, prune, and measure how much
    BM25 nDCG@10 of the held-out fold's queries falls (filtering the unpruned top-1000 run, whose
    scores barely move when the corpus shrinks). Writes benchmarks/results/quality_features.{json,md}."""
    from eval import evaluate
    from retrieval.quality.learned import _Lexical, fit_lexical_head, fit_logistic, _apply
    col, docs, F = data["scifact"]["col"], data["scifact"]["docs"], data["scifact"]["F"]
    docids = np.array([d.docid for d in docs])
    texts = [d.contents for d in docs]
    train = col.qrels("train")
    qs = col.queries("train")
    run = {q: [(h.docid, h.score) for h in hs] for q, hs in data["scifact"]["idx"].batch_search(qs, k=1000, retriever="bm25").items()}
    T = _Lexical.fit(texts)[2]
    qids = sorted(q for q in train if q in run)
    res = {}
    t0 = time.perf_counter()
    for seed in seeds:
        perm = np.random.default_rng(seed).permutation(len(qids))
        for f in range(folds):
            held = {qids[i] for i in perm[f::folds]}
            pos = {d for q in qids if q not in held for d, g in train[q].items() if g > 0}
            y = np.array([d in pos for d in docids], dtype=np.float64)
            hq = {q: train[q] for q in held}
            base = evaluate(hq, {q: dict(run[q]) for q in held}, ["nDCG@10"])["nDCG@10"]
            for l2 in l2s:
                cands = {"emb (standardised, + log length)": _apply(fit_logistic(F, y, l2=l2, seed=seed), F)}
                fit = fit_lexical_head(F[:, :-1], T, y, l2=l2)
                cands["tfidf+emb"] = T @ np.asarray(fit["lexical_weights"]) + F[:, :-1] @ np.asarray(fit["weights"])
                for name, sc in cands.items():
                    order = np.argsort(-sc, kind="stable")
                    for p in ps:
                        keep = set(docids[order[:int(round(len(sc) * (1 - p)))]])
                        r = {q: {d: v for d, v in run[q] if d in keep} for q in held}
                        d = evaluate(hq, r, ["nDCG@10"])["nDCG@10"] - base
                        res.setdefault(f"{name}|{l2}|{p}", []).append(d)
    rows = []
    for key, v in res.items():
        name, l2, p = key.split("|")
        rows.append({"features": name, "l2": float(l2), "p": float(p), "mean_delta": float(np.mean(v)),
                     "deltas": [round(x, 4) for x in v]})
    rows.sort(key=lambda r: (r["p"], -r["mean_delta"]))
    best = max((r for r in rows if r["p"] == max(ps)), key=lambda r: r["mean_delta"])
    md = ["# Learned quality estimator: choosing its features on training queries", "",
          f"SciFact training queries split into {folds} folds ({len(seeds)} seeds); each fold's queries are held out, "
          "the estimator is trained on the other fold's positives (every other passage a negative), the lowest-scoring "
          "share p is pruned, and the held-out queries' BM25 nDCG@10 (filtered unpruned top-1000 run) is compared "
          "with no pruning. Test queries are never used. Reproduce: "
          "`.venv/bin/python benchmarks/bench_quality.py --select-features --collections scifact --skip-savings`.", "",
          common.md_table(["features", "l2 (1/C)", "p", "mean Δ nDCG@10", "per fold"],
                          [[r["features"], r["l2"], r["p"], f"{r['mean_delta']:+.4f}", " ".join(f"{x:+.4f}" for x in r["deltas"])]
                           for r in rows]), "",
          f"Chosen at p={best['p']}: **{best['features']}, l2={best['l2']}** ({best['mean_delta']:+.4f}). "
          f"Time: {time.perf_counter() - t0:.0f} s."]
    common.write_results("quality_features", {"machine": common.machine(), "rows": rows, "chosen": best}, "\n".join(md))
    return best


def deepct_sub(name, idx):
    """The benchmark folder's DeepCT sub-index used for the DeepCT pipeline and estimators (None on
    Vaswani, whose DeepCT model trained on half of its test queries)."""
    if name == "vaswani":
        return None
    return next((s for s in ("deepct", "deepct-tiny") if s in idx.retrievers), None)


def deepct_weight_scores(idx, sub, docs, stat):
    """deepct-mass / deepct-max from the raw term weights the DeepCT sub-index stored when it encoded
    the corpus: the numbers the estimator would compute with the same model (rounded to 1e-5)."""
    import gzip
    from retrieval.deepct.weights import WEIGHTS_FILE
    got = {}
    with gzip.open(idx.path / idx.manifest["subindexes"][sub]["path"] / WEIGHTS_FILE, "rt") as fh:
        for line in fh:
            r = json.loads(line)
            pos = [max(v, 0.0) for v in r["w"].values()]
            got[r["id"]] = (sum(pos) if stat == "mass" else max(pos)) if pos else 0.0
    return np.array([got.get(d.docid, 0.0) for d in docs])


def scores_for(name, est, docs, data_c, head):
    from retrieval.quality import get_estimator, read_scores, write_scores
    from retrieval.quality.learned import _apply
    path = QDIR / name / f"{est}.tsv"
    if est in DEEPCT_ESTS:
        sub = deepct_sub(name, data_c["idx"])
        return deepct_weight_scores(data_c["idx"], sub, docs, est.split("-")[1])
    if est == "learned":
        if "lexical" in head:
            from retrieval.quality.learned import _Lexical
            T = _Lexical(head["lexical"]["vocabulary"], head["lexical"]["idf"])([d.contents for d in docs])
            return _apply(head, data_c["F"], T)
        return _apply(head, data_c["F"])
    if path.exists():
        s = read_scores(path)
        return np.array([s[d.docid] for d in docs])
    t0 = time.perf_counter()
    kw = {"positions": 8, "per_copy": 4} if est == "pseudo-ppl" else {}
    s = get_estimator(est, **kw).score([d.contents for d in docs], quiet=True)
    print(f"  [{name}] {est}: {time.perf_counter() - t0:.0f} s", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_scores(path, [d.docid for d in docs], s)
    return s


def bm25_run(docs, keep, queries, tmp):
    import retrieval
    if tmp.exists():
        shutil.rmtree(tmp)
    idx = retrieval.build_index([d for d in docs if d.docid in keep], tmp, quiet=True)
    res = idx.batch_search(queries, k=1000, retriever="bm25")
    return {q: [(h.docid, h.score) for h in hits] for q, hits in res.items()}


def dense_run(X, docids, keep, Q, qids):
    import faiss
    rows = [i for i, d in enumerate(docids) if d in keep]
    ix = faiss.IndexFlatIP(X.shape[1])
    ix.add(np.ascontiguousarray(X[rows]))
    S, I = ix.search(Q, 1000)
    names = [docids[i] for i in rows]
    return {q: [(names[j], float(s)) for j, s in zip(I[n], S[n]) if j >= 0] for n, q in enumerate(qids)}


def hybrid_run(a, b):
    from retrieval.fusion import fuse, parse_pipeline
    fusion = parse_pipeline("bm25+dense:rrf(k=60)").fusion
    return {q: [(d, s) for d, s, _ in fuse({"bm25": a[q][:100], "dense": b[q][:100]}, fusion)] for q in a}


def per_query(qrels, run):
    r = {q: {d: s for d, s in hits} for q, hits in run.items()}
    return evaluate(qrels, r, ["nDCG@10", "R@100"], per_query=True)


def overlap_note(col, data_c, head, p=0.3):
    """How much of the learned estimator's success is memory: test-relevant passages that are also
    training positives, and the share of each group the learned head keeps at ``p``."""
    from retrieval.quality import select_keep
    if not col.qrels_path("train").exists():
        return ""
    docs = data_c["docs"]
    ids = {d.docid for d in docs}
    test = {d for q in col.qrels().values() for d, g in q.items() if g > 0 and d in ids}
    train = {d for q in col.qrels("train").values() for d, g in q.items() if g > 0 and d in ids}
    keep = select_keep([d.docid for d in docs], scores_for(col.name, "learned", docs, data_c, head), p)
    both, only = test & train, test - train
    share = lambda s: f"{len(s & keep) / len(s):.0%}" if s else "–"  # noqa: E731
    return (f"Test-relevant passages that are also training positives: {len(both)} of {len(test)}. At p={p} the "
            f"learned head keeps {share(both)} of those and {share(only)} of the other {len(only)} "
            f"(training positives: {len(train)} of {len(docs)} passages).")


def curve_cache(name, est, head, idx=None):
    # the learned curves belong to one head, the DeepCT ones to one DeepCT model: new ones get new curves
    if est == "learned":
        return QDIR / name / f"curves-learned-{head['name']}.json"
    if est in DEEPCT_ESTS and idx is not None and deepct_sub(name, idx):
        sha = idx.manifest["subindexes"][deepct_sub(name, idx)]["model"]["sha256"]
        return QDIR / name / f"curves-{est}-{sha}.json"
    return QDIR / name / f"curves-{est}.json"


def collection_curves(col, data_c, head, ests):
    name = col.name
    docs, X = data_c["docs"], data_c["X"]
    docids = [d.docid for d in docs]
    queries = col.queries()
    qrels = col.qrels()
    idx = data_c["idx"]
    Q = idx.snapshot().retriever("dense").encode_queries([q.text for q in queries])
    qids = [q.qid for q in queries]
    out = {}
    tmp = QDIR / name / f"bm25-tmp-{os.getpid()}"  # one per process: runs may go in parallel
    base = None
    from retrieval.quality import select_keep
    for est in ests:
        cache = curve_cache(name, est, head, idx)
        if cache.exists():  # reruns add estimators without redoing the others
            for p, v in json.loads(cache.read_text()).items():
                out[(est, float(p))] = v
            base = base or out[(est, 0.0)]
            continue
        s = scores_for(name, est, docs, data_c, head)
        for p in PS:
            if p == 0.0 and base is not None:
                out[(est, p)] = base
                continue
            keep = select_keep(docids, s, p)
            runs = {"bm25": bm25_run(docs, keep, queries, tmp), "dense": dense_run(X, docids, keep, Q, qids)}
            runs["hybrid"] = hybrid_run(runs["bm25"], runs["dense"])
            out[(est, p)] = {pipe: per_query(qrels, r) for pipe, r in runs.items()}
            if p == 0.0:
                base = out[(est, p)]
        cache.write_text(json.dumps({str(p): out[(est, p)] for p in PS}))
        print(f"  [{name}] {est} done", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    add_deepct_pipeline(name, idx, docs, data_c, head, ests, queries, qrels, out)
    return out


def add_deepct_pipeline(name, idx, docs, data_c, head, ests, queries, qrels, out):
    """DeepCT curves where the benchmark index has a default DeepCT sub-index (bench_deepct.py):
    the unpruned DeepCT top-1000 run with the pruned passages removed. Unlike the BM25 curves this
    does not rebuild the index, so collection statistics (idf, average length) stay those of the
    whole corpus; the approximation is stated in the results."""
    from retrieval.quality import select_keep
    sub = deepct_sub(name, idx)
    if sub is None:
        return
    full = {q: [(h.docid, h.score) for h in hs]
            for q, hs in idx.batch_search(queries, k=1000, retriever=sub).items()}
    docids = [d.docid for d in docs]
    for est in ests:
        s = scores_for(name, est, docs, data_c, head)
        for p in PS:
            keep = select_keep(docids, s, p)
            out[(est, p)]["deepct"] = per_query(qrels, {q: [(d, v) for d, v in hits if d in keep]
                                                        for q, hits in full.items()})
    print(f"  [{name}] deepct pipeline ({sub}, filtered run) done", flush=True)


def summarise(name, curves, ests):
    rows = []
    for est in ests:
        for pipe in [p for p in PIPES if p in curves[(est, 0.0)]]:
            base = curves[(est, 0.0)][pipe]
            qids = sorted(base)
            b = [base[q]["nDCG@10"] for q in qids]
            best_eq, streak = 0.0, True
            pts = []
            for p in PS:
                pq = curves[(est, p)][pipe]
                a = [pq[q]["nDCG@10"] for q in qids]
                pv = tost(a, b, MARGIN) if p > 0 else 0.0
                eq = pv < ALPHA
                if p > 0:
                    streak = streak and eq
                    if streak:
                        best_eq = p
                pts.append({"p": p, "nDCG@10": float(np.mean(a)), "R@100": float(np.mean([pq[q]["R@100"] for q in qids])),
                            "tost_p": pv, "equivalent": bool(eq)})
            rows.append({"collection": name, "pipeline": pipe, "estimator": est, "points": pts,
                         "largest_equivalent_p": best_eq, "queries": len(qids)})
    return rows


def folder_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file())


def savings(col, p, estimators):
    """Real end-to-end builds (BM25 + dense, with encoding), unpruned vs pruned with each
    estimator at share ``p``, all in one run; ratios pruned / unpruned."""
    from retrieval.writer import build_index, build_pruned_index
    from retrieval.dense.subindex import DenseSpec
    root = QDIR / "savings"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    queries = col.queries()
    rec = {"collection": col.name, "p": p, "builds": {}}
    for tag in ["unpruned"] + list(estimators):
        t0 = time.perf_counter()
        if tag == "unpruned":
            idx = build_index(col.corpus, root / tag, empty="skip", subindexes={"dense": DenseSpec()}, quiet=True)
        else:
            idx = build_pruned_index(col.corpus, root / tag, prune=p, quality=tag, empty="skip",
                                     subindexes={"dense": DenseSpec()}, quiet=True)
        build_s = time.perf_counter() - t0
        lat = {}
        for r in ("bm25", "dense"):
            idx.batch_search(queries[:5], k=100, retriever=r)  # warm-up (JVM, model)
            t1 = time.perf_counter()
            for q in queries:
                idx.search(q.text, k=100, retriever=r, text=False)
            lat[r] = (time.perf_counter() - t1) / len(queries)
        rec["builds"][tag] = {"build_seconds": build_s, "index_bytes": folder_bytes(root / tag), "docs": len(idx),
                              "encode_seconds": idx.manifest["subindexes"]["dense"].get("encode_seconds"),
                              "latency_s": lat, "pruning": idx.manifest.get("pruning"),
                              "vectors_from": idx.manifest["subindexes"]["dense"].get("vectors_from", "encoded")}
        shutil.rmtree(root / tag, ignore_errors=True)
    u = rec["builds"]["unpruned"]
    rec["ratios"] = {e: {"index_size": q["index_bytes"] / u["index_bytes"],
                         "indexing_time": q["build_seconds"] / u["build_seconds"],
                         "latency_bm25": q["latency_s"]["bm25"] / u["latency_s"]["bm25"],
                         "latency_dense": q["latency_s"]["dense"] / u["latency_s"]["dense"]}
                     for e, q in rec["builds"].items() if e != "unpruned"}
    shutil.rmtree(root, ignore_errors=True)
    return rec


def plot(rows, cols, ests, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pipes = [p for p in PIPES if any(r["pipeline"] == p for r in rows)]
    fig, axes = plt.subplots(len(cols), len(pipes), figsize=(4 * len(pipes), 2.8 * len(cols)), squeeze=False)
    for i, c in enumerate(cols):
        for j, pipe in enumerate(pipes):
            ax = axes[i][j]
            for r in rows:
                if r["collection"] == c and r["pipeline"] == pipe:
                    ax.plot(PS, [pt["nDCG@10"] for pt in r["points"]], marker="o", ms=3, label=r["estimator"],
                            ls="--" if r["estimator"] == "random" else "-")
            ax.set_title(f"{c} / {pipe}", fontsize=9)
            ax.set_xlabel("share pruned p", fontsize=8)
            ax.set_ylabel("nDCG@10", fontsize=8)
            ax.grid(alpha=.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--collections", nargs="*")
    ap.add_argument("--estimators", nargs="*", default=ESTS)
    ap.add_argument("--expensive-on", nargs="*", default=None,
                    help="collections on which dense-norm / pseudo-ppl run (default: all); elsewhere they are "
                         "left out unless their scores are cached")
    ap.add_argument("--ship-head", action="store_true",
                    help="write the trained head to retrieval/quality/default_head.json.gz")
    ap.add_argument("--select-features", action="store_true",
                    help="first run the feature choice on SciFact's training queries (quality_features.md)")
    ap.add_argument("--savings-collection", default="cranfield")
    ap.add_argument("--skip-savings", action="store_true")
    ap.add_argument("--cached-only", action="store_true",
                    help="assemble results from the cached curves only (estimators without them: not run)")
    ap.add_argument("--savings-p", type=float, default=None, help="share pruned in the savings builds "
                    "[default: the default estimator's largest equivalent p there, else 0.3]")
    ap.add_argument("--rerun-savings", action="store_true", help="ignore the cached savings measurement")
    args = ap.parse_args()
    cols = common.by_name(args.collections)
    data = {}
    for col in {c.name: c for c in cols + common.by_name(TRAIN_COLS)}.values():
        idx = common.bench_index(col, dense=("mean",))
        docs = _docs(col)
        X = _vectors(idx, [d.docid for d in docs])
        data[col.name] = {"col": col, "idx": idx, "docs": docs, "X": X, "F": _features(idx, docs, X)}
    if args.select_features:
        print("chosen:", select_features(data), flush=True)
    head = train_shipped_head(data)
    if args.ship_head:
        import gzip
        raw = (json.dumps(head, indent=0) + "\n").encode()
        (common.ROOT / "retrieval" / "quality" / "default_head.json.gz").write_bytes(gzip.compress(raw, mtime=0))
    rows, skipped, no_deepct = [], {}, []
    for col in cols:
        ests = [e for e in args.estimators if e not in EXPENSIVE or args.expensive_on is None
                or col.name in args.expensive_on or (QDIR / col.name / f"{e}.tsv").exists()]
        if deepct_sub(col.name, data[col.name]["idx"]) is None:
            ests = [e for e in ests if e not in DEEPCT_ESTS]
            no_deepct.append(col.name)
        if args.cached_only:
            ests = [e for e in ests if curve_cache(col.name, e, head, data[col.name]["idx"]).exists()]
        skipped[col.name] = [e for e in args.estimators if e not in ests]
        print(f"[{col.name}] curves: {', '.join(ests)}", flush=True)
        rows += summarise(col.name, collection_curves(col, data[col.name], head, ests), ests)
    sav = None
    if not args.skip_savings:
        from retrieval.quality import DEFAULT_ESTIMATOR
        scol = common.by_name([args.savings_collection])[0]
        eqs = [r["largest_equivalent_p"] for r in rows
               if r["collection"] == scol.name and r["estimator"] == DEFAULT_ESTIMATOR]
        p = args.savings_p if args.savings_p is not None else (max(eqs) if eqs and max(eqs) > 0 else 0.3)
        cache = QDIR / f"savings-{scol.name}-{p}.json"
        if cache.exists() and not args.rerun_savings:
            sav = json.loads(cache.read_text())
        else:
            print(f"[savings] {scol.name} p={p}", flush=True)
            sav = savings(scol, p, [DEFAULT_ESTIMATOR] + [e for e in ("length",) if e != DEFAULT_ESTIMATOR])
            cache.write_text(json.dumps(sav))
    payload = {"machine": common.machine(), "margin_ndcg10": MARGIN, "alpha": ALPHA, "ps": PS,
               "head_card": head["card"], "rows": rows, "savings": sav,
               "not_run": skipped}
    md = [f"# Static pruning by passage quality\n\nTOST margin {MARGIN} nDCG@10, alpha {ALPHA}; "
          "`eq p` = largest p in the grid with every smaller p also equivalent. nDCG@10 per p on the test queries.\n",
          "Pipelines: `bm25` = a real Lucene index of the kept passages; `dense` = MiniLM mean pooling, faiss Flat "
          "over the kept passages' vectors; `hybrid` = RRF(k=60) of the two; `deepct` = the default DeepCT "
          "sub-index of the benchmark folder (bench_deepct.py), its unpruned top-1000 run with the pruned passages "
          "removed (collection statistics not recomputed). `deepct-mass` / `deepct-max` = sum / max of the positive term "
          "weights of that same DeepCT model (read from the weights its sub-index stored when it encoded the corpus). "
          "`learned` = the shipped head "
          f"`{head['name']}` ({head['card']['model']}), trained on {', '.join(head['card']['training_data'])} only: "
          "in-domain on SciFact, out of domain elsewhere. Reproduce: "
          "`.venv/bin/python benchmarks/bench_quality.py --expensive-on cranfield --rerun-savings`.\n"]
    for c in cols:
        md.append(f"\n## {c.name}\n")
        ov = overlap_note(c, data[c.name], head)
        if ov:
            md.append(ov + "\n")
        sub = deepct_sub(c.name, data[c.name]["idx"])
        if sub:
            m = data[c.name]["idx"].manifest["subindexes"][sub]["model"]
            md.append(f"DeepCT here: the `{sub}` sub-index, model {Path(m['path']).name} ({m['sha256']}).\n")
        if skipped.get(c.name):
            why = [e for e in skipped[c.name] if e not in DEEPCT_ESTS]
            if why:
                md.append(f"Not run here (CPU budget): {', '.join(why)}.\n")
            if c.name in no_deepct:
                md.append("No DeepCT curves or DeepCT estimators: this collection's benchmark DeepCT model was "
                          "trained on half of its test queries.\n" if c.name == "vaswani" else
                          "No DeepCT curves or DeepCT estimators: no DeepCT sub-index in the benchmark folder.\n")
        md.append(common.md_table(["pipeline", "estimator"] + [f"p={p}" for p in PS] + ["R@100 p=0.3", "eq p"],
                                  [[r["pipeline"], r["estimator"]] + [pt["nDCG@10"] for pt in r["points"]]
                                   + [r["points"][3]["R@100"], r["largest_equivalent_p"]]
                                   for r in rows if r["collection"] == c.name]))
    if sav:
        md.append(f"\n## Savings ({sav['collection']}, p={sav['p']}; ratios pruned / unpruned build, same run)\n")
        md.append(common.md_table(["estimator", "index size", "indexing time (incl. quality scoring + encoding)",
                                   "latency bm25", "latency dense", "dense vectors"],
                                  [[e] + [round(v, 3) for v in r.values()]
                                   + [sav["builds"][e].get("vectors_from", "encoded")]
                                   for e, r in sav["ratios"].items()]))
    common.write_results("quality", payload, "\n".join(md))
    plot(rows, [c.name for c in cols], args.estimators, common.RESULTS / "quality_curves.png")


if __name__ == "__main__":
    main()
