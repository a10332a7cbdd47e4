"""Sharded indexes (#30), in-process: are N shards searched as one the single folder, byte for byte,
and what does the DFS round cost?

- equality: SciFact and NFCorpus, each as one folder and as 2, 4, 8 shards (BM25 + MiniLM dense;
  the dense vectors encoded once and given to every build, as build_sharded does itself), runs of
  BM25, dense and bm25+dense (the default confidence-weighted fusion) at k=100 over the test queries,
  unfiltered and with two docid filters (30% of the documents: the path one folder cuts from its
  unfiltered ranking; 5%: the filtered search), compared as TREC text; then 50 held-out documents
  added, 50 deleted and 10 updated in every index, and compared again;
- synthetic: the 100k-passage synthetic corpus (benchmarks.common.synthetic_corpus): BM25, dense (seeded
  random vectors stand in for MiniLM's, :func:`stand_in_vectors`) and bm25+dense, before and after changes;
- cost: per query in one process, the sharded search against the single folder's (ratios in one run),
  with the DFS statistics round's share.

Results go to benchmarks/results/sharded.{json,md} by section (:func:`write_section`); the Ray Serve
part of #30 adds its own sections to the same files through it.

    python benchmarks/bench_sharded.py [--collections scifact nfcorpus] [--shards 2 4 8] [--synthetic 100000]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, WORK, by_name, machine, md_table, synthetic_corpus  # noqa: E402

STEM = "sharded"
ORDER = ["equality-scifact", "equality-nfcorpus", "kinds-scifact", "kinds-nfcorpus", "kinds-nfcorpus-8", "synthetic",
         "cost"]  # this script's, before others (serve's)


def write_section(name: str, data: dict, markdown: str) -> None:
    """Put one section into benchmarks/results/sharded.json (replacing a section of that name) and
    write sharded.md again from every section: this script's in ORDER, then others (Ray Serve's) as added."""
    path = RESULTS / f"{STEM}.json"
    doc = json.loads(path.read_text()) if path.exists() else {"sections": {}}
    doc["sections"][name] = {"data": data, "markdown": markdown.rstrip() + "\n", "machine": machine()}
    names = [n for n in ORDER if n in doc["sections"]] + [n for n in doc["sections"] if n not in ORDER]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    md = ["# Sharded indexes (#30)", "",
          "Written by `benchmarks/bench_sharded.py` (and the sections other scripts add through its "
          "`write_section`). Each section says what it measured and on what machine.", ""]
    md += [doc["sections"][n]["markdown"] for n in names]
    (RESULTS / f"{STEM}.md").write_text("\n".join(md))
    print(f"wrote section {name!r} of {path}")


def _run_bytes(idx, queries, retriever, flt, k) -> str:
    from retrieval.runs import write_run

    res = idx.batch_search(queries, k=k, retriever=retriever, filter=flt)
    with tempfile.TemporaryDirectory() as d:
        write_run(res, Path(d) / "run", tag="t")
        return (Path(d) / "run").read_text()


def _compare(single, shards: dict, queries, pipelines, filters, k) -> list:
    """Rows: (pipeline, filter name, shards, identical?, lines differing, lines)."""
    rows = []
    for retriever in pipelines:
        for fname, flt in filters.items():
            want = _run_bytes(single, queries, retriever, flt, k)
            for n, idx in shards.items():
                got = _run_bytes(idx, queries, retriever, flt, k)
                a, b = want.splitlines(), got.splitlines()
                diff = sum(1 for x, y in zip(a, b) if x != y) + abs(len(a) - len(b))
                rows.append([retriever, fname, n, want == got, diff, len(a),
                             hashlib.sha256(got.encode()).hexdigest()[:12]])
    return rows


def _filters(ids, seed=0) -> dict:
    rng = random.Random(seed)
    return {"none": None, "docid 30%": {"docid": {"in": rng.sample(ids, int(0.3 * len(ids)))}},
            "docid 5%": {"docid": {"in": rng.sample(ids, max(1, int(0.05 * len(ids))))}}}


def _change(single, paths, held, base, seed=0):
    """The same additions, deletions and updates in the single folder and every sharded index."""
    from retrieval import writer
    from retrieval.sharded import write as sw
    from retrieval.types import Document

    rng = random.Random(seed)
    gone = [d.docid for d in rng.sample(base, 50)]
    keep = [d for d in base if d.docid not in set(gone)]
    upd = [Document(d.docid, d.text + " updated passage text", d.title, d.metadata) for d in rng.sample(keep, 10)]
    writer.add_documents(single.path, held, quiet=True).close()
    writer.delete_documents(single.path, gone, quiet=True).close()
    writer.update_documents(single.path, upd, quiet=True).close()
    for p in paths:
        sw.write_documents(p, held, "add", quiet=True)
        sw.delete_documents(p, gone, quiet=True)
        sw.write_documents(p, upd, "update", quiet=True)
    single.refresh()


def _build_and_compare(work, docs, spec, pre, shard_counts, queries, k) -> dict:
    """``docs`` but their last 50 as one folder and as ``shard_counts`` shards (the vectors ``pre``
    given to every build), compared as TREC text for bm25, dense and bm25+dense, unfiltered and
    filtered; then the same after :func:`_change` (adding those 50). Returns the rows and timings."""
    import retrieval
    from retrieval.sharded.index import ShardedIndex
    from retrieval.sharded.write import build_sharded

    base, held = docs[:-50], docs[-50:]
    t0 = time.perf_counter()
    single = retrieval.build_index(base, work / "single", subindexes=spec, quiet=True, precomputed=pre)
    times = {"single": time.perf_counter() - t0}
    shards = {}
    for n in shard_counts:
        t0 = time.perf_counter()
        shards[n] = build_sharded(base, work / f"s{n}", n, subindexes=spec, quiet=True, precomputed=pre)
        times[n] = time.perf_counter() - t0
    pipelines = ["bm25", "dense", "bm25+dense"]
    filters = _filters([d.docid for d in base])
    before = _compare(single, shards, queries, pipelines, filters, k)
    _change(single, [s.path for s in shards.values()], held, base)
    shards = {n: ShardedIndex.open(s.path) for n, s in shards.items()}
    after = _compare(single, shards, queries, pipelines, {"none": None, "docid 30%": filters["docid 30%"]}, k)
    return {"documents": len(base), "build_seconds": times, "before": before, "after_changes": after,
            "indexes": {"single": str(single.path), **{n: str(s.path) for n, s in shards.items()}}}


def _fresh(work: Path) -> Path:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


def equality(col, shard_counts, k=100) -> dict:
    from retrieval.collections import read_corpus
    from retrieval.dense.subindex import DenseSpec
    from retrieval.kinds import get_kind

    work = _fresh(WORK / "sharded" / col.name)
    docs = list(read_corpus(col.corpus, empty="skip"))
    spec = {"dense": DenseSpec()}
    t0 = time.perf_counter()
    pre = get_kind("dense").encode_documents(docs[:-50], spec=spec["dense"], quiet=True)
    encode_s = time.perf_counter() - t0
    qs = {q.qid: q.text for q in col.queries()}
    r = _build_and_compare(work, docs, spec, pre, shard_counts, qs, k)
    return {"collection": col.name, "documents": r["documents"], "queries": len(qs), "k": k,
            "encode_seconds": encode_s, "before": r["before"], "after_changes": r["after_changes"]}


def stand_in_vectors(docs, spec, seed: int = 0) -> dict:
    """Seeded random unit vectors for ``docs`` in the form ``encode_documents`` returns, under the encoder
    config ``spec`` would record (so the build takes them as its own, ``vectors_from``): 100,000
    synthetic passages would take MiniLM about 3 hours on 2 CPU cores (results/dense_speed.md), and
    what the dense merge's exactness needs is vectors in faiss, not meaningful ones. Queries and
    documents added later are encoded by MiniLM as usual."""
    import numpy as np

    from retrieval.dense.encoder import DenseEncoder

    enc = DenseEncoder(spec.model, pooling=spec.pooling, device="cpu", max_length=spec.max_length,
                       dtype=spec.dtype, quiet=True, sts_dir=spec.sts_dir)
    rng = np.random.default_rng(seed)
    array = rng.standard_normal((len(docs), enc.dim), dtype=np.float32)
    array /= np.linalg.norm(array, axis=1, keepdims=True)
    return {"config": enc.config(), "docids": [d.docid for d in docs], "array": array.astype(enc.out_dtype),
            "source": "seeded random unit vectors (bench_sharded.stand_in_vectors)"}


def synthetic(n_docs, shard_counts, queries, k=100) -> dict:
    """The synthetic corpus as one folder and as shards (:func:`_build_and_compare`), its dense
    sub-index of stand-in vectors (:func:`stand_in_vectors`; the added and updated documents MiniLM
    encodes)."""
    from retrieval.collections import read_corpus
    from retrieval.dense.subindex import DenseSpec

    work = _fresh(WORK / "sharded" / "synthetic")
    docs = list(read_corpus(synthetic_corpus(n_docs, WORK / f"synthetic-{n_docs}.jsonl"), empty="skip"))
    spec = {"dense": DenseSpec()}
    pre = stand_in_vectors(docs[:-50], spec["dense"])
    r = _build_and_compare(work, docs, spec, pre, shard_counts, queries, k)
    return {"documents": r["documents"], "queries": len(queries), "k": k, "build_seconds": r["build_seconds"],
            "rows": r["before"], "after_changes": r["after_changes"], "vectors": pre["source"],
            "indexes": r["indexes"]}


def cost(single_path, shard_paths, queries, ks=(10, 1000), rounds=2) -> list:
    """Per query (search() one by one, text=False): the single folder's time and each sharded index's,
    and the sharded search's stats round, in one process, alternating."""
    import retrieval

    single = retrieval.open_index(single_path)
    sharded = {n: retrieval.open_index(p) for n, p in shard_paths.items()}
    texts = list(queries.values())
    rows = []
    for k in ks:
        for idx in [single, *sharded.values()]:  # warm: JVM, readers, term caches
            for t in texts[:50]:
                idx.search(t, k=k, retriever="bm25", text=False)
        spent = {"single": 0.0, **{n: 0.0 for n in sharded}}
        stats = {n: {} for n in sharded}
        for _ in range(rounds):
            for t in texts:
                t0 = time.perf_counter()
                single.search(t, k=k, retriever="bm25", text=False)
                spent["single"] += time.perf_counter() - t0
                for n, idx in sharded.items():
                    t0 = time.perf_counter()
                    idx.search(t, k=k, retriever="bm25", text=False, timings=stats[n])
                    spent[n] += time.perf_counter() - t0
        per = {key: 1000 * v / (rounds * len(texts)) for key, v in spent.items()}
        for n in sharded:
            rows.append([k, n, per["single"], per[n], per[n] / per["single"],
                         1000 * stats[n].get("stats", 0) / (rounds * len(texts))])
    return rows


def kinds(col, counts=(2,), k=100, tune: bool = True) -> dict:
    """DeepCT and SPLADE on ``col`` as one folder and as ``n`` shards: the defaults (``tune``: a user's
    build, DeepCT's mode, scale, k1/b and bm25+deepct fusion chosen on its model's dev queries, once
    for the whole sharded index; else mode and scale pinned, k1/b at their defaults, no tuning), then
    every DeepCT variant, DeepCT-Query, SPLADE and fusions over them, compared as TREC text before
    and after the same changes; with ``tune``, also whether every shard records the folder's choice.
    The DeepCT model is bench_deepct's SPLADE-tiny one for the collection (trained there, or here
    once, cached)."""
    import retrieval
    from benchmarks.bench_deepct import TINY, train
    from retrieval.collections import read_corpus
    from retrieval.deepct.subindex import DeepCTSpec
    from retrieval.sharded.index import ShardedIndex
    from retrieval.sharded.write import build_sharded
    from retrieval.splade.subindex import SpladeSpec

    train(col, f"{col.name}-tiny", TINY, "train")
    from benchmarks.bench_deepct import MODELS

    work = WORK / "sharded" / f"kinds-{col.name}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    docs = list(read_corpus(col.corpus, empty="skip"))
    base, held = docs[:-50], docs[-50:]
    def specs():
        model = str(MODELS / f"{col.name}-tiny")
        return {"deepct": DeepCTSpec(model=model) if tune else
                DeepCTSpec(model=model, mode="bm25", scale="linear", tune=False, tune_fusion=False),
                "splade": SpladeSpec()}
    t0 = time.perf_counter()
    single = retrieval.build_index(base, work / "single", subindexes=specs(), quiet=True)
    t1 = time.perf_counter()
    builds = {"single": t1 - t0}
    sharded = {}
    for n in counts:  # each shard encodes its own passages: no vectors are shared between the builds
        t1 = time.perf_counter()
        sharded[n] = build_sharded(base, work / f"s{n}", n, subindexes=specs(), quiet=True)
        builds[n] = time.perf_counter() - t1
    qs = {q.qid: q.text for q in col.queries()}
    # the defaults first (each index as built), then the variants (configured: later rows keep it)
    runs = [("deepct", None), ("deepct-query", None), ("bm25+deepct", None)] if tune else []
    runs += [("deepct", {"mode": m, "scale": s}) for m in ("impact", "bm25") for s in ("linear", "sqrt")]
    runs += [("deepct-query", None), ("splade", None), ("bm25+deepct", None), ("deepct+splade:rrf(k=60)", None)]
    filters = _filters([d.docid for d in base])

    def compare(one, shards, flts):
        rows = []
        for i, (retriever, opts) in enumerate(runs):
            for idx in (one, *shards.values()):
                idx.configure(retriever, **(opts or {}))
            name = retriever + (f" ({opts['mode']}-{opts['scale']})" if opts else "") + \
                (" (default)" if tune and i < 3 else "")
            rows += [[name, *r[1:]] for r in _compare(one, shards, qs, [retriever], flts, k)]
        return rows

    tuning = {n: _same_tuning(single, s.path) for n, s in sharded.items()} if tune else None
    before = compare(single, sharded, filters)
    _change(single, [s.path for s in sharded.values()], held, base)
    after = compare(retrieval.open_index(single.path), {n: ShardedIndex.open(s.path) for n, s in sharded.items()},
                    {"none": None, "docid 30%": filters["docid 30%"]})
    return {"collection": col.name, "documents": len(base), "queries": len(qs), "k": k, "shards": list(counts),
            "build_seconds": builds, "tuned": tune, "same_tuning": tuning, "before": before, "after_changes": after}


def _same_tuning(single, path) -> bool:
    """Whether every shard of the sharded index ``path`` records the folder's DeepCT choice: the
    entries' config, tuning record and spec, and the tuned pipelines (their time stamps aside)."""
    from indexes import manifest as mf
    from indexes import sharded as sh

    def chosen(m):
        subs = m["subindexes"]
        return ({n: [subs[n].get(key) for key in ("config", "tuning", "spec")] for n in ("deepct", "deepct-query")},
                {b: {key: v for key, v in r.items() if key not in ("tuned_at", "seconds")}
                 for b, r in m.get("pipelines", {}).items()})

    want = chosen(single.manifest)
    return all(chosen(mf.read_manifest(p)) == want for p in sh.shard_paths(path, sh.read(path)))


def _md_kinds(r) -> str:
    head = ["pipeline", "filter", "shards", "identical", "differing", "lines", "sha256"]
    return "\n".join([
        f"## DeepCT and SPLADE on {', '.join(map(str, r['shards'])) if isinstance(r['shards'], list) else r['shards']} shards: {r['collection']} ({r['documents']:,} documents, "
        f"{r['queries']} queries)", "",
        "A DeepCT model on the SPLADE-tiny body (bench_deepct's) and the bundled SPLADE-tiny, built as one folder "
        "and as shards, the model outputs made once for every shard (BuildContext.shared). Every DeepCT variant (mode-scale pinned, k1/b at the "
        "build's defaults), DeepCT-Query, SPLADE and two fusions; TREC runs at k=100 compared as text. "
        + (("Built as a user's build is: DeepCT's mode, scale, k1/b and its bm25+deepct fusion tuned on the model's "
            "held-out training queries, once for the whole sharded index through its search (the rows marked "
            "default use that choice); every shard records the folder's choice: "
            + ", ".join(f"{n} shards {'yes' if ok else 'NO'}" for n, ok in r["same_tuning"].items()) + ". ")
           if r.get("tuned") else "The build does not tune DeepCT here (`--deepct-tune off`: `tune=False`). ")
        + "Build seconds: "
        + ", ".join(f"{key}: {v:.0f}" for key, v in r["build_seconds"].items()) + ".", "",
        md_table(head, r["before"]), "",
        "After 50 additions, 50 deletions and 10 updates routed to the shards (and the same in the single folder):",
        "", md_table(head, r["after_changes"]), ""])


def _md_equality(results) -> str:
    out = [f"## Equality with one folder: {', '.join(r['collection'] for r in results)}", "",
           "BM25, dense (MiniLM, Flat) and bm25+dense (the default fusion). Each row compares the TREC run (k=100, every test query) of the sharded index with the single "
           "folder's, as text. `identical`: byte for byte; `differing`: lines that differ.", ""]
    for r in results:
        out += [f"### {r['collection']} ({r['documents']:,} documents, {r['queries']} queries)", "",
                md_table(["pipeline", "filter", "shards", "identical", "differing", "lines", "sha256"], r["before"]),
                "", "After 50 additions, 50 deletions and 10 updates routed to the shards (and the same in the "
                    "single folder):", "",
                md_table(["pipeline", "filter", "shards", "identical", "differing", "lines", "sha256"],
                         r["after_changes"]), ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--collections", nargs="*", default=["scifact", "nfcorpus"])
    ap.add_argument("--shards", nargs="*", type=int, default=[2, 4, 8])
    ap.add_argument("--synthetic", type=int, default=100_000)
    ap.add_argument("--synthetic-shards", nargs="*", type=int, default=[4])
    ap.add_argument("--cost-shards", nargs="*", type=int, default=None, help="[default: --shards]")
    ap.add_argument("--skip", nargs="*", default=[], choices=["equality", "synthetic", "cost"])
    ap.add_argument("--kinds", nargs="?", const="nfcorpus", default=None, metavar="COLLECTION",
                    help="only the DeepCT and SPLADE equality section, on COLLECTION [nfcorpus] at --shards")
    ap.add_argument("--deepct-tune", choices=["on", "off"], default="on",
                    help="--kinds: build DeepCT as a user's build does, tuned on its model's dev queries (on), "
                         "or with tune=False and pinned bm25-linear defaults (off)")
    a = ap.parse_args(argv)
    if a.kinds:
        r = kinds(by_name([a.kinds])[0], a.shards, tune=a.deepct_tune == "on")
        # the default counts keep one section per collection; other counts get their own, so a rerun at
        # one count adds to the file instead of replacing the rows of the others
        tail = "" if a.shards == [2, 4, 8] else "-" + "-".join(map(str, a.shards))
        write_section(f"kinds-{r['collection']}{tail}", r, _md_kinds(r))
        return 0
    cols = by_name(a.collections)
    if "equality" not in a.skip:
        for c in cols:  # one section per collection, so a rerun of one keeps the other's
            res = [equality(c, a.shards)]
            write_section(f"equality-{c.name}", {"results": res}, _md_equality(res))
    qs = {q.qid: q.text for q in by_name(["scifact"])[0].queries()}
    if "synthetic" not in a.skip:
        syn = synthetic(a.synthetic, a.synthetic_shards, qs)
        write_section("synthetic", syn, "\n".join([
            f"## {syn['documents']:,} synthetic passages: BM25, dense and bm25+dense", "",
            "The synthetic corpus of `benchmarks.common.synthetic_corpus` (less 50 passages held out for the "
            "changes); SciFact's test queries, k=100. Dense: a Flat index of seeded random unit vectors in "
            "MiniLM's configuration, given to every build (encoding 100,000 such passages with MiniLM takes "
            "about 3 hours on these 2 cores; the merge's exactness does not depend on what the vectors mean); "
            "the queries, and the documents the changes add or update, are encoded by MiniLM. Build seconds: "
            + ", ".join(f"{n}: {s:.0f}" for n, s in syn["build_seconds"].items()) + ".", "",
            md_table(["pipeline", "filter", "shards", "identical", "differing", "lines", "sha256"], syn["rows"]), "",
            "After 50 additions, 50 deletions and 10 updates routed to the shards (and the same in the single "
            "folder):", "",
            md_table(["pipeline", "filter", "shards", "identical", "differing", "lines", "sha256"],
                     syn["after_changes"]), ""]))
    if "cost" not in a.skip:
        work = WORK / "sharded" / "scifact"
        rows = cost(work / "single", {n: work / f"s{n}" for n in (a.cost_shards or a.shards)}, qs)
        write_section("cost", {"rows": rows}, "\n".join([
            "## Cost of the DFS round, in-process", "",
            "SciFact, BM25, `search()` one query at a time (no text), the shards searched one after the other in "
            "this process (no parallelism: the shape of the work, not a serving setup); milliseconds per query, "
            "the sharded index over the single folder in the same run, and the statistics round alone.", "",
            md_table(["k", "shards", "single ms", "sharded ms", "ratio", "stats round ms"], rows), ""]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
