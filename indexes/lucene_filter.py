"""Filtered Lucene search: the query of an Anserini searcher, restricted to an
allow-list of document ids by a non-scoring FILTER clause.

``BooleanQuery(MUST query, FILTER TermInSetQuery(id, allowed))`` scores every
matching document exactly as the query alone does (a FILTER clause adds nothing to
the score), and Lucene collects the top k among the allowed documents only, so the
result is the first k allowed documents of the unfiltered ranking. The query is
built by the searcher's own generator and analyser, and the search runs through
the searcher's own result path (its sort, its score-ties reranker), so scores and
order are those of the unfiltered search. Kept apart from :class:`LuceneIndex`'s
search path on purpose: it relies only on Anserini's public ``search(Query, k)``
(and, for impact searchers, the protected ``_search``, reached through pyjnius).
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

from indexes import jvm

Result = List[Tuple[str, float]]
CONTENTS = "contents"  # Anserini's Constants.CONTENTS
ID = "id"              # Anserini's Constants.ID: a StringField on every document


def id_filter(docids: Iterable[str]):
    """A Lucene ``TermInSetQuery`` on the id field (reusable across indexes and threads)."""
    BytesRef = jvm.autoclass("org.apache.lucene.util.BytesRef")
    terms = jvm.autoclass("java.util.ArrayList")()
    for d in docids:
        terms.add(BytesRef(d.encode("utf-8")))
    return jvm.autoclass("org.apache.lucene.search.TermInSetQuery")(ID, terms)


def _with_filter(query, flt):
    Occur = jvm.autoclass("org.apache.lucene.search.BooleanClause$Occur")
    b = jvm.autoclass("org.apache.lucene.search.BooleanQuery$Builder")()
    b.add(query, Occur.MUST)
    b.add(flt, Occur.FILTER)
    return b.build()


def text_query(searcher, text: str):
    """The query ``SimpleSearcher.search(text, k)`` runs: its generator over its analyser."""
    return searcher.generator.buildQuery(CONTENTS, searcher.analyzer, text)


def impact_query(searcher, weights: Dict[str, int]):
    """The query ``SimpleImpactSearcher.search(map, k)`` runs for integer term weights."""
    m = jvm.autoclass("java.util.HashMap")()
    JFloat = jvm.autoclass("java.lang.Float")
    for t, w in weights.items():
        m.put(t, JFloat(float(w)))
    return searcher.generator.buildQuery(CONTENTS, m)


def search_filtered(searcher, query, k: int, flt, impact: bool = False) -> Result:
    """Top ``k`` of ``query`` among the documents ``flt`` (an :func:`id_filter`) allows."""
    q = _with_filter(query, flt)
    hits = searcher._search(q, "", int(k)) if impact else searcher.search(q, int(k))
    return [(h.docid, float(h.score)) for h in hits]
