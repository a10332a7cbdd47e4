"""Encoding speed per backend, precision and batch, each against the fp32 PyTorch path in the same run.

    .venv/bin/python benchmarks/bench_encode.py [--passages 256] [--queries 100] [--deepct DIR]
    .venv/bin/python benchmarks/bench_encode.py --ndcg [--collections scifact nfcorpus cranfield] [--cap-min 25]
    .venv/bin/python benchmarks/bench_encode.py --splade-ndcg [--collections ...]

Speed (the default): on SciFact's first ``--passages`` passages and ``--queries`` test queries,
  - dense query encoding, one query at a time on one thread (torch and ONNX Runtime both set to 1):
    queries/s for torch fp32 (DenseEncoder, the shipped path), onnx and onnx-int8;
  - dense passage encoding (batch 64, torch's default threads, the build's): passages/s for torch fp32,
    torch bf16 autocast, onnx and onnx-int8 (the last three run each text alone, texts in parallel);
  - agreement of each backend's vectors with torch fp32's (largest absolute difference, smallest cosine);
  - SPLADE-tiny query encoding one query at a time on one thread, torch vs onnx (queries/s), and how many
    test queries of SciFact, NFCorpus and Cranfield get other impacts from onnx;
  - SPLADE-tiny passage encoding (one thread, as a build runs it) at batch 1 (the default) and batched;
  - DeepCT passage encoding fp32 vs bf16 when ``--deepct DIR`` names a trained model.
Every rate is also given as a ratio to torch fp32 measured in the same run.

``--ndcg``: nDCG@10 per backend on each collection (faiss Flat over the whole corpus and its test
queries, the same encoder for both); collections run in order until ``--cap-min`` minutes have passed,
and the ones not reached are listed as not measured.

``--splade-ndcg``: SPLADE-tiny's nDCG@10 with torch and with onnx query impacts over the same impact index.

Writes benchmarks/results/encode.{json,md} (``--ndcg``: encode-ndcg.{json,md}; ``--splade-ndcg``:
encode-splade-ndcg.{json,md}).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from common import RESULTS, by_name, cpu_line, machine, md_table, write_results

DENSE = (("torch", "fp32"), ("torch", "bf16"), ("onnx", "fp32"), ("onnx-int8", "fp32"))
LOADED = ("Absolute rates move between runs and machines (these machines' speed varies up to 3x); the ratios, "
          "measured in one run against torch fp32, are what to read. Dense rates are the median of "
          "3 interleaved rounds (each backend once per round).")


def _corpus(col, n=None):
    out = []
    with open(col.corpus, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            out.append((d["_id"], f"{d.get('title') or ''} {d['text']}".strip()))
            if n and len(out) >= n:
                break
    return out


def _timed(fn, reps: int = 1):
    """(result, seconds): the fastest of ``reps`` runs (the least disturbed by other jobs)."""
    best, out = float("inf"), None
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return out, best


def _encoder(backend, precision, threads=None):
    from retrieval.dense.encoder import DenseEncoder

    enc = DenseEncoder(device="cpu", backend=backend, precision=precision, quiet=True)
    if enc.backend != "torch":
        from retrieval.onnxrt import OnnxBody

        body = enc.onnx_body  # export (cached) before any timing
        enc._onnx = OnnxBody(body.path, body.input_names, threads=threads)
    return enc


def _agree(v, ref) -> dict:
    return {"max_abs": float(np.abs(v - ref).max()), "min_cosine": float((v * ref).sum(1).min())}


ROUNDS = 3  # each backend timed once per round, the rounds interleaved: a drift in the machine's speed hits all


def _rounds(encoders: dict, run) -> dict:
    """{name: (vectors, median seconds)}: ``run(encoder)`` for every encoder once per round, ROUNDS rounds,
    so that each ratio compares timings taken minutes apart at most, under the same load."""
    times, vecs = {k: [] for k in encoders}, {}
    for _ in range(ROUNDS):
        for name, enc in encoders.items():
            t = time.perf_counter()
            vecs[name] = run(enc)
            times[name].append(time.perf_counter() - t)
    return {k: (vecs[k], float(np.median(times[k]))) for k in encoders}


def dense_queries(queries):
    """One query at a time, one thread: queries/s per backend, and agreement with torch fp32."""
    torch.set_num_threads(1)
    encs = {b: _encoder(b, "fp32", threads=1) for b in ("torch", "onnx", "onnx-int8")}
    for enc in encs.values():
        enc.encode(queries[:5], quiet=True)  # warm up
    got = _rounds(encs, lambda enc: np.concatenate([enc.encode([q], quiet=True) for q in queries]))
    ref = got["torch"][0]
    return {b: {"queries_per_s": len(queries) / secs, **_agree(v, ref)} for b, (v, secs) in got.items()}


def dense_passages(texts, threads):
    torch.set_num_threads(threads)
    encs = {(f"torch {p}" if b == "torch" else b): _encoder(b, p, threads=threads) for b, p in DENSE}
    for enc in encs.values():
        enc.encode(texts[:8], quiet=True)  # warm up
    got = _rounds(encs, lambda enc: enc.encode(texts, batch_size=64, quiet=True))
    ref = got["torch fp32"][0]
    return {k: {"passages_per_s": len(texts) / secs, **_agree(v, ref)} for k, (v, secs) in got.items()}


def splade_queries(queries):
    """SPLADE-tiny queries one at a time, one thread, PyTorch vs ONNX Runtime (queries/s, median of the
    rounds), and how many test queries of SciFact, NFCorpus and Cranfield get other impacts from ONNX
    (none: the rankings are PyTorch's)."""
    from retrieval.splade.model import SpladeEncoder

    torch.set_num_threads(1)
    encs = {b: SpladeEncoder(device="cpu", threads=1, backend=b) for b in ("torch", "onnx")}
    for enc in encs.values():
        enc.impacts(queries[:5])  # warm up (and export)
    got = _rounds(encs, lambda enc: [enc.impacts([q])[0] for q in queries])
    rows = {b: {"queries_per_s": len(queries) / secs} for b, (_v, secs) in got.items()}
    checked = {}
    for col in by_name(["scifact", "nfcorpus", "cranfield"]):
        qs = [q.text for q in col.queries()]
        a, b = encs["torch"].impacts(qs), encs["onnx"].impacts(qs)
        checked[col.name] = {"queries": len(qs), "impacts_differ": sum(x != y for x, y in zip(a, b))}
    return {"rates": rows, "test_queries": checked}


def splade(texts, batches=(1, 8, 32)):
    from retrieval.splade.model import SpladeEncoder

    rows, ref = {}, None
    for b in batches:
        enc = SpladeEncoder(threads=1, batch=b)
        enc.weights(texts[:4])
        ws, secs = _timed(lambda: enc.impacts(texts))
        ref = ws if ref is None else ref
        moved = sum(1 for x, y in zip(ws, ref) if x != y)
        rows[f"batch {b}"] = {"passages_per_s": len(texts) / secs, "passages_whose_impacts_differ_from_batch_1": moved}
    return rows


def deepct(model, texts):
    from retrieval.deepct.model import DeepCTEncoder

    rows = {}
    for precision in ("fp32", "bf16"):
        enc = DeepCTEncoder(model, device="cpu", threads=1, precision=precision)
        enc.encode_words(texts[:4])
        _w, secs = _timed(lambda: enc.encode_words(texts))
        rows[precision] = {"passages_per_s": len(texts) / secs}
    return rows


def _ratio_rows(rows, key, base):
    return [[name, r[key], r[key] / rows[base][key], f"{r['max_abs']:.1e}", f"{r['min_cosine']:.6f}"]
            for name, r in rows.items()]


def speed(args):
    col = by_name(["scifact"])[0]
    texts = [t for _d, t in _corpus(col, args.passages)]
    queries = [q.text for q in col.queries()][:args.queries]
    t0 = time.perf_counter()
    out = {"passages": len(texts), "queries": len(queries), "threads": torch.get_num_threads(), "cpu": cpu_line()}
    out["dense_queries"] = dense_queries(queries)
    out["dense_passages"] = dense_passages(texts, out["threads"])
    out["splade_queries"] = splade_queries(queries)
    out["splade"] = splade(texts[:args.splade_passages])
    out["deepct"] = deepct(args.deepct, texts[:args.splade_passages]) if args.deepct else None
    out["seconds"] = time.perf_counter() - t0
    write_results("encode", {"machine": machine(), "results": out}, speed_md(out))


def speed_md(out) -> str:
    hd = ["backend", "rate", "x torch fp32", "max abs diff", "min cosine"]
    md = ["# Encoding speed on a CPU: PyTorch fp32 vs bf16 vs ONNX Runtime (fp32, int8)", "",
          f"Generated by `benchmarks/bench_encode.py` on SciFact's first {out['passages']} passages and "
          f"{out['queries']} test queries (bundled all-MiniLM-L6-v2, mean pooling; SPLADE-tiny). {LOADED}", "",
          f"Machine: {out['cpu']}.", "",
          "## Dense query encoding: one query at a time, one thread (queries/s)", "",
          md_table(hd, _ratio_rows(out["dense_queries"], "queries_per_s", "torch")), "",
          f"## Dense passage encoding: batch 64, {out['threads']} threads (passages/s)", "",
          "torch fp32 runs padded, length-sorted batches of 64; torch bf16, onnx and onnx-int8 run each text alone "
          f"(no padding; a vector does not depend on its neighbours), {out['threads']} texts at a time on one "
          "thread each.", "",
          md_table(hd, _ratio_rows(out["dense_passages"], "passages_per_s", "torch fp32")), "",
          "## SPLADE-tiny query encoding: one query at a time, one thread (queries/s)", "",
          md_table(["backend", "queries/s", "x torch"],
                   [[b, r["queries_per_s"], r["queries_per_s"] / out["splade_queries"]["rates"]["torch"]["queries_per_s"]]
                    for b, r in out["splade_queries"]["rates"].items()]), "",
          "Test queries whose SPLADE impacts differ between onnx and torch: " + ", ".join(
              f"{c} {r['impacts_differ']} of {r['queries']}" for c, r in out["splade_queries"]["test_queries"].items())
          + " (where none differ, onnx queries rank exactly as torch's). On a CPU a SPLADE sub-index's queries "
            "run on onnx by default (its passages on torch).", "",
          "## SPLADE-tiny passage encoding, one thread (passages/s)", "",
          md_table(["batch", "passages/s", "x batch 1", "passages whose impacts differ from batch 1"],
                   [[k, r["passages_per_s"], r["passages_per_s"] / out["splade"]["batch 1"]["passages_per_s"],
                     r["passages_whose_impacts_differ_from_batch_1"]] for k, r in out["splade"].items()]), ""]
    if out.get("deepct"):
        d = out["deepct"]
        md += ["## DeepCT passage encoding, one thread (passages/s)", "",
               md_table(["precision", "passages/s", "x fp32"],
                        [[k, r["passages_per_s"], r["passages_per_s"] / d["fp32"]["passages_per_s"]]
                         for k, r in d.items()]), ""]
    else:
        md += ["DeepCT: not measured in this run (no trained DeepCT model was given: `--deepct DIR`).", ""]
    from retrieval.models import CPU_DEFAULT

    from retrieval.models import resolve_encoding

    here = {r: " ".join(resolve_encoding("auto", "auto", "cpu", "mean", r)) for r in ("queries", "passages")}
    md += [f"Defaults on a CPU (`--backend auto`, retrieval.models.CPU_DEFAULT, the first pair that can run): "
           f"queries {_order(CPU_DEFAULT['queries'])}; passages {_order(CPU_DEFAULT['passages'])}. On this "
           f"machine (mean pooling): queries {here['queries']}, passages {here['passages']}.", "",
           f"One run, {out['seconds']:.0f} s in all. GPU rows (bf16 and batched SPLADE on a GPU) are "
           "`benchmarks/bench_gpu.py --encode`'s; no GPU was available to this run."]
    return "\n".join(md)


def _order(pairs) -> str:
    return ", then ".join(" ".join(p) for p in pairs)


def _ndcg10(col, qs, ids, dv, qv) -> float:
    from eval import evaluate
    from indexes.faiss_index import FaissIndex

    fi = FaissIndex.build([(dv, ids)], factory="Flat", dim=dv.shape[1], use_gpu=False, quiet=True)
    scores, names = fi.search(qv, 10)
    run = {q.qid: dict(zip(n, map(float, s))) for q, n, s in zip(qs, names, scores)}
    return evaluate(col.qrels(), run, ["nDCG@10"])["nDCG@10"]


def splade_ndcg(args) -> None:
    """nDCG@10 of SPLADE-tiny on each collection's test queries with the query impacts from PyTorch and
    from ONNX Runtime over the same impact index (the collection's shared benchmark index with a
    ``splade`` sub-index added), and how many queries' impacts differ: the ranking cost of SPLADE's
    default query backend on a CPU. Writes encode-splade-ndcg.{json,md}."""
    from common import bench_index

    from eval import evaluate
    from retrieval.splade.model import SpladeEncoder
    from retrieval.splade.subindex import SpladeSpec
    from retrieval.writer import add_subindex

    encs = {b: SpladeEncoder(device="cpu", threads=1, backend=b) for b in ("torch", "onnx")}
    out = {}
    for col in by_name(args.collections):
        idx = bench_index(col)
        if "splade" not in idx.retrievers:
            print(f"[{col.name}] adding splade ...", flush=True)
            idx = add_subindex(idx, SpladeSpec(), name="splade", quiet=True)
        lucene = idx.snapshot().retriever("splade")._lucene()
        qs = col.queries()
        weights = {b: e.impacts([q.text for q in qs]) for b, e in encs.items()}
        row = {"queries": len(qs), "impacts_differ": sum(a != b for a, b in zip(*weights.values()))}
        for b, w in weights.items():
            run = {q: dict(hits) for q, hits in lucene.batch(w, [q.qid for q in qs], 10).items()}
            row[f"nDCG@10 ({b} queries)"] = evaluate(col.qrels(), run, ["nDCG@10"])["nDCG@10"]
        out[col.name] = row
        print(col.name, row, flush=True)
    rows = [[c, r["queries"], r["impacts_differ"], r["nDCG@10 (torch queries)"], r["nDCG@10 (onnx queries)"],
             f"{r['nDCG@10 (onnx queries)'] - r['nDCG@10 (torch queries)']:+.4f}"] for c, r in out.items()]
    cpu = cpu_line()
    md = ["# SPLADE-tiny query impacts from PyTorch and from ONNX Runtime: nDCG@10", "",
          f"Generated by `benchmarks/bench_encode.py --splade-ndcg` on {cpu}. The same impact index (passages "
          "encoded by PyTorch), test queries, k=10; the two backends' float weights agree to ~5e-6, so an "
          "integer impact differs only where a weight lies at a rounding boundary.", "",
          md_table(["collection", "queries", "queries whose impacts differ", "nDCG@10 torch", "nDCG@10 onnx", "Δ"],
                   rows), ""]
    write_results("encode-splade-ndcg", {"machine": {**machine(), "cpu": cpu}, "results": out}, "\n".join(md))


def _baseline() -> dict:
    """torch fp32's nDCG@10 per collection from the last file that measured it (torch fp32 vectors
    are the same to ~1e-7 from run to run, so its rankings are too): re-encoding every passage in
    torch costs ~18 minutes on these cores, which the run spends on the backends under test."""
    path = RESULTS / "encode-ndcg.json"
    if not path.is_file():
        return {}
    old = json.loads(path.read_text()).get("results", {})
    return {c: {k: v for k, v in r.items() if k.startswith("torch passages")} for c, r in old.items()}


def _passages(args, name, backend, encode):
    """Passage vectors, kept in ``--keep DIR`` when given (a later run with other query backends
    reuses them instead of encoding the corpus again)."""
    if not args.keep:
        return encode()
    from pathlib import Path

    path = Path(args.keep) / f"{name}-{backend.replace(':', '-')}.npy"
    if path.is_file():
        return np.load(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    v = encode()
    np.save(path, v)
    return v


def ndcg(args):
    """nDCG@10 of each ``--pairs`` entry (passages/queries backends) per collection, smallest first,
    while the cap allows; torch fp32's rows come from :func:`_baseline` unless ``torch/torch`` is
    among the pairs."""
    deadline = time.perf_counter() + args.cap_min * 60
    args.cpu = cpu_line()
    base = _baseline()
    out, skipped, encs = {}, [], {}
    pairs = [tuple(p.split("/")) for p in args.pairs]
    cols = sorted(by_name(args.collections), key=lambda c: c.corpus.stat().st_size)
    for col in cols:
        docs, qs = _corpus(col), col.queries()
        ids, texts = [d for d, _t in docs], [t for _d, t in docs]
        out[col.name] = {"passages": len(ids), "queries": len(qs), **base.get(col.name, {})}
        dvs = {}  # passage vectors per backend, shared by the pairs that name it
        for pb, qb in pairs:
            if time.perf_counter() > deadline:
                skipped.append(f"{col.name} ({pb} passages, {qb} queries)")
                continue
            for b in (pb, qb):  # auto: the CPU default (retrieval.models.CPU_DEFAULT) for passages
                name, _, prec = b.partition(":")  # torch:bf16 names a precision; else fp32 (auto: the default's)
                encs.setdefault(b, _encoder(name, prec or ("auto" if name == "auto" else "fp32")))
            if pb not in dvs:
                t = time.perf_counter()
                dvs[pb] = _passages(args, col.name, pb, lambda: encs[pb].encode(texts, batch_size=64, quiet=True))
                if not args.keep:  # vectors loaded from --keep took no encoding time
                    out[col.name][f"{pb}_passage_seconds"] = time.perf_counter() - t
            dv = dvs[pb]
            qv = encs[qb].encode([q.text for q in qs], quiet=True)
            out[col.name][f"{pb} passages, {qb} queries"] = _ndcg10(col, qs, ids, dv, qv)
            print(col.name, out[col.name], flush=True)
            _write_ndcg(out, skipped, args)
    _write_ndcg(out, skipped, args)


def _write_ndcg(out, skipped, args) -> None:
    """Written after each step, so a run stopped at its cap keeps what it measured."""
    write_results("encode-ndcg", {"machine": {**machine(), "cpu": args.cpu}, "command": _command(args),
                                  "results": out, "not_measured": sorted(set(skipped))},
                  ndcg_md(out, sorted(set(skipped)), args.cap_min, args.cpu, _command(args)))


def _command(args) -> str:
    return "benchmarks/bench_encode.py --ndcg" + (" --keep DIR" if args.keep else "") + \
        (" --pairs " + " ".join(args.pairs)) + (" --collections " + " ".join(args.collections))


def ndcg_md(out, skipped, cap, cpu, command) -> str:
    rows = []
    for c, res in out.items():
        base = res.get("torch passages, torch queries", float("nan"))
        rows += [[c, k, v, f"{v - base:+.4f}"] for k, v in res.items() if k.endswith(" queries")]
    md = ["# nDCG@10 per dense encoding backend (all-MiniLM-L6-v2, mean pooling, faiss Flat, test queries)", "",
          f"Generated by `{command}` on {cpu}. The tolerance for a CPU default: within 0.003 of torch fp32 "
          "on SciFact, NFCorpus and Cranfield. `torch:bf16` passages run each text alone in bf16 autocast.", "",
          md_table(["collection", "passages / queries encoded by", "nDCG@10", "Δ vs torch fp32"], rows), ""]
    md.append("The torch-passage rows come from the previous run of this file (torch fp32 vectors agree from "
              "run to run to ~1e-7, so their rankings do) unless this run lists `torch/torch` among its pairs; "
              "the onnx (fp32) backend's vectors agree with torch's to ~3e-7, so its passages rank as torch's do.")
    from retrieval.models import CPU_DEFAULT

    md += ["", "`--backend auto` on a CPU (retrieval.models.CPU_DEFAULT) takes the first of these that can run: "
           f"passages {_order(CPU_DEFAULT['passages'])}; queries {_order(CPU_DEFAULT['queries'])}."]
    if skipped:
        md.append(f"Not measured (past the run's {cap:g}-minute cap): {', '.join(skipped)}.")
    return "\n".join(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=256)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--splade-passages", type=int, default=64)
    ap.add_argument("--deepct", help="a trained DeepCT model folder (`retr train deepct`)")
    ap.add_argument("--ndcg", action="store_true")
    ap.add_argument("--splade-ndcg", action="store_true", help="SPLADE nDCG@10 with torch vs onnx query impacts")
    ap.add_argument("--collections", nargs="*", default=["cranfield", "nfcorpus", "scifact"])
    ap.add_argument("--keep", help="a folder to keep passage vectors in (and reuse them from)")
    ap.add_argument("--pairs", nargs="*", default=["auto/onnx-int8"],
                    help="passages/queries backends to measure, each BACKEND[:PRECISION] (torch:bf16/onnx-int8; "
                         "torch/torch re-measures the baseline)")
    ap.add_argument("--cap-min", type=float, default=25.0)
    args = ap.parse_args()
    splade_ndcg(args) if args.splade_ndcg else ndcg(args) if args.ndcg else speed(args)


if __name__ == "__main__":
    main()
