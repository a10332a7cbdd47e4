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

pyjnius builds a class's proxy on first use and that is not safe from several
threads at once (it crashed the JVM here under 8 concurrent searches), so every
class is loaded once under a lock, and each searcher's generator and analyser are
read once (:class:`FilteredSearcher`).
"""
from __future__ import annotations

import threading
from typing import Dict, Iterable, List, Tuple

from indexes import jvm

Result = List[Tuple[str, float]]
CONTENTS = "contents"  # Anserini's Constants.CONTENTS
ID = "id"              # Anserini's Constants.ID: a StringField on every document

_lock = threading.Lock()
_classes: Dict[str, object] = {}


def _cls(name: str):
    c = _classes.get(name)
    if c is None:
        with _lock:
            c = _classes.get(name)
            if c is None:
                c = _classes[name] = jvm.autoclass(name)
    return c


def _load_all() -> None:
    for n in ("org.apache.lucene.util.BytesRef", "java.util.ArrayList", "java.util.HashMap", "java.lang.Float",
              "org.apache.lucene.search.TermInSetQuery", "org.apache.lucene.search.BooleanClause$Occur",
              "org.apache.lucene.search.BooleanQuery$Builder"):
        _cls(n)


def id_filter(docids: Iterable[str]):
    """A Lucene ``TermInSetQuery`` on the id field (reusable across indexes and threads)."""
    _load_all()
    BytesRef = _cls("org.apache.lucene.util.BytesRef")
    terms = _cls("java.util.ArrayList")()
    for d in docids:
        terms.add(BytesRef(d.encode("utf-8")))
    return _cls("org.apache.lucene.search.TermInSetQuery")(ID, terms)


class FilteredSearcher:
    """Filtered search over one Anserini ``SimpleSearcher`` or ``SimpleImpactSearcher``."""

    def __init__(self, searcher, impact: bool):
        _load_all()
        self.searcher, self.impact = searcher, impact
        with _lock:
            self.generator = searcher.generator
            self.analyzer = None if impact else searcher.analyzer
        self._must = _cls("org.apache.lucene.search.BooleanClause$Occur").MUST
        self._filter = _cls("org.apache.lucene.search.BooleanClause$Occur").FILTER

    def text_query(self, text: str):
        """The query ``SimpleSearcher.search(text, k)`` runs: its generator over its analyser."""
        return self.generator.buildQuery(CONTENTS, self.analyzer, text)

    def impact_query(self, weights: Dict[str, int]):
        """The query ``SimpleImpactSearcher.search(map, k)`` runs for integer term weights."""
        m = _cls("java.util.HashMap")()
        JFloat = _cls("java.lang.Float")
        for t, w in weights.items():
            m.put(t, JFloat(float(w)))
        return self.generator.buildQuery(CONTENTS, m)

    def search(self, query, k: int, flt) -> Result:
        """Top ``k`` of ``query`` among the documents ``flt`` (an :func:`id_filter`) allows."""
        b = _cls("org.apache.lucene.search.BooleanQuery$Builder")()
        b.add(query, self._must)
        b.add(flt, self._filter)
        q = b.build()
        hits = self.searcher._search(q, "", int(k)) if self.impact else self.searcher.search(q, int(k))
        return [(h.docid, float(h.score)) for h in hits]
