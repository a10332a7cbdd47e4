"""The changes and upkeep of an index by its path, whichever layout the path holds: ``add``,
``update``, ``delete``, ``compact``, ``sync``, ``check`` and ``info``.

A plain folder is changed through :mod:`retrieval.writer` (one writer lock, one new generation,
switched in atomically); a sharded folder (:func:`is_sharded`) through
:mod:`retrieval.sharded.write` (every document in the shard its id hashes to, one commit of every
shard the change touches). Each change returns an :class:`Outcome` with the same counts for both
layouts, which ``retr`` prints and the server returns; adding an id the index holds is
:class:`indexes.errors.DuplicateIds` in both (nothing is added). ``target`` is an index folder or
an open index (anything with a ``path``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Tuple, Union

from indexes import manifest as mf
from indexes import sharded as sh
from indexes.errors import DuplicateIds, InputError

__all__ = ["DuplicateIds", "Outcome", "WriteOptions", "add", "check", "compact", "delete", "info", "is_sharded",
           "path_of", "sync", "update", "write"]

OPS = ("add", "update", "delete")  # the document changes :func:`write` makes by name


@dataclass(frozen=True)
class WriteOptions:
    """How a document change runs: indexing ``threads``, what a document without text does
    (``empty``: error, skip or keep), ``quiet`` (no progress output), ``executor`` (where the model
    stages run, :mod:`retrieval.executors`), ``missing_ok`` (a delete skips ids the index lacks)."""
    threads: int = 2
    empty: str = "error"
    quiet: bool = False
    executor: Any = None
    missing_ok: bool = False


@dataclass(frozen=True)
class Outcome:
    """What a change did. ``total``: documents the index holds after it; ``generation``: a folder's
    new (or current) generation, ``generations``: a sharded folder's, per shard; the counts are the
    writer's (``read``, ``added``, ``replaced``, ``pruned``, ``removed`` for add and update;
    ``deleted``, ``missing`` for delete; ``compacted``: sub-indexes, ``SHARD/NAME`` in a sharded
    folder)."""
    op: str
    path: str
    sharded: bool
    total: int
    generation: Optional[int] = None
    generations: Tuple[int, ...] = ()
    shards_changed: int = 0
    read: int = 0
    added: int = 0
    replaced: int = 0
    pruned: int = 0
    removed: int = 0
    deleted: int = 0
    missing: int = 0
    compacted: Tuple[str, ...] = ()
    retrievers: Tuple[str, ...] = field(default=(), compare=False)

    @property
    def changed(self) -> int:
        """Documents added, replaced or deleted."""
        return self.added + self.replaced + self.deleted

    def as_dict(self) -> Dict[str, Any]:
        return dict(asdict(self), generations=list(self.generations), compacted=list(self.compacted),
                    retrievers=list(self.retrievers), changed=self.changed)


def path_of(target: Union[str, Path, Any]) -> Path:
    """The folder of ``target`` (a path, or an open index's ``path``)."""
    p = getattr(target, "path", target)
    if p is None:
        raise InputError("this index has no folder (its shards are remote); change it through its server")
    return Path(p)


def is_sharded(target) -> bool:
    """Whether ``target`` is a sharded folder (``shards.json``), not one index folder."""
    return sh.is_sharded(path_of(target))


_COUNTS = ("read", "added", "replaced", "pruned", "removed", "deleted", "missing", "shards_changed")


def _folder_outcome(op: str, path: Path, idx, rep: dict) -> Outcome:
    """The Outcome of a folder's change from the writer's reopened index and report (closes it)."""
    try:
        counts = {k: int(rep[k]) for k in _COUNTS if k in rep}
        return Outcome(op, str(path), False, len(idx), generation=int(idx.generation),
                       compacted=tuple(rep.get("compacted") or ()), retrievers=tuple(idx.retrievers), **counts)
    finally:
        idx.close()


def _sharded_outcome(op: str, path: Path, rep: dict) -> Outcome:
    """The Outcome of a sharded folder's commit: its shards' generations and documents as committed."""
    record = sh.read(path)
    total = sum(int(mf.read_manifest(p)["corpus"]["doc_count"]) for p in sh.shard_paths(path, record))
    counts = {k: int(rep[k]) for k in _COUNTS if k in rep}
    return Outcome(op, str(path), True, total, generations=tuple(int(g) for g in record["generations"]),
                   compacted=tuple(rep.get("compacted") or ()), **counts)


def _put(op: str, target, corpus, options: Optional[WriteOptions]) -> Outcome:
    o = options or WriteOptions()
    path = path_of(target)
    rep: Dict[str, Any] = {}
    if sh.is_sharded(path):
        from retrieval.sharded.write import write_documents

        write_documents(path, corpus, op, threads=o.threads, empty=o.empty, quiet=o.quiet, report=rep,
                        executor=o.executor)
        return _sharded_outcome(op, path, rep)
    from retrieval import writer

    fn = writer.add_documents if op == "add" else writer.update_documents
    idx = fn(path, corpus, threads=o.threads, empty=o.empty, quiet=o.quiet, report=rep, executor=o.executor)
    return _folder_outcome(op, path, idx, rep)


def add(target, corpus, options: Optional[WriteOptions] = None) -> Outcome:
    """Add the documents of ``corpus`` (a corpus path or :class:`retrieval.Document` objects) to
    every sub-index, all or nothing. An id the index already holds is :class:`DuplicateIds`."""
    return _put("add", target, corpus, options)


def update(target, corpus, options: Optional[WriteOptions] = None) -> Outcome:
    """Replace the documents whose ids ``corpus`` holds and add the others, all or nothing."""
    return _put("update", target, corpus, options)


def delete(target, docids: Iterable[str], options: Optional[WriteOptions] = None) -> Outcome:
    """Remove ``docids`` from every sub-index, all or nothing; ids the index lacks are an error
    unless ``options.missing_ok``."""
    o = options or WriteOptions()
    path = path_of(target)
    rep: Dict[str, Any] = {}
    if sh.is_sharded(path):
        from retrieval.sharded.write import delete_documents

        delete_documents(path, docids, quiet=o.quiet, missing_ok=o.missing_ok, report=rep)
        return _sharded_outcome("delete", path, rep)
    from retrieval import writer

    idx = writer.delete_documents(path, docids, quiet=o.quiet, missing_ok=o.missing_ok, report=rep)
    return _folder_outcome("delete", path, idx, rep)


def write(target, op: str, items, options: Optional[WriteOptions] = None) -> Outcome:
    """:func:`add`, :func:`update` (``items``: documents) or :func:`delete` (``items``: ids) by
    the name ``op``."""
    if op not in OPS:
        raise InputError(f"unknown change {op!r} (one of: {', '.join(OPS)})")
    return delete(target, items, options) if op == "delete" else _put(op, target, items, options)


def compact(target, quiet: bool = False) -> Outcome:
    """Drop what additions and deletions left behind (:func:`retrieval.writer.compact`; in a sharded
    folder every shard, one commit)."""
    path = path_of(target)
    rep: Dict[str, Any] = {}
    if sh.is_sharded(path):
        from retrieval.sharded.write import compact as compact_sharded

        compact_sharded(path, quiet=quiet, report=rep)
        return _sharded_outcome("compact", path, rep)
    from retrieval import writer

    return _folder_outcome("compact", path, writer.compact(path, quiet=quiet, report=rep), rep)


def sync(target, corpus, dry_run: bool = False, options: Optional[WriteOptions] = None) -> dict:
    """:func:`retrieval.sync.sync_index` (a sharded folder is refused with one error line)."""
    from retrieval.sync import sync_index

    o = options or WriteOptions()
    return sync_index(path_of(target), corpus, dry_run=dry_run, threads=o.threads, quiet=o.quiet,
                      executor=o.executor)


def check(target, full: bool = False, sample: int = 1000, strict: bool = False):
    """``retr check``: a :class:`retrieval.check.Report` (``sharded`` says which layout it checked)."""
    path = path_of(target)
    if sh.is_sharded(path):
        from retrieval.sharded.write import check_sharded

        return check_sharded(path, full=full, sample=sample, strict=strict)
    from retrieval.check import check_index

    return check_index(path, full=full, sample=sample, strict=strict)


def info(target) -> dict:
    """The index's description (``Index.info()``, or ``ShardedIndex.info()`` with ``sharded: True``)."""
    from retrieval.sharded.index import open_index

    with open_index(path_of(target)) as idx:
        return idx.info()
