"""Tune the fusion of a pipeline on training queries and store it in the index.

Every retriever is run once over the training queries; each candidate fusion
is then scored on those runs with the evaluator. The best spec is written to
``manifest["pipelines"][base]`` and becomes the default for a bare ``a+b``.
Tuning refuses qrels that look like a test split: test queries are for
reporting, never for choosing settings. A collection with only test judgments
(Cranfield, Vaswani) gets :func:`cross_validate` instead: each fold's fusion is
chosen on the other folds and scored on its own, and nothing is stored.
"""
from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass, fields, replace
from typing import Any, Dict, List, Optional, Sequence

from indexes import manifest as mf
from indexes.errors import InputError, ParameterError
from retrieval.datasets.qrels import looks_like_test  # noqa: F401 (also importable from here)
from retrieval.fusion import DEFAULT_FUSION, Fusion, Pipeline, fuse
from retrieval.progress import progress
from retrieval.types import Query


def candidates(names: Sequence[str], step: float = 0.1) -> List[Fusion]:
    """The grid: rrf over k, combsum/combmnz per normalisation, the untuned default
    (confidence-weighted combmnz), and convex weights on a simplex grid per normalisation."""
    out = [Fusion("rrf", k) for k in (5, 10, 20, 40, 60, 100)] + [DEFAULT_FUSION]
    for norm in ("minmax", "zscore"):
        out += [Fusion("combsum", norm=norm), Fusion("combmnz", norm=norm)]
        n = round(1 / step)
        for parts in itertools.product(range(1, n), repeat=len(names) - 1):
            last = n - sum(parts)
            if last < 1:
                continue
            ws = tuple((name, round(p * step, 4)) for name, p in zip(names, (*parts, last)))
            out.append(Fusion("weighted", norm=norm, weights=ws))
    return out


def tune(index, queries: Sequence[Query], qrels: Dict[str, Dict[str, int]], *, how: Optional[Tuning] = None,
         qrels_path: Optional[str] = None, allow_test: bool = False, save: bool = True, **options: Any) -> dict:
    """Choose the fusion of ``retriever`` (e.g. ``bm25+dense``) that maximises
    ``metric`` on ``queries``/``qrels`` (training data). Returns a report. ``index``: a folder's
    :class:`~retrieval.index.Index`, or a sharded index (its search runs the members, and the
    choice is stored in every shard as one commit). ``how`` (:class:`Tuning`), or its fields as
    keywords (``**options``: ``retriever``, ``metric``, ``depth``, ``threads``, ``quiet``)."""
    retriever, metric, depth, threads, quiet = _tuning("tune", how, options)
    if qrels_path and looks_like_test(qrels_path) and not allow_test:
        raise InputError("refusing to tune on what looks like test qrels; tune on a train/dev split "
                         "(or cross-validate on them: retr tune --folds 2)", qrels_path)
    p, qs, qrels = _judged(index, retriever, queries, qrels)
    t0 = time.perf_counter()
    commit = index.begin_change("tune") if save else None  # (what the runs read, refused on a lone shard)
    lists, conf = member_runs(index, p.retrievers, qs, depth, threads)
    qids = [q.qid for q in qs]
    best, best_value, scores = best_fusion(lists, conf, qrels, qids, metric, depth, quiet=quiet)
    grid = candidates(p.retrievers)
    spec = str(Pipeline(p.retrievers, best))
    report = {"spec": spec, "metric": metric, "value": best_value, "single": _singles(lists, qrels, qids, metric),
              "tuned_on": str(qrels_path) if qrels_path else "<python qrels>", "queries": len(qs),
              "depth": depth, "tuned_at": mf.now(), "seconds": round(time.perf_counter() - t0, 1),
              "top": [{"fusion": str(grid[i]), metric: scores[i]}
                      for i in sorted(range(len(grid)), key=lambda i: -scores[i])[:10]]}
    if save:  # a generation of its own: readers holding the current one keep its default until they move on
        def edit(ch) -> None:
            ch.new.setdefault("pipelines", {})[p.base] = report

        commit(edit)  # a folder: one generation; a sharded index: every shard, one commit
    return report


def cross_validate(index, queries: Sequence[Query], qrels: Dict[str, Dict[str, int]], folds: int, *,
                   how: Optional[Tuning] = None, seed: int = 0, **options: Any) -> dict:
    """Estimate what tuning ``retriever``'s fusion gives on a collection that has only test
    judgments (Cranfield, Vaswani): the judged queries are shuffled (``seed``) into ``folds``
    folds; for each, the fusion is chosen on the other folds' queries and scored on its own.
    Stores nothing (every choice was made on test queries). Returns a report with each fold
    and ``value``, ``metric`` over all the queries, each scored by the fusion chosen without it.
    ``how``/``**options``: as :func:`tune` takes them."""
    retriever, metric, depth, threads, quiet = _tuning("cross_validate", how, options)
    p, qs, qrels = _judged(index, retriever, queries, qrels)
    if not 2 <= folds <= len(qs):
        raise ParameterError("{folds} must be from 2 to the number of judged queries ({n}), got {got}",
                             n=len(qs), got=folds)
    t0 = time.perf_counter()
    lists, conf = member_runs(index, p.retrievers, qs, depth, threads)
    parts = split_folds([q.qid for q in qs], folds, seed)
    held_out, report_folds = {}, []
    for i, part in enumerate(progress(parts, desc="cross-validating", unit="fold", quiet=quiet)):
        train = [q for j, other in enumerate(parts) if j != i for q in other]
        f, v, _ = best_fusion(lists, conf, qrels, train, metric, depth, quiet=True)
        run = fused_run(lists, conf, part, f, depth)
        held_out.update(run)
        report_folds.append({"fold": i + 1, "spec": str(Pipeline(p.retrievers, f)), "train_queries": len(train),
                             "train_value": v, "queries": len(part),
                             "value": _evaluate(qrels, run, part, metric)})
    qids = [q.qid for q in qs]
    return {"metric": metric, "folds": report_folds, "value": _evaluate(qrels, held_out, qids, metric),
            "single": _singles(lists, qrels, qids, metric), "queries": len(qs), "depth": depth, "seed": seed,
            "seconds": round(time.perf_counter() - t0, 1)}


@dataclass(frozen=True)
class Tuning:
    """What :func:`tune` and :func:`cross_validate` search: the fusions of ``retriever``'s members, scored
    by ``metric`` on each member's top ``depth`` (searched on ``threads``); ``quiet``: no progress."""
    retriever: str = "bm25+dense"
    metric: str = "nDCG@10"
    depth: int = 1000
    threads: int = 2
    quiet: bool = False


def _tuning(fn: str, how: Optional[Tuning], options: Dict[str, Any]) -> tuple:
    """``how`` (default :class:`Tuning`) with ``options`` over it, as ``(retriever, metric, depth,
    threads, quiet)``; a keyword that is no field is a TypeError naming it, as Python's own for ``fn``."""
    bad = sorted(set(options) - {f.name for f in fields(Tuning)})
    if bad:
        raise TypeError(f"{fn}() got an unexpected keyword argument {bad[0]!r}")
    t = replace(how or Tuning(), **options)
    return t.retriever, t.metric, t.depth, t.threads, t.quiet


# ------------------------------------------------------------------ the steps (benchmarks use them too)

def member_runs(index, names: Sequence[str], qs: Sequence[Query], depth: int, threads: int = 2):
    """Each retriever's own ranking of ``qs`` as its search returns it (a sharded index's: merged,
    global statistics), ``{name: {qid: [(docid, score)]}}``, and each query's list confidences
    ``{qid: ...}`` for the confidence-weighted candidates."""
    lists = {name: {q: [(h.docid, h.score) for h in hits]
                    for q, hits in index.batch_search(qs, k=depth, retriever=name, threads=threads).items()}
             for name in names}
    per = {n: [lists[n][q.qid] for q in qs] for n in names}
    texts = [q.text for q in qs]
    conf = dict(zip((q.qid for q in qs), index.confidences(texts, per)))  # any Searcher answers it
    return lists, conf


def fused_run(lists, conf, qids: Sequence[str], f: Fusion, depth: int) -> Dict[str, Dict[str, float]]:
    """The run of fusion ``f`` over :func:`member_runs`' lists for ``qids``."""
    return {q: {d: s for d, s, _ in fuse({n: lists[n][q] for n in lists}, f, conf[q])[:depth]} for q in qids}


def best_fusion(lists, conf, qrels, qids: Sequence[str], metric: str = "nDCG@10", depth: int = 1000,
                quiet: bool = True):
    """The candidate fusion (:func:`candidates`) with the highest ``metric`` on ``qids``; ties go to
    the earlier (simpler) grid entry. Returns (fusion, its value, every candidate's value)."""
    grid = candidates(list(lists))
    scores = [_evaluate(qrels, fused_run(lists, conf, qids, f, depth), qids, metric)
              for f in progress(grid, desc="tuning fusion", unit="cfg", quiet=quiet)]
    best = max(range(len(grid)), key=scores.__getitem__)
    return grid[best], scores[best], scores


def split_folds(qids: Sequence[str], folds: int, seed: int = 0) -> List[List[str]]:
    """``qids`` shuffled by ``random.Random(seed)`` and dealt into ``folds`` folds (round robin)."""
    shuffled = list(qids)
    random.Random(seed).shuffle(shuffled)
    return [shuffled[i::folds] for i in range(folds)]


def _evaluate(qrels, run, qids, metric: str) -> float:
    from eval import evaluate

    # scored over these queries, one with no hits scoring 0 (the evaluator's default, as `retr eval`'s)
    return evaluate({q: qrels[q] for q in qids}, run, [metric])[metric]


def _singles(lists, qrels, qids, metric: str) -> Dict[str, float]:
    return {n: _evaluate(qrels, {q: dict(lists[n][q]) for q in qids}, qids, metric) for n in lists}


def _judged(index, retriever: str, queries: Sequence[Query], qrels):
    """The pipeline ``retriever`` names, the queries with judgments and their qrels."""
    p = index.pipeline(retriever.split(":", 1)[0], "rrf")
    qs = [q for q in queries if q.qid in qrels]
    if not qs:
        raise InputError("none of the queries has judgments in the tuning qrels")
    return p, qs, {q.qid: qrels[q.qid] for q in qs}
