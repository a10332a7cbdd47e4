"""A Lucene sub-index as one shard of a sharded index (issue #30): its statistics for some
queries, and its searches scored with the statistics summed over every shard.

Elasticsearch's DFS_QUERY_THEN_FETCH in retr's terms: :func:`collection_stats` reads this shard's
document count and lengths of the ``contents`` field and the document frequency and total term
frequency of each query term (the analysed terms of Anserini's bag-of-words query); the router sums
them over the shards; :class:`ShardView` searches with the sums (``retr.lucene.GlobalStats``: an
IndexSearcher whose ``collectionStatistics``/``termStatistics`` answer them, which is what
BM25Similarity reads) and returns the raw float scores, before Anserini's rounding and tie offsets,
so the router can merge the shards' lists by (score, docid) and round once over the merged list
(``retrieval.sharded.merge``); its ``explain`` is Lucene's explanation of a document under the
same sums (``explainWith``), so the parts add up to the sharded search's score. Impact indexes
read no statistics; their view only skips the rounding.
Kept apart from :class:`indexes.lucene.LuceneIndex`'s own search path.

Pseudo-relevance feedback (RM3, Rocchio) adds three calls (``retr.lucene.ShardFeedback``, whose
comment says why the work is split so): :func:`term_vectors` of the feedback documents a shard owns,
:func:`term_stats` of their terms and the shard's live document count (summed by the router),
:func:`expand` (Anserini's reranker over those global figures, on any one shard), and the expanded
queries (:class:`Boosted`) searched by :class:`ShardView` with the global statistics.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from indexes import jvm
from indexes.lucene import LuceneIndex, Result, _check_k, _flat_weights


def collection_stats(index: LuceneIndex, queries: Sequence) -> Optional[dict]:
    """``{"field": [maxDoc, docCount, sumTotalTermFreq, sumDocFreq], "terms": {term: [df, ttf]}}``
    of ``index``'s reader for the terms of ``queries`` (texts); None for an impact index."""
    if index.impact:
        return None

    def run(s):
        terms: Dict[str, None] = {}
        for q in queries:
            for t in s.js.clauseTerms(s.js.textQuery(str(q))) or ():
                terms[str(t)] = None
        names = list(terms)
        pairs = list(s.js.termStats(names)) if names else []
        return {"field": [int(x) for x in s.js.fieldStats()],
                "terms": {t: [int(pairs[2 * i]), int(pairs[2 * i + 1])] for i, t in enumerate(names)}}
    return index._call(run)


def global_stats(stats: Optional[dict]):
    """The Java ``retr.lucene.GlobalStats`` of summed statistics (None: none)."""
    if not stats:
        return None
    f = [int(x) for x in stats["field"]]
    terms = list(stats.get("terms", {}))
    df = [int(stats["terms"][t][0]) for t in terms]
    ttf = [int(stats["terms"][t][1]) for t in terms]
    return jvm.autoclass("retr.lucene.GlobalStats")(f[0], f[1], f[2], f[3], terms, df, ttf)


class Boosted(tuple):
    """An expanded query: ``(terms, boosts)``, the clauses Anserini's reranker built, in its order
    (a plain tuple, picklable, so a router can send it to a remote shard)."""

    __slots__ = ()

    def __new__(cls, terms: Sequence[str], boosts: Sequence[float]):
        return super().__new__(cls, (tuple(str(t) for t in terms), tuple(float(b) for b in boosts)))

    def __getnewargs__(self):  # pickled as its two parts (a tuple subclass's default is one tuple)
        return tuple(self)

    @property
    def terms(self) -> Tuple[str, ...]:
        return self[0]

    @property
    def boosts(self) -> Tuple[float, ...]:
        return self[1]


def term_vectors(index: LuceneIndex, docids: Sequence[str]) -> Dict[str, Tuple[List[str], List[int]]]:
    """``{docid: (terms, frequencies)}``: the stored "contents" term vector (in its own order) of each
    of ``docids`` that has a live document in ``index`` (the others are left out)."""
    ids = [str(d) for d in docids]
    if not ids:
        return {}

    def run(s):
        v = jvm.autoclass("retr.lucene.ShardFeedback").vectors(s.js, ids)
        counts, terms, freqs = list(v.counts), list(v.terms), list(v.freqs)
        out, at = {}, 0
        for d, c in zip(ids, counts):
            if c >= 0:
                out[d] = (terms[at:at + c], [int(f) for f in freqs[at:at + c]])
                at += c
        return out
    return index._call(run)


def term_stats(index: LuceneIndex, terms: Sequence[str]) -> Dict[str, Any]:
    """``{"docs": live documents, "terms": {term: [df, ttf]}}`` of ``index``'s "contents" for the
    given (already analysed) terms: what the router sums for the feedback model and the expanded
    query's scores."""
    names = [str(t) for t in terms]

    def run(s):
        pairs = list(s.js.termStats(names)) if names else []
        return {"docs": int(s.js.numDocs()),
                "terms": {t: [int(pairs[2 * i]), int(pairs[2 * i + 1])] for i, t in enumerate(names)}}
    return index._call(run)


def expand(index: LuceneIndex, feedback, items: Sequence[tuple], k: int, dfs: Dict[str, int], docs: int
           ) -> List[Boosted]:
    """Per item ``(text, docids, scores, vectors)`` (the whole index's first ranking of ``text``,
    raw scores, and ``{position: (terms, frequencies)}`` of the documents the reranker reads), the
    query Anserini's reranker ``feedback`` (a Java ``retr.lucene.Feedback``) expands ``text`` to for a
    search of ``k`` hits, reading ``dfs`` (the vectors' terms' document frequencies) and ``docs``
    (live documents) of the whole index."""
    df_terms = list(dfs)
    df_values = [int(dfs[t]) for t in df_terms]

    def run(s):
        F = jvm.autoclass("retr.lucene.ShardFeedback")
        out = []
        for text, ids, scores, vectors in items:
            counts, terms, freqs = [], [], []
            for i in range(len(ids)):
                v = vectors.get(i)
                if v is None:
                    counts.append(-1)
                else:
                    counts.append(len(v[0]))
                    terms.extend(v[0])
                    freqs.extend(int(f) for f in v[1])
            b = F.expand(feedback, s.js, str(text), int(k), [str(d) for d in ids], [float(x) for x in scores],
                         counts, terms, freqs, df_terms, df_values, int(docs))
            out.append(Boosted(list(b.terms), list(b.boosts)))
        return out
    return index._call(run)


class ShardView:
    """``index``'s searches (the subset the retrievers call) scored with ``stats`` (summed over the
    shards; None: this index's own) and answered with raw float scores. Closing it closes nothing:
    the index belongs to its retriever."""

    def __init__(self, index: LuceneIndex, stats: Optional[dict]):
        self._index = index
        self.impact = index.impact
        self.path = index.path
        self._g = global_stats(stats)

    def __getattr__(self, name):  # k1, b, set_bm25, highlights: the index's own
        return getattr(self._index, name)

    def search(self, query, k: int = 10) -> Result:
        return self.batch_search([query], ["q"], k)["q"]

    def batch_search(self, queries: Sequence, qids: Sequence[str], k: int = 10, threads: int = 1,
                     parallel: str = "python") -> Dict[str, Result]:
        k = _check_k(k)
        qids = [str(q) for q in qids]
        if not qids:
            return {}
        g, threads = self._g, max(1, int(threads))
        if queries and all(isinstance(q, Boosted) for q in queries):  # expanded by feedback (see expand)
            terms = [t for q in queries for t in q.terms]
            boosts = [b for q in queries for b in q.boosts]
            offsets = [0]
            for q in queries:
                offsets.append(offsets[-1] + len(q.terms))
            snap, batch = self._index._call(lambda s: (s, s.js.batchSearchBoostedWith(terms, boosts, offsets, k,
                                                                                       threads, g)))
        elif self.impact:
            terms, weights, offsets = _flat_weights(queries)
            snap, batch = self._index._call(lambda s: (s, s.js.batchSearchWeightedWith(terms, weights, offsets, k,
                                                                                        threads, g)))
        else:
            texts = [str(q) for q in queries]
            snap, batch = self._index._call(lambda s: (s, s.js.batchSearchWith(texts, k, threads, g)))
        if batch.errors is not None:
            import warnings

            for qid, err in zip(qids, batch.errors):
                if err is not None:
                    warnings.warn(f"{self.path}: query {qid!r} failed and has no hits: {err}", RuntimeWarning,
                                  stacklevel=2)
        return dict(zip(qids, snap.decode_batch(batch.data.tostring(), len(qids))))

    def search_filtered(self, query, k: int, allowed) -> Result:
        """:meth:`indexes.lucene.LuceneIndex.search_filtered` with the summed statistics, raw scores."""
        from indexes import lucene_filter as lf

        k = _check_k(k)
        if isinstance(query, Boosted):
            terms, boosts = list(query.terms), list(query.boosts)

            def make(s):
                return jvm.autoclass("retr.lucene.ShardFeedback").query(terms, boosts)
        else:
            make = self._index._query_maker(query)
        if make is None:
            return []
        g = self._g

        def run(s):
            q = make(s)
            bits = allowed.backend(("lucene-bits", s), lambda: s.js.allowedDocs(list(allowed.docids)))
            buf = s.js.searchAllowedWith(q, k, bits, g)
            if buf is not None:
                return s.decode(buf.tostring())
            flt = allowed.backend("lucene-ids", lambda: lf.id_filter(allowed.docids))
            return s.decode(s.js.runWith(lf.with_filter(q, flt), k, g).tostring())
        return self._index._call(run)

    def explain(self, query, docid: str, returned: Optional[float] = None, k: int = 1000
                ) -> Optional[Dict[str, object]]:
        """:meth:`indexes.lucene.LuceneIndex.explain` under the summed statistics: Lucene's own
        explanation of this shard's document through the same IndexSearcher the searches score with
        (the helper's ``explainWith``), so each term's df, N, avgdl and idf are the whole index's and
        its parts add up to the score the sharded search gives it (``returned``: that score, after the
        router's rounding and tie offsets). Lucene, not Python, computes the figures: BM25Similarity
        reads the document length from its one-byte norm and computes in floats, which only its own
        code reproduces bit for bit. Impact indexes read no statistics: the index's own explanation."""
        return self._index.explain(query, docid, returned, k, stats=None if self.impact else self._g)

    def query_masses(self, texts: Sequence[str]) -> List[float]:
        if self.impact:
            return self._index.query_masses(texts)  # raises: no mass for impact indexes
        g = self._g
        return self._index._call(lambda s: list(s.js.queryMassesWith(list(texts), g)))

    def close(self) -> None:
        pass
