"""Training examples for contrastive fine-tuning, whatever the encoder (dense, SPLADE), and their batches.

:func:`training_examples` turns training queries and qrels into (query, positive passage, hard
negatives) examples, one per relevant document of a query that the folder holds:

- A query is used when the qrels judge it and at least one of its documents of grade ``>= min_rel``
  is in the folder; a judged query without one is skipped (and counted in the report). Queries the
  qrels do not judge are ignored.
- Hard negatives come from the folder's own ranking: the top ``depth`` hits of ``retriever`` (the
  primary kind, BM25, by default) for the query, minus **every** document the qrels judge relevant
  to that query at any grade above 0 (a grade-1 document is no negative even when ``min_rel`` is 2).
  Documents judged non-relevant (grade 0 or below) stay in the pool: they are negatives a judge
  looked at.
- Each example samples ``negatives`` of that pool without replacement, with one
  ``numpy.random.Generator`` seeded by ``seed`` and drawn in a fixed order (queries as given, a
  query's positives by docid), so the same inputs and seed give the same examples. The sampled
  negatives are kept in rank order. A pool smaller than ``negatives`` is taken whole (the report
  counts such examples as ``short_examples``); ``negatives=0`` gives no negatives (in-batch only).
- Passage text is :func:`retrieval.types.contents` (title + text), what the encoders see.

Qrels whose file looks like a test split are refused as ``retr tune`` refuses them
(:func:`retrieval.datasets.qrels.looks_like_test`): test queries are for scoring, never for training.

:func:`split_dev` holds out a share of the training *queries* (never single examples) for early
stopping. :func:`batches` cuts one epoch's batches: a seeded order, each query at most once per batch,
hard negatives sampled from each example's pool.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from indexes.errors import InputError, ParameterError
from retrieval.kinds import PRIMARY
from retrieval.datasets.qrels import looks_like_test
from retrieval.types import Query


@dataclass(frozen=True)
class Example:
    """One training example: a query, one relevant passage and its hard negatives (rank order)."""
    qid: str
    query: str
    positive_id: str
    positive: str
    negative_ids: Tuple[str, ...]
    negatives: Tuple[str, ...]


def _check_parameters(negatives: int, depth: int, min_rel: int) -> None:
    if negatives < 0:
        raise ParameterError("{negatives} must be at least 0, got {got}", got=negatives)
    if depth < negatives:
        raise ParameterError("{depth} must be at least {negatives} (the pool negatives are drawn from), "
                             "got {got} < {want}", got=depth, want=negatives)
    if min_rel < 1:
        raise ParameterError("{min_rel} must be at least 1, got {got}", got=min_rel)


def judged_queries(queries: Sequence[Query], qrels: Mapping[str, Mapping[str, int]]) -> List[Query]:
    """The queries the qrels judge; none is an error (a trainer checks this before it writes anything)."""
    judged = [q for q in queries if q.qid in qrels]
    if not judged:
        raise InputError("none of the queries has judgments in the training qrels (do the query ids match?)")
    return judged


def _positives(view, queries: Sequence[Query], qrels: Mapping[str, Mapping[str, int]], min_rel: int
               ) -> Tuple[List[Tuple[Query, List[str]]], int]:
    """The judged queries with their relevant documents present in the folder (sorted), and how
    many judged queries had none."""
    judged = judged_queries(queries, qrels)
    used, skipped = [], 0
    for q in judged:
        rel = sorted(d for d, r in qrels[q.qid].items() if r >= min_rel and view.get(d) is not None)
        if rel:
            used.append((q, rel))
        else:
            skipped += 1
    if not used:
        raise InputError(f"no training query has a relevant document (grade >= {min_rel}) in the index folder; "
                         f"{skipped} judged queries, all skipped: were the qrels made for this corpus?")
    return used, skipped


def _text(view, docid: str, cache: Dict[str, str]) -> str:
    if docid not in cache:
        cache[docid] = view.get(docid).contents
    return cache[docid]


@dataclass(frozen=True)
class Mining:
    """How :func:`training_examples` mines: ``negatives`` per example from the top ``depth`` of
    ``retriever``'s ranking (searched on ``threads``), positives judged at least ``min_rel``, the
    draw seeded by ``seed``."""
    negatives: int = 7
    depth: int = 30
    retriever: str = PRIMARY
    min_rel: int = 1
    seed: int = 0
    threads: int = 1


def training_examples(index, queries: Sequence[Query], qrels: Mapping[str, Mapping[str, int]],
                      *, mining: Optional[Mining] = None, qrels_path: Optional[str] = None,
                      allow_test: bool = False, **options: Any) -> Tuple[List[Example], dict]:
    """Examples for contrastive training (see the module's notes) and a report: ``queries_used``,
    ``queries_skipped`` (judged, but no relevant document in the folder), ``examples``,
    ``negatives_per_example`` (asked), ``short_examples`` (fewer negatives: the pool ran short),
    ``depth``, ``retriever``, ``seed``. ``index`` is an open :class:`retrieval.Index`; its current
    generation is read throughout. ``qrels_path``: the file the qrels came from, for the test-split check.
    ``mining`` (:class:`Mining`), or its fields as keywords (``**options``: ``negatives``, ``depth``,
    ``retriever``, ``min_rel``, ``seed``, ``threads``; another keyword is a TypeError naming it)."""
    bad = sorted(set(options) - {f.name for f in fields(Mining)})
    if bad:
        raise TypeError(f"training_examples() got an unexpected keyword argument {bad[0]!r}")
    m = replace(mining or Mining(), **options)
    negatives, depth, retriever, min_rel, seed = m.negatives, m.depth, m.retriever, m.min_rel, m.seed
    threads = m.threads
    if qrels_path and looks_like_test(qrels_path) and not allow_test:
        raise InputError("refusing to train on what looks like test qrels; train on a train/dev split", qrels_path)
    _check_parameters(negatives, depth, min_rel)
    rng = np.random.default_rng(seed)
    examples: List[Example] = []
    cache: Dict[str, str] = {}
    with index.snapshot() as view:
        used, skipped = _positives(view, queries, qrels, min_rel)
        ranked = (view.batch_search([q for q, _ in used], k=depth, retriever=retriever, threads=threads)
                  if depth > 0 else {})
        for q, rel in used:
            judged_relevant = {d for d, r in qrels[q.qid].items() if r > 0}
            pool = [h.docid for h in ranked.get(q.qid, []) if h.docid not in judged_relevant]
            for pos in rel:
                take = min(negatives, len(pool))
                picked = sorted(rng.choice(len(pool), size=take, replace=False)) if take else []
                neg_ids = tuple(pool[i] for i in picked)
                examples.append(Example(q.qid, q.text, pos, _text(view, pos, cache), neg_ids,
                                        tuple(_text(view, d, cache) for d in neg_ids)))
    report = {"queries_used": len(used), "queries_skipped": skipped, "examples": len(examples),
              "negatives_per_example": negatives,
              "short_examples": sum(len(e.negative_ids) < negatives for e in examples),
              "depth": depth, "retriever": retriever, "seed": seed}
    return examples, report


def _qid(item) -> str:
    return item if isinstance(item, str) else item.qid


def split_dev(examples_or_queries: Sequence, share: float, seed: int = 0) -> Tuple[list, list]:
    """``(train, dev)``: the items (examples, queries or query ids) of a held-out share of the
    distinct query ids, so every query's examples stay on one side; each side keeps the input order.
    The dev side has ``floor(share * n + 0.5)`` queries (``share * n`` rounded half up) of the ``n``
    distinct queries, at most ``n - 1`` so training keeps one. Which queries is a permutation of the
    sorted ids by ``numpy.random.default_rng(seed)``: the same ids, share and seed give the same
    split whatever the input order."""
    if not 0 <= share < 1:
        raise ParameterError("{share} must be in [0, 1), got {got}", got=share)
    qids = sorted({_qid(x) for x in examples_or_queries})
    n_dev = min(int(np.floor(share * len(qids) + 0.5)), max(len(qids) - 1, 0))
    order = np.random.default_rng(seed).permutation(len(qids))
    dev = {qids[i] for i in order[:n_dev]}
    return ([x for x in examples_or_queries if _qid(x) not in dev],
            [x for x in examples_or_queries if _qid(x) in dev])


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


def mining_index(corpus, folder: Path, quiet: bool = True, empty: str = "error"):
    """The folder whose ranking hard negatives are mined from when a training run is given none: the
    BM25 folder of ``corpus`` at ``folder`` (a training run's checkpoint), opened if a run already built
    it, else built there (again, when half-built). ``empty``: what the build does with an empty passage
    (:func:`retrieval.writer.build_index`)."""
    from retrieval.index import open_index
    from retrieval.writer import build_index

    try:
        return open_index(folder)
    except Exception:  # absent or half-built: build it (again)
        shutil.rmtree(folder, ignore_errors=True)
        return build_index(corpus, folder, quiet=quiet, **({} if empty == "error" else {"empty": empty}))
