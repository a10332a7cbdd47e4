"""The pure steps of a sharded search (see the package's docstring): summing the shards'
statistics, merging their ranked lists exactly, fusing the merged lists. No I/O, no index."""
from __future__ import annotations

import heapq
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence

from indexes.errors import IndexFormatError
from retrieval.fusion import Pipeline, fuse
from retrieval.types import Scored

RULES = ("anserini", "score")


def sum_stats(parts: Sequence[Any]) -> Any:
    """The shards' statistics added up: dicts key by key (a key some shard lacks counts 0 there),
    lists element by element, numbers summed, None where every shard answered None. Document counts,
    total term frequencies and document frequencies of a collection are such sums."""
    given = [p for p in parts if p is not None]
    if not given:
        return None
    first = given[0]
    if isinstance(first, dict):
        keys = list(dict.fromkeys(k for p in given for k in p))
        return {k: sum_stats([p.get(k) for p in given]) for k in keys}
    if isinstance(first, (list, tuple)):
        if any(len(p) != len(first) for p in given):
            raise IndexFormatError("the shards' statistics do not have the same shape")
        return [sum_stats([p[i] for p in given]) for i in range(len(first))]
    if isinstance(first, bool) or not isinstance(first, int):
        raise IndexFormatError(f"a shard's statistics hold a {type(first).__name__}, not counts")
    return sum(given)


def sum_stats_by_name(answers: Sequence[Mapping[str, Any]], names: Sequence[str]) -> Dict[str, Any]:
    """Round 1's answers of every shard (``{retriever: stats}`` each) summed per retriever."""
    return {n: sum_stats([a.get(n) for a in answers]) for n in names}


def _java_round(x: float) -> float:
    # Java's Math.round(double): floor(x + 1/2) computed exactly (x - floor(x) is exact in a double)
    f = math.floor(x)
    return f + 1.0 if x - f >= 0.5 else f


def anserini_ties(scores: Sequence[float]) -> List[float]:
    """Anserini's ScoreTiesAdjusterReranker as retr's helper applies it (HitSearcher.adjustTies): each
    float score rounded to 4 decimals, and each run of scores within 1e-4 of the one before pushed
    down by 1e-6 per place in the run, in float32 arithmetic as Java does it. Written here rather than
    called in Java because the merge runs where no JVM may be (a router), on the merged list."""
    import numpy as np

    out: List[float] = []
    f32 = np.float32
    eps, step = f32(1e-4), f32(1e-6)
    run = 0
    prev = None
    for s in scores:
        v = f32(_java_round(float(f32(s)) * 10000.0) / 10000.0)
        if prev is None or prev - v > eps:
            run = 0
        else:
            run += 1
            v = f32(v - step * f32(run))
        out.append(float(v))
        prev = v
    return out


def merge_lists(rule: str, lists: Sequence[Scored], k: int) -> Scored:
    """The first ``k`` of the shards' lists (each best first, each its shard's own first k or more) as
    one index holding every shard's documents ranks them, under ``rule``:

    - ``"anserini"`` (Lucene through retr's helper): the lists hold raw float scores; order by score
      descending, then the docid's UTF-8 bytes (Anserini's tie break on the id field), then Anserini's
      rounding and tie offsets over the merged list (:func:`anserini_ties`);
    - ``"score"`` (faiss): score descending, then the docid's UTF-8 bytes, as a folder's faiss
      sub-index orders the candidates it rescored (indexes.faiss_index.rank_exact)."""
    if rule not in RULES:
        raise IndexFormatError(f"unknown merge rule {rule!r} (this retr merges: {', '.join(RULES)})")
    merged = heapq.merge(*lists, key=lambda h: (-h[1], h[0].encode("utf-8")))
    top = [h for _, h in zip(range(k), merged)]
    if rule == "score":
        return top
    # an entry's further fields (a deepened filter's "allowed" flag) stay with it
    return [(h[0], s, *h[2:]) for h, s in zip(top, anserini_ties([h[1] for h in top]))]


def merge_all(rules: Mapping[str, str], answers: Sequence[Mapping[str, Mapping[str, Scored]]], qids: Sequence[str],
              k: int) -> Dict[str, Dict[str, Scored]]:
    """Round 2's answers of every shard (``{retriever: {qid: list}}`` each) merged per retriever and
    query: ``{retriever: {qid: merged list}}``."""
    return {name: {q: merge_lists(rule, [a.get(name, {}).get(q, []) for a in answers], k) for q in qids}
            for name, rule in rules.items()}


def filtered_first(merged: Scored, k: int) -> Scored:
    """The first ``k`` allowed entries of a merged unfiltered list whose entries carry an "allowed"
    flag (a deepened filter's), as ``(docid, score)``: the scores and tie offsets are the unfiltered
    list's, as one folder's reader gives them when it filters its unfiltered ranking."""
    return [(h[0], h[1]) for h in merged if h[2]][:k]


def fuse_lists(p: Pipeline, lists: Mapping[str, Scored], k: int, confidences: Optional[Mapping] = None):
    """The fused ranking of one query's merged lists, cut at ``k``: ``[(docid, score, {member: score})]``,
    as ``Index.search`` fuses one folder's lists."""
    return fuse(lists, p.fusion, confidences)[:k]
