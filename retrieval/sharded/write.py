"""Every change of a sharded index: the build (``retr index --shards N``) and the live changes, each
routed to the shards its documents hash to (:func:`indexes.sharded.shard_of`), where
:mod:`retrieval.writer` makes it as in any folder (one generation per changed shard); and
``retr check`` over every shard plus the routing invariant.

One change, one commit (issue #30)
----------------------------------
A change (add, update, delete, compact) through the sharded index becomes visible to its readers with
one atomic switch, whatever number of shards it touches, and a kill at any point leaves the old or the
new state (:func:`indexes.shard_commit.transaction`):

1. Take the sharded index's writer lock (``SHARDED/.lock``: sharded writers serialise) and every
   shard's own writer lock (held to the end, so no writer of a single shard folder interleaves).
2. Recover: a shard whose generation ``shards.json`` names is still only prepared (a writer died after
   step 4) is switched in now (:func:`indexes.folder.settle`); a prepared generation ``shards.json``
   does not name (a writer died before step 4) is a leftover, removed with its folders and
   document-store rows by the shard's next change (:func:`indexes.folder.clean_leftovers`), as any
   uncommitted generation. Input is checked against every shard here, under the locks.
3. Prepare: each changed shard's generation N+1 is made as in any folder (store rows, hard-link copies
   changed by the kinds), but its manifest is written as ``manifest.g<N+1>.json`` and the shard's own
   ``manifest.json`` stays (:func:`indexes.folder.deferred`): neither the shard's readers nor the
   sharded index's see any of it.
4. Switch: ``shards.json`` is replaced (one ``os.replace``) with ``generations`` naming every shard's
   new generation. This is the commit.
5. Roll forward: each prepared manifest is moved onto its shard's ``manifest.json`` (one
   ``os.replace`` each) and the shard's unread generations are collected.

Readers of the sharded index (:class:`~retrieval.sharded.index.ShardedIndex`, a served sharded
index) open each shard at the generation ``shards.json`` names, reading the prepared manifest while
step 5 has not reached that shard, and hold each shard's generation lock like any reader, so nothing
they read is collected; an in-process router moves all its shards to a new commit at once, between
calls (:mod:`retrieval.sharded.pins`). A kill before step 4 leaves the old commit (the prepared
generations are leftovers), after it the new one (the next writer, or the readers meanwhile, take
the prepared manifests as the shards' generations). Pause points for crash tests:
``sharded:prepared:<shard folder>`` (after that shard's step 3), ``sharded:before-switch``,
``sharded:after-switch``, ``sharded:rolled:<shard folder>`` (after that shard's step 5).

A rebuild in place (``retr index --shards N --overwrite``, :func:`build_sharded`) is a writer too: it
holds ``SHARDED/.lock`` from the start of its build to its switch, which is one atomic exchange of
the built folder with the old one (under every old shard's lock as well), so the path holds one
whole index at every instant and a change waiting for the lock goes on in the new index (its
documents re-routed to the new shards); a change never commits into an index that replaced the
one it prepared in (:func:`indexes.shard_commit.transaction`). Pause points ``sharded:before-swap``, ``sharded:after-swap``;
the copies a killed build leaves beside the path are removed by its next build or write.

A reader that opens one shard folder on its own (``retr search --index SHARDED/shard-001``) sees that
folder's ``manifest.json``: one shard's part of a write appears there at step 5, shard by shard, and a
shard whose step 5 a kill cut off shows its previous generation until the next write of the sharded
index. Writes made to one shard folder directly (``retr add --index SHARDED/shard-001``, and a Ray Serve
replica's write of its own shard where the router's machine lacks some shard folder) commit that shard
alone, as any folder (the in-process server, and a Ray Serve router that holds the whole folder, write
through this module: one commit);
the sharded index's readers see such a generation once it is there (a later one than
``shards.json`` names is taken as it is).
"""
from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from indexes import folder
from indexes import generations as gens
from indexes import manifest as mf
from indexes import sharded as sh
from indexes.errors import DuplicateIds, InputError, ParameterError
from indexes.shard_commit import commit_manifests, leftovers, notice as _notice, remove_leftovers  # noqa: F401
from indexes.shard_commit import shard_folders as _shards, transaction as _transaction
from retrieval import writer
from retrieval.check import Report, check_index
from retrieval.collections import read_corpus
from retrieval.index import Index
from retrieval.kinds import kind_of, kind_of_spec
from retrieval.sharded.shard import committed_at
from retrieval.types import Document


def _read(corpus, empty: str) -> List[Document]:
    docs = list(read_corpus(corpus, empty=empty) if isinstance(corpus, (str, Path)) else corpus)
    if not docs:
        raise InputError("no documents given", corpus if isinstance(corpus, (str, Path)) else None)
    return docs


def route(items: Iterable[Any], n: int, key: Callable[[Any], str] = lambda d: d.docid) -> List[List[Any]]:
    """``items`` (documents, or with ``key=str`` ids) per shard of ``n``: each in the shard its id
    (``key(item)``) hashes to (:func:`indexes.sharded.shard_of`), in their order."""
    out: List[List[Any]] = [[] for _ in range(n)]
    for x in items:
        out[sh.shard_of(key(x), n)].append(x)
    return out


def _split(docs: Iterable[Document], n: int) -> List[List[Document]]:
    return route(docs, n)


def build_sharded(corpus: Union[str, Path, Iterable[Document]], index_dir: Union[str, Path], shards: int, *,
                  subindexes: Optional[Mapping[str, Any]] = None, overwrite: bool = False,
                  report: Optional[dict] = None, **options: Any):
    """Build a sharded index: ``shards`` ordinary folders (each :func:`retrieval.writer.build_index`
    of the documents routed to it, with the same ``subindexes``) and the sharded manifest, staged
    beside ``index_dir`` and moved into place when every shard is built. Returns the opened
    :class:`retrieval.sharded.index.ShardedIndex`. Every model kind makes what its model makes of the
    documents once for every shard (:func:`_vectors`); ``precomputed``: vectors already made for the
    documents (``BuildContext.precomputed``), which the kind whose form they are takes instead.
    What a kind chooses on the documents (DeepCT's tuning) is chosen once for the whole index, as one
    folder of these documents would choose, and recorded in every shard (:func:`tune_shards`).

    Replacing a sharded index (``overwrite``) holds its writer lock from the start of the build to the
    switch, one atomic exchange of the folders (:func:`_swap`); its shards' generations start after
    the old ones'. ``report`` gets ``record``: the sharded manifest this build committed (later writers
    may have committed after it by the time this returns). ``**options``: how each shard is built,
    :func:`retrieval.writer.build_index`'s ``threads`` (default 2), ``empty`` ("error"), ``quiet``
    (False), ``executor`` (None), ``precomputed`` (None); another keyword is a TypeError naming it."""
    from retrieval.sharded.index import ShardedIndex

    bad = sorted(set(options) - {"threads", "empty", "quiet", "executor", "precomputed"})
    if bad:
        raise TypeError(f"build_sharded() got an unexpected keyword argument {bad[0]!r}")
    run = _Run(**options)
    empty, quiet = run.empty, run.quiet
    index_dir = Path(index_dir)
    record = sh.new_record(shards)
    _may_write(index_dir, overwrite)
    docs = _read(corpus, empty)
    parts = _parts(docs, shards)
    remove_leftovers(index_dir)
    replacing = sh.is_sharded(index_dir)
    # a sharded index being replaced is held by its writer lock from here to the switch: its writers
    # wait and then change the new index (or went first, and the new index replaces what they made)
    with gens.writer_lock(index_dir, _notice(index_dir, quiet)) if replacing else contextlib.nullcontext():
        first = _first_generation(index_dir) if replacing else 0
        stage = index_dir.parent / f".{index_dir.name}.sharding-{os.getpid()}"
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
        try:
            committed = _build_shards(stage, docs, parts, record, first, subindexes, run)
            _swap(stage, index_dir, replacing)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)  # (after the switch: the old index)
            raise
    if report is not None:
        report["record"] = committed
    return ShardedIndex.open(index_dir)


def _parts(docs: List[Document], shards: int) -> List[List[Document]]:
    """``docs`` routed to ``shards`` parts; a part without documents is an error."""
    parts = _split(docs, shards)
    for i, part in enumerate(parts):
        if not part:
            raise ParameterError("{shards}: shard %d of %d would hold no document (the corpus has %d); use fewer"
                                 % (i, shards, sum(map(len, parts))))
    return parts


@dataclass(frozen=True)
class _Run:
    """How :func:`build_sharded` builds each shard (its keywords of the same names)."""
    threads: int = 2
    empty: str = "error"
    quiet: bool = False
    executor: Any = None
    precomputed: Optional[dict] = None


def _build_shards(stage: Path, docs: Sequence[Document], parts: Sequence[Sequence[Document]], record: dict,
                  first: int, subindexes: Optional[Mapping[str, Any]], run: _Run) -> dict:
    """Every shard of ``record`` built in ``stage`` from its part of ``docs`` (generations from
    ``first``), the sharded manifest written and what a kind chooses on the documents tuned once;
    returns the sharded manifest committed in ``stage``."""
    shared = _vectors(docs, [(n, kind_of_spec(s), s, None) for n, s in (subindexes or {}).items()],
                      run.quiet, run.executor, run.threads, given=run.precomputed)
    # each kind's spec for one shard: what a kind chooses on the documents is chosen once, below
    each = {n: kind_of_spec(s).untuned(s) for n, s in subindexes.items()} \
        if isinstance(subindexes, Mapping) else subindexes
    for i, part in enumerate(parts):
        where = stage / record["folders"][i]
        writer.build_index(part, where, subindexes=each, threads=run.threads, empty=run.empty, quiet=run.quiet,
                           executor=run.executor, precomputed=run.precomputed, shared=shared,
                           generation=first).close()
        member = sh.member(record, i)
        folder.commit_manifest(where, lambda ch, m=member: ch.new.__setitem__("sharded", m))
    record["generations"] = [int(mf.read_manifest(stage / f)["generation"]) for f in record["folders"]]
    sh.write(stage, record)
    if isinstance(subindexes, Mapping):
        tune_shards(stage, subindexes, quiet=run.quiet)
    return sh.read(stage)


def tune_shards(path: Union[str, Path], specs: Mapping[str, Any], quiet: bool = True) -> bool:
    """What each kind of ``specs`` chooses on the documents (``SubIndexKind.choose``: DeepCT's
    defaults and default fusion on its model's held-out queries), chosen once over the whole sharded
    index ``path`` through its search (global statistics), as one folder holding every document
    chooses, and recorded in every shard's manifest as one commit. False: nothing to choose."""
    from retrieval.sharded.index import ShardedIndex

    with ShardedIndex.open(path) as idx:
        based_on = [ix.manifest for ix in idx.local()]
        edits = [e for e in (kind_of_spec(s).choose(idx, n, s, quiet=quiet) for n, s in specs.items())
                 if e is not None]
    if not edits:
        return False

    def edit(ch) -> None:
        for e in edits:
            e(ch)

    commit_manifests(path, edit, based_on=based_on, quiet=quiet)
    return True


def _vectors(docs: Sequence[Document], makers, quiet: bool, executor, threads: int = 2,
             given: Any = None) -> Dict[str, Any]:
    """Per sub-index name, what its kind's model makes of ``docs``, once for every shard
    (``SubIndexKind.encode_documents``; ``makers``: (name, kind, spec, entry)), as one folder's build or
    change of ``docs`` makes it: each shard's part of it then stands in for encoding the shard's own
    documents in batches of their own (``BuildContext.shared``), so every model sub-index, not only
    the first, holds exactly what one folder holds."""
    out: Dict[str, Any] = {}
    for name, kind, spec, entry in makers:
        got = kind.encode_documents(docs, spec=spec, entry=entry, quiet=quiet, executor=executor,
                                    threads=threads, given=given)
        if got is not None:
            out[name] = got
    return out


def _may_write(index_dir: Path, overwrite: bool) -> None:
    if index_dir.is_symlink():
        raise ParameterError("{_path}: is a symbolic link; refusing to replace it (choose the folder itself)",
                             _path=str(index_dir))
    if not index_dir.exists() or (index_dir.is_dir() and not any(index_dir.iterdir())):
        return
    if not overwrite:
        raise ParameterError("{_path}: index folder already exists; pass {overwrite} to rebuild it",
                             _path=str(index_dir))
    if not sh.is_sharded(index_dir):
        raise ParameterError("{_path}: is not a sharded retr index; {overwrite} replaces only one",
                             _path=str(index_dir))


def _first_generation(index_dir: Path) -> int:
    """The first generation of the shards of a build that replaces the sharded index ``index_dir``: after
    every generation of its shards (committed, or in a shard's own manifest), so that a reader of the old
    index sees each shard move to the new one and takes nothing of the old generation for the new one's
    (as :func:`indexes.folder.next_build_generation` for one folder). Call with its writer lock held."""
    from indexes.errors import RetrError

    try:
        record = sh.read(index_dir)
    except RetrError:
        return 0
    after = [int(g) + 1 for g in record.get("generations") or []]
    after += [folder.next_build_generation(p) for p in sh.shard_paths(index_dir, record)]
    return max(after, default=0)


def _old_shards(index_dir: Path) -> List[Path]:
    """The shard folders of the sharded index being replaced, as far as its record can be read."""
    from indexes.errors import RetrError

    try:
        paths = sh.shard_paths(index_dir, sh.read(index_dir))
    except RetrError:
        return []
    return [p for p in paths if p.is_dir() and not p.is_symlink()]


def _swap(stage: Path, index_dir: Path, replacing: bool) -> None:
    """Put the built sharded index ``stage`` at ``index_dir`` in one step. Replacing a sharded index (its
    writer lock held by the caller since the build began): under every shard's writer lock too (no
    change of one shard folder is cut off half-way), one atomic exchange of the two folders
    (``renameat2(RENAME_EXCHANGE)``, as :func:`indexes.folder.atomic_folder` swaps one folder), so the
    path holds the old index or the new one at every instant; the old one, now at ``stage``, is then
    removed. Otherwise ``index_dir`` is missing or an empty folder, which one rename replaces."""
    gens.pause("sharded:before-swap")
    if not replacing:
        try:
            os.rename(stage, index_dir)  # (over an empty folder too)
        except OSError as e:  # another build put an index there meanwhile
            raise InputError(f"appeared while this build ran ({e.strerror}); nothing was replaced",
                             index_dir) from None
        return
    with contextlib.ExitStack() as locks:
        for p in _old_shards(index_dir):
            locks.enter_context(gens.writer_lock(p))
        if gens.exchange(stage, index_dir):
            gens.pause("sharded:after-swap")
            shutil.rmtree(stage, ignore_errors=True)  # the old index now
            return
        # no atomic exchange on this system: two renames (a kill between them leaves no index at the path)
        old = index_dir.parent / f".{index_dir.name}.replaced-{os.getpid()}"
        os.rename(index_dir, old)
        os.rename(stage, index_dir)
        shutil.rmtree(old, ignore_errors=True)


def _present(paths: Sequence[Path], groups: Sequence[Sequence[str]]) -> List[str]:
    """Those of each shard's ids its current generation holds."""
    out: List[str] = []
    for p, ids in zip(paths, groups):
        if ids:
            with Index.open(p, auto_refresh=False) as idx:
                out += list(idx.docstore.get_many(ids))
    return out


def _sum(reports: Sequence[dict], report: Optional[dict]) -> None:
    if report is None:
        return
    for r in reports:
        for key, v in r.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                report[key] = report.get(key, 0) + v
    report["shards_changed"] = len(reports)


def write_documents(path: Union[str, Path], corpus, op: str = "add", threads: int = 2, empty: str = "error",
                    quiet: bool = False, report: Optional[dict] = None, executor=None) -> None:
    """:func:`retrieval.writer.add_documents` (``op="add"``) or ``update_documents`` (``"update"``),
    each document in its own shard."""
    record_id = sh.read(path)["id"]  # (read first: a rebuild after it is seen under the lock)
    paths = _shards(path)
    docs = _read(corpus, empty)
    parts = _split(docs, len(paths))
    fn = writer.add_documents if op == "add" else writer.update_documents
    entries = {n: e for n, e in mf.read_manifest(paths[0]).get("subindexes", {}).items() if not e.get("alias_of")}
    shared = _vectors(docs, [(n, kind_of(e), None, e) for n, e in entries.items()], quiet, executor,
                      threads)  # before the locks
    reports = []
    with _transaction(path, quiet) as paths:
        if sh.read(path)["id"] != record_id or len(paths) != len(parts):  # rebuilt meanwhile: its shards now
            parts = _split(docs, len(paths))
            entries = {n: e for n, e in mf.read_manifest(paths[0]).get("subindexes", {}).items()
                       if not e.get("alias_of")}
            shared = _vectors(docs, [(n, kind_of(e), None, e) for n, e in entries.items()], quiet, executor,
                              threads)
        if op == "add":
            there = _present(paths, [[d.docid for d in part] for part in parts])
            if there:
                there = set(there)  # (the first in the corpus's order, as one folder names it)
                raise DuplicateIds(len(there), next(d.docid for d in docs if d.docid in there), path)
        for p, part in zip(paths, parts):
            if part:
                rep: Dict[str, Any] = {}
                fn(p, part, threads=threads, empty=empty, quiet=quiet, report=rep, executor=executor,
                   shared=shared).close()
                reports.append(rep)
        _drop_tuned(paths, [bool(part) for part in parts])
    _sum(reports, report)


def _drop_tuned(paths: Sequence[Path], changed: Sequence[bool]) -> None:
    """One folder drops its tuned pipelines when its documents change (:mod:`retrieval.writer`: they
    were tuned on the old collection), and the router reads the shards' common record: so a change of
    any shard's documents drops them in every shard, in the same commit."""
    if not any(changed):
        return
    for p, ch in zip(paths, changed):
        if not ch and mf.read_manifest(p).get("pipelines"):
            folder.commit_manifest(p, lambda c: c.new.pop("pipelines", None))


def delete_documents(path: Union[str, Path], docids: Iterable[str], quiet: bool = False, missing_ok: bool = False,
                     report: Optional[dict] = None) -> None:
    """:func:`retrieval.writer.delete_documents`, each id in its own shard."""
    paths = _shards(path)
    ids = list(dict.fromkeys(str(d) for d in docids))
    if not ids:
        raise InputError("no document ids to delete")
    reports = []
    with _transaction(path, quiet) as paths:
        groups = route(ids, len(paths), str)  # (the shards now: a rebuild may have switched in)
        have = set(_present(paths, groups))
        missing = [d for d in ids if d not in have]
        if missing and not missing_ok:
            raise InputError(f"{len(missing)} of {len(ids)} document id(s) are not in the index (first: "
                             f"{missing[0]!r}); nothing was deleted", path)
        changed = []
        for p, group in zip(paths, groups):
            group = [d for d in group if d in have]
            changed.append(bool(group))
            if group:
                rep: Dict[str, Any] = {}
                writer.delete_documents(p, group, quiet=quiet, report=rep).close()
                reports.append(rep)
        _drop_tuned(paths, changed)
    _sum(reports, report)
    if report is not None:
        report.update(asked=len(ids), deleted=len(ids) - len(missing), missing=len(missing))


def compact(path: Union[str, Path], quiet: bool = False, report: Optional[dict] = None) -> None:
    """:func:`retrieval.writer.compact` on every shard, one commit for all of them."""
    done: List[str] = []
    with _transaction(path, quiet) as paths:
        for p in paths:
            rep: Dict[str, Any] = {}
            writer.compact(p, quiet=quiet, report=rep).close()
            done += [f"{p.name}/{n}" for n in rep.get("compacted", [])]
    if report is not None:
        report.update(compacted=done, shards_changed=len({d.split("/", 1)[0] for d in done}))


def check_sharded(path: Union[str, Path], full: bool = False, sample: int = 1000, strict: bool = False,
                  seed: int = 0) -> Report:
    """``retr check`` of every shard (problems and notes prefixed with the shard's folder), each
    shard's record of the sharded index, and the routing invariant: every document of shard i
    hashes to i."""
    from indexes.errors import RetrError

    rep = Report(str(path), sharded=True)
    try:
        record = sh.read(path)
    except RetrError as e:
        rep.problems.append(str(e))
        return rep
    n = record["shards"]
    for p, pid in leftovers(path):
        (rep.problems if strict else rep.notes).append(
            f"leftover of dead process {pid}: {p} ({(0 if p.is_symlink() else gens.size_of(p)) / 1e6:.1f} MB); "
            f"the next write or build of "
            f"{Path(path).name} removes it")
    for i, p in enumerate(sh.shard_paths(path, record)):
        if not p.is_dir():
            rep.problems.append(f"{p.name}: shard {i} of {n} is missing")
            continue
        at = committed_at(record, i)
        r = check_index(p, full=full, sample=sample, strict=strict, seed=seed, at_least=at)
        rep.problems += [f"{p.name}: {x}" for x in r.problems]
        rep.notes += [f"{p.name}: {x}" for x in r.notes]
        rep.checked += [f"{p.name}: {x}" for x in r.checked]
        rep.documents += r.documents
        if r.problems:
            continue
        _check_shard(p, record, i, rep, at)
    return rep


def _check_shard(p: Path, record: dict, i: int, rep: Report, at: int) -> None:
    from indexes.errors import RetrError

    n = record["shards"]
    try:
        m = mf.read_manifest(p)
        sh.check_member(m, record, i, p)
        if folder.committed_prepared(p, m) is not None:
            rep.notes.append(f"{p.name}: generation {at}, committed by the sharded index, is not yet in the shard's "
                             f"own manifest (a writer stopped half-way); the next write of the sharded index moves it")
        with Index(p, auto_refresh=False, at_least=at) as idx:
            wrong = [d for d, _m in idx.docstore.iter_meta() if sh.shard_of(d, n) != i]
    except RetrError as e:
        rep.problems.append(f"{p.name}: {e}")
        return
    if wrong:
        rep.problems.append(f"{p.name}: {len(wrong)} document(s) belong to another shard by the routing hash "
                            f"(first: {wrong[0]!r} belongs to shard {sh.shard_of(wrong[0], n)})")
    else:
        rep.checked.append(f"{p.name}: every document routes to shard {i} of {n}")
