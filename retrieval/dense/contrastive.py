"""Contrastive fine-tuning of the dense encoder on training qrels (issue #26).

The loss is sentence-transformers' ``MultipleNegativesRankingLoss`` (InfoNCE over cosine
similarities scaled by 20): each query against its positive passage, every other passage of the
batch (in-batch negatives) and its hard negatives. retr computes the embeddings with its own
pooling (:mod:`retrieval.dense.pooling`, the same code that encodes at index time) and hands them to
the loss's ``compute_loss_from_embeddings``; the library's Trainer is not used, so that progress,
checkpoints, resuming and seeding are retr's own (as for DeepCT).

- Hard negatives: each example carries a pool mined from the folder's BM25 ranking
  (:func:`retrieval.dense.pairs.training_examples`); each epoch takes ``hard_negatives`` of them per
  example with a generator seeded by (seed, epoch).
- Batches hold each query once (a query's second positive waits for a later batch), so a query's
  other relevant passage is never one of its in-batch negatives.
- The held-out queries (:func:`retrieval.dense.pairs.split_dev`) are scored after every epoch:
  nDCG@10 of the dense ranking over the pool of the held-out examples' positives and mined negatives
  (a re-ranking of hard candidates, cheap enough to run each epoch on a CPU). The best epoch is kept.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from indexes.errors import InputError

from retrieval.dense.pairs import Example
from retrieval.dense.pooling import cls_pool, mean_pool

POOLINGS = ("mean", "cls")


def load_body(path):
    from transformers import AutoModel, AutoTokenizer

    return AutoModel.from_pretrained(path), AutoTokenizer.from_pretrained(path)


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


def batches(examples: Sequence[Example], batch_size: int, hard_negatives: int, seed: int, epoch: int,
            per_query: Optional[int] = None) -> List[List[tuple]]:
    """One epoch's batches of (query, positive, negatives...) texts: a seeded order, each query at
    most once per batch (a query's next positive goes to a later batch), ``hard_negatives`` sampled
    from each example's pool (a short pool repeats its last negative, so rows have one width).
    ``per_query``: each query brings at most this many of its examples to the epoch, drawn anew each
    epoch (for qrels with dozens of relevant documents a query, as NFCorpus's; None: all)."""
    gen = np.random.default_rng([seed, 3, epoch])
    if per_query is None:
        pending = gen.permutation(len(examples)).tolist()
    else:
        pending = gen.permutation(_some_of_each_query(examples, per_query, gen)).tolist()
    out: List[List[tuple]] = []
    while pending:
        current, seen, rest = [], set(), []
        for j in pending:
            if len(current) < batch_size and examples[j].qid not in seen:
                current.append(j)
                seen.add(examples[j].qid)
            else:
                rest.append(j)
        out.append([_row(examples[j], hard_negatives, gen) for j in current])
        pending = rest
    return out


def _some_of_each_query(examples: Sequence[Example], per_query: int, gen: np.random.Generator) -> List[int]:
    """Indices of at most ``per_query`` examples of each query (all of a query that has fewer)."""
    by_query: Dict[str, List[int]] = {}
    for i, e in enumerate(examples):
        by_query.setdefault(e.qid, []).append(i)
    keep: List[int] = []
    for qid in sorted(by_query):
        rows = by_query[qid]
        keep += rows if len(rows) <= per_query else sorted(gen.choice(rows, size=per_query, replace=False).tolist())
    return keep


def _row(e: Example, k: int, gen: np.random.Generator) -> tuple:
    if k == 0 or not e.negatives:  # no pool: this row has in-batch negatives only
        return (e.query, e.positive)
    take = sorted(gen.choice(len(e.negatives), size=min(k, len(e.negatives)), replace=False).tolist())
    negs = [e.negatives[t] for t in take]
    negs += [negs[-1]] * (k - len(negs))
    return (e.query, e.positive, *negs)


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
