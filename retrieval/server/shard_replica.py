"""One shard as the server holds it: :class:`ServedShard` answers the shard protocol of
:mod:`retrieval.sharded` (``ShardSearcher``'s describe/stats/search/confidence/fetch) plus what
serving needs beyond searching: ``ping``, ``highlight``, ``present`` and the writes (``write``: add, update or delete of this shard alone,
under the shard folder's own writer lock, as ``retr add`` takes it; ``commit``: the router's write
as one commit of the whole sharded index, :mod:`retrieval.sharded.write`, made in this process).

A router that reads the sharded folder itself names, for each call, the generation of this shard
its request reads (:class:`retrieval.sharded.pins.Commits`); :meth:`ServedShard.reading` answers at
exactly that one, moving there first when it is newer, and refuses an older one it has left
(:class:`~retrieval.sharded.pins.MovedOn`), so that every request reads one commit of every shard.

The same object answers in the router's process (``retr serve --index SHARDED``: local shards) or
inside a Ray Serve replica (:class:`ShardReplica`, ``retr serve --sharded``): every argument and
answer is plain picklable data, so the router cannot tell the two apart except by their failures.
No FastAPI and no Ray are imported here: a replica loads only the shard's own code.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from indexes import sharded as sh
from indexes.errors import IndexFormatError
from retrieval.sharded.pins import Gate, MovedOn
from retrieval.sharded.shard import ShardSearcher, committed_at

#: a document on the wire: (docid, text, title, metadata)
DocTuple = Tuple[str, str, Optional[str], Optional[dict]]


class ServedShard(ShardSearcher):
    """A :class:`ShardSearcher` with the server's extra methods."""

    def __init__(self, path: Union[str, Path], record: Optional[dict] = None, position: Optional[int] = None):
        super().__init__(path, record, position)
        self._gate = Gate()  # calls at a named generation, or one move to another (reading)

    @contextlib.contextmanager
    def reading(self, at: Optional[int]) -> Iterator[None]:
        """The call inside reads generation ``at`` of this shard (None: whatever it reads now). A newer
        one is moved to first (:meth:`retrieval.sharded.shard.ShardReader.pin`) while no call of this shard runs; an
        older one, or one the folder has already moved past, is :class:`MovedOn`: no answer from
        another generation."""
        if at is None:
            yield
            return
        for _ in range(3):
            with self._gate.reading():
                now = self.index.generation
                if now == at:
                    yield
                    return
            if at < now:
                break
            with self._gate.moving():
                if self.index.generation < at:
                    self.index.pin(at)
        raise MovedOn(f"{self.path.name}: asked for generation {at}, which this replica can no longer open (it "
                      f"reads generation {self.index.generation}); retry with the sharded index's newest commit")

    def ping(self) -> Dict[str, Any]:
        """Alive and answering: the shard's position, generation and process."""
        return {"shard": self.position, "generation": self.index.generation, "pid": os.getpid()}

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

    def commit(self, op: str, payload: Union[Sequence[DocTuple], Sequence[str]]) -> Dict[str, Any]:
        """The router's write as ONE commit of the whole sharded index (``retrieval.sharded.write``:
        every shard's locks, each changed shard prepared, one replace of ``shards.json``), made here
        because a replica has the JVM and the models and the router has neither. Sent only where the
        whole sharded folder is on this node's file system (as on the router's); an id the index holds
        makes an add :class:`~indexes.errors.DuplicateIds` (re-raised in the router)."""
        from retrieval import ops
        from retrieval.types import Document

        root = self.path.parent
        if self.record is None or sh.read(root).get("id") != self.record.get("id"):
            raise IndexFormatError(f"{root}: is not the sharded index this replica serves")
        items = list(payload) if op == "delete" else [Document(d, t, ti, md) for d, t, ti, md in payload]
        return {"documents": ops.write(root, op, items, ops.WriteOptions(quiet=True, missing_ok=True)).changed}


class ShardReplica:
    """The Ray Serve deployment of one shard (``retr serve --sharded``): every replica opens the
    shard folder at ``path`` (a path on the node it runs on; placement puts it where the files are)
    and answers the router's calls. Its health check (run by Serve's controller) fails when the
    folder is gone or its newest generation cannot be opened, and Serve then replaces the replica.

    ``exact``: the router names the generation of every call (``at``, see :meth:`ServedShard.reading`)
    and the replica moves only when told; else it follows the commit record itself before each call."""

    def __init__(self, path: str, record: dict, position: int, exact: bool = False):
        self.shard = ServedShard(Path(path), record, position)
        self.shard.follows = not exact
        self.exact = exact
        self.shard.describe()  # load what the first call would: retrievers, fields

    def call(self, method: str, args: tuple = (), kwargs: Optional[dict] = None, at: Optional[int] = None):
        if method.startswith("_") or method not in CALLABLE:
            raise ValueError(f"not a shard method: {method!r}")
        with self.shard.reading(at):
            return getattr(self.shard, method)(*args, **(kwargs or {}))

    def check_health(self) -> None:
        s = self.shard
        if not s.path.is_dir():
            raise RuntimeError(f"{s.path}: the shard folder is gone")
        if not self.exact:
            s.sync()
            return
        # the newest commit's generation can be opened (held and let go: the router says when to move)
        s.index.hold(committed_at(sh.read(s.path.parent), int(s.position or 0))).release()


#: the methods a router may call on a shard
CALLABLE = frozenset({"describe", "stats", "search", "confidence", "configure", "fetch", "get", "count", "ping",
                      "summary", "highlight", "present", "write", "commit", "explain",
                      "vectors", "term_stats", "expand"})  # the last three: pseudo-relevance feedback
