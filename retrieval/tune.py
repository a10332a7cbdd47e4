"""Tune the fusion of a pipeline on training queries and store it in the index.

Every retriever is run once over the training queries; each candidate fusion
is then scored on those runs with the evaluator. The best spec is written to
``manifest["pipelines"][base]`` and becomes the default for a bare ``a+b``.
Tuning refuses qrels that look like a test split: test queries are for
reporting, never for choosing settings.
"""
from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from indexes import folder
from indexes import manifest as mf
from indexes.errors import InputError
from retrieval.fusion import DEFAULT_FUSION, Fusion, Pipeline, fuse, list_confidences
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


def looks_like_test(path: Path | str) -> bool:
    return "test" in Path(path).name.lower()


def tune(index, queries: Sequence[Query], qrels: Dict[str, Dict[str, int]], retriever: str = "bm25+dense",
         metric: str = "nDCG@10", depth: int = 1000, threads: int = 2, qrels_path: Optional[str] = None,
         allow_test: bool = False, save: bool = True, quiet: bool = False) -> dict:
    """Choose the fusion of ``retriever`` (e.g. ``bm25+dense``) that maximises
    ``metric`` on ``queries``/``qrels`` (training data). Returns a report."""
    from eval import evaluate

    if qrels_path and looks_like_test(qrels_path) and not allow_test:
        raise InputError("refusing to tune on what looks like test qrels; tune on a train/dev split", qrels_path)
    base = retriever.split(":", 1)[0]
    p = index.pipeline(base, "rrf")
    qs = [q for q in queries if q.qid in qrels]
    if not qs:
        raise InputError("none of the queries has judgments in the tuning qrels")
    t0 = time.perf_counter()
    lists = {name: index.retriever(name).batch_search(qs, depth, threads) for name in p.retrievers}
    grid = candidates(p.retrievers)
    # each list's confidence per query, for the confidence-weighted candidate
    conf = dict(zip((q.qid for q in qs), list_confidences(
        {n: index.retriever(n) for n in p.retrievers}, [q.text for q in qs],
        {n: [lists[n][q.qid] for q in qs] for n in p.retrievers})))
    scores = []
    for f in progress(grid, desc="tuning fusion", unit="cfg", quiet=quiet):
        run = {q.qid: {d: s for d, s, _ in fuse({n: lists[n][q.qid] for n in p.retrievers}, f,
                                                 conf[q.qid])[:depth]}
               for q in qs}
        scores.append(evaluate(qrels, run, [metric])[metric])
    singles = {n: evaluate(qrels, {q.qid: dict(lists[n][q.qid]) for q in qs}, [metric])[metric]
               for n in p.retrievers}
    best = max(range(len(grid)), key=scores.__getitem__)  # ties: the earlier (simpler) grid entry
    best_value = scores[best]
    spec = str(Pipeline(p.retrievers, grid[best]))
    report = {"spec": spec, "metric": metric, "value": best_value, "single": singles,
              "tuned_on": str(qrels_path) if qrels_path else "<python qrels>", "queries": len(qs),
              "depth": depth, "tuned_at": mf.now(), "seconds": round(time.perf_counter() - t0, 1),
              "top": [{"fusion": str(grid[i]), metric: scores[i]}
                      for i in sorted(range(len(grid)), key=lambda i: -scores[i])[:10]]}
    if save:  # a generation of its own: readers holding the current one keep its default until they move on
        folder.commit_manifest(index.path, lambda ch: ch.new.setdefault("pipelines", {}).__setitem__(p.base, report),
                              based_on=index.manifest)
        index.refresh()
    return report

