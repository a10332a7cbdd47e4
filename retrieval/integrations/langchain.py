"""LangChain retriever over a retr ``Index`` or ``Client``::

    from retrieval.integrations.langchain import RetrRetriever
    r = RetrRetriever(index=retrieval.Client("http://127.0.0.1:8080"), k=5, retriever="bm25+dense")
    docs = r.invoke("does aspirin prevent colorectal cancer")   # langchain_core Documents

``page_content`` is the passage text (title first when ``with_title``); ``id`` the docid;
``metadata`` as described in :mod:`retrieval.integrations`.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from retrieval.integrations import hit_metadata, run_search
from retrieval.kinds import PRIMARY


class RetrRetriever(BaseRetriever):
    index: Any = Field(description="A retrieval.Index or retrieval.Client")
    k: int = 4
    retriever: str = PRIMARY
    fusion: Optional[str] = None
    filter: Optional[Dict[str, Any]] = None
    with_title: bool = False
    search_kwargs: Dict[str, Any] = Field(default_factory=dict)

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> List[Document]:
        hits = run_search(self.index, query, self.k, self.retriever, self.fusion, self.filter, self.search_kwargs)
        return [Document(page_content=f"{h.title}\n{h.text}" if self.with_title and h.title else h.text,
                         metadata=hit_metadata(h, self.retriever), id=h.docid) for h in hits]
