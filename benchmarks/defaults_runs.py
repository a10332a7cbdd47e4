"""Cached first-stage runs for the defaults benchmark (bench_defaults_fusion.py, bench_defaults_pruning.py).

Each collection's BM25 and dense (MiniLM, mean pooling) top-1000 for every
judged query (all splits) is computed once from the benchmark index and kept
under WORK/defaults-runs/<collection>.<retriever>.json.gz, so that choosing
defaults never searches (or encodes) again. Beside them: the shifted variants
(VARIANTS: passages as queries, misspelled queries, passages behind unrelated
text; runs <collection>-<variant>.<retriever>.json.gz) and each list's
confidence as the product computes it (<set>.confidence.json).

    RETR_BENCH_WORK=... python benchmarks/defaults_runs.py [--indexes DIR] [--collections ...]

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
        res = idx.snapshot().retriever(name).batch_search(qs, DEPTH, 2)
        tmp = out.with_suffix(".tmp")
        with gzip.open(tmp, "wt") as f:
            json.dump({q: [[d, float(s)] for d, s in v] for q, v in res.items()}, f)
        tmp.rename(out)
        print(f"[{col.name}] {name}: {len(res)} queries", flush=True)


# ------------------------------------------------------------------ shifted variants
# Each collection's test queries are searched as they are ("test") and under three shifts that
# change which retriever is stronger, all with the collection's real judgments:
#   doc     passages as queries (long, ArguAna-like queries; doc_queries)
#   typo    the test queries misspelled (typo_queries)
#   longF   every passage behind F words of unrelated text from other passages (long_corpus): the
#           dense encoder reads fewer of its own words, as with long documents; BM25 reads all
VARIANTS = ("test", "doc", "typo", "long40", "long80")
DOC_WORDS = 300   # a passage used as a query keeps its first 300 words (MiniLM reads 256 word pieces)
VARIANT_DEPTH = 100


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


def typo_queries(col, share: float = 0.5, seed: int = 0):
    """The test queries with about ``share`` of their alphabetic words of 5+ letters misspelled (two
    adjacent inner letters swapped), seeded."""
    import random

    from retrieval.types import Query

    rng = random.Random(seed)
    out = []
    for q in col.queries():
        words = []
        for w in q.text.split():
            if len(w) >= 5 and w.isalpha() and rng.random() < share:
                i = rng.randrange(1, len(w) - 2)
                w = w[:i] + w[i + 1] + w[i] + w[i + 2:]
            words.append(w)
        out.append(Query(q.qid, " ".join(words)))
    return out


def long_corpus(col, fill: int, seed: int = 0) -> Path:
    """The collection's corpus with every passage behind ``fill`` words taken from seeded random other
    passages (written once under WORK)."""
    import random

    from retrieval.collections import read_corpus

    out = WORK / "defaults-variants" / f"{col.name}-long{fill}.jsonl"
    if out.exists():
        return out
    docs = list(read_corpus(col.corpus, empty="skip"))
    rng = random.Random(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for d in docs:
            words: List[str] = []
            while len(words) < fill:
                words += docs[rng.randrange(len(docs))].contents.split()
            f.write(json.dumps({"id": d.docid, "contents": " ".join(words[:fill]) + " " + d.contents}) + "\n")
    tmp.rename(out)
    return out


def _variant_index(col, variant: str, indexes: Path | None):
    if not variant.startswith("long"):
        return _open(col, indexes)
    import retrieval
    from retrieval.dense.subindex import DenseSpec
    from retrieval.writer import add_subindex

    path = WORK / "defaults-variants" / f"index-{col.name}-{variant}"
    if not (path / "manifest.json").exists():
        print(f"[{col.name}-{variant}] indexing ...", flush=True)
        idx = retrieval.build_index(long_corpus(col, int(variant[4:])), path, empty="skip", overwrite=True,
                                    quiet=True)
        add_subindex(idx, DenseSpec(pooling="mean"), name="dense", quiet=True)
    return retrieval.open_index(path)


def variant_queries(col, variant: str):
    """(queries, qrels) of a variant."""
    if variant == "doc":
        return doc_queries(col)
    if variant == "typo":
        return typo_queries(col), col.qrels()
    return list(col.queries()), col.qrels()


def variant_set(col, variant: str) -> str:
    return col.name if variant == "test" else f"{col.name}-{variant}"


def dump_variant(col, variant: str, indexes: Path | None) -> None:
    """Both retrievers' top 100 for a variant (the query's own passage removed for ``doc``), and each
    list's confidence as the product computes it (the retrievers' ``confidence``: BM25's top score over
    the query's mass, dense's top cosine), cached under WORK/defaults-runs."""
    name = variant_set(col, variant)
    conf_path = RUNS / f"{name}.confidence.json"
    if conf_path.exists() and (variant == "test" or all(run_path(name, n).exists() for n in NAMES)):
        return
    if variant == "test" and not all(run_path(col.name, n).exists() for n in NAMES):
        dump(col, indexes)
    idx = _variant_index(col, variant, indexes)
    qs, _ = variant_queries(col, variant)
    RUNS.mkdir(parents=True, exist_ok=True)
    lists = {}
    for n in NAMES:
        if variant == "test":
            got = load(col.name, n)
            lists[n] = {q.qid: got.get(q.qid, [])[:VARIANT_DEPTH] for q in qs}
            continue
        res = idx.snapshot().retriever(n).batch_search(qs, VARIANT_DEPTH + 1, 2)
        own = (lambda q: q.split("|", 1)[1]) if variant == "doc" else (lambda q: None)
        lists[n] = {q: [(d, float(s)) for d, s in v if d != own(q)][:VARIANT_DEPTH] for q, v in res.items()}
        tmp = run_path(name, n).with_suffix(".tmp")
        with gzip.open(tmp, "wt") as f:
            json.dump({q: [[d, s] for d, s in v] for q, v in lists[n].items()}, f)
        tmp.rename(run_path(name, n))
        print(f"[{name}] {n}: {len(res)} queries", flush=True)
    from retrieval.fusion import list_confidences

    conf = dict(zip((q.qid for q in qs), list_confidences(
        {n: idx.snapshot().retriever(n) for n in NAMES}, [q.text for q in qs], {n: [lists[n][q.qid] for q in qs] for n in NAMES})))
    conf_path.write_text(json.dumps(conf))


def load_variant(col, variant: str, indexes: Path | None = None):
    """({retriever: {qid: [(docid, score)]}}, qrels, {qid: {retriever: (kind, value)}}) of a variant."""
    dump_variant(col, variant, indexes)
    name = variant_set(col, variant)
    lists = {n: load(name, n) for n in NAMES}
    conf = {q: {n: (tuple(v) if v else None) for n, v in c.items()}
            for q, c in json.loads((RUNS / f"{name}.confidence.json").read_text()).items()}
    return lists, variant_queries(col, variant)[1], conf


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--indexes", type=Path)
    ap.add_argument("--collections", nargs="*")
    args = ap.parse_args()
    for col in by_name(args.collections):
        dump(col, args.indexes)
        for variant in VARIANTS:
            dump_variant(col, variant, args.indexes)


if __name__ == "__main__":
    main()
