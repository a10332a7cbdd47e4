"""A sharded index served as one index: the router's side.

:class:`ShardedServed` stands where the registry's ``Served`` stands for one folder, so the same
routes, auth, filters, 429 and metrics answer for it (``retr serve --index SHARDED`` with the
shards in this process, or ``retr serve --sharded SHARDED`` with each shard a Ray Serve deployment,
:mod:`retrieval.server.ray_shards`). Its :meth:`~ShardedServed.index` is the
:class:`retrieval.sharded.index.ShardedIndex` itself (its rounds: statistics, search, exact merge, fusion,
text; its ``snapshot``, ``docstore`` and ``highlight``), the same :class:`retrieval.searcher.Searcher`
surface a folder's ``Index`` gives the routes.

Writes go through :mod:`retrieval.ops` (each document to its own shard, :func:`indexes.sharded.shard_of`;
ids checked on every shard concerned before the first changes). Where the router reads the whole
sharded folder (shards in this process, ``retr serve --index SHARDED``; or Ray Serve replicas on this
machine or a shared file system) a write is one commit of every shard it touches, as ``retr add --index
SHARDED`` makes it (:mod:`retrieval.sharded.write`: in this process, or for Ray in one replica,
``commit_remote``), and every request reads one commit of every shard (in-process
:mod:`retrieval.sharded.pins`' ``Pins``; on Ray its ``Commits``, which names each call's generation). With Ray Serve replicas whose folders only
their own nodes hold, each shard's write is its own folder's commit, shard by shard, and each replica
follows its folder by itself.

Partial answers: while a shard does not answer, a search fails with 503 naming it; inside
:func:`partial_results` with ``allow=True`` the caller (the Ray one) answers for it as a shard
without documents would and records its name, which the route returns as ``"partial"``.
"""
from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence

from retrieval.server.gate import ApiError
from retrieval.sharded.index import Caller, ShardedIndex, call_each

WARM_QUERY = "warm up the retrievers"  # as registry.WARM_QUERY (not imported: the registry imports this module)
_state = threading.local()


class PartialScope:
    """One request's tolerance of missing shards, and the shards that were missing."""

    def __init__(self, allow: bool):
        self.allow = allow
        self.missing: List[str] = []

    def add(self, names: Sequence[str]) -> None:
        self.missing += [n for n in names if n not in self.missing]


@contextlib.contextmanager
def partial_results(allow: bool) -> Iterator[PartialScope]:
    """Within (in this thread): searches of a sharded index answer without shards that do not
    answer when ``allow``, naming them in the scope's ``missing``; else such a search is a 503."""
    prev = getattr(_state, "scope", None)
    _state.scope = scope = PartialScope(allow)
    try:
        yield scope
    finally:
        _state.scope = prev


def current_scope() -> Optional[PartialScope]:
    return getattr(_state, "scope", None)


def open_local_shards(path: Path):
    """The sharded manifest of ``path`` and a :class:`~retrieval.server.shard_replica.ServedShard`
    per shard in this process, each checked to be shard i of this index."""
    from retrieval.server.shard_replica import ServedShard
    from retrieval.sharded.shard import open_shards

    return open_shards(path, ServedShard)


class ShardedServed:
    """One served sharded index: ``shards`` in shard order (local ``ServedShard`` objects, or the
    Ray router's remote shards with ``call``), named ``shard_names`` in errors."""

    sharded = True
    one_commit = False  # whether a write goes through retrieval.sharded.write as one commit
    commit_remote = None  # (op, wire payload) -> documents: that commit made by a replica (Ray Serve)

    def __init__(self, name: str, path: Path, shards: Sequence[Any], shard_names: Sequence[str],
                 call: Optional[Caller] = None, on_close=None, pins=None):
        self.name, self.path = name, Path(path)
        self.shard_names = list(shard_names)
        from retrieval.sharded.pins import Pins

        # the commit every call reads: the index's rounds and call_one hold it alike
        self.pins = pins if pins is not None else Pins.of(self.path, list(shards))
        self.sharded_index = ShardedIndex(shards, call=call, path=self.path, pins=self.pins)
        self._call = call or call_each  # (the same caller the index uses)
        self.write_lock = threading.Lock()  # one write at a time from this server (each shard also locks)
        self._on_close = on_close

    @classmethod
    def local(cls, name: str, path: Path) -> "ShardedServed":
        record, shards = open_local_shards(Path(path))
        served = cls(name, path, shards, list(record["folders"]))
        served.one_commit = True  # the folder is here: a write is one commit of the sharded index
        return served

    def index(self) -> ShardedIndex:
        """What the routes search and read (never closed by them: :meth:`close` closes it)."""
        return self.sharded_index

    def call_one(self, i: int, method: str, *args) -> Any:
        ix = self.sharded_index
        with self.pins.reading() if self.pins is not None else contextlib.nullcontext():
            return self._call(ix.shards[i:i + 1], method, args, {})[0]  # local shards: the newest commit, held

    def warm(self) -> None:
        """A search per retriever through every shard (models loaded, JVMs started), a filtered one,
        and a document fetch."""
        ix = self.sharded_index
        for name in ix.retrievers:
            hits = ix.search(WARM_QUERY, k=1, retriever=name, text=True)
            if hits:
                ix.search(WARM_QUERY, k=1, retriever=name, text=False, filter={"docid": {"in": [hits[0].docid]}})

    # -- writes --------------------------------------------------------------------------------
    def write(self, op: str, payload: Sequence[Any]) -> int:
        """``add``/``update`` (``retrieval.types.Document`` objects) or ``delete`` (ids; those the
        index lacks are skipped); the number of documents changed. Where the sharded folder is
        here, one commit of it through :func:`retrieval.ops.write` (in this process, or made by a
        replica on Ray Serve); else each shard's part is its own folder's commit. Adding an id the
        index holds is :class:`~indexes.errors.DuplicateIds` before any shard changes."""
        from retrieval import ops

        if not payload:
            return 0
        if self.commit_remote is not None:  # a replica makes it (the router runs no JVM); outside any reading
            return int(self.commit_remote(op, _wire(op, payload)))
        if self.one_commit:
            return ops.write(self.path, op, payload, ops.WriteOptions(quiet=True, missing_ok=True)).changed
        return self._each_shard(op, payload)

    def _each_shard(self, op: str, payload: Sequence[Any]) -> int:
        """Shards that only their own nodes hold (Ray Serve): each shard's part (routed as
        :func:`retrieval.sharded.write.route`) changes that shard's folder alone; ids checked on
        every shard concerned first."""
        from indexes.errors import DuplicateIds
        from retrieval.sharded.write import route

        key = str if op == "delete" else (lambda d: d.docid)
        parts = route(payload, len(self.shard_names), key)
        have = [set(self.call_one(i, "present", [key(x) for x in part])) if part and op != "update" else set()
                for i, part in enumerate(parts)]
        there = set().union(*have)
        if op == "add" and there:
            raise DuplicateIds(len(there), next(d.docid for d in payload if d.docid in there), self.path)
        changed = 0
        for i, part in enumerate(parts):
            part = [d for d in part if d in have[i]] if op == "delete" else part
            if part:
                changed += int(self.call_one(i, "write", op, _wire(op, part))["documents"])
        return changed

    def close(self) -> None:
        try:
            self.sharded_index.close()
        finally:
            if self._on_close is not None:
                self._on_close()


def _wire(op: str, payload: Sequence[Any]) -> list:
    """A write's payload as it travels to a replica: ids, or documents as tuples."""
    return list(payload) if op == "delete" else [(d.docid, d.text, d.title, d.metadata) for d in payload]
