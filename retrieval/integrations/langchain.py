"""LangChain retriever over a retr index path, ``Index`` or ``Client``::

    from retrieval.integrations.langchain import RetrRetriever
    r = RetrRetriever(index=retrieval.Client("http://127.0.0.1:8080"), k=5, retriever="bm25+dense")
    docs = r.invoke("does aspirin prevent colorectal cancer")   # langchain_core Documents
    docs = r.invoke("statins", k=2, filter={"year": {"gte": 2000}})   # per call, as LangChain passes kwargs
    r = RetrRetriever(index=idx, search_kwargs={"k": 2, "depth": 200})  # as VectorStoreRetriever takes them
    r = RetrRetriever(index="IDX")                                       # a folder path is opened

``page_content`` is the passage text (title first when ``with_title``); ``id`` the docid;
``metadata`` as described in :mod:`retrieval.integrations` (so are the search options: the fields,
then ``search_kwargs``, then the call's keyword arguments). ``ainvoke`` is truly async: over a
``Client`` it searches through ``httpx.AsyncClient``, over an in-process ``Index`` in a worker thread.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, field_validator

from retrieval.integrations import arun_search, check_k, hit_metadata, open_source, run_search, search_options
from retrieval.request import DEFAULT_K

_LANGCHAIN_ONLY = ("verbose",)  # invoke() keyword arguments LangChain itself reads


class RetrRetriever(BaseRetriever):
    index: Any = Field(description="An index folder's path, a retrieval.Index (or sharded index) or a retrieval.Client")
    k: int = DEFAULT_K
    retriever: Optional[str] = None
    fusion: Optional[str] = None
    filter: Optional[Dict[str, Any]] = None
    with_title: bool = False
    search_kwargs: Dict[str, Any] = Field(default_factory=dict,
                                          description="Further search arguments (k, filter, depth, dimsel, ...); "
                                                      "they override the fields")

    model_config = ConfigDict(arbitrary_types_allowed=True)

    # "before": a path is opened, and k checked as given (pydantic's own int would take 2.0 or "2")
    @field_validator("index", mode="before")
    @classmethod
    def _open_index(cls, v: Any) -> Any:
        return open_source(v)

    @field_validator("k", mode="before")
    @classmethod
    def _check_k(cls, v: Any) -> int:
        return check_k(v)

    def _options(self, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        call = {key: v for key, v in kwargs.items() if key not in _LANGCHAIN_ONLY}
        return search_options(self.k, self.retriever, self.fusion, self.filter, self.search_kwargs, call)

    def _documents(self, hits) -> List[Document]:
        return [Document(page_content=f"{h.title}\n{h.text}" if self.with_title and h.title else h.text,
                         metadata=hit_metadata(h), id=h.docid) for h in hits]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> List[Document]:
        opts = self._options(kwargs)
        return self._documents(run_search(self.index, query, opts))

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **kwargs: Any) -> List[Document]:
        opts = self._options(kwargs)
        return self._documents(await arun_search(self.index, query, opts))
