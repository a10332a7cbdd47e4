"""retr: retrieval with learned term and dimension weights.

Public API::

    import retrieval
    idx = retrieval.open_index("IDX")
    for hit in idx.search("what causes fever", k=5):
        print(hit.rank, hit.docid, hit.score, hit.title)
"""
from indexes.errors import FilterWarning, InputError, IndexFormatError, RetrError
from retrieval.types import Document, Hit, Hits, Query

__version__ = "0.1.0"


def __getattr__(name):
    # Lazy: `import retrieval` stays cheap (no JVM, no torch) until an index is used.
    if name == "open_index":  # a folder, or a sharded index (retrieval.sharded)
        from retrieval.sharded.index import open_index
        return open_index
    if name == "Index":
        from retrieval import index as _index
        return _index.Index
    if name in ("build_index", "index_corpus", "add_documents", "update_documents", "delete_documents", "compact"):
        from retrieval import writer as _writer
        return getattr(_writer, name)
    if name == "sync_index":
        from retrieval.sync import sync_index
        return sync_index
    if name in ("SearchRequest", "RequestError"):
        from retrieval import request as _request

        return getattr(_request, name)
    if name == "Searcher":
        from retrieval.searcher import Searcher

        return Searcher
    if name == "Client":
        from retrieval.client import Client
        return Client
    if name in ("read_corpus", "read_queries"):
        from retrieval import collections as _c
        return getattr(_c, name)
    raise AttributeError(f"module 'retrieval' has no attribute {name!r}")


__all__ = ["Document", "Query", "Hit", "Hits", "SearchRequest", "RequestError", "Searcher", "open_index", "build_index", "index_corpus", "add_documents",
           "update_documents", "delete_documents", "compact", "sync_index", "Index",
           "read_corpus", "read_queries", "Client", "RetrError", "FilterWarning", "InputError", "IndexFormatError"]
