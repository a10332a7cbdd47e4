"""Ditto on retrieval, every head: SciFact nDCG@10 of all-MiniLM-L6-v2 with Ditto pooling for every
(layer, head) and both token-state choices (the authors' first-last average and the last layer), on
the training and the test queries, from one forward pass per batch. It shows whether any head of the
authors' formulation could reach mean pooling, and whether the training queries would pick the same
head as STS-B dev does.

    .venv/bin/python benchmarks/bench_ditto_heads.py [--collection scifact]

Writes benchmarks/results/ditto_heads.{json,md}.
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
from common import bench_index, by_name, machine, md_table, write_results
from tqdm import tqdm

from eval import evaluate
from retrieval.dense.encoder import DenseEncoder
from retrieval.dense.pooling import DITTO_STATES, ditto_all_heads, mean_pool


def encode_all_heads(enc: DenseEncoder, texts, quiet=False) -> dict:
    """{states: (N, layers*heads, dim) normalised Ditto vectors}, plus {"mean": (N, 1, dim)}."""
    L, H = enc.n_layers, enc.n_heads
    out = {st: np.zeros((len(texts), L * H, enc.dim), np.float32) for st in DITTO_STATES}
    out["mean"] = np.zeros((len(texts), 1, enc.dim), np.float32)
    with tqdm(total=len(texts), desc="encoding (every head)", disable=quiet) as bar:
        for idx, o, mask in enc.forward_batches(texts, 32, hidden_states=True, attentions=True, bar=bar):
            for st in DITTO_STATES:
                v = ditto_all_heads(o, mask, st).reshape(len(idx), L * H, -1)
                out[st][idx] = torch.nn.functional.normalize(v, dim=-1).numpy()
            out["mean"][idx, 0] = torch.nn.functional.normalize(mean_pool(o.last_hidden_state, mask), dim=-1).numpy()
    return out


def ndcg(D, Q, docids, qs, qrels, k=100):
    S = Q @ D.T
    top = np.argpartition(-S, k, axis=1)[:, :k]
    run = {q.qid: {docids[j]: float(S[i, j]) for j in top[i]} for i, q in enumerate(qs)}
    return evaluate(qrels, run, ["nDCG@10"])["nDCG@10"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--collection", default="scifact")
    args = ap.parse_args()
    col = by_name([args.collection])[0]
    enc = DenseEncoder(pooling="mean", quiet=True)
    L, H = enc.n_layers, enc.n_heads
    idx = bench_index(col, dense=("mean",))
    docs = list(idx.docstore.iter_docs())
    docids = [d[0] for d in docs]
    D = encode_all_heads(enc, [f"{t} {x}" if t else x for _, t, x, _ in docs])
    res = {}
    for split in ("train", "test"):
        qrels, qs = col.qrels(split), col.queries(split)
        Q = encode_all_heads(enc, [q.text for q in qs], quiet=True)
        res[split] = {"mean": ndcg(D["mean"][:, 0], Q["mean"][:, 0], docids, qs, qrels)}
        for st in DITTO_STATES:
            res[split][st] = [[ndcg(D[st][:, l * H + h], Q[st][:, l * H + h], docids, qs, qrels) for h in range(H)]
                              for l in range(L)]
    rows, summary = [], {}
    for st in DITTO_STATES:
        tr, te = np.array(res["train"][st]), np.array(res["test"][st])
        lt, ht = np.unravel_index(int(tr.argmax()), tr.shape)
        lb, hb = np.unravel_index(int(te.argmax()), te.shape)
        summary[st] = {"best_on_train": [int(lt), int(ht)], "its_test": float(te[lt, ht]),
                       "best_on_test": [int(lb), int(hb)], "best_test": float(te.max()),
                       "head_0_8_test": float(te[0, 8]), "median_test": float(np.median(te))}
        rows.append([st, f"({lt},{ht}) → {te[lt, ht]:.4f}", f"({lb},{hb}) {te.max():.4f}", f"{te[0, 8]:.4f}",
                     f"{np.median(te):.4f}"])
    md = [f"# Ditto on retrieval: every (layer, head) of all-MiniLM-L6-v2 on {col.name}", "",
          f"nDCG@10 (top 100, exact inner product) for all {L * H} heads and both token-state choices, from one "
          f"forward pass. Mean pooling: train {res['train']['mean']:.4f}, test {res['test']['mean']:.4f}. "
          "`retr ditto-select` chooses on STS-B dev, not on these queries; head (0, 8) is its choice for both "
          "states. Reproduce: `.venv/bin/python benchmarks/bench_ditto_heads.py`.", "",
          md_table(["states", "best head on train queries → its test nDCG@10", "best head on test (oracle)",
                    "head (0, 8) on test", "median head on test"], rows), ""]
    write_results("ditto_heads", {"machine": machine(), "collection": col.name, "summary": summary,
                                  "ndcg10": res}, "\n".join(md))


if __name__ == "__main__":
    main()
