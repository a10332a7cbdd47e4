"""Long documents with the answer deep inside: dense and hybrid retrieval with and without chunking (#45).

    .venv/bin/python benchmarks/bench_chunking.py [--queries 200] [--distractors 900] [--seed 0]

The collection is built from SciFact (test queries and qrels) so that the text that answers a query
lies past the first 256 word-pieces of its document, where a dense encoder with MiniLM's window
(256) never looks unless the document is chunked:

* a seeded subset of ``--queries`` test queries whose relevant abstracts no other chosen query shares;
* for each, one long document ``q<QID>``: unrelated abstracts (drawn without replacement from the
  abstracts no test query judges), as many as put at least 256 word-pieces (MiniLM's tokenizer, at
  least one abstract and one to three drawn) before the query's relevant abstracts, which follow
  them, then zero or one more unrelated abstract; each abstract is a paragraph ``title. text``;
* ``--distractors`` long documents ``d<N>`` made the same way from unrelated abstracts only (as many
  abstracts as a query document has);
* qrels: each query judges its own long document with the highest grade of its relevant abstracts.

Two index folders of the same JSONL corpus, each with BM25 and a MiniLM dense sub-index, built with
``retrieval.build_index``: ``chunk=False`` (``retr index --no-chunk``: one passage per document, the
encoder sees its first 256 word-pieces) and ``chunk=True`` (the documents' default, 256 tokens with 32
overlapping). The chunked folder is searched with ``per_document=True`` so each run ranks documents;
passages map back to their document by ``retrieval.chunking.document_of``. Scored by ``eval.evaluate``
(a query with no hits scores 0). Writes benchmarks/results/chunking.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import random
import time

from common import DATA, WORK, machine, md_table, write_results

import retrieval
from eval import evaluate
from retrieval.chunking import document_of, token_count
from retrieval.dense.subindex import DenseSpec

MEASURES = ["nDCG@10", "R@100"]
RETRIEVERS = ("bm25", "dense", "bm25+dense")
DEEP = 256  # word-pieces before the answer: MiniLM's window


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def make_collection(n_queries: int, n_distractors: int, seed: int):
    """(documents, qrels, queries, stats) of the long-document collection (see the module docstring)."""
    root = DATA / "scifact"
    corpus = {d["_id"]: f"{d.get('title') or ''}. {d.get('text') or ''}".strip() for d in read_jsonl(root / "corpus.jsonl")}
    qtext = {q["_id"]: q["text"] for q in read_jsonl(root / "queries.jsonl")}
    test: dict = {}
    with open(root / "qrels" / "test.tsv", encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
                continue  # the header
            if int(parts[2]) > 0 and parts[1] in corpus:
                test.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    rng = random.Random(seed)
    qids = sorted(test)
    rng.shuffle(qids)
    chosen, used = [], set()
    for q in qids:  # queries whose relevant abstracts no chosen query shares
        if len(chosen) == n_queries:
            break
        if used.isdisjoint(test[q]):
            chosen.append(q)
            used.update(test[q])
    judged = {d for rel in test.values() for d in rel}
    pool = sorted(d for d in corpus if d not in judged)
    rng.shuffle(pool)

    def wordpieces(parts):  # word-pieces of the joined text, the special tokens left out
        return token_count(["\n\n".join(corpus[d] for d in parts)])[0] - 2 if parts else 0

    def take(n):
        if n > len(pool):
            raise SystemExit("not enough unjudged SciFact abstracts for this size: lower --distractors")
        return [pool.pop() for _ in range(n)]

    def fillers(before: bool):
        out = take(rng.randint(1, 3)) if before else take(rng.randint(0, 1))
        while before and wordpieces(out) < DEEP:
            out += take(1)
        return out

    docs, qrels, queries, sizes, depths = [], {}, [], [], []
    for q in chosen:
        before, after = fillers(True), fillers(False)
        rel = sorted(test[q])
        rng.shuffle(rel)
        parts = before + rel + after
        sizes.append(len(parts))
        depths.append(wordpieces(before))
        docs.append({"_id": f"q{q}", "title": "", "text": "\n\n".join(corpus[d] for d in parts)})
        qrels[q] = {f"q{q}": max(test[q].values())}
        queries.append(retrieval.Query(q, qtext[q]))
    for i in range(n_distractors):
        n = rng.choice(sizes)
        parts = take(n)
        docs.append({"_id": f"d{i:04d}", "title": "", "text": "\n\n".join(corpus[d] for d in parts)})
    rng.shuffle(docs)
    words = token_count([d["text"] for d in docs])
    stats = {"documents": len(docs), "queries": len(queries), "abstracts_per_document_mean": sum(sizes) / len(sizes),
             "wordpieces_per_document_mean": sum(words) / len(words),
             "wordpieces_before_answer_min": min(depths), "wordpieces_before_answer_mean": sum(depths) / len(depths)}
    return docs, qrels, queries, stats


def to_documents(run, chunked: bool):
    out = {}
    for qid, hits in run.items():
        ranked = {}
        for h in hits:
            d = document_of(h.docid, h.metadata) if chunked else h.docid
            ranked.setdefault(d, h.score)  # per_document already keeps one passage per document
        out[qid] = ranked
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=200, help="test queries in the subset (default 200)")
    ap.add_argument("--distractors", type=int, default=900, help="long documents with no answer (default 900)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="chunking", help="results stem under benchmarks/results")
    args = ap.parse_args()
    start = time.perf_counter()
    docs, qrels, queries, stats = make_collection(args.queries, args.distractors, args.seed)
    work = WORK / "chunking"
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"corpus-q{args.queries}-d{args.distractors}-s{args.seed}.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    print(stats, flush=True)
    variants = {}
    for name, chunk in (("no chunking (--no-chunk)", False), ("chunked 256/32 (default)", True)):
        t0 = time.perf_counter()
        idx = retrieval.build_index(corpus, work / ("chunked" if chunk else "whole"), subindexes={"dense": DenseSpec()},
                                    chunk=chunk, overwrite=True, quiet=True)
        build_s = time.perf_counter() - t0
        v = {"chunk": chunk, "passages": len(idx), "build_s": build_s, "results": {}, "search_s": {}}
        for r in RETRIEVERS:
            t0 = time.perf_counter()
            run = idx.batch_search(queries, k=100, retriever=r, text=chunk, per_document=chunk)
            v["search_s"][r] = time.perf_counter() - t0
            v["results"][r] = evaluate(qrels, to_documents(run, chunk), MEASURES)
        variants[name] = v
        print(name, v["passages"], "passages", f"{build_s:.0f}s",
              {r: round(m["nDCG@10"], 4) for r, m in v["results"].items()}, flush=True)
    m = machine()
    total_s = time.perf_counter() - start
    whole, chunked = variants.values()
    gain = {r: chunked["results"][r]["nDCG@10"] - whole["results"][r]["nDCG@10"] for r in RETRIEVERS}
    rows = [[r, name, v["results"][r]["nDCG@10"], v["results"][r]["R@100"]]
            for r in RETRIEVERS for name, v in variants.items()]
    build_rows = [[name, v["passages"], f"{v['build_s']:.0f}", " / ".join(f"{v['search_s'][r]:.1f}" for r in RETRIEVERS)]
                  for name, v in variants.items()]
    cmd = "benchmarks/bench_chunking.py" + ("" if (args.queries, args.distractors, args.seed) == (200, 900, 0)
                                            else f" --queries {args.queries} --distractors {args.distractors} --seed {args.seed}")
    md = ["# Long documents, answer deep inside: chunking (#45)", "",
          f"Machine: {m['cpus']} CPU cores (shared, busy), {m['platform']}, Python {m['python']}, no GPU; run {m['date']}. "
          f"Rerun: `.venv/bin/python {cmd}`.", "",
          "The collection, built from SciFact by the script (seeded): "
          f"{stats['queries']} test queries (a seeded subset whose relevant abstracts no other chosen query shares, "
          f"taken from the 300 in a seeded order; the subset keeps the run short on 2 CPU cores: this one took {total_s / 60:.1f} "
          "minutes) each get one long document: unrelated "
          "abstracts (ones no test query judges), as many as put at least 256 word-pieces before the answer, then "
          "the query's relevant abstracts, then zero or one more unrelated abstract. "
          f"{args.distractors} distractor documents are made the same way from unrelated abstracts only. "
          f"{stats['documents']} documents, {stats['abstracts_per_document_mean']:.1f} abstracts and "
          f"{stats['wordpieces_per_document_mean']:.0f} word-pieces each on average; the answer starts after "
          f"{stats['wordpieces_before_answer_mean']:.0f} word-pieces on average (at least "
          f"{stats['wordpieces_before_answer_min']}). Judged at the document level: a query's one relevant "
          "document is its own long document.", "",
          "Both folders hold BM25 and a MiniLM dense sub-index (`retrieval.build_index`, Flat). "
          "`--no-chunk`: one passage per document, of which the encoder sees the first 256 word-pieces. "
          "Chunked: the default for a folder of documents, 256 word-pieces with 32 overlapping, searched with "
          "`per_document=True` (each document once, by its best passage). `bm25+dense` is the default fusion. "
          "Top 100 documents, scored by `eval.evaluate`.", "",
          md_table(["retriever", "index", "nDCG@10", "R@100"], rows), "",
          md_table(["index", "passages", "build s (BM25 + dense)", "search s (bm25 / dense / bm25+dense, all queries)"],
                   build_rows), "",
          f"Reading: without chunking the dense encoder never sees the answer, and dense nDCG@10 is "
          f"{whole['results']['dense']['nDCG@10']:.4f} (R@100 {whole['results']['dense']['R@100']:.4f}, what chance gives "
          f"among {stats['documents']} documents); chunked it is {chunked['results']['dense']['nDCG@10']:.4f} "
          f"({gain['dense']:+.4f}). The default fusion gains {gain['bm25+dense']:+.4f} "
          f"(unchunked, the blind dense list drags it below BM25 alone); BM25 reads every word either way "
          f"({gain['bm25']:+.4f}). Chunking costs {chunked['passages'] / whole['passages']:.1f}x the passages "
          f"to encode and store.", "",
          "Seconds are wall time on the shared machine (other jobs ran beside it): compare them within this table only; the unchunked folder, searched first, also pays for loading the query encoder."]
    write_results(args.out, {"machine": m, "args": vars(args), "total_s": total_s, "collection": stats, "variants": variants}, "\n".join(md))


if __name__ == "__main__":
    main()
