"""BM25 benchmark: effectiveness on four collections (and that retr ranks exactly as Pyserini);
search speed against Pyserini, bm25s and Lucene alone on SciFact, NFCorpus and a synthetic
100k-passage corpus, one query at a time and batched on 1 and 2 threads; which of retr's two
search paths is faster where; indexing cost against Anserini's indexer. All in the same run.

    .venv/bin/python benchmarks/bench_bm25.py [--collections scifact ...] [--speed scifact nfcorpus]
        [--synthetic 100000] [--threads 1 2] [--repeats 5]

Writes benchmarks/results/bm25.{json,md}.
"""
from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from common import COLLECTIONS, WORK, by_name, machine, md_table, run_dict, synthetic_corpus, write_results

import retrieval
from eval import evaluate
from indexes import jvm
from indexes.lucene import run_indexer
from retrieval.types import Query

MEASURES = ["nDCG@10", "R@100", "R@1000"]
PUBLISHED = {"scifact": 0.679}  # Pyserini BEIR flat BM25, k1=0.9 b=0.4


def effectiveness(cols, threads):
    rows, out = [], {}
    for c in cols:
        path = WORK / f"{c.name}-bm25"
        t0 = time.perf_counter()
        idx = retrieval.build_index(c.corpus, path, overwrite=True, threads=threads, empty="skip", quiet=True)
        build_s = time.perf_counter() - t0
        qs = c.queries()
        res = idx.batch_search(qs, k=1000, retriever="bm25", threads=threads)
        identical = _identical_to_pyserini(idx, qs, res, threads)
        # a test query BM25 returns nothing for (NFCorpus has 15 one-word
        # queries absent from the corpus) counts as 0, the evaluator's default, as in every other benchmark here.
        m = evaluate(c.qrels(), run_dict(res), MEASURES)
        info = idx.info()
        out[c.name] = {"queries": len(qs), "documents": len(idx), **m, "build_seconds": round(build_s, 2),
                       "identical_to_pyserini_k1000": identical,
                       "bm25_bytes": info["subindexes"]["bm25"]["size_bytes"],
                       "docstore_bytes": info["docstore_bytes"]}
        if c.name in PUBLISHED:
            out[c.name]["published_nDCG@10"] = PUBLISHED[c.name]
        rows.append([c.name, len(idx), len(qs), m["nDCG@10"], m["R@100"], m["R@1000"],
                     PUBLISHED.get(c.name, "–"), identical])
        print(c.name, m, flush=True)
    return out, rows


def _identical_to_pyserini(idx, qs, res, threads):
    """How many queries retr ranks exactly as Pyserini's LuceneSearcher (same docids in the same
    order, scores within 1e-4) at k=1000."""
    jvm.start()
    from pyserini.search.lucene import LuceneSearcher

    ref = LuceneSearcher(str(idx.path / "bm25"))
    ref.set_bm25(0.9, 0.4)
    theirs = ref.batch_search([q.text for q in qs], [q.qid for q in qs], k=1000, threads=threads)
    same = 0
    for q in qs:
        a, b = res[q.qid], theirs.get(q.qid, [])
        same += [h.docid for h in a] == [h.docid for h in b] and all(
            abs(x.score - y.score) <= 1e-4 for x, y in zip(a, b))
    ref.close()
    return f"{same}/{len(qs)}"


def _baseline_index(corpus: Path, dest: Path, threads: int) -> float:
    """What a Pyserini user does: convert BEIR to Anserini's JsonCollection and run IndexCollection."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        files = [open(Path(tmp) / f"part-{i}.jsonl", "w") for i in range(threads)]
        with open(corpus, encoding="utf-8") as f:
            for n, line in enumerate(f):
                d = json.loads(line)
                contents = f"{d.get('title', '')} {d['text']}" if d.get("title") else d["text"]
                files[n % threads].write(json.dumps({"id": d["_id"], "contents": contents}) + "\n")
        for fh in files:
            fh.close()
        run_indexer(Path(tmp), dest, threads=threads)
    return time.perf_counter() - t0


def indexing_speed(cols, threads, repeats):
    """Index all collections' documents, ours end to end against the baseline, alternating."""
    big = WORK / "all-corpus.jsonl"
    n = 0
    with open(big, "w", encoding="utf-8") as out:
        for c in cols:
            with open(c.corpus, encoding="utf-8") as f:
                for line in f:
                    d = json.loads(line)
                    d["_id"] = f"{c.name}-{d['_id']}"
                    out.write(json.dumps(d) + "\n")
                    n += 1
    ours, base = [], []

    def run_base():
        dest = WORK / "speed-base"
        shutil.rmtree(dest, ignore_errors=True)
        base.append(_baseline_index(big, dest, threads))

    def run_ours():
        t0 = time.perf_counter()
        retrieval.build_index(big, WORK / "speed-ours", overwrite=True, threads=threads, empty="keep", quiet=True)
        ours.append(time.perf_counter() - t0)

    for i in range(repeats):  # alternate which goes first, so drift and warm caches favour neither
        for f in ((run_base, run_ours) if i % 2 == 0 else (run_ours, run_base)):
            f()
    # the fastest of the repeats: the run least disturbed by other load on the host
    o, b = min(ours), min(base)
    return {"documents": n, "ours_seconds": ours, "baseline_seconds": base, "ours_docs_per_s": n / o,
            "baseline_docs_per_s": n / b, "ratio": o / b}


# ----------------------------------------------------------------------------------- search speed
class SpeedCorpus:
    """A corpus of the speed benchmark: its retr folder, queries, qrels (if any) and bm25s index."""

    def __init__(self, name, corpus, queries, qrels, idx):
        self.name, self.corpus, self.queries, self.qrels, self.idx = name, Path(corpus), queries, qrels, idx


class Bm25s:
    """bm25s (installed for the benchmark only: ``pip install bm25s PyStemmer``) over the same
    passages retr indexes (title and text), with its own tokenizer, English stopwords and the
    Snowball English stemmer, Lucene's BM25 variant and the same k1/b."""

    def __init__(self, corpus: Path, k1: float, b: float):
        import bm25s
        import numpy as np
        import Stemmer

        from retrieval.collections import read_corpus

        self.bm25s = bm25s
        ids, texts = [], []
        for d in read_corpus(corpus, empty="skip"):
            ids.append(d.docid)
            texts.append(d.contents)
        self.stemmer = Stemmer.Stemmer("english")
        t0 = time.perf_counter()
        self.ret = bm25s.BM25(k1=k1, b=b, method="lucene")
        self.ret.index(self._tokenize(texts), show_progress=False)
        self.index_seconds = time.perf_counter() - t0
        self.ids = np.array(ids, dtype=object)
        self.version = bm25s.__version__

    def _tokenize(self, texts):
        return self.bm25s.tokenize(texts, stopwords="en", stemmer=self.stemmer, show_progress=False)

    def arrays(self, texts, k, threads):
        """Doc indices and scores as bm25s returns them (numpy arrays)."""
        return self.ret.retrieve(self._tokenize(texts), k=k, n_threads=0 if threads == 1 else threads,
                                 show_progress=False)

    def pairs(self, texts, k, threads):
        """Each query's ranked (docid, score) list, as retr's retrievers return them."""
        docs, scores = self.arrays(texts, k, threads)
        return [list(zip(self.ids[d].tolist(), s.tolist())) for d, s in zip(docs, scores)]


def _speed_corpora(names, synthetic_n, threads):
    out = []
    for c in by_name(names):
        idx = retrieval.open_index(WORK / f"{c.name}-bm25")
        out.append(SpeedCorpus(c.name, c.corpus, c.queries(), c.qrels(), idx))
    if synthetic_n:
        corpus = synthetic_corpus(synthetic_n, WORK / f"synthetic-{synthetic_n}" / "corpus.jsonl")
        path = WORK / f"synthetic-{synthetic_n}-bm25"
        manifest = path / "manifest.json"
        if not manifest.exists() or manifest.stat().st_mtime < corpus.stat().st_mtime:
            retrieval.build_index(corpus, path, overwrite=True, threads=threads, quiet=True)
        # every test query of the four collections (ids prefixed by their collection)
        queries = [Query(f"{c.name}-{q.qid}", q.text) for c in COLLECTIONS for q in c.queries()]
        out.append(SpeedCorpus(f"synthetic-{synthetic_n // 1000}k", corpus, queries, None,
                               retrieval.open_index(path)))
    return out


def bench_searcher(js):
    """retr.lucene.BenchSearcher over a Java HitSearcher (``LuceneIndex.searcher``): Lucene alone
    (luceneOnly, luceneOnlyBatch) and the postings of a query's terms, which retr's search never asks."""
    return jvm.autoclass("retr.lucene.BenchSearcher")(js)


def _stats(xs):
    return {"p50_ms": 1e3 * statistics.median(xs), "mean_ms": 1e3 * statistics.fmean(xs)}


def single_speed(sc: SpeedCorpus, ref, old, bm, repeats: int):
    """One query at a time, every system on the same query in turn (the first rotates), so that
    drift in the machine's speed hits all alike; p50 and mean over all queries and repeats."""
    r = sc.idx.snapshot().retriever("bm25")
    floor = bench_searcher(r._index.searcher)
    out, identical = {}, {}
    for k in (10, 1000):
        systems = {
            "retr": lambda t: sc.idx.search(t, k=k, retriever="bm25", text=False),
            "retr before #16 (SimpleSearcher via pyjnius)": lambda t: [(h.docid, float(h.score)) for h in
                                                                    old.search(t, k)],
            "Pyserini LuceneSearcher.search": lambda t: [(h.docid, h.score) for h in ref.search(t, k=k)],
            "bm25s": lambda t: bm.pairs([t], k, 1)[0],
            "Lucene alone (IndexSearcher.search, nothing crosses)": lambda t: floor.luceneOnly(t, k),
        }
        names = list(systems)
        times = {n: [] for n in names}
        texts = [q.text for q in sc.queries]
        for t in texts[:20]:  # warm every path
            for n in names:
                systems[n](t)
        same = 0
        for rep in range(repeats):
            for i, t in enumerate(texts):
                got = {}
                for j in range(len(names)):
                    n = names[(i + j) % len(names)]
                    t0 = time.perf_counter()
                    got[n] = systems[n](t)
                    times[n].append(time.perf_counter() - t0)
                if rep == 0:
                    ours = [(h.docid, h.score) for h in got["retr"]]
                    theirs = got["Pyserini LuceneSearcher.search"]
                    same += [d for d, _ in ours] == [d for d, _ in theirs] and all(
                        abs(a[1] - b[1]) <= 1e-4 for a, b in zip(ours, theirs))
        out[f"k{k}"] = {n: _stats(v) for n, v in times.items()}
        identical[f"k{k}"] = f"{same}/{len(texts)}"
    return out, identical


OURS = "retr retriever.batch_search"
SLOW = {"Pyserini LuceneSearcher.batch_search"}  # 20-50x slower: timed in the first two rounds only


def batch_speed(sc: SpeedCorpus, ref, bm, threads_list, repeats: int, k: int = 1000):
    """All queries at once, in 2*repeats rounds; each round runs every system once, the order
    alternating from round to round. Reported per system: queries/s of its fastest run (the one
    least disturbed by other load) and, against retr, the median over rounds of the two systems'
    time ratio within the round (runs of one round are seconds apart, so a burst of load on the
    shared machine hits both). Every system returns each query's ranked (docid, score) list except
    the rows marked otherwise."""
    r = sc.idx.snapshot().retriever("bm25")
    floor = bench_searcher(r._index.searcher)
    qs = sc.queries
    texts, qids = [q.text for q in qs], [q.qid for q in qs]
    out = {}
    for th in threads_list:
        systems = {
            OURS: lambda th=th: r.batch_search(qs, k, th),
            "retr Index.batch_search (Hit objects)": lambda th=th: sc.idx.batch_search(qs, k=k, retriever="bm25", threads=th),
            "Pyserini LuceneSearcher.batch_search": lambda th=th: {
                q: [(h.docid, h.score) for h in hs] for q, hs in ref.batch_search(texts, qids, k=k, threads=th).items()},
            "bm25s (tokenize + retrieve + ids)": lambda th=th: bm.pairs(texts, k, th),
            "bm25s arrays only (no per-hit objects)": lambda th=th: bm.arrays(texts, k, th),
            "Lucene alone (IndexSearcher.search on Java threads)": lambda th=th: floor.luceneOnlyBatch(texts, k, th),
        }
        if th > 1:
            systems["retr, one Java call on Java threads (parallel='java')"] = \
                lambda th=th: r._index.batch_search(texts, qids, k, th, parallel="java")
        names = list(systems)
        times = {n: [None] * (2 * repeats) for n in names}
        for i in range(2 * repeats):
            for n in (names if i % 2 == 0 else names[::-1]):
                if n in SLOW and i >= 2:
                    continue
                t0 = time.perf_counter()
                systems[n]()
                times[n][i] = time.perf_counter() - t0
        out[f"threads{th}"] = {
            n: {"qps": len(qs) / min(t for t in v if t is not None),
                "retr_speedup": statistics.median(t / o for t, o in zip(v, times[OURS]) if t is not None)}
            for n, v in times.items()}
    return out


def path_choice(sc: SpeedCorpus, ks=(10, 100, 1000)):
    """Both of HitSearcher's paths on every query (they return the same hits): the exhaustive
    term-at-a-time one and Lucene's collector, by the postings the query's terms have. This is the
    measurement behind HitSearcher.DEFAULT_EXHAUSTIVE_SHARE."""
    li = sc.idx.snapshot().retriever("bm25")._index
    js = li.searcher
    default = float(jvm.autoclass("retr.lucene.HitSearcher").DEFAULT_EXHAUSTIVE_SHARE)
    texts = [q.text for q in sc.queries]
    counter = bench_searcher(js)
    post = [int(counter.postings(t)) for t in texts]
    rows = {}
    try:
        for k in ks:
            t_ex, t_co = [], []
            for t in texts[:20]:
                for share in (0.0, float("inf")):
                    js.setExhaustiveShare(share)
                    li.search(t, k)
            for t in texts:
                for share, acc in ((0.0, t_ex), (float("inf"), t_co)):
                    js.setExhaustiveShare(share)
                    t0 = time.perf_counter()
                    li.search(t, k)
                    acc.append(time.perf_counter() - t0)
            chosen = [e if k >= default * p else c for e, c, p in zip(t_ex, t_co, post)]
            rows[f"k{k}"] = {"exhaustive_ms": 1e3 * sum(t_ex), "collector_ms": 1e3 * sum(t_co),
                             "default_rule_ms": 1e3 * sum(chosen),
                             "best_per_query_ms": 1e3 * sum(map(min, t_ex, t_co)),
                             "buckets": _buckets(post, t_ex, t_co)}
    finally:
        js.setExhaustiveShare(default)
    return {"queries": len(texts), "postings_p50": statistics.median(post), "default_share": default, **rows}


def _buckets(post, t_ex, t_co):
    edges = [0, 1_000, 5_000, 20_000, 50_000, 100_000, 200_000, float("inf")]
    out = []
    for lo, hi in zip(edges, edges[1:]):
        sel = [i for i, p in enumerate(post) if lo <= p < hi]
        if sel:
            out.append({"postings": f"{lo:,}-{hi:,}" if hi != float("inf") else f"{lo:,}+", "queries": len(sel),
                        "exhaustive_us": 1e6 * statistics.median(t_ex[i] for i in sel),
                        "collector_us": 1e6 * statistics.median(t_co[i] for i in sel)})
    return out


def search_speed(names, synthetic_n, threads_list, repeats, k1, b):
    jvm.start()
    from pyserini.search.lucene import LuceneSearcher  # imported after our JVM start (see indexes/jvm.py)

    out = {}
    for sc in _speed_corpora(names, synthetic_n, max(threads_list)):
        print(f"[speed] {sc.name}: {len(sc.idx):,} docs, {len(sc.queries)} queries", flush=True)
        ref = LuceneSearcher(str(sc.idx.path / "bm25"))
        ref.set_bm25(k1, b)
        old = jvm.autoclass("io.anserini.search.SimpleSearcher")(str(sc.idx.path / "bm25"))
        old.set_bm25(k1, b)
        bm = Bm25s(sc.corpus, k1, b)
        # This process imports Pyserini (and with it torch) and holds bm25s's index, which a retr BM25
        # process does not: freezing what exists now keeps those objects out of the garbage collector's
        # passes, so each system pays only for the objects it makes itself.
        gc.collect()
        gc.freeze()
        reps = max(1, -(-900 // len(sc.queries)))  # about 900 timed queries per system
        single, identical = single_speed(sc, ref, old, bm, reps)
        row = {"documents": len(sc.idx), "queries": len(sc.queries), "single_repeats": reps,
               "single": single, "identical_to_pyserini": identical,
               "batch_k1000": batch_speed(sc, ref, bm, threads_list, repeats),
               "paths": path_choice(sc), "bm25s_version": bm.version, "bm25s_index_seconds": bm.index_seconds}
        if sc.qrels is not None:
            res = sc.idx.batch_search(sc.queries, k=1000, retriever="bm25", threads=max(threads_list))
            got = dict(zip([q.qid for q in sc.queries], bm.pairs([q.text for q in sc.queries], 1000, 1)))
            row["nDCG@10"] = {"retr": evaluate(sc.qrels, run_dict(res), ["nDCG@10"])["nDCG@10"],
                              "bm25s": evaluate(sc.qrels, {q: dict(h) for q, h in got.items()}, ["nDCG@10"])["nDCG@10"]}
        out[sc.name] = row
        print(json.dumps({sc.name: {"single": single, "batch": row["batch_k1000"]}}, indent=1), flush=True)
        ref.close()
        old.close()
    return out


def _speed_md(speed, threads_list):
    md = []
    for name, row in speed.items():
        md += [f"### {name}: {row['documents']:,} passages, {row['queries']} queries", ""]
        single = row["single"]
        retr = single["k1000"]["retr"]["p50_ms"]
        md += ["One query at a time (every system on the same query in turn; p50 and mean over "
               f"{row['single_repeats']} pass(es) of all queries; ms):", "",
               md_table(["system", "k=10 p50", "k=10 mean", "k=1000 p50", "k=1000 mean", "k=1000 p50 / retr's"],
                        [[n, single["k10"][n]["p50_ms"], single["k10"][n]["mean_ms"], v["p50_ms"], v["mean_ms"],
                          v["p50_ms"] / retr] for n, v in single["k1000"].items()]), "",
               f"retr's rankings equal Pyserini's (same docids, same order, scores within 1e-4) on "
               f"{row['identical_to_pyserini']['k10']} queries at k=10 and {row['identical_to_pyserini']['k1000']} "
               "at k=1000.", ""]
        batch = row["batch_k1000"]
        names = list(batch[f"threads{max(threads_list)}"])
        cell = lambda t, n, key: batch[f"threads{t}"][n][key] if n in batch[f"threads{t}"] else "–"  # noqa: E731
        md += ["All queries at once, k=1000: queries/s of each system's fastest run, and how many times "
               "faster retr's retriever.batch_search was (median over rounds of the time ratio within a round):",
               "", md_table(["system"] + [f"q/s, {t} thread{'s' if t > 1 else ''}" for t in threads_list]
                            + [f"retr faster by, {t}t" for t in threads_list],
                            [[n] + [cell(t, n, "qps") for t in threads_list]
                             + [cell(t, n, "retr_speedup") for t in threads_list] for n in names]), ""]
        if "nDCG@10" in row:
            md += [f"nDCG@10 of the k=1000 runs: retr {row['nDCG@10']['retr']:.4f}, bm25s "
                   f"{row['nDCG@10']['bm25s']:.4f} (bm25s {row['bm25s_version']}: its own tokenizer, English "
                   "stopwords, Snowball stemmer).", ""]
    return md


def _targets(speed, threads_list):
    rows = []
    sf = speed.get("scifact")
    if sf:
        p50 = sf["single"]["k1000"]["retr"]["p50_ms"]
        rows.append(["single query k=1000 p50 on SciFact <= 2 ms", f"{p50:.2f} ms", "met" if p50 <= 2 else "missed"])
        ratio = p50 / sf["single"]["k1000"]["Pyserini LuceneSearcher.search"]["p50_ms"]
        rows.append(["single query k=1000 p50 <= 1/3 of Pyserini's (SciFact, same run)", f"{ratio:.3f}",
                     "met" if ratio <= 1 / 3 else "missed"])
    for name in ("scifact", "nfcorpus"):
        if name not in speed:
            continue
        for t in threads_list:
            b = speed[name]["batch_k1000"][f"threads{t}"]
            bm = b["bm25s (tokenize + retrieve + ids)"]
            r = bm["retr_speedup"]
            best = b[OURS]["qps"] / bm["qps"]
            rows.append([f"batched k=1000 q/s >= bm25s's, {name}, {t} thread{'s' if t > 1 else ''} "
                         "(both returning (docid, score) lists)",
                         f"{r:.2f}x (median per round; fastest runs {best:.2f}x)", "met" if r >= 1 else "missed"])
    for name, row in speed.items():
        k10 = row["single"]["k10"]
        r = k10["retr"]["p50_ms"] / k10["retr before #16 (SimpleSearcher via pyjnius)"]["p50_ms"]
        rows.append([f"k=10 not slower than before #16 ({name}, p50)", f"{r:.2f}x", "met" if r <= 1 else "missed"])
    for name, row in speed.items():
        s1 = row["single"]["k1000"]
        floor = s1["Lucene alone (IndexSearcher.search, nothing crosses)"]["p50_ms"]
        t = max(threads_list)
        b = row["batch_k1000"][f"threads{t}"]
        rows.append([f"physical floor ({name}): retr's time / Lucene alone's", f"single k=1000 p50 "
                     f"{s1['retr']['p50_ms'] / floor:.2f}x; batch {t}t "
                     f"{1 / b['Lucene alone (IndexSearcher.search on Java threads)']['retr_speedup']:.2f}x",
                     "(report)"])
    return rows


def _paths_md(speed):
    md = []
    for name, row in speed.items():
        p = row["paths"]
        md += [f"{name} ({p['queries']} queries, median {p['postings_p50']:,.0f} postings per query; default share "
               f"1/{1 / p['default_share']:.0f}), total ms over all queries:", "",
               md_table(["k", "exhaustive always", "Lucene collector always", "default rule"],
                        [[k[1:], v["exhaustive_ms"], v["collector_ms"], v["default_rule_ms"]]
                         for k, v in p.items() if k.startswith("k")]), ""]
        if name.startswith("synthetic"):
            md += ["Median µs per query by the postings of its terms:", "",
                   md_table(["k", "postings", "queries", "exhaustive", "collector"],
                            [[k[1:], bk["postings"], bk["queries"], bk["exhaustive_us"], bk["collector_us"]]
                             for k, v in p.items() if k.startswith("k") for bk in v["buckets"]]), ""]
    return md


def _cli_args(args) -> str:
    """The options of this run that differ from the defaults, as they are typed."""
    defaults = {"collections": None, "speed": ["scifact", "nfcorpus"], "synthetic": 100_000, "threads": [1, 2],
                "repeats": 5}
    out = []
    for k, v in vars(args).items():
        if v != defaults.get(k):
            out.append(f"--{k} " + (" ".join(map(str, v)) if isinstance(v, list) else str(v)))
    return (" " + " ".join(out)) if out else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--collections", nargs="*", help="effectiveness and indexing (default: all four)")
    ap.add_argument("--speed", nargs="*", default=["scifact", "nfcorpus"], help="collections for search speed")
    ap.add_argument("--synthetic", type=int, default=100_000,
                    help="passages of the synthetic corpus for search speed (0: none)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=5, help="batched rounds are 2x this; indexing runs this often")
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    cols = by_name(args.collections)
    threads = max(args.threads)
    eff, rows = effectiveness(cols, threads)
    speed = search_speed(args.speed, args.synthetic, args.threads, args.repeats, 0.9, 0.4)
    speed_i = indexing_speed(cols, threads, args.repeats)
    payload = {"machine": machine(), "args": vars(args), "measures": MEASURES, "bm25": {"k1": 0.9, "b": 0.4},
               "effectiveness": eff, "search_speed": speed, "indexing_speed": speed_i,
               "synthetic_corpus": {"passages": args.synthetic, "seed": 0,
                                    "sources": [c.folder for c in COLLECTIONS]}}
    md = ["# BM25 (Lucene via Anserini, k1=0.9, b=0.4)", "",
          f"Generated by `benchmarks/bench_bm25.py{_cli_args(args)}`; all test queries of each collection "
          "(a query with no "
          "hit scores 0, trec_eval -c), top 1000. Last column: queries that retr ranks exactly as Pyserini's "
          "`LuceneSearcher` (same docids in the same order, scores within 1e-4) at k=1000.", "",
          md_table(["collection", "docs", "queries", "nDCG@10", "R@100", "R@1000", "published nDCG@10",
                    "= Pyserini"], rows), "",
          "## Targets of issue #16 (measured in this run)", "",
          md_table(["target", "measured", ""], _targets(speed, args.threads)), "",
          "## Search speed (same machine, same run, same queries)", "",
          "Systems: `retr` is `Index.search(q, k, text=False)` (hits as `Hit` objects) and, batched, the BM25 "
          "retriever's `batch_search` ((docid, score) lists; `Index.batch_search` adds `Hit` objects): with 1 "
          "thread one Java call searches every query and returns one array; with t threads, t Python threads "
          "take the queries one by one, each searching its query in one Java call (pyjnius releases the GIL "
          "while Java runs) and turning the hits into Python objects, so one thread's search overlaps "
          "another's decoding. The row `parallel='java'` is the alternative: one Java call on t Java threads, "
          "decoded afterwards. "
          "`retr before #16` is what retr ran until this change, Anserini's `SimpleSearcher` through pyjnius; "
          "Pyserini is `pyserini.search.lucene.LuceneSearcher` on the same Lucene folder (its `batch_search` "
          "ignores the thread count and uses every core); `bm25s` returns each query's ranked (docid, score) "
          "list, its tokenizer included; `Lucene alone` is `IndexSearcher.search(query, k)` on the same "
          "Anserini query with nothing handed to Python (no tie break by id, no rescoring): the physical floor. "
          "Every timed system runs in one process with Pyserini, torch and bm25s loaded; what those had made "
          "is frozen out of the garbage collector's passes (`gc.freeze()`), so each system pays only for the "
          "objects it makes itself. Timings on a shared 2-core machine vary up to 3x over minutes: compare them "
          "as ratios within this run.",
          ""] + _speed_md(speed, args.threads) + [
          "## Which path (retr.lucene.HitSearcher)", "",
          "Both paths return the same hits. Exhaustive: every posting of the query's terms scored with Lucene's "
          "own SimScorer and summed per document, then the top k selected; Lucene collector: "
          "`IndexSearcher.search` with the (score, id) sort, Anserini's own call. The default rule scores "
          "exhaustively when k >= share x postings.", ""] + _paths_md(speed) + [
          "## Indexing (ratio to Anserini's indexer with the same flags, same run)", "",
          md_table(["what", "retr", "baseline", "ratio"], [
              [f"indexing {speed_i['documents']:,} docs, docs/s", speed_i["ours_docs_per_s"],
               speed_i["baseline_docs_per_s"], speed_i["ratio"]]]), "",
          "Baseline: converting the BEIR corpus to Anserini's JsonCollection plus `IndexCollection` with the same "
          "flags. retr's indexing also validates every line, fills the SQLite document store and fingerprints "
          "the corpus. Alternating order, fastest of the repeats.", "",
          f"The synthetic corpus (`common.synthetic_corpus({args.synthetic}, path)`): passage i has the new id "
          "`syn-<i>` and the text of two passages drawn at random (seed 0) from the four local collections "
          "(title and text) joined by a space; its queries are the test queries of the four collections."]
    write_results("bm25", payload, "\n".join(md))


if __name__ == "__main__":
    main()
