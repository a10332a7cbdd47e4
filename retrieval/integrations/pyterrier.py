"""retr's retrievers as PyTerrier transformers (``retr[pyterrier]``; PyTerrier 1.1)::

    import pyterrier as pt
    from retrieval.integrations.pyterrier import RetrRetriever
    bm25 = RetrRetriever("IDX", retriever="bm25", k=100)          # an index path, an Index or a Client
    hybrid = RetrRetriever(index, retriever="bm25+dense")        # any pipeline spec retr search takes
    res = bm25(topics)                                           # topics: a frame with qid, query
    pt.Experiment([bm25, hybrid % 10], topics, qrels, eval_metrics=["ndcg_cut_10", "map"])

``transform`` takes a query frame (``qid``, ``query``, and any further query columns, which are
kept) and returns PyTerrier's results frame: the query columns, then ``docno``, ``score``, ``rank``
(0-based, PyTerrier's numbering; :mod:`retrieval.frames`), and ``title``, ``text`` with
``text=True``. Each query's top ``k`` come from one ``batch_search`` of the source, so the
results are the ones ``Index.batch_search`` returns. ``>>``, ``%`` (a following rank cut-off is
folded into ``k`` when PyTerrier compiles the pipeline: ``fuse_rank_cutoff``), ``+``, ``**`` and
``pt.Experiment`` work as on any transformer.

It retrieves; it does not re-rank: an input that already has a ``docno`` column (results of an
earlier stage) is refused by PyTerrier's own validation error. It needs none of PyTerrier's Java
(Terrier) parts: nothing here calls ``pt.java.init()``, so ``pt.java.started()`` stays False.
"""
from __future__ import annotations

from os import PathLike
from typing import Any, Dict, List, Optional, Union

import pyterrier as pt

from retrieval.frames import TEXT_COLUMNS
from retrieval.integrations import check_k, open_source
from retrieval.request import RUN_K, SearchRequest

RESULT_COLUMNS = ["docno", "score", "rank"]


class RetrRetriever(pt.Transformer):
    """A retr pipeline (``retriever``: ``bm25``, ``dense``, ``bm25+dense``, ``bm25+dense:rrf(k=60)``, ...)
    over ``index`` (a folder path, a :class:`retrieval.Index` or a :class:`retrieval.Client`) as a
    PyTerrier retriever returning each query's top ``k``. ``fusion``, ``filter`` and ``threads`` are
    ``batch_search``'s; ``search_kwargs`` any of its other arguments (``depth``, ``dimsel``, ...)."""

    def __init__(self, index: Union[str, PathLike, Any], retriever: Optional[str] = None, k: int = RUN_K,
                 fusion: Optional[str] = None, filter: Optional[Dict[str, Any]] = None, text: bool = False,
                 threads: int = 1, search_kwargs: Optional[Dict[str, Any]] = None):
        self.k = check_k(k)
        self.index = open_source(index, "batch_search")
        self.retriever, self.fusion, self.filter = retriever, fusion, filter
        self.text, self.threads, self.search_kwargs = text, threads, dict(search_kwargs or {})
        # the search options as one request, checked here (a bad one is refused at construction);
        # batch_search's own arguments (batch_size, quiet, a Client's text_chars) go beside it
        given = {"k": self.k, "retriever": retriever, "fusion": fusion, "filter": filter, "text": text,
                 **self.search_kwargs}
        self._batch_kwargs = {key: given.pop(key) for key in ("batch_size", "quiet", "text_chars") if key in given}
        self.request = SearchRequest.of(**given)

    def __repr__(self) -> str:
        return f"RetrRetriever({self.retriever!r}, k={self.k})"

    def _validate(self, inp) -> None:
        pt.validate.columns(inp, includes=["qid", "query"], excludes=["docno"], context=self)

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        """The output columns for these input columns, without searching (PyTerrier's inspection)."""
        self._validate(input_columns)
        return [*self._query_columns(input_columns), *RESULT_COLUMNS, *(TEXT_COLUMNS if self.text else ())]

    @staticmethod
    def _query_columns(columns) -> List[str]:
        """qid, query, then the input's other columns, in their order (all of them describe the query)."""
        return ["qid", "query", *(c for c in columns if c not in ("qid", "query"))]

    def transform(self, inp):
        self._validate(inp)
        qcols = self._query_columns(list(inp.columns))
        queries = inp[qcols].drop_duplicates(subset=["qid", "query"])
        res = self.index.batch_search(queries[["qid", "query"]], threads=self.threads, as_frame=True,
                                      request=self.request, **self._batch_kwargs)
        # joined on the qid as text (batch_search's ids), so the input's qid column keeps its own type
        res = res.drop(columns=["query"]).rename(columns={"qid": "_qid"})
        out = queries.assign(_qid=queries["qid"].map(str)).merge(res, on="_qid", how="inner", sort=False)
        return out[self.transform_outputs(list(inp.columns))].reset_index(drop=True)

    def fuse_rank_cutoff(self, k: int) -> Optional["RetrRetriever"]:
        """``self % k``, folded into one search of the smaller ``k`` (PyTerrier's compile step)."""
        if k >= self.k:
            return self
        return RetrRetriever(self.index, self.retriever, k, self.fusion, self.filter, self.text, self.threads,
                             self.search_kwargs)
