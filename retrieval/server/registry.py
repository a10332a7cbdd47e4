"""The indexes a server answers for, by name.

Each :class:`Served` index is opened once and follows its folder: a write through
the API, or ``retr add`` run by another process, replaces the folder's manifest, and
the next request after that moves to the new generation (``Index.follow``: one
``stat`` of the manifest per request tells). Requests already running finish on the
generation they started on, so a search never sees half a write.
"""
from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from indexes.errors import InputError, ParameterError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
RESERVED = {"indexes"}  # /v1/indexes lists them
WARM_QUERY = "warm up the retrievers"


def parse_index_specs(index_specs: Sequence[str]) -> Dict[str, Path]:
    """``NAME=DIR`` or ``DIR`` (named after the folder), each name once."""
    out: Dict[str, Path] = {}
    for spec in index_specs:
        name, sep, folder = spec.partition("=")
        if not sep:
            folder, name = spec, Path(spec.rstrip("/")).name
        if not NAME.match(name) or name in RESERVED:
            raise InputError(f"index name {name!r} must be 1-64 letters, digits, '_', '.' or '-' "
                             f"(and not {', '.join(sorted(RESERVED))}); give NAME=DIR")
        if name in out:
            raise InputError(f"index name {name!r} given twice")
        out[name] = Path(folder)
    if not out:
        raise ParameterError("{index_specs} is empty: give at least one [NAME=]DIR")
    return out


class Served:
    """One served index folder."""

    def __init__(self, name: str, path: Path):
        from retrieval.index import open_index

        self.name, self.path = name, Path(path)
        self._index = open_index(self.path)  # a bad folder fails at start-up, in one line
        self.write_lock = threading.Lock()   # one write at a time from this server

    def index(self):
        """The Index, moved to the folder's newest generation if a writer made one."""
        self._index.follow()  # one stat when nothing changed; a newest generation that stays unreadable is an error
        return self._index

    def write(self, op: str, payload) -> int:
        """``add``/``update`` (documents) or ``delete`` (ids; those the folder lacks are skipped)
        through :func:`retrieval.ops.write`: the folder's writer lock, one new generation; the
        number of documents changed. An id the folder holds makes an add :class:`DuplicateIds`."""
        from retrieval import ops

        return ops.write(self.path, op, payload, ops.WriteOptions(quiet=True, missing_ok=True)).changed

    def warm(self) -> None:
        """Start what the first search would: the JVM, every retriever (models loaded), the
        document store and the metadata table."""
        idx = self.index()
        with idx.snapshot() as s:
            first = next(iter(s.metadata.docids), None)
        for name in idx.retrievers:
            idx.search(WARM_QUERY, k=1, retriever=name, text=False)
            if first is not None:  # the filtered path loads its own Java classes
                idx.search(WARM_QUERY, k=1, retriever=name, text=False, filter={"docid": {"in": [first]}})
        idx.docstore.get("")


def open_served(name: str, path: Path):
    """A folder's :class:`Served`, or for a sharded index (its folder holds ``shards.json``) a
    :class:`retrieval.server.sharded.ShardedServed` with every shard opened in this process."""
    from indexes.sharded import is_sharded

    if is_sharded(path):
        from retrieval.server.sharded import ShardedServed

        return ShardedServed.local(name, Path(path))
    return Served(name, path)


class Registry:
    def __init__(self, indexes: Dict[str, Path], served: Optional[Dict[str, object]] = None):
        """``indexes``: folders opened here by name; ``served``: indexes opened elsewhere (a sharded
        index on Ray Serve), by name."""
        self.served: Dict[str, Served] = {n: open_served(n, p) for n, p in indexes.items()}
        self.served.update(served or {})
        self.ready = threading.Event()
        self.warm_error: Optional[str] = None

    def get(self, name: str) -> Served:
        s = self.served.get(name)
        if s is None:
            raise KeyError(name)
        return s

    def names(self) -> List[str]:
        return list(self.served)

    def warm(self) -> None:
        try:
            for s in self.served.values():
                s.warm()
        except Exception as e:  # reported by /readyz; searches still try
            self.warm_error = f"{type(e).__name__}: {e}"
        finally:
            self.ready.set()
