"""GPU check of the dense path: CUDA encoding and faiss's GPU-or-CPU choice.

Meant for a machine with an NVIDIA GPU (it exits with a message where torch sees none):

  agree    the same texts encoded on CPU and on CUDA (mean and Ditto pooling, eager attention):
           largest absolute difference and smallest cosine between the two vectors of a text
  encode   SciFact's corpus on CUDA with DenseEncoder.encode (length-sorted) against a bare
           `model(**batch)` loop in corpus order, same model object, same batch size; fp16 storage too
  faiss    FaissIndex with use_gpu="auto" and use_gpu=True: which device searched, and whether the
           fallback warned instead of failing when this faiss build has no GPU support
  quality  SciFact test nDCG@10 with the CUDA-encoded vectors against the CPU-encoded ones

    python benchmarks/bench_gpu.py --model DIR --scifact DIR [--tag NAME] [--out DIR]

Writes <out>/gpu-<tag>.json and .md (default out: benchmarks/results).

``--encode`` measures issue 46's GPU rows instead (one short script, each row against fp32 / batch 1
in the same run), writing <out>/gpu-encode-<tag>.{json,md}:

  dense    DenseEncoder passages/s, fp32 vs bf16 autocast (``precision=``), batch --batch-size, and
           SciFact test nDCG@10 of each (the issue's bar: bf16 within 0.002 of fp32)
  splade   SPLADE-tiny passages/s at batch 1 (the default) vs --splade-batch, and how many passages'
           impacts differ between the two
  rom      ROM pre-training steps (BM25 importance, the masking and --rom-steps optimiser steps)
           fp32 vs bf16 autocast: seconds

    python benchmarks/bench_gpu.py --encode --model minilm --scifact DIR          # on the GPU
    python benchmarks/bench_gpu.py --encode --model minilm --scifact DIR --device cpu --limit 32  # dry run
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def bare_loop(enc, texts, batch_size):
    """What a user would write by hand: batches in corpus order, padded by the tokenizer, mean pooled."""
    out = []
    with torch.inference_mode():
        for s in range(0, len(texts), batch_size):
            b = enc.tokenizer(texts[s:s + batch_size], truncation=True, max_length=enc.max_length,
                              padding=True, return_tensors="pt").to(enc.device)
            h = enc.model(**b).last_hidden_state
            m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
            out.append(torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).cpu())
    _sync()
    return torch.cat(out).numpy()


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn):
    _sync()
    t = time.perf_counter()
    r = fn()
    _sync()
    return r, time.perf_counter() - t


def ndcg10(vecs, docids, qvecs, qs, qrels):
    from eval import evaluate
    from indexes.faiss_index import FaissIndex

    idx = FaissIndex.build(vecs, docids, "Flat", use_gpu="auto", quiet=True)
    D, names = idx.search(qvecs, 10)
    run = {q.qid: dict(zip(n, map(float, d))) for q, n, d in zip(qs, names, D)}
    return evaluate(qrels, run, ["nDCG@10"])["nDCG@10"]


def dense_precisions(args, texts, qs, qrels, docids) -> dict:
    """Passages/s and SciFact nDCG@10 in fp32 and bf16 autocast, same model, same batches."""
    from retrieval.dense.encoder import DenseEncoder

    out = {}
    for precision in ("fp32", "bf16"):
        enc = DenseEncoder(args.model, device=args.device, precision=precision, quiet=True)
        enc.encode(texts[:256], batch_size=args.batch_size, quiet=True)  # warm up (kernels, allocator)
        vecs, t = timed(lambda: enc.encode(texts, batch_size=args.batch_size, quiet=True))
        qv = enc.encode([q.text for q in qs], quiet=True)
        out[precision] = {"seconds": t, "passages_per_s": len(texts) / t,
                          "nDCG@10": ndcg10(vecs, docids, qv, qs, qrels)}
    return out


def splade_batches(args, texts) -> dict:
    from retrieval.splade.model import SpladeEncoder

    out, ref = {}, None
    for b in (1, args.splade_batch):
        enc = SpladeEncoder(device=args.device, batch=b, precision="fp32")
        enc.impacts(texts[:8])
        imp, t = timed(lambda: enc.impacts(texts))
        ref = imp if ref is None else ref
        out[f"batch {b}"] = {"seconds": t, "passages_per_s": len(texts) / t,
                             "passages_whose_impacts_differ_from_batch_1": sum(x != y for x, y in zip(imp, ref))}
    return out


def rom_steps(args, texts) -> dict:
    """ROM's preparation (BM25 importance, masks) and ``--rom-steps`` optimiser steps, per precision."""
    from retrieval.dense import mlm as M
    from retrieval.models import autocast, resolve_model_path
    from retrieval.optim import adamw_with_warmup

    out = {}
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        model = M.load_mlm(resolve_model_path(args.model))
        model.model.to(args.device).train()
        # as training runs it: the passages tokenized once, shared by the importance and the masking
        (ws, imp), t_imp = timed(lambda: (lambda w: (w, M.importance_of("bm25", w, model.tokenizer, 256)))(
            M.words_of(texts, model.tokenizer, 256)))
        pt = M.Pretrainer(model, ws, strategy="rom", rate=0.3, max_length=256, batch_size=32, importance=imp,
                          device=args.device)
        opt, sched = adamw_with_warmup(model.model, 5e-5, 0.01, 0.1, args.rom_steps)

        def steps():
            for i, batch in enumerate(pt.batches(0)):
                if i >= args.rom_steps:
                    break
                with autocast(precision, args.device):
                    loss = pt.loss(*batch)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
        _r, t = timed(steps)
        out[precision] = {"importance_s": t_imp, "steps_s": t, "steps": args.rom_steps}
    return out


def encode_rows(args, texts, qs, qrels, docids) -> None:
    res = {"machine": {"device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
                       "torch": torch.__version__, "python": platform.python_version()},
           "docs": len(texts), "queries": len(qs)}
    res["dense"] = dense_precisions(args, texts, qs, qrels, docids)
    res["splade"] = splade_batches(args, texts[:args.splade_passages or None])
    res["rom"] = rom_steps(args, texts[:max(32 * args.rom_steps, 32)])
    d, sp, r = res["dense"], res["splade"], res["rom"]
    b1, bn = sp["batch 1"], sp[f"batch {args.splade_batch}"]
    md = [f"# GPU encoding rows ({args.tag}): precision and batching", "",
          f"Generated by `benchmarks/bench_gpu.py --encode` on {res['machine']['device']} (torch "
          f"{res['machine']['torch']}); SciFact {len(texts)} passages, {len(qs)} test queries.", "",
          "| row | fp32 / batch 1 | bf16 / batched | ratio |", "|---|---|---|---|",
          f"| dense passages/s (batch {args.batch_size}) | {d['fp32']['passages_per_s']:.0f} | "
          f"{d['bf16']['passages_per_s']:.0f} | {d['bf16']['passages_per_s'] / d['fp32']['passages_per_s']:.2f}x |",
          f"| dense SciFact nDCG@10 | {d['fp32']['nDCG@10']:.4f} | {d['bf16']['nDCG@10']:.4f} | "
          f"Δ {d['bf16']['nDCG@10'] - d['fp32']['nDCG@10']:+.4f} |",
          f"| SPLADE passages/s (batch {args.splade_batch}) | {b1['passages_per_s']:.0f} | {bn['passages_per_s']:.0f} | "
          f"{bn['passages_per_s'] / b1['passages_per_s']:.2f}x ({bn['passages_whose_impacts_differ_from_batch_1']} "
          "passages' impacts differ) |",
          f"| ROM: {args.rom_steps} steps, seconds | {r['fp32']['steps_s']:.2f} | {r['bf16']['steps_s']:.2f} | "
          f"{r['fp32']['steps_s'] / r['bf16']['steps_s']:.2f}x |",
          f"| ROM: tokenisation and BM25 importance, seconds | {r['fp32']['importance_s']:.2f} | – | – |", ""]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gpu-encode-{args.tag}.json").write_text(json.dumps(res, indent=2) + "\n")
    (out / f"gpu-encode-{args.tag}.md").write_text("\n".join(md))
    print("\n".join(md))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--scifact", required=True, help="folder with corpus.jsonl(.gz), queries.jsonl, qrels/test.tsv")
    ap.add_argument("--tag", default="minilm")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--device", default="cuda", help="cpu only to try this script out (with --limit)")
    ap.add_argument("--limit", type=int, default=0, help="first N passages only (a dry run)")
    ap.add_argument("--encode", action="store_true", help="issue 46's rows: precision, SPLADE batching, ROM steps")
    ap.add_argument("--splade-batch", type=int, default=128)
    ap.add_argument("--splade-passages", type=int, default=0, help="SPLADE rows on the first N passages [all]")
    ap.add_argument("--rom-steps", type=int, default=50)
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_gpu: torch sees no GPU here; run this on a CUDA machine")

    import faiss

    from eval.io import read_qrels
    from indexes.faiss_index import FaissIndex, gpu_available
    from retrieval.collections import read_corpus, read_queries
    from retrieval.dense.encoder import DenseEncoder
    from retrieval.models import pick_device

    sf = Path(args.scifact)
    docs = list(read_corpus(sf))[:args.limit or None]
    docids = [d.docid for d in docs]
    texts = [f"{d.title} {d.text}" if d.title else d.text for d in docs]
    qrels = read_qrels(sf / "qrels" / "test.tsv")
    qs = [q for q in read_queries(sf / "queries.jsonl") if q.qid in qrels]
    res: dict = {"machine": {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU", "torch": torch.__version__,
                             "cuda": torch.version.cuda, "faiss": faiss.__version__,
                             "python": platform.python_version(), "cpu_threads": torch.get_num_threads()},
                 "model": args.model, "docs": len(docs), "queries": len(qs), "auto_device": pick_device("auto")}
    if args.encode:
        return encode_rows(args, texts, qs, qrels, docids)

    # -- agree: CPU vs CUDA on the same 256 texts, mean and Ditto ---------------------------------
    sample = texts[:256]
    agree = {}
    for pooling, lh in (("mean", None), ("ditto", (0, 0))):
        a = DenseEncoder(args.model, pooling=pooling, ditto_layer_head=lh, device="cpu", quiet=True).encode(sample, quiet=True)
        b = DenseEncoder(args.model, pooling=pooling, ditto_layer_head=lh, device=args.device, quiet=True).encode(sample, quiet=True)
        agree[pooling] = {"max_abs_diff": float(np.abs(a - b).max()), "min_cosine": float((a * b).sum(1).min())}
    res["agree"] = agree

    # -- encode: ours vs bare loop on CUDA -------------------------------------------------------
    enc = DenseEncoder(args.model, pooling="mean", device=args.device, quiet=True)
    bare_loop(enc, texts[:512], args.batch_size)  # warm-up (kernels, allocator)
    enc.encode(texts[:512], batch_size=args.batch_size, quiet=True)
    times = {"bare": [], "ours": []}
    for who in ("bare", "ours", "ours", "bare"):
        fn = (lambda: bare_loop(enc, texts, args.batch_size)) if who == "bare" else \
             (lambda: enc.encode(texts, batch_size=args.batch_size, quiet=True))
        v, t = timed(fn)
        times[who].append(t)
        if who == "ours":
            gpu_vecs = v
        else:
            bare_vecs = v
    enc16 = DenseEncoder(args.model, pooling="mean", device=args.device, dtype="float16", quiet=True)
    v16, t16 = timed(lambda: enc16.encode(texts, batch_size=args.batch_size, quiet=True))
    tb, to = min(times["bare"]), min(times["ours"])
    res["encode"] = {"bare_s": tb, "ours_s": to, "ours_fp16_storage_s": t16, "ratio_ours_to_bare": to / tb,
                     "passages_per_s": len(texts) / to, "bare_vs_ours_min_cosine": float((gpu_vecs * bare_vecs).sum(1).min()),
                     "fp16_storage_bytes": int(v16.nbytes), "fp32_storage_bytes": int(gpu_vecs.nbytes)}

    # -- faiss: GPU when this build has it, else a clean CPU fallback ----------------------------
    fi = {"faiss_has_gpu_build": hasattr(faiss, "StandardGpuResources"), "gpu_available": gpu_available()}
    for want in ("auto", True):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            idx = FaissIndex.build(gpu_vecs, docids, "Flat", use_gpu=want, quiet=True)
            D, names = idx.search(gpu_vecs[:4], 5)
        fi[f"use_gpu={want}"] = {"searched_on": "gpu" if idx._gpu_index is not None else "cpu",
                                 "warnings": [str(x.message) for x in w], "top1_is_self": names[0][0] == docids[0]}
    res["faiss"] = fi

    # -- quality: the same nDCG@10 from CUDA and CPU vectors -------------------------------------
    qtexts = [q.text for q in qs]
    q_gpu = enc.encode(qtexts, quiet=True)
    cpu = DenseEncoder(args.model, pooling="mean", device="cpu", quiet=True)
    cpu_vecs, t_cpu = timed(lambda: cpu.encode(texts, batch_size=64, quiet=True))
    res["encode"]["cpu_s"] = t_cpu
    q_cpu = cpu.encode(qtexts, quiet=True)
    res["quality"] = {"nDCG@10_cuda": ndcg10(gpu_vecs, docids, q_gpu, qs, qrels),
                      "nDCG@10_cpu": ndcg10(cpu_vecs, docids, q_cpu, qs, qrels),
                      "nDCG@10_cuda_fp16_storage": ndcg10(v16.astype(np.float32), docids, q_gpu, qs, qrels)}

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gpu-{args.tag}.json").write_text(json.dumps(res, indent=2) + "\n")
    m, e, q = res["machine"], res["encode"], res["quality"]
    md = [f"# GPU check ({args.tag})", "",
          f"{m['gpu']}, torch {m['torch']} (CUDA {m['cuda']}), faiss {m['faiss']}; SciFact {len(docs)} passages, "
          f"{len(qs)} test queries; `--device auto` picked `{res['auto_device']}`.", "",
          "| check | result |", "|---|---|"]
    for p, a in agree.items():
        md.append(f"| CPU vs CUDA vectors, {p} pooling (256 texts) | max abs diff {a['max_abs_diff']:.2e}, "
                  f"min cosine {a['min_cosine']:.6f} |")
    md += [f"| encode corpus on CUDA, ours (length-sorted) | {e['ours_s']:.2f} s, {e['passages_per_s']:.0f} passages/s |",
           f"| bare `model(**batch)` loop, corpus order | {e['bare_s']:.2f} s (ours/bare = {e['ratio_ours_to_bare']:.2f}x) |",
           f"| the same corpus on this machine's CPU ({m['cpu_threads']} threads) | {e['cpu_s']:.2f} s |",
           f"| fp16 storage | {e['ours_fp16_storage_s']:.2f} s, {e['fp16_storage_bytes']} vs {e['fp32_storage_bytes']} bytes |",
           f"| faiss GPU build present / GPU usable | {fi['faiss_has_gpu_build']} / {fi['gpu_available']} |"]
    for want in ("auto", True):
        f = fi[f"use_gpu={want}"]
        md.append(f"| FaissIndex use_gpu={want} | searched on {f['searched_on']}; warnings: "
                  f"{'; '.join(f['warnings']) or 'none'} |")
    md += [f"| SciFact test nDCG@10, CUDA vectors | {q['nDCG@10_cuda']:.4f} |",
           f"| SciFact test nDCG@10, CPU vectors | {q['nDCG@10_cpu']:.4f} |",
           f"| SciFact test nDCG@10, CUDA vectors stored fp16 | {q['nDCG@10_cuda_fp16_storage']:.4f} |", ""]
    (out / f"gpu-{args.tag}.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
