"""Retrievers for RAG frameworks, over an :class:`retrieval.index.Index` or a
:class:`retrieval.client.Client` (anything with ``search(query, k=..., ...)`` returning Hits):

- :mod:`retrieval.integrations.langchain`: ``RetrRetriever`` (LangChain, ``retr[langchain]``);
- :mod:`retrieval.integrations.llama_index`: ``RetrRetriever`` (LlamaIndex, ``retr[llamaindex]``).

Each hit's metadata carries the document's own metadata, then ``docid``, ``rank``,
``score``, ``scores`` (each retriever's raw score; for one retriever, its score) and
``title`` (these keys win over document metadata of the same name).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional


def hit_metadata(hit, retriever: str) -> Dict[str, Any]:
    scores = dict(hit.scores) if hit.scores else {retriever: hit.score}
    return {**(hit.metadata or {}), "docid": hit.docid, "rank": hit.rank, "score": hit.score, "scores": scores,
            "title": hit.title}


def run_search(source, query: str, k: int, retriever: str, fusion: Optional[str], filter: Optional[dict],
               search_kwargs: Optional[dict]) -> List:
    return source.search(query, k=k, retriever=retriever, fusion=fusion, filter=filter, text=True,
                         **(search_kwargs or {}))
