"""STS benchmark: mean / CLS / first-last / Ditto pooling on STS12-16, STS-B and SICK-R, for the bundled
MiniLM (all-MiniLM-L6-v2) and the BERT body of SPLADE-tiny. Ditto's (layer, head) is chosen per model
on STS-B dev (all 1500 pairs) in the same run; the choice is not written to the user cache.

    .venv/bin/python benchmarks/bench_sts.py [--models minilm splade-tiny] [--texts senteval raw] [--quiet]

Writes benchmarks/results/sts.{json,md}.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from common import machine, md_table, write_results

from retrieval.dense import sts
from retrieval.dense.pooling import get_pooler
from retrieval.dense.encoder import DenseEncoder

POOLINGS = ["mean", "cls", "first-last", "ditto"]
AUTHORS = "authors' ditto vs first-last"
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
          "Ditto's (layer, head) and token states (first-last average or last layer) are chosen together on STS-B dev "
          "(1500 pairs, same text variant) by `retrieval.dense.sts.select_ditto_head`; `ditto-fl` is the authors' first-last "
          "Ditto at its best head on STS-B dev.",
          "Reproduce: `.venv/bin/python benchmarks/bench_sts.py`.", ""]
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
            lh, st = (rec["layer"], rec["head"]), rec["states"]
            fl = np.array(rec["scores"]["first-last"])
            fl_lh = tuple(int(x) for x in np.unravel_index(int(fl.argmax()), fl.shape))
            t0 = time.perf_counter()
            res = sts.evaluate(enc, POOLINGS, text=text, ditto_layer_head=lh, ditto_states=st,
                               batch_size=a.batch_size, quiet=a.quiet,
                               extra={"ditto-fl": get_pooler("ditto", *fl_lh, states="first-last")})
            ev_s = time.perf_counter() - t0
            top = sorted(((float(v), k, l, h) for k, g in rec["scores"].items() for l, row in enumerate(g)
                          for h, v in enumerate(row)), reverse=True)[:5]
            v = {"vs first-last": verdict(res["ditto"], res["first-last"], "first-last"),
                 "vs mean": verdict(res["ditto"], res["mean"], "mean"),
                 AUTHORS: verdict(res["ditto-fl"], res["first-last"], "first-last")}
            entry["texts"][text] = {"spearman": res, "ditto_layer_head": list(lh), "ditto_states": st,
                                    "ditto_first_last_layer_head": list(fl_lh),
                                    "ditto_dev_spearman": rec["spearman_dev"], "ditto_dev_scores": rec["scores"],
                                    "ditto_dev_best_per_states": rec["best_per_states"],
                                    "ditto_dev_top5": [[k, l, h, round(s, 2)] for s, k, l, h in top],
                                    "verdict": v, "seconds": {"select": round(sel_s, 1), "evaluate": round(ev_s, 1)}}
            label = {"ditto": f"ditto ({lh[0]},{lh[1]}, {st})", "ditto-fl": f"ditto-fl ({fl_lh[0]},{fl_lh[1]}, first-last)"}
            rows = [[label.get(p, p)] + [f"{res[p][s]:.2f}" for s in sts.SETS]
                    + [f"{res[p]['avg']:.2f}"] for p in POOLINGS + ["ditto-fl"]]
            md += [f"### text: {text}", "", md_table(["pooling", *sts.SETS, "avg"], rows), "",
                   f"Ditto on STS-B dev: layer {lh[0]}, head {lh[1]} over the {st} states (dev Spearman "
                   f"{rec['spearman_dev']:.2f}; best first-last {rec['best_per_states']['first-last']:.2f}, best last "
                   f"{rec['best_per_states']['last']:.2f}; top 5: "
                   + ", ".join(f"{k} ({l},{h}) {s:.2f}" for s, k, l, h in top) + ").",
                   f"Ditto {v['vs first-last']}; {v['vs mean']}. The authors' first-last Ditto "
                   f"{v[AUTHORS]}.", ""]
            verdicts.append(f"{text}: Ditto {v['vs first-last']}; {v['vs mean']}")
            print(m, text, {p: round(res[p]["avg"], 2) for p in res}, lh, st, flush=True)
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
