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
    ``metric`` on ``queries``/``qrels`` (training data). Returns a report. ``index``: a folder's
    :class:`~retrieval.index.Index`, or a sharded index (its search runs the members, and the
    choice is stored in every shard as one commit)."""
    from eval import evaluate

    if qrels_path and looks_like_test(qrels_path) and not allow_test:
        raise InputError("refusing to tune on what looks like test qrels; tune on a train/dev split", qrels_path)
    base = retriever.split(":", 1)[0]
    p = index.pipeline(base, "rrf")
    qs = [q for q in queries if q.qid in qrels]
    if not qs:
        raise InputError("none of the queries has judgments in the tuning qrels")
    # scored over the tuning queries, one with no hits scoring 0 (the evaluator's default, as `retr eval`'s)
    qrels = {q.qid: qrels[q.qid] for q in qs}
    t0 = time.perf_counter()
    sharded = _is_sharded(index)
    if save and not sharded:
        from indexes.sharded import refuse_one_shard

        refuse_one_shard(index.manifest, index.path, "tune")
    shards_read = [ix.manifest for ix in index.local()] if sharded and save else None  # what the runs read
    # each member's own ranking, as its search returns it (a sharded index's: merged, global statistics)
    lists = {name: {q: [(h.docid, h.score) for h in hits]
                    for q, hits in index.batch_search(qs, k=depth, retriever=name, threads=threads).items()}
             for name in p.retrievers}
    grid = candidates(p.retrievers)
    # each list's confidence per query, for the confidence-weighted candidate
    per = {n: [lists[n][q.qid] for q in qs] for n in p.retrievers}
    texts = [q.text for q in qs]
    conf = dict(zip((q.qid for q in qs), index.confidences(texts, per) if sharded else
                    list_confidences({n: index.retriever(n) for n in p.retrievers}, texts, per)))
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
        def edit(ch) -> None:
            ch.new.setdefault("pipelines", {})[p.base] = report

        if sharded:  # every shard records it, one commit of the sharded index
            from retrieval.sharded.write import commit_manifests

            commit_manifests(index.path, edit, based_on=shards_read)
            index.describe()
        else:
            folder.commit_manifest(index.path, edit, based_on=index.manifest)
            index.refresh()
    return report


def _is_sharded(index) -> bool:
    from retrieval.sharded.index import ShardedIndex

    return isinstance(index, ShardedIndex)

