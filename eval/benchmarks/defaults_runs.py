"""Cached first-stage runs for the defaults benchmark (bench_defaults.py).

Each collection's BM25 and dense (MiniLM, mean pooling) top-1000 for every
judged query (all splits) is computed once from the benchmark index and kept
under WORK/defaults-runs/<collection>.<retriever>.json.gz, so that choosing
defaults never searches (or encodes) again. Beside them: the passages-as-queries
robustness set (``doc_queries``; runs <collection>-doc.<retriever>.json.gz) and
each query's BM25 mass, the most a passage can score for it
(<collection>.mass.json, ``query_masses``).

    RETR_BENCH_WORK=... python eval/benchmarks/defaults_runs.py [--indexes DIR] [--collections ...]

``--indexes DIR`` reads the benchmark folders from DIR (opened read-only,
e.g. another checkout's WORK) instead of building them under WORK.
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Dict, List, Tuple

from common import DATA, WORK, COLLECTIONS, bench_index, by_name

DEPTH = 1000
NAMES = ("bm25", "dense")
RUNS = WORK / "defaults-runs"
Scored = List[Tuple[str, float]]


def splits(col) -> List[str]:
    return sorted(p.stem for p in (col.root / "qrels").glob("*.tsv") if p.stem in ("train", "dev", "test"))


def run_path(col_name: str, name: str) -> Path:
    return RUNS / f"{col_name}.{name}.json.gz"


def load(col_name: str, name: str) -> Dict[str, Scored]:
    with gzip.open(run_path(col_name, name), "rt") as f:
        return {q: [(d, s) for d, s in v] for q, v in json.load(f).items()}


def _open(col, indexes: Path | None):
    import retrieval

    return retrieval.open_index(indexes / col.name) if indexes else bench_index(col, dense=("mean",))


def dump(col, indexes: Path | None) -> None:
    idx = _open(col, indexes)
    qs, seen = [], set()
    for split in splits(col):
        for q in col.queries(split):
            if q.qid not in seen:
                seen.add(q.qid)
                qs.append(q)
    RUNS.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        out = run_path(col.name, name)
        if out.exists():
            continue
        res = idx.retriever(name).batch_search(qs, DEPTH, 2)
        tmp = out.with_suffix(".tmp")
        with gzip.open(tmp, "wt") as f:
            json.dump({q: [[d, float(s)] for d, s in v] for q, v in res.items()}, f)
        tmp.rename(out)
        print(f"[{col.name}] {name}: {len(res)} queries", flush=True)


# ------------------------------------------------------------------ passages as queries
DOC_WORDS = 300   # a passage used as a query keeps its first 300 words (MiniLM reads 256 word pieces)


def doc_queries(col):
    """Long queries with real judgments, for our own two retrievers (ArguAna-like: a passage finds the
    passages that answer the same need): for every test query with at least two relevant passages in the
    corpus, its first relevant passage (by docid; title and text, first DOC_WORDS words) becomes a query
    ``<qid>|<docid>`` whose relevant passages are the query's other relevant ones. Returns (queries, qrels)."""
    from retrieval.collections import read_corpus
    from retrieval.types import Query

    docs = {d.docid: d.contents for d in read_corpus(col.corpus, empty="skip")}
    queries, qrels = [], {}
    for qid, rel in sorted(col.qrels().items()):
        pos = sorted(d for d, g in rel.items() if g > 0 and d in docs)
        if len(pos) < 2:
            continue
        qq = f"{qid}|{pos[0]}"
        queries.append(Query(qq, " ".join(docs[pos[0]].split()[:DOC_WORDS])))
        qrels[qq] = {d: g for d, g in rel.items() if d != pos[0]}
    return queries, qrels


def dump_doc(col, indexes: Path | None) -> None:
    """Both retrievers' top 100 for the passages-as-queries set, the query's own passage removed."""
    outs = {n: run_path(col.name + "-doc", n) for n in NAMES}
    if all(p.exists() for p in outs.values()):
        return
    idx = _open(col, indexes)
    qs, _ = doc_queries(col)
    RUNS.mkdir(parents=True, exist_ok=True)
    for name, out in outs.items():
        res = idx.retriever(name).batch_search(qs, 101, 2)
        keep = {q: [[d, float(s)] for d, s in v if d != q.split("|", 1)[1]][:100] for q, v in res.items()}
        tmp = out.with_suffix(".tmp")
        with gzip.open(tmp, "wt") as f:
            json.dump(keep, f)
        tmp.rename(out)
        print(f"[{col.name}-doc] {name}: {len(keep)} queries", flush=True)


def query_masses(col, indexes: Path | None) -> Dict[str, float]:
    """{qid: the BM25 mass of the query}: the sum, over its analysed terms (repeats included, as Anserini's
    bag-of-words query boosts a term by its count), of the term's BM25 idf, log(1 + (N - df + 0.5) / (df + 0.5)),
    for terms some passage has. Lucene's BM25 scores a term at most its idf times its boost, so a passage's
    score over this mass is the share of the query it matched (1 = every term, at saturation). Test queries
    and the passages-as-queries set; read from the BM25 sub-index with Pyserini's index reader."""
    path = RUNS / f"{col.name}.mass.json"
    if path.exists():
        return json.loads(path.read_text())
    import math

    from indexes import jvm

    jvm.start()   # retr's JVM settings before Pyserini's import would start one of its own
    from pyserini.index.lucene import LuceneIndexReader

    idx = _open(col, indexes)
    reader = LuceneIndexReader(str(idx.path / idx.manifest["subindexes"]["bm25"]["path"]))
    n = reader.stats()["documents"]
    idf: Dict[str, float] = {}
    out = {}
    for q in list(col.queries()) + doc_queries(col)[0]:
        total = 0.0
        for t in reader.analyze(q.text):
            if t not in idf:
                df, _cf = reader.get_term_counts(t, analyzer=None)
                idf[t] = math.log(1 + (n - df + 0.5) / (df + 0.5)) if df else 0.0
            total += idf[t]
        out[q.qid] = total
    RUNS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--indexes", type=Path)
    ap.add_argument("--collections", nargs="*")
    args = ap.parse_args()
    for col in by_name(args.collections):
        dump(col, args.indexes)
        dump_doc(col, args.indexes)
        query_masses(col, args.indexes)


if __name__ == "__main__":
    main()
