"""Contrastive fine-tuning of the dense encoder on training qrels (issue #26).

The loss is sentence-transformers' ``MultipleNegativesRankingLoss`` (InfoNCE over cosine
similarities scaled by 20): each query against its positive passage, every other passage of the
batch (in-batch negatives) and its hard negatives. retr computes the embeddings with its own
pooling (:mod:`retrieval.dense.pooling`, the same code that encodes at index time) and hands them to
the loss's ``compute_loss_from_embeddings``; the library's Trainer is not used, so that progress,
checkpoints, resuming and seeding are retr's own (as for DeepCT).

- Hard negatives: each example carries a pool mined from the folder's BM25 ranking
  (:func:`retrieval.pairs.training_examples`); each epoch takes ``hard_negatives`` of them per
  example with a generator seeded by (seed, epoch).
- Batches hold each query once (a query's second positive waits for a later batch), so a query's
  other relevant passage is never one of its in-batch negatives.
- The held-out queries (:func:`retrieval.pairs.split_dev`) are scored after every epoch:
  nDCG@10 of the dense ranking over the pool of the held-out examples' positives and mined negatives
  (a re-ranking of hard candidates, cheap enough to run each epoch on a CPU). The best epoch is kept.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import torch

from indexes.errors import InputError

from retrieval.pairs import Example
from retrieval.dense.pooling import cls_pool, mean_pool

POOLINGS = ("mean", "cls")


def load_body(path):
    from transformers import AutoModel, AutoTokenizer

    try:
        return AutoModel.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot load {path} as an encoder: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from None


def make_loss(body, scale: float = 20.0):
    """sentence-transformers' MultipleNegativesRankingLoss (the embeddings are passed in)."""
    try:
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    except ImportError:
        raise InputError("fine-tuning needs sentence-transformers: pip install 'retr[train]'") from None

    return MultipleNegativesRankingLoss(body, scale=scale)


class Embedder:
    """Token batches through the body, pooled as at index time (mean or CLS)."""

    def __init__(self, body, tokenizer, pooling: str, query_length: int, max_length: int, device: str):
        self.body, self.tok, self.pooling = body, tokenizer, pooling
        self.query_length, self.max_length, self.device = query_length, max_length, device

    def __call__(self, texts: Sequence[str], query: bool = False) -> torch.Tensor:
        enc = self.tok(list(texts), padding=True, truncation=True, return_tensors="pt",
                       max_length=self.query_length if query else self.max_length)
        enc = {k: v.to(self.device) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        last = self.body(**enc).last_hidden_state
        return mean_pool(last, enc["attention_mask"]) if self.pooling == "mean" else cls_pool(last)

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], query: bool = False, batch_size: int = 64) -> np.ndarray:
        was = self.body.training
        self.body.eval()
        out = []
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for b in range(0, len(order), batch_size):
            v = self(tuple(texts[i] for i in order[b:b + batch_size]), query=query)
            out.append(torch.nn.functional.normalize(v.float(), dim=-1).cpu().numpy())
        self.body.train(was)
        flat = np.concatenate(out) if out else np.zeros((0, 1), np.float32)
        res = np.empty_like(flat)
        res[order] = flat
        return res


def step_loss(loss_fn, embed: Embedder, rows: List[tuple]) -> torch.Tensor:
    """The loss of one batch. Rows without hard negatives (a query whose pool was empty) are
    trimmed to the batch's narrowest row, as the loss needs one column count."""
    width = min(len(r) for r in rows)
    cols = list(zip(*[r[:width] for r in rows]))
    embs = [embed(cols[0], query=True)] + [embed(c) for c in cols[1:]]
    labels = torch.arange(len(rows), device=embs[0].device)
    return loss_fn.compute_loss_from_embeddings(embs, labels)


def dev_ndcg(embed: Embedder, dev: Sequence[Example], qrels: Dict[str, Dict[str, int]]) -> float:
    """Mean nDCG@10 (retr's evaluator, trec_eval's numbers) of the held-out queries, ranking the pool
    of their positives and mined negatives."""
    from eval import evaluate

    if not dev:
        return float("nan")
    pool: Dict[str, str] = {}
    queries: Dict[str, str] = {}
    for e in dev:
        pool[e.positive_id] = e.positive
        pool.update(zip(e.negative_ids, e.negatives))
        queries[e.qid] = e.query
    ids = sorted(pool)
    D = embed.encode([pool[d] for d in ids])
    qids = sorted(queries)
    S = embed.encode([queries[q] for q in qids], query=True) @ D.T
    run = {q: {ids[t]: float(S[r, t]) for t in range(len(ids))} for r, q in enumerate(qids)}
    return float(evaluate({q: qrels[q] for q in qids}, run, ["nDCG@10"])["nDCG@10"])
