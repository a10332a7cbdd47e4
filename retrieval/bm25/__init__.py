"""BM25: Lucene over analysed text, the sub-index every folder starts with.

- ``subindex.py``: :class:`BM25Spec`, the ``bm25`` sub-index kind and its retriever.
- ``options.py``: what it adds to the command line, as data (``--k1``, ``--b``, ``--docvectors``; for `retr search` also
  Pyserini's ``--bm25``, ``--rm3``, ``--rocchio`` and the feedback parameters).
- ``prf.py``: pseudo-relevance feedback settings (RM3, Rocchio: Pyserini's names and defaults), run by
  Anserini's own rerankers through ``indexes.lucene.LuceneIndex.set_feedback``.
"""
from retrieval.bm25.subindex import BM25Spec, check_bm25

__all__ = ["BM25Spec", "check_bm25"]
