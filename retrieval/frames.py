"""Search results and topics as pandas DataFrames with PyTerrier's column names.

- results: ``qid``, ``query``, ``docno``, ``score``, ``rank``, one row per hit, each query's hits
  best first; ``rank`` is 0-based, as PyTerrier numbers ranks (``pyterrier.model.FIRST_RANK`` is
  0), so it is a :class:`~retrieval.types.Hit`'s ``rank - 1``. With ``text=True`` the passages'
  ``title`` and ``text`` follow. (:meth:`Index.search_df`, ``Index.batch_search(as_frame=True)``
  and the same on :class:`retrieval.client.Client` all come here.)
- topics: ``qid``, ``query`` (:func:`topics_frame`, :func:`read_topics`); ``batch_search`` takes
  such a frame as its queries.

Run files and qrels to and from frames are the evaluator's (:mod:`eval.frames`); ``eval.evaluate``
takes these result frames as they are. pandas is imported when a frame is made, never at
``import retrieval`` (``retr --help`` does not load it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Union

from retrieval.types import Hit, Query

RESULT_COLUMNS = ("qid", "query", "docno", "score", "rank")
TEXT_COLUMNS = ("title", "text")
FIRST_RANK = 0  # PyTerrier's first rank (pyterrier.model.FIRST_RANK); a Hit's rank starts at 1


def _pandas():
    import pandas as pd

    return pd


def hits_frame(results: Mapping[str, List[Hit]], queries: Mapping[str, str], text: bool = False):
    """``{qid: hits}`` (what ``batch_search`` returns) as a results frame, queries in the order of
    ``results``; ``queries`` gives each qid's text for the ``query`` column."""
    import numpy as np

    pd = _pandas()
    # Column by column from the hits themselves: a tuple per row made the cyclic GC walk every Hit
    # (a million rows took 0.8 s in tuples alone); a query's columns are its values repeated.
    qids = list(results)
    counts = [len(results[q]) for q in qids]
    hits = [h for q in qids for h in results[q]]
    n = len(hits)
    frame = pd.DataFrame({
        "qid": pd.Series(np.repeat(np.array(qids, dtype=object), counts), dtype=object).astype(str),
        "query": pd.Series(np.repeat(np.array([queries.get(q, "") for q in qids], dtype=object), counts),
                           dtype=object).astype(str),
        "docno": pd.Series([h.docid for h in hits], dtype=object).astype(str),
        "score": np.fromiter((h.score for h in hits), dtype=np.float64, count=n),
        "rank": np.fromiter((h.rank for h in hits), dtype=np.int64, count=n) - 1 + FIRST_RANK,
    })
    if text:
        frame["title"] = pd.Series([h.title or "" for h in hits], dtype=object).astype(str)
        frame["text"] = pd.Series([h.text or "" for h in hits], dtype=object).astype(str)
    return frame


def query_texts(queries: List[Query]) -> Dict[str, str]:
    return {q.qid: q.text for q in queries}


def search_df(source, query: str, qid: str = "1", text: bool = False, **options):
    """One query's hits from ``source.search`` (an Index, a Snapshot, a Client) as a results frame
    (``qid`` defaults to ``"1"``, as PyTerrier's ``Transformer.search`` has it)."""
    return hits_frame({str(qid): source.search(query, text=text, **options)}, {str(qid): query}, text)


def topics_frame(queries: Union[List[Query], Mapping[str, str]]):
    """Queries (a list of :class:`Query` or ``{qid: text}``) as a topics frame: ``qid``, ``query``."""
    pd = _pandas()
    pairs = list(queries.items()) if isinstance(queries, Mapping) else [(q.qid, q.text) for q in queries]
    return pd.DataFrame({"qid": pd.Series([str(q) for q, _ in pairs], dtype=object).astype(str),
                         "query": pd.Series([t for _, t in pairs], dtype=object).astype(str)})


def read_topics(path: Union[str, Path]):
    """A queries file in any form ``retr search`` reads (BEIR JSONL, TSV, TREC topics; optionally
    gzip) as a topics frame; a BEIR folder's ``queries.jsonl`` when ``path`` is the folder."""
    from retrieval.collections import read_queries

    return topics_frame(read_queries(path))


def batch_result(results: Dict[str, List[Hit]], queries: List[Query], text: bool, as_frame: bool):
    """What ``batch_search`` returns: ``results`` as they are, or with ``as_frame`` as a results frame."""
    return hits_frame(results, query_texts(queries), text) if as_frame else results


__all__ = ["RESULT_COLUMNS", "TEXT_COLUMNS", "FIRST_RANK", "hits_frame", "search_df", "topics_frame", "read_topics"]
