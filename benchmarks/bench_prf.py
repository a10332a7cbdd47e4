"""Pseudo-relevance feedback (issue #29): BM25, BM25+RM3 and BM25+Rocchio through retr (Anserini's own
rerankers build the expanded query, retr's helper ranks it) against Pyserini's LuceneSearcher with
set_rm3() / set_rocchio() on the same Lucene index (built with document vectors), on SciFact,
NFCorpus, Cranfield and Vaswani: nDCG@10 and R@100, queries whose ranking and scores are identical
to Pyserini's at k=1000, and per-query latency of both in the same run (one query at a time,
alternating which searcher goes first).

    python benchmarks/bench_prf.py [--collections scifact nfcorpus] [--k 1000]
"""
from __future__ import annotations

import argparse
import statistics
import time

from common import WORK, by_name, machine, md_table, run_dict, write_results

import retrieval
from eval import evaluate
from indexes import jvm
from retrieval.bm25 import BM25Spec

MEASURES = ["nDCG@10", "R@100"]
#: Pyserini's 2CR figures (pyserini/2cr/beir.yaml, BEIR v1.0.0, k1 0.9 b 0.4): the only BEIR ones it
#: publishes for Lucene BM25; it publishes none with RM3 or Rocchio on BEIR (RM3 only for MS MARCO)
PUBLISHED = {("scifact", "bm25"): {"flat": {"nDCG@10": 0.6789, "R@100": 0.9253},
                                   "multifield": {"nDCG@10": 0.6647, "R@100": 0.9076}},
             ("nfcorpus", "bm25"): {"flat": {"nDCG@10": 0.3218, "R@100": 0.2457},
                                    "multifield": {"nDCG@10": 0.3254, "R@100": 0.2500}}}
#: (retr's prf setting, what Pyserini's LuceneSearcher is told): Pyserini's defaults
METHODS = [("bm25", None, lambda s: None), ("bm25+rm3", "rm3", lambda s: s.set_rm3()),
           ("bm25+rocchio", "rocchio", lambda s: s.set_rocchio())]


def feedback_index(c):
    """The collection's folder with document vectors in its BM25 sub-index (built once under WORK)."""
    path = WORK / f"{c.name}-prf"
    if (path / "manifest.json").exists():
        return retrieval.open_index(path)
    return retrieval.build_index(c.corpus, path, subindexes={"bm25": BM25Spec(store_docvectors=True)},
                                 empty="skip", overwrite=True, quiet=True)


def one(c, idx, qs, qrels, name, prf, setup, k):
    from pyserini.search.lucene import LuceneSearcher  # after retr started the JVM (indexes/jvm.py)

    ref = LuceneSearcher(str(idx.path / "bm25"))
    ref.set_bm25(0.9, 0.4)
    setup(ref)
    idx.configure("bm25", prf=prf or "none")
    ours_t, theirs_t, ours, theirs = [], [], {}, {}
    for i, q in enumerate(qs):  # one query at a time, alternating which goes first
        for side in ((0, 1) if i % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            if side == 0:
                ours[q.qid] = [(h.docid, h.score) for h in idx.search(q.text, k=k, retriever="bm25", text=False)]
                ours_t.append(time.perf_counter() - t0)
            else:
                theirs[q.qid] = [(h.docid, h.score) for h in ref.search(q.text, k=k)]
                theirs_t.append(time.perf_counter() - t0)
    batch = idx.batch_search(qs, k=k, retriever="bm25", threads=2)
    same_batch = all([(h.docid, h.score) for h in batch[q.qid]] == ours[q.qid] for q in qs)
    identical = sum(ours[q.qid] == theirs[q.qid] for q in qs)
    ranked = sum([d for d, _ in ours[q.qid]] == [d for d, _ in theirs[q.qid]] for q in qs)
    m = evaluate(qrels, run_dict(batch), MEASURES)
    mp = evaluate(qrels, {q: dict(h) for q, h in theirs.items()}, MEASURES)
    ref.close()
    return {"collection": c.name, "method": name, "queries": len(qs), **m,
            "pyserini": mp, "identical": identical, "same_ranking": ranked, "batch_equals_single": same_batch,
            "retr_ms": 1000 * statistics.mean(ours_t), "pyserini_ms": 1000 * statistics.mean(theirs_t),
            "retr_median_ms": 1000 * statistics.median(ours_t),
            "pyserini_median_ms": 1000 * statistics.median(theirs_t)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--collections", nargs="*")
    ap.add_argument("--k", type=int, default=1000)
    args = ap.parse_args()
    jvm.start()
    rows = []
    for c in by_name(args.collections):
        idx = feedback_index(c)
        qs, qrels = c.queries(), c.qrels()
        for name, prf, setup in METHODS:
            r = one(c, idx, qs, qrels, name, prf, setup, args.k)
            print(r, flush=True)
            rows.append(r)
        idx.close()
    write_results("prf", {"machine": machine(), "k": args.k, "rows": rows,
                          "published": {f"{c}/{m}": v for (c, m), v in PUBLISHED.items()}}, report(rows, args.k))


def report(rows, k):
    table = md_table(["collection", "method", "queries", "nDCG@10", "R@100", "Pyserini nDCG@10",
                      "identical to Pyserini", "retr ms/query", "Pyserini ms/query", "speed-up"],
                     [[r["collection"], r["method"], r["queries"], r["nDCG@10"], r["R@100"], r["pyserini"]["nDCG@10"],
                       f"{r['identical']}/{r['queries']}", f"{r['retr_ms']:.2f}", f"{r['pyserini_ms']:.2f}",
                       f"{r['pyserini_ms'] / r['retr_ms']:.1f}x"] for r in rows])
    pub = md_table(["collection", "Pyserini 2CR flat nDCG@10 / R@100", "multifield", "retr BM25 (flat)"],
                   [[c, f"{v['flat']['nDCG@10']:.4f} / {v['flat']['R@100']:.4f}",
                     f"{v['multifield']['nDCG@10']:.4f} / {v['multifield']['R@100']:.4f}",
                     next((f"{r['nDCG@10']:.4f} / {r['R@100']:.4f}" for r in rows
                           if r["collection"] == c and r["method"] == m), "not run")]
                    for (c, m), v in PUBLISHED.items()])
    return f"""# Pseudo-relevance feedback: RM3 and Rocchio (issue #29)

`benchmarks/bench_prf.py`, k={k}, BM25 k1 0.9 b 0.4, Pyserini's feedback defaults (RM3: 10 terms from
10 documents, original query weight 0.5; Rocchio: 10 terms from the top 10 documents, alpha 1, beta
0.75, gamma 0). Each folder's BM25 sub-index is built with document vectors (`retr index --docvectors`);
Pyserini's `LuceneSearcher` opens the same Lucene index. *Identical*: the query's k hits have the same
ids in the same order and the same float scores in both. Latency: one query at a time through
`Index.search` and `LuceneSearcher.search`, alternating which goes first, in the same process; the
speed-up is Pyserini's mean time over retr's. Metrics from retr's `batch_search` (2 threads), which
equals its one-at-a-time search on every query of every row.

{table}

How it works: Anserini's own `Rm3Reranker` / `RocchioReranker` (in the fat jar Pyserini ships) build
the expanded query from the first ranking, exactly as Anserini's `SimpleSearcher` hands it to them (RM3:
the first 50 hits; Rocchio: the k hits; Lucene's scores before the tie adjustment); the searcher they
are given records that query instead of running it, and retr's helper ranks it on its own path (no
stored document loaded per hit), then rounds as Anserini does. The equality column is the check that
this is Pyserini's ranking.

## Published figures

Pyserini's reproductions (`pyserini/2cr/beir.yaml`) give Lucene BM25 on BEIR as "flat" (title and
text in one field, as retr indexes) and "multifield"; they publish no BEIR figure with RM3 or Rocchio
(Pyserini's 2CR has RM3 only for MS MARCO; Anserini's BEIR regressions have no RM3 condition either),
so the feedback rows above have nothing published to match; their check is the equality with
Pyserini's own searcher on the same index.

{pub}

The NFCorpus here is `nfcorpus-preproc` (the local copy of the collection), not necessarily BEIR's
files byte for byte, so its BM25 figure need not equal the published one.
"""


if __name__ == "__main__":
    main()
