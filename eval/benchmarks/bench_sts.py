"""STS benchmark: mean / CLS / first-last / Ditto pooling on STS12-16, STS-B and SICK-R, for the bundled
MiniLM (all-MiniLM-L6-v2) and the BERT body of SPLADE-tiny. Ditto's (layer, head) is chosen per model
on STS-B dev (all 1500 pairs) in the same run; the choice is not written to the user cache.

    .venv/bin/python eval/benchmarks/bench_sts.py [--models minilm splade-tiny] [--texts senteval raw] [--quiet]

Writes eval/results/sts.{json,md}.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from common import machine, md_table, write_results

from retrieval import sts
from retrieval.encoders.dense import DenseEncoder

POOLINGS = ["mean", "cls", "first-last", "ditto"]
NAMES = {"minilm": "all-MiniLM-L6-v2 (bundled)", "splade-tiny": "SPLADE-tiny BERT body (no MLM head)"}


def verdict(row_ditto: dict, row: dict, other: str) -> str:
    d = row_ditto["avg"] - row["avg"]
    wins = sum(row_ditto[s] > row[s] for s in sts.SETS)
    word = "helps" if d > 0.5 else "hurts" if d < -0.5 else "about equal"
    return f"{word} vs {other}: {d:+.2f} avg, better on {wins}/7 sets"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["minilm", "splade-tiny"])
    ap.add_argument("--texts", nargs="+", default=["senteval", "raw"], choices=list(sts.TEXTS))
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()

    payload = {"machine": machine(), "protocol": "Spearman x100 of cosine vs gold; STS12-16 'all' (subsets "
               "concatenated), STS-B and SICK-R test; avg over the seven; Ditto pair chosen on STS-B dev", "models": {}}
    md = ["# STS: poolers compared (Spearman x100)", "",
          "Standard SentEval/SimCSE protocol: cosine similarity, Spearman with the gold scores; STS12-16 use the",
          "\"all\" aggregation (one correlation over the concatenated subsets), STS-B and SICK-R their test split.",
          "`senteval` = SentEval's tokenised text (what published SimCSE/Ditto numbers use), `raw` = original text.",
          "Ditto's (layer, head) is chosen on STS-B dev (1500 pairs, same text variant) by `retrieval.sts.select_ditto_head`.",
          "Reproduce: `.venv/bin/python eval/benchmarks/bench_sts.py`.", ""]
    for m in a.models:
        enc = DenseEncoder(m, device="cpu", quiet=True)
        entry = {"model": str(enc.model_path), "model_sha256": enc.model_hash, "layers": enc.n_layers,
                 "heads": enc.n_heads, "max_length": enc.max_length, "texts": {}}
        md += [f"## {NAMES.get(m, m)}", ""]
        verdicts = []
        for text in a.texts:
            t0 = time.perf_counter()
            rec = sts.select_ditto_head(enc, text=text, store=False, quiet=a.quiet, batch_size=a.batch_size)
            sel_s = time.perf_counter() - t0
            lh = (rec["layer"], rec["head"])
            t0 = time.perf_counter()
            res = sts.evaluate(enc, POOLINGS, text=text, ditto_layer_head=lh, batch_size=a.batch_size, quiet=a.quiet)
            ev_s = time.perf_counter() - t0
            sc = np.array(rec["scores"])
            top = sorted(((float(sc[l, h]), l, h) for l in range(sc.shape[0]) for h in range(sc.shape[1])), reverse=True)[:5]
            v = {"vs first-last": verdict(res["ditto"], res["first-last"], "first-last"),
                 "vs mean": verdict(res["ditto"], res["mean"], "mean")}
            entry["texts"][text] = {"spearman": res, "ditto_layer_head": list(lh),
                                    "ditto_dev_spearman": rec["spearman_dev"], "ditto_dev_scores": rec["scores"],
                                    "ditto_dev_top5": [[l, h, round(s, 2)] for s, l, h in top],
                                    "verdict": v, "seconds": {"select": round(sel_s, 1), "evaluate": round(ev_s, 1)}}
            rows = [[p if p != "ditto" else f"ditto ({lh[0]},{lh[1]})"] + [f"{res[p][s]:.2f}" for s in sts.SETS]
                    + [f"{res[p]['avg']:.2f}"] for p in POOLINGS]
            md += [f"### text: {text}", "", md_table(["pooling", *sts.SETS, "avg"], rows), "",
                   f"Ditto head on STS-B dev: layer {lh[0]}, head {lh[1]} (dev Spearman {rec['spearman_dev']:.2f}; "
                   "top 5: " + ", ".join(f"({l},{h}) {s:.2f}" for s, l, h in top) + ").",
                   f"Ditto {v['vs first-last']}; {v['vs mean']}.", ""]
            verdicts.append(f"{text}: Ditto {v['vs first-last']}; {v['vs mean']}")
            print(m, text, {p: round(res[p]["avg"], 2) for p in POOLINGS}, lh, flush=True)
        entry["verdicts"] = verdicts
        payload["models"][m] = entry
    md += ["## Does Ditto help?", ""]
    for m, e in payload["models"].items():
        md += [f"* **{NAMES.get(m, m)}**: " + "; ".join(e["verdicts"]) + "."]
    md += ["", "The Ditto paper reports gains for BERT, RoBERTa and SBERT over their first-last / mean baselines "
           "(BERT-base first-last avg 56.70). 'helps'/'hurts' above means an average change of more than 0.5 points.", ""]
    write_results("sts", payload, "\n".join(md))


if __name__ == "__main__":
    main()
