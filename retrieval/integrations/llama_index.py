"""LlamaIndex retriever over a retr ``Index`` or ``Client``::

    from retrieval.integrations.llama_index import RetrRetriever
    r = RetrRetriever(retrieval.open_index("IDX"), k=5, retriever="bm25")
    nodes = r.retrieve("does aspirin prevent colorectal cancer")   # NodeWithScore list

Each node is a ``TextNode`` whose id is the docid and whose text is the passage;
``score`` is the hit's (fused) score; metadata as in :mod:`retrieval.integrations`.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from retrieval.integrations import hit_metadata, run_search
from retrieval.kinds import PRIMARY


class RetrRetriever(BaseRetriever):
    def __init__(self, index: Any, k: int = 4, retriever: str = PRIMARY, fusion: Optional[str] = None,
                 filter: Optional[Dict[str, Any]] = None, search_kwargs: Optional[Dict[str, Any]] = None, **kwargs):
        super().__init__(**kwargs)
        self.index, self.k, self.retriever, self.fusion = index, k, retriever, fusion
        self.filter, self.search_kwargs = filter, dict(search_kwargs or {})

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        hits = run_search(self.index, query_bundle.query_str, self.k, self.retriever, self.fusion, self.filter,
                          self.search_kwargs)
        return [NodeWithScore(node=TextNode(id_=h.docid, text=h.text, metadata=hit_metadata(h, self.retriever)),
                              score=h.score) for h in hits]
