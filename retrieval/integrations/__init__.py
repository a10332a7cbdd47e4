"""Retrievers for RAG frameworks, over an index folder's path (opened with :func:`retrieval.open_index`),
an :class:`retrieval.index.Index`, a sharded index or a :class:`retrieval.client.Client` (anything with
``search(query, k=..., ...)`` returning Hits); a source of another type, or a ``k`` that is not a
positive integer, is refused when the retriever is made:

- :mod:`retrieval.integrations.langchain`: ``RetrRetriever`` (LangChain, ``retr[langchain]``);
- :mod:`retrieval.integrations.llama_index`: ``RetrRetriever`` (LlamaIndex, ``retr[llamaindex]``).

Each hit's metadata carries the document's own metadata, then ``docid``, ``rank``,
``score``, ``scores`` (each retriever's raw score; for one retriever, its score) and
``title`` (these keys win over document metadata of the same name).

A retriever that names no ``retriever`` searches with the index's default pipeline (its tuned
one, else every sub-index fused: :func:`retrieval.request.default_pipeline`), and ``k`` defaults
to :data:`retrieval.request.DEFAULT_K` (a PyTerrier retriever: ``RUN_K``, a run's depth).

Search options come, each overriding the one before: the retriever's own fields (``k``,
``retriever``, ``fusion``, ``filter``), its ``search_kwargs`` (LangChain's usual form:
``search_kwargs={"k": 2}``; any other ``search`` argument such as ``depth``, ``dimsel``,
``text_chars``), then a call's own keyword arguments (LangChain's ``invoke(query, k=2)``).
The async paths never block the event loop: a ``Client`` (anything with ``asearch``) is
asked through ``httpx.AsyncClient``, an in-process ``Index`` in the loop's thread pool.
"""
from __future__ import annotations

import asyncio
import functools
from os import PathLike
from typing import Any, Dict, List, Optional

#: metadata keys that describe the ranking, not the document: kept out of what an LLM sees (a prompt that shows
#: scores invites the model to weigh them), and, with the docid, out of what an embedding model sees
RANKING_KEYS = ["rank", "score", "scores"]


def hit_metadata(hit) -> Dict[str, Any]:
    return {**(hit.metadata or {}), "docid": hit.docid, "rank": hit.rank, "score": hit.score,
            "scores": dict(hit.scores or {}), "title": hit.title}


def open_source(index: Any, needs: str = "search"):
    """What a retriever searches: an index folder path (a ``str`` or ``PathLike``; a sharded index's
    folder too) opened with :func:`retrieval.open_index`; an Index, Snapshot, sharded index or Client
    (anything with a ``needs`` method) as it is; anything else refused here, at construction, rather
    than with an AttributeError at the first search."""
    if isinstance(index, (str, PathLike)):
        import retrieval

        return retrieval.open_index(index)
    if not callable(getattr(index, needs, None)):
        raise TypeError(f"a retriever takes an index path, a retrieval.Index (or a sharded index) or a "
                        f"retrieval.Client, got {type(index).__name__}")
    return index


def check_k(k: Any) -> int:
    """``k`` as given when it is a positive integer (``True`` is not), else one ValueError."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return k


def search_options(k: int, retriever: Optional[str], fusion: Optional[str], filter: Optional[dict],
                   search_kwargs: Optional[dict], call_kwargs: Optional[dict] = None) -> Dict[str, Any]:
    """The ``search`` keyword arguments: the fields, then ``search_kwargs``, then the call's own."""
    from retrieval.request import SearchRequest

    opts: Dict[str, Any] = {"k": k, "retriever": retriever, "fusion": fusion, "filter": filter}
    opts.update(search_kwargs or {})
    opts.update(call_kwargs or {})
    check_k(opts["k"])
    opts["text"] = True
    extra = {key: opts.pop(key) for key in SOURCE_ONLY if key in opts}
    return {"request": SearchRequest.of(**opts), **extra}


#: search arguments that are a source's own, not the request's (a Client's ``text_chars``)
SOURCE_ONLY = ("text_chars",)


def run_search(source, query: str, options: Dict[str, Any]) -> List:
    return source.search(query, **options)


async def arun_search(source, query: str, options: Dict[str, Any]) -> List:
    """``source.asearch`` where it has one (a Client: async HTTP), else ``source.search`` in the
    running loop's default thread pool (an in-process Index: its search holds no event loop)."""
    if hasattr(source, "asearch"):
        return await source.asearch(query, **options)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(source.search, query, **options))
