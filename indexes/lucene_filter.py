"""Filtered Lucene search: the query of a retr ``HitSearcher`` (Anserini's own query
generator and analyser), restricted to an allow-list of document ids by a non-scoring
FILTER clause.

``BooleanQuery(MUST query, FILTER TermInSetQuery(id, allowed))`` scores every matching
document exactly as the query alone does (a FILTER clause adds nothing to the score), and
Lucene collects the top k among the allowed documents only, so the result is the first k
allowed documents of the unfiltered ranking. It runs through the helper's own result path
(Lucene's collector with the (score, id) sort, then Anserini's score rounding); the
helper's exhaustive path does not take such a query and is skipped. Kept apart from
:class:`indexes.lucene.LuceneIndex`'s search path on purpose.

pyjnius builds a class's proxy on first use and that is not safe from several threads at
once (it crashed the JVM here under 8 concurrent searches), so every class is loaded once
under a lock.
"""
from __future__ import annotations

import threading
from typing import Dict, Iterable

from indexes import jvm

ID = "id"  # Anserini's Constants.ID: a StringField on every document

_lock = threading.Lock()
_classes: Dict[str, object] = {}
_NAMES = ("org.apache.lucene.util.BytesRef", "java.util.ArrayList", "org.apache.lucene.search.TermInSetQuery",
          "org.apache.lucene.search.BooleanClause$Occur", "org.apache.lucene.search.BooleanQuery$Builder")


def _cls(name: str):
    c = _classes.get(name)
    if c is None:
        with _lock:
            if not _classes:
                for n in _NAMES:
                    _classes[n] = jvm.autoclass(n)
            c = _classes.get(name) or _classes.setdefault(name, jvm.autoclass(name))
    return c


def id_filter(docids: Iterable[str]):
    """A Lucene ``TermInSetQuery`` on the id field (reusable across indexes and threads)."""
    BytesRef = _cls("org.apache.lucene.util.BytesRef")
    terms = _cls("java.util.ArrayList")()
    for d in docids:
        terms.add(BytesRef(d.encode("utf-8")))
    return _cls("org.apache.lucene.search.TermInSetQuery")(ID, terms)


def with_filter(query, flt):
    Occur = _cls("org.apache.lucene.search.BooleanClause$Occur")
    b = _cls("org.apache.lucene.search.BooleanQuery$Builder")()
    b.add(query, Occur.MUST)
    b.add(flt, Occur.FILTER)
    return b.build()


def run_filtered(helper, query, k: int, flt) -> bytes:
    """The packed hits of ``query`` restricted by ``flt``, from a ``retr.lucene.HitSearcher``
    (its private ``run``, reached through pyjnius, as its public searches use it)."""
    return helper.run(with_filter(query, flt), int(k)).pack().tostring()
