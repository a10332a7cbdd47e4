"""One shard as the server holds it: :class:`ServedShard` answers the shard protocol of
:mod:`retrieval.sharded` (``ShardSearcher``'s describe/stats/search/confidence/fetch) plus what
serving needs beyond searching: ``ping``, ``summary`` (the info endpoint's part of this shard),
``highlight``, ``present`` and the writes (``write``: add, update or delete, under the shard
folder's own writer lock, as ``retr add`` takes it).

The same object answers in the router's process (``retr serve --index SHARDED``: local shards) or
inside a Ray Serve replica (:class:`ShardReplica`, ``retr serve --sharded``): every argument and
answer is plain picklable data, so the router cannot tell the two apart except by their failures.
No FastAPI and no Ray are imported here: a replica loads only the shard's own code.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from retrieval.sharded.shard import ShardSearcher

#: a document on the wire: (docid, text, title, metadata)
DocTuple = Tuple[str, str, Optional[str], Optional[dict]]


class ServedShard(ShardSearcher):
    """A :class:`ShardSearcher` with the server's extra methods."""

    def ping(self) -> Dict[str, Any]:
        """Alive and answering: the shard's position, generation and process."""
        return {"shard": self.position, "generation": self.index.generation, "pid": os.getpid()}

    def summary(self) -> Dict[str, Any]:
        """This shard's part of ``GET /v1/{index}``: its generation, live documents, sub-index
        entries (kind, documents, config) and its manifest's times."""
        with self.index.snapshot() as s:
            m, n, gen = s.manifest, len(s), s.generation
        subs = {name: {"kind": e.get("kind", ""), "doc_count": e.get("doc_count"), "config": e.get("config", {})}
                for name, e in m.get("subindexes", {}).items()}
        return {"shard": self.position, "folder": self.path.name, "generation": gen, "documents": n,
                "subindexes": subs, "created_at": m.get("created_at"), "updated_at": m.get("updated_at")}

    def highlight(self, query: str, texts: Sequence[str], retriever: str) -> Optional[List[List[Tuple[int, int]]]]:
        """:meth:`retrieval.index.Index.highlight` (the analysis of a query's words is the same in
        every shard, so any shard answers for texts of any shard)."""
        spans = self.index.highlight(query, list(texts), retriever=retriever)
        return None if spans is None else [[(int(a), int(b)) for a, b in row] for row in spans]

    def present(self, docids: Sequence[str]) -> List[str]:
        """Those of ``docids`` this shard's current generation holds."""
        return list(self.index.docstore.get_many(list(docids)))

    def write(self, op: str, payload: Union[Sequence[DocTuple], Sequence[str]]) -> Dict[str, Any]:
        """``add``/``update`` (documents as :data:`DocTuple`) or ``delete`` (ids) on this shard's
        folder through :mod:`retrieval.writer` (its writer lock; one generation); the count changed."""
        from retrieval import writer
        from retrieval.types import Document

        rep: Dict[str, Any] = {}
        if op == "delete":
            writer.delete_documents(self.index, list(payload), quiet=True, report=rep).close()
            n = len(payload)
        else:
            docs = [Document(d, t, ti, md) for d, t, ti, md in payload]
            fn = writer.add_documents if op == "add" else writer.update_documents
            fn(self.index, docs, quiet=True, report=rep).close()  # the writer's reopened Index
            n = len(docs)
        self._follow()  # (a replica moves itself; an in-process router moves all its shards at its next call)
        return {"shard": self.position, "documents": n, "total": len(self.index)}


class ShardReplica:
    """The Ray Serve deployment of one shard (``retr serve --sharded``): every replica opens the
    shard folder at ``path`` (a path on the node it runs on; placement puts it where the files are)
    and answers the router's calls. Its health check (run by Serve's controller) fails when the
    folder is gone or its newest generation cannot be opened, and Serve then replaces the replica."""

    def __init__(self, path: str, record: dict, position: int):
        self.shard = ServedShard(Path(path), record, position)
        self.shard.describe()  # load what the first call would: retrievers, fields

    def call(self, method: str, args: tuple = (), kwargs: Optional[dict] = None):
        if method.startswith("_") or method not in CALLABLE:
            raise ValueError(f"not a shard method: {method!r}")
        return getattr(self.shard, method)(*args, **(kwargs or {}))

    def check_health(self) -> None:
        if not self.shard.path.is_dir():
            raise RuntimeError(f"{self.shard.path}: the shard folder is gone")
        self.shard.sync()


#: the methods a router may call on a shard
CALLABLE = frozenset({"describe", "stats", "search", "confidence", "configure", "fetch", "get", "count", "ping",
                      "summary", "highlight", "present", "write"})
