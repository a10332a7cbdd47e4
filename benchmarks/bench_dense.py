"""Dense retrieval benchmark: all-MiniLM-L6-v2 with mean, CLS, first-last and
Ditto pooling on four collections, paired tests against mean pooling. Ditto twice:
as `retr ditto-select` chose it on STS-B dev (layer, head AND token states), and with
the authors' first-last states at the best first-last head on STS-B dev.

    .venv/bin/python benchmarks/bench_dense.py [--collections ...]

All four poolings come from ONE forward pass per batch (hidden states and
attentions requested together), which is exactly what four separate encoders
would compute, at a quarter of the cost. The shipped path (`retr index --dense
--pooling P`) is checked against this: the mean-pooled `dense` sub-index of the
shared benchmark folder must give the same nDCG@10. Writes benchmarks/results/dense.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import statistics

import numpy as np
import torch

from common import COLLECTIONS, RESULTS, bench_index, by_name, machine, md_table, write_results

from eval import evaluate
from eval.significance import compare
from retrieval.dense import sts
from retrieval.dense import ditto_store
from retrieval.dense.encoder import DenseEncoder
from retrieval.dense.pooling import get_pooler

MEASURES = ["nDCG@10", "R@100", "R@1000"]
POOLINGS = ("mean", "cls", "first-last", "ditto", "ditto-fl")
PUBLISHED = {"scifact": 0.645}  # MTEB all-MiniLM-L6-v2


def encode_all(enc: DenseEncoder, texts, poolers, quiet=False):
    from tqdm import tqdm

    out = {name: np.zeros((len(texts), enc.dim), dtype=np.float32) for name in poolers}
    with tqdm(total=len(texts), desc=f"encoding ({len(poolers)} poolings)", disable=quiet) as bar:
        for idx, o, mask in enc.forward_batches(texts, 32, hidden_states=True, attentions=True, bar=bar):
            for name, p in poolers.items():
                v = torch.nn.functional.normalize(p(o, mask).float(), dim=-1)
                out[name][idx] = v.cpu().numpy()
    return out


def search(doc_vecs, docids, q_vecs, k=1000):
    import faiss

    index = faiss.IndexFlatIP(doc_vecs.shape[1])
    index.add(doc_vecs)
    D, I = index.search(q_vecs, k)
    return [{docids[j]: float(s) for j, s in zip(row_i, row_d) if j >= 0} for row_i, row_d in zip(I, D)]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--collections", nargs="*")
    args = ap.parse_args()
    enc = DenseEncoder(pooling="mean", quiet=True)
    rec = ditto_store.load_choice(enc.model_hash) or {}
    if not isinstance(rec.get("scores"), dict):  # none stored, or a record from before the states sweep
        rec = sts.select_ditto_head(enc, store=True, quiet=True)
    enc = DenseEncoder(pooling="ditto", quiet=True)  # what `--pooling ditto` resolves: the stored choice
    layer, head = enc.ditto_layer_head
    states = enc.ditto_states
    assert (layer, head, states) == (rec["layer"], rec["head"], rec["states"])
    fl = np.array(rec["scores"]["first-last"])
    fl_layer, fl_head = (int(x) for x in np.unravel_index(int(fl.argmax()), fl.shape))
    poolers = {p: get_pooler(p) for p in ("mean", "cls", "first-last")}
    poolers["ditto"] = get_pooler("ditto", layer, head, states)
    poolers["ditto-fl"] = get_pooler("ditto", fl_layer, fl_head, "first-last")
    # A run over some collections keeps the other collections' committed results.
    old = json.loads((RESULTS / "dense.json").read_text()) if (RESULTS / "dense.json").exists() else {}
    out = dict(old.get("results", {}))
    for col in by_name(args.collections):
        idx = bench_index(col, dense=("mean",))
        docs = list(idx.docstore.iter_docs())
        docids = [d[0] for d in docs]
        texts = [f"{t} {x}" if t else x for _, t, x, _ in docs]
        qrels, qs = col.qrels(), col.queries()
        dv = encode_all(enc, texts, poolers)
        qv = encode_all(enc, [q.text for q in qs], poolers, quiet=True)
        per_q = {}
        for p in POOLINGS:
            res = search(dv[p], docids, qv[p])
            per_q[p] = evaluate(qrels, {q.qid: r for q, r in zip(qs, res)}, MEASURES, per_query=True)
        shipped = idx.batch_search(qs, k=1000, retriever="dense")
        shipped_ndcg = evaluate(qrels, {q: {h.docid: h.score for h in hs} for q, hs in shipped.items()},
                                ["nDCG@10"])["nDCG@10"]
        means = {p: {m: statistics.fmean(v[m] for v in per_q[p].values()) for m in MEASURES} for p in per_q}
        tests = compare({p: {q: v["nDCG@10"] for q, v in s.items()} for p, s in per_q.items()}, baseline="mean",
                        test="perm")
        t = {r["system"]: r for r in tests if not r.get("baseline")}
        out[col.name] = {"queries": len(qs), "documents": len(docids), "means": means,
                         "shipped_dense_subindex_nDCG@10": shipped_ndcg,
                         "tests_vs_mean": {p: {k: r.get(k) for k in ("delta", "p", "p_holm", "significant")}
                                           for p, r in t.items()}}
        print(col.name, {p: round(m["nDCG@10"], 4) for p, m in means.items()}, "shipped", round(shipped_ndcg, 4),
              flush=True)
    out = {c.name: out[c.name] for c in COLLECTIONS if c.name in out}
    rows = []
    for name, e in out.items():
        for p in POOLINGS:
            if p not in e["means"]:
                continue  # a collection measured before this pooling was added
            r = e["tests_vs_mean"].get(p)
            mark = "–" if r is None else f"{r['delta']:+.4f}{' *' if r['significant'] else ''} (p={r['p_holm']:.3f})"
            m = e["means"][p]
            rows.append([name, p, m["nDCG@10"], m["R@100"], m["R@1000"], mark,
                         PUBLISHED.get(name, "–") if p == "mean" else ""])
    md = ["# Dense retrieval: all-MiniLM-L6-v2 with four poolings (faiss Flat, inner product)", "",
          "Generated by `benchmarks/bench_dense.py`; test queries, top 1000. Δ: paired randomization test "
          "against mean pooling (the pooling MiniLM was trained with), Holm-corrected; * = significant at 0.05. "
          f"`ditto` is what `--pooling ditto` uses: `retr ditto-select` swept every (layer, head) over both token-state "
          f"choices on STS-B dev and chose ({layer}, {head}) over the {states} states. `ditto-fl` is the authors' "
          f"first-last average at the best first-last head on STS-B dev, ({fl_layer}, {fl_head}).", "",
          md_table(["collection", "pooling", "nDCG@10", "R@100", "R@1000", "Δ nDCG@10 vs mean", "published (MTEB)"],
                   rows), "",
          "Check of the shipped path: nDCG@10 of the `dense` sub-index built by `retr index --dense` (mean): " +
          ", ".join(f"{n} {e['shipped_dense_subindex_nDCG@10']:.4f}" for n, e in out.items()) + "."]
    write_results("dense", {"machine": machine(), "ditto_layer_head": [layer, head], "ditto_states": states,
                            "ditto_first_last_layer_head": [fl_layer, fl_head], "results": out}, "\n".join(md))


if __name__ == "__main__":
    main()
