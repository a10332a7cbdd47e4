"""Pseudo-relevance feedback (BM25's RM3 and Rocchio, :mod:`retrieval.bm25.prf`) on a sharded
index, giving the runs one folder holding every shard's documents gives.

One folder runs Anserini's reranker over its first ranking: it reads the top ``fb_docs`` documents'
term vectors (Rocchio with ``use_negative``: also the bottom ``bottom_fb_docs``), the number of live
documents and the document frequency of each of their terms, and the first ranking's raw scores
(RM3). A shard alone would read its own top documents and counts. So the router expands each query
from the whole index, in rounds over the shards (after the statistics round of the query's terms):

1. **first ranking**: every shard's top ``depth`` (Anserini's rerank cutoff, 50, for RM3; the hits
   asked for, for Rocchio: ``retr.lucene.Feedback.depth``) with the global statistics, merged with
   their raw scores in one folder's order (score, then docid bytes);
2. **vectors**: the shard that owns each feedback document sends its term vector;
3. **term statistics**: every shard's live documents and ``[df, ttf]`` of the vectors' terms, summed;
4. **expansion**: one shard (any: the expansion reads none of its documents) runs Anserini's reranker
   over a reader made of those global figures and returns the expanded query's clauses
   (``retr.lucene.ShardFeedback``, whose comment says why the work is split so);
5. **search**: the shards search the expanded query with the global statistics (the query's and the
   feedback terms'), and the router merges as for any BM25 search.

Filters: one folder expands from the unfiltered first ranking of a search of ``k`` hits, then filters
the expanded query's ranking (a filter allowing a large share of the documents reads that ranking
deeper, each depth expanding anew); the router does the same (:meth:`ShardedIndex._deep_search`)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from indexes import sharded as sh
from indexes.errors import ParameterError
from retrieval.request import SearchRequest
from retrieval.sharded import merge

#: Anserini's rerank cutoff (SearchCollection.Args.rerankcutoff), the depth RM3's first ranking is read
#: to; tests/retrieval/test_sharded_prf.py checks it against ``retr.lucene.Feedback.depth``
RM3_DEPTH = 50

NO_VECTORS = ("{prf} reads the feedback documents' term vectors, which this index's BM25 sub-index does not "
              "store: rebuild it with {store_docvectors}")


def first_depth(setting, k: int) -> int:
    """How deep the first ranking of a search of ``k`` hits is read (as ``retr.lucene.Feedback``)."""
    return RM3_DEPTH if setting.method == "rm3" else int(k)


def positions(setting, n: int) -> List[int]:
    """The positions of a first ranking of ``n`` documents whose term vectors the reranker reads."""
    top = list(range(min(n, setting.fb_docs)))
    if setting.method == "rocchio" and setting.use_negative:
        top += [n - 1 - i for i in range(min(n, setting.bottom_fb_docs))]
    return sorted(set(top))


def settings(router, p, prf, configured: Dict[str, Any]) -> Dict[str, Any]:
    """The feedback of each member of pipeline ``p`` for one search: ``prf`` (this search's, as
    :meth:`retrieval.index.Index.search` takes it) on every member that takes it, else the setting
    :meth:`ShardedIndex.configure` gave it. ParameterErrors as one folder raises them."""
    from retrieval.bm25.prf import parse

    takes = router.info[0].get("prf") or {}
    if prf is None:
        return {n: s for n, s in configured.items() if n in p.retrievers and s}
    setting = parse(prf)
    takers = [n for n in p.retrievers if n in takes]
    if not takers:
        raise ParameterError("{prf} (pseudo-relevance feedback) applies to no retriever of {_p}: none of its "
                             "retrievers ({_names}) takes it", _p=str(p), _names=", ".join(p.retrievers))
    if not setting:
        return {}
    check_vectors(router, takers)
    return {n: setting for n in takers}


def check_vectors(router, names: Sequence[str]) -> None:
    """One ParameterError where a shard's sub-index ``names`` stores no term vectors."""
    for info in router.info:
        if any(not (info.get("prf") or {}).get(n, False) for n in names):
            raise ParameterError(NO_VECTORS)


def expand(router, name: str, setting, queries: Sequence[Tuple[str, str]], k: int, stats: Optional[dict],
           threads: int = 1) -> Tuple[Dict[str, Any], Optional[dict]]:
    """Rounds 1-4 of the module docstring for retriever ``name`` and ``queries`` ``[(qid, text)]``
    searched for ``k`` hits: ``({qid: Boosted}, stats)``, the expanded queries and the global
    statistics that score them (``stats``, the query terms', with the feedback terms' added)."""
    depth = first_depth(setting, k)
    opts = router.options
    found = router.all("search", list(queries), [name], SearchRequest(k=depth, text=False), {name: stats}, opts,
                       threads)
    first = {q: merge.merge_lists("score", [a.get(name, {}).get(q, []) for a in found], depth) for q, _ in queries}
    want = {q: positions(setting, len(first[q])) for q, _ in queries}
    n = len(router.shards)
    owned: Dict[int, List[str]] = {}
    for q, _ in queries:
        for i in want[q]:
            d = first[q][i][0]
            owned.setdefault(sh.shard_of(d, n), [])
            if d not in owned[sh.shard_of(d, n)]:
                owned[sh.shard_of(d, n)].append(d)
    vectors: Dict[str, Tuple[List[str], List[int]]] = {}
    if owned:  # the owners in one call, each sent every id and answering for its own (as ShardedIndex._texts)
        order = sorted(owned)
        ids = [d for i in order for d in owned[i]]
        for i, got in zip(order, router.call([router.shards[i] for i in order], "vectors", (name, ids), {})):
            vectors.update((d, v) for d, v in got.items() if sh.shard_of(d, n) == i)
    missing = sorted({first[q][i][0] for q, _ in queries for i in want[q]} - set(vectors))
    if missing:
        raise ParameterError(NO_VECTORS + " (no term vector of {_docs})", _docs=", ".join(missing[:5]))
    terms = sorted({t for v in vectors.values() for t in v[0]})
    counted = merge.sum_stats(router.all("term_stats", name, terms))
    docs = int(counted["docs"])
    term_stats = counted.get("terms") or {}
    dfs = {t: int(term_stats[t][0]) for t in terms}
    items = [(text, [d for d, _s in first[q]], [s for _d, s in first[q]],
              {i: vectors[first[q][i][0]] for i in want[q]}) for q, text in queries]
    boosted = router.call(router.shards[:1], "expand", (name, _as_dict(setting), k, items, dfs, docs, opts), {})[0]
    out = {q: b for (q, _t), b in zip(queries, boosted)}
    if stats is None:
        return out, None
    used = {t for b in boosted for t in b[0]}
    more = {t: term_stats[t] for t in used if t in term_stats and t not in (stats.get("terms") or {})}
    return out, dict(stats, terms=dict(stats.get("terms") or {}, **more))


def _as_dict(setting) -> Dict[str, Any]:
    return dict(setting.params(), method=setting.method)
