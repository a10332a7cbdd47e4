"""LlamaIndex retriever over a retr index path, ``Index`` or ``Client``::

    from retrieval.integrations.llama_index import RetrRetriever
    r = RetrRetriever("IDX", k=5, retriever="bm25")             # or retrieval.open_index("IDX"), a Client
    nodes = r.retrieve("does aspirin prevent colorectal cancer")   # NodeWithScore list
    nodes = await r.aretrieve("statins")                          # without blocking the event loop

Each node is a ``TextNode`` whose id is the docid and whose text is the passage;
``score`` is the hit's (fused) score; metadata as in :mod:`retrieval.integrations`. The
ranking's keys (``rank``, ``score``, ``scores``) are in the node's ``excluded_llm_metadata_keys``
(and, with ``docid``, in ``excluded_embed_metadata_keys``), so scores stay out of a prompt:
``get_content(MetadataMode.LLM)`` shows the document's metadata, docid and title. ``aretrieve`` searches a ``Client`` through ``httpx.AsyncClient`` and
an in-process ``Index`` in a worker thread.
"""
from __future__ import annotations

from os import PathLike
from typing import Any, Dict, List, Optional, Union

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from retrieval.integrations import RANKING_KEYS, arun_search, check_k, hit_metadata, open_source, run_search, search_options
from retrieval.request import DEFAULT_K


class RetrRetriever(BaseRetriever):
    def __init__(self, index: Union[str, PathLike, Any], k: int = DEFAULT_K, retriever: Optional[str] = None,
                 fusion: Optional[str] = None,
                 filter: Optional[Dict[str, Any]] = None, search_kwargs: Optional[Dict[str, Any]] = None, **kwargs):
        super().__init__(**kwargs)
        self.k = check_k(k)
        self.index = open_source(index)
        self.retriever, self.fusion = retriever, fusion
        self.filter, self.search_kwargs = filter, dict(search_kwargs or {})

    def _options(self) -> Dict[str, Any]:
        return search_options(self.k, self.retriever, self.fusion, self.filter, self.search_kwargs)

    @staticmethod
    def _nodes(hits) -> List[NodeWithScore]:
        return [NodeWithScore(node=TextNode(id_=h.docid, text=h.text, metadata=hit_metadata(h),
                                            excluded_llm_metadata_keys=list(RANKING_KEYS),
                                            excluded_embed_metadata_keys=["docid", *RANKING_KEYS]),
                              score=h.score) for h in hits]

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        opts = self._options()
        return self._nodes(run_search(self.index, query_bundle.query_str, opts))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        opts = self._options()
        return self._nodes(await arun_search(self.index, query_bundle.query_str, opts))
