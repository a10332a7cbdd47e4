"""How an in-process :class:`~retrieval.sharded.index.ShardedIndex` moves all its shards to a new
commit at once, so that no search sees part of a multi-shard write (:mod:`retrieval.sharded.write`).

Every shard's :class:`~retrieval.index.Index` is pinned: it reads the generation ``shards.json``'s
``generations`` names for it (or a later one that shard's own folder committed alone) and never moves
by itself. Before each call of the router (a search with all its rounds, a count, a fetch), one
``os.stat`` of ``shards.json`` and of each shard's ``manifest.json`` tells whether anything moved; if
so, :meth:`Pins.sync` opens every shard's new generation (held: no writer removes it), checks that
``shards.json`` did not change meanwhile (else starts again: a writer committed between), and only
then installs them all, while no call is running (:class:`Gate`). A search's rounds thus all read one
commit of every shard.

Shards served by Ray Serve replicas (``retr serve --sharded``) whose folder the router reads too (one
machine, or a shared file system) are moved the same way from the router: :class:`Commits` reads which
generation of each shard the newest commit names (the same ``os.stat`` test, the files re-read only
when they changed) and hands it to every shard call of a request, held under the router's
:class:`Gate`; each replica answers at exactly that generation
(:meth:`retrieval.server.shard_replica.ServedShard.reading`) or fails with :class:`MovedOn`, never
from another one.
"""
from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence

from indexes import manifest as mf
from indexes import sharded as sh
from indexes.errors import IndexFormatError, RetrError


class MovedOn(IndexFormatError):
    """A shard was asked for a generation it no longer holds and cannot open again (it moved past the
    commit the request read): the router reads the newest commit and runs the request again."""


class Gate:
    """Many calls at once, or one move of the shards' generations alone; re-entrant for a thread that
    is inside already (the router's rounds call it again). Hand-written: the standard library has no
    reader-writer lock, and this project adds no dependency for twenty lines."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._moving = False
        self._mine = threading.local()

    def inside(self) -> bool:
        return getattr(self._mine, "depth", 0) > 0

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        if not self.inside():
            with self._cond:
                while self._moving:
                    self._cond.wait()
                self._readers += 1
        self._mine.depth = getattr(self._mine, "depth", 0) + 1
        try:
            yield
        finally:
            self._mine.depth -= 1
            if not self._mine.depth:
                with self._cond:
                    self._readers -= 1
                    self._cond.notify_all()

    @contextlib.contextmanager
    def moving(self) -> Iterator[None]:
        with self._cond:
            while self._moving:
                self._cond.wait()
            self._moving = True  # new calls wait from now on
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._moving = False
                self._cond.notify_all()


class Pins:
    """The commit every local shard of the sharded index at ``path`` reads, moved as one."""

    def __init__(self, path, shards: Sequence[Any], auto: bool = True):
        self.path = path
        self.shards = list(shards)
        self.auto = auto  # each call brings the commit up to date first (False: only sync() moves it)
        for s in self.shards:
            s.follows = False
        self.gate = Gate()
        self._key: Optional[tuple] = None
        self._sync_lock = threading.Lock()

    @classmethod
    def of(cls, path, shards: Sequence[Any], auto: bool = True) -> Optional["Pins"]:
        """Pins for ``shards`` when every one is a local shard of the folder ``path``, else None
        (remote shards follow the record themselves). ``auto``: every call moves them to the newest
        commit first (a sharded index's ``auto_refresh``)."""
        from retrieval.sharded.shard import ShardSearcher

        if path is None or not all(isinstance(s, ShardSearcher) and s.record is not None for s in shards):
            return None
        return cls(path, shards, auto)

    def _state(self) -> tuple:
        return tuple(s.state() for s in self.shards)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """One call of the router: the shards' commit is brought up to date first (unless this thread
        is inside a call already, or ``auto`` is off), then held until the call ends."""
        if self.auto and not self.gate.inside():
            self.sync()
        with self.gate.reading():
            yield

    def sync(self) -> None:
        """Move every shard to the commit ``shards.json`` names now, at once (nothing when nothing moved)."""
        if self._state() == self._key:
            return
        with self._sync_lock:
            key = self._state()
            if key == self._key:
                return
            at, held = self._hold_all()
            with self.gate.moving():
                for s, g, held_g in zip(self.shards, at, held):
                    s.index.pin(g, held_g)
                    s._key = s.state()
            self._key = key

    def _hold_all(self):
        """Every shard's generation of one commit, opened and held, not yet in use."""
        from retrieval.sharded.shard import committed_at

        record_file = self.path / sh.SHARDS_FILE
        for _ in range(100):
            before = self.shards[0].state()[0]
            record = sh.read(self.path)
            rebuilt = record["id"] != (self.shards[0].record or {}).get("id")
            if rebuilt and record["shards"] != len(self.shards):
                raise IndexFormatError(f"{self.path}: was rebuilt with {record['shards']} shards while open with "
                                       f"{len(self.shards)}; open it again")
            at = [committed_at(record, i) for i in range(len(self.shards))]
            held: List[Any] = []
            try:
                for s, g in zip(self.shards, at):
                    held.append(s.index.hold(g))
                    if rebuilt:  # a new index at the path (retr index --overwrite): its shards, checked
                        sh.check_member(held[-1].manifest, record, s.position or 0, s.path)
            except BaseException:
                for h in held:
                    h.release()
                raise
            if self.shards[0].state()[0] == before:
                if rebuilt:
                    for s in self.shards:
                        s.record = record
                return at, held
            for h in held:  # a writer committed meanwhile: read its commit instead
                h.release()
        raise IndexFormatError(f"{record_file}: changed on every read; cannot open the sharded index")


def _own_generation(path: Path) -> int:
    """The generation a shard folder's own manifest names (0 when it cannot be read: the replica that
    serves it answers for it, or is down)."""
    try:
        return int(mf.read_manifest(path).get("generation", 0))
    except RetrError:
        return 0


class Commits:
    """The commit that remote shards (Ray Serve replicas) read, chosen by the router for each request:
    the router reads ``shards.json`` and the shards' own manifests from its own file system (it runs
    where the folder is, or on a shared file system), and :meth:`generation` tells the shard calls made
    inside :meth:`reading` which generation each shard must answer at. A new commit is taken between
    requests, while none is running (:class:`Gate`), so a replica is never asked for a generation older
    than one it moved to for this router."""

    def __init__(self, path, record: dict):
        self.path = Path(path)
        self.paths = sh.shard_paths(self.path, record)
        self.gate = Gate()
        self._at: Optional[List[int]] = None
        self._key: Optional[tuple] = None
        self._sync_lock = threading.Lock()

    def _state(self) -> tuple:
        from retrieval.sharded.shard import _stat

        return (_stat(self.path / sh.SHARDS_FILE),) + tuple(_stat(p / mf.MANIFEST) for p in self.paths)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """One request: the newest commit is read first (unless this thread is inside one already),
        then kept for every call made inside."""
        if not self.gate.inside():
            self.sync()
        with self.gate.reading():
            yield

    def generation(self, i: int) -> Optional[int]:
        """Shard ``i``'s generation for a call made in this thread inside :meth:`reading` (else None)."""
        at = self._at
        return at[i] if at is not None and self.gate.inside() else None

    def sync(self) -> None:
        key = self._state()
        if key == self._key:
            return
        with self._sync_lock:
            key = self._state()
            if key == self._key:
                return
            at = self._read()
            if at == self._at:  # a shard's roll-forward to the generation already read: nothing moves
                self._key = key
                return
            with self.gate.moving():
                self._at, self._key = at, key

    def _read(self) -> List[int]:
        """Each shard's generation in the newest commit: the one ``shards.json`` names, or a later one
        its own folder committed alone (what :meth:`retrieval.sharded.shard.ShardReader.hold` opens for it). A shard
        manifest newer than the commit read is a change of that folder alone, since a sharded write
        moves the shards' manifests only after replacing ``shards.json`` (checked unchanged here)."""
        from retrieval.sharded.shard import _stat, committed_at

        record_file = self.path / sh.SHARDS_FILE
        for _ in range(100):
            before = _stat(record_file)
            record = sh.read(self.path)
            at = [max(committed_at(record, i), _own_generation(p)) for i, p in enumerate(self.paths)]
            if _stat(record_file) == before:
                return at
        raise IndexFormatError(f"{record_file}: changed on every read; cannot read the sharded index's commit")
