"""The one search surface a folder (:class:`retrieval.index.Index`) and a sharded folder
(:class:`retrieval.sharded.index.ShardedIndex`) both implement, with the same signatures
(``tests/retrieval/test_contract.py`` compares them). Code that searches takes a
:class:`Searcher` and does not ask which one it holds."""
from __future__ import annotations

from typing import Dict, List, Optional, Protocol, Sequence, Tuple, runtime_checkable

from typing_extensions import Unpack

from retrieval.fusion import Pipeline
from retrieval.request import BatchOptions, DefaultPipeline, SearchOptions, SearchRequest
from retrieval.types import Document, Hit, Hits, QueriesArg


@runtime_checkable
class Searcher(Protocol):
    """Search, explain and read one index, whatever it is made of."""

    @property
    def retrievers(self) -> List[str]: ...

    def __len__(self) -> int: ...

    def info(self) -> dict: ...

    def fields(self) -> Dict[str, int]: ...

    def default_pipeline(self) -> DefaultPipeline: ...

    def pipeline(self, retriever: Optional[str] = None, fusion: Optional[str] = None) -> Pipeline: ...

    def search(self, query: str, k: int = ..., retriever: Optional[str] = None, *,
               request: Optional[SearchRequest] = None, **options: Unpack[SearchOptions]) -> Hits: ...

    def batch_search(self, queries: QueriesArg, qids: Optional[Sequence[str]] = None, k: int = ...,
                     retriever: Optional[str] = None, *, request: Optional[SearchRequest] = None,
                     **options: Unpack[BatchOptions]) -> Dict[str, List[Hit]]: ...

    def search_df(self, query: str, k: int = ..., retriever: Optional[str] = None, fusion: Optional[str] = None,
                  qid: str = "1", text: bool = False, **options): ...

    def explain(self, query: str, docid: str, retriever: Optional[str] = None, fusion: Optional[str] = None,
                depth: Optional[int] = None, dimsel=None, filter=None,
                request: Optional[SearchRequest] = None) -> dict: ...

    def highlight(self, query: str, texts: Sequence[str], retriever: Optional[str] = None,
                  fusion: Optional[str] = None) -> Optional[List[List[Tuple[int, int]]]]: ...

    def confidences(self, texts: Sequence[str], lists: Dict[str, Sequence[list]]) -> List[dict]: ...

    def get(self, docid: str) -> Optional[Document]: ...

    def snapshot(self): ...

    def refresh(self) -> bool: ...

    def close(self) -> None: ...

    @property
    def manifest(self) -> dict: ...

    @property
    def generation(self) -> int: ...

    def configure(self, retriever: str = ..., **options) -> List[str]: ...

    def unknown_fields(self, filter) -> List[str]: ...

    def local(self) -> list: ...

    def begin_change(self, what: str): ...


#: the methods and properties of :class:`Searcher`, in the order above
SURFACE = ("retrievers", "__len__", "info", "fields", "default_pipeline", "pipeline", "search", "batch_search",
           "search_df", "explain", "highlight", "confidences", "get", "snapshot", "refresh", "close",
           "manifest", "generation", "configure", "unknown_fields", "local", "begin_change")
