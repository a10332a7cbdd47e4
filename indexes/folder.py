"""The index folder's owner: its file names, its builds and its commits.

This is the one module that knows how a folder is laid out (``manifest.json``, ``docs.sqlite``,
``<name>.g<N>`` generation folders, ``docs.g<N>.sqlite``), that writes a manifest, and that
removes files: a build is staged beside the target and swapped in (:func:`atomic_folder`);
every change of an existing folder, a manifest-only one included (a tuned fusion, a trained
selector), is a generation N+1 committed under the writer lock (:func:`changing`,
:func:`commit_manifest`), so a reader holding N keeps N; leftovers of dead writers and folders
no generation needs are removed by writers here, never by readers (as Lucene's IndexWriter owns
every file of its directory and readers are snapshots that delete nothing).

The rest of retr asks this module for paths (:func:`docstore_path`, :func:`manifest_path`)
instead of spelling them. :mod:`indexes.manifest` is the manifest's JSON (read, validate,
write); :mod:`indexes.generations` the locks and hard-link copies it is built on.
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import stat
import threading
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from indexes import generations as gens
from indexes import manifest as mf
from indexes.docstore import DocStore, LiveStore, migrate, schema
from indexes.errors import IndexFormatError, InputError, ParameterError, RetrError

MANIFEST = mf.MANIFEST
DOCSTORE = "docs.sqlite"


# ------------------------------------------------------------------------------ names
def docstore_path(folder: Path | str, manifest: dict) -> Path:
    """The document store a manifest names (``docs.sqlite`` unless migrated)."""
    return Path(folder) / ((manifest.get("docstore") or {}).get("path") or DOCSTORE)


def manifest_path(folder: Path | str) -> Path:
    return Path(folder) / MANIFEST


# ------------------------------------------------------------------------------ generations and leftovers
GEN_DIR = re.compile(r"^(?P<base>.+)\.g(?P<gen>\d+)$")


# temporary names retr itself creates inside a folder (and nothing else matches them)
_TEMP = (re.compile(r"^retr-lucene-"), re.compile(r"^\..+\.new-"), re.compile(r"^\..+\.tmp-\d+$"),
         re.compile(r"^\.manifest\.json\.tmp-\d+$"), re.compile(r"^docs\.g\d+\.sqlite(?:-wal|-shm|-journal)?$"),
         re.compile(r"^manifest\.g\d+\.json$"))


def gen_path(path: str, generation: int) -> str:
    """The folder name of sub-index folder ``path`` in ``generation`` (``bm25`` -> ``bm25.g3``)."""
    m = GEN_DIR.match(path)
    return f"{m.group('base') if m else path}.g{int(generation)}"


_SIBLING = re.compile(r"^(?:(?P<name>.+)\.tmp-(?P<pid>\d+)|\.(?P<name2>.+)\.old-(?P<pid2>\d+))$")


def sibling_leftovers(folder: Path) -> List[Tuple[Path, int]]:
    """Staging folders of dead processes beside ``folder`` (``INDEX.tmp-<pid>`` of a build,
    ``.INDEX.old-<pid>`` of a swap), as ``(path, pid)``."""
    folder = Path(folder)
    out = []
    parent = folder.parent
    if not parent.is_dir():
        return out
    for p in parent.iterdir():
        m = _SIBLING.match(p.name)
        if not m:
            continue
        name, pid = (m.group("name"), m.group("pid")) if m.group("name") else (m.group("name2"), m.group("pid2"))
        if name != folder.name:
            continue
        if not gens.pid_alive(int(pid)):
            out.append((p, int(pid)))
    return out


def inner_leftovers(folder: Path, manifest: dict) -> List[Path]:
    """Entries inside ``folder`` that only a writer that did not finish can have left: folders of
    an uncommitted generation and retr's temporary names. Only meaningful while no writer runs."""
    keep = {MANIFEST, gens.LOCK, gens.READERS}
    named = [manifest]
    g = committed_prepared(folder, manifest)
    if g is not None:  # a sharded index's commit names it: not a leftover, the next writer switches it in
        keep.add(prepared_name(g))
        named.append(read_prepared(folder, g) or {})
    for m in named:
        ds = (m.get("docstore") or {}).get("path", DOCSTORE)
        keep |= {ds, ds + "-wal", ds + "-shm", ds + "-journal"}
        for e in m.get("subindexes", {}).values():
            keep.add(str(e.get("path", "")).split("/")[0])
        for r in m.get("retired", []):
            keep.add(str(r.get("path", "")).split("/")[0])
    out = []
    for p in Path(folder).iterdir():
        if p.name in keep:
            continue
        if GEN_DIR.match(p.name) or any(t.match(p.name) for t in _TEMP):
            out.append(p)
    return out


def collect(folder: Path, manifest: dict) -> List[str]:
    """Remove the retired folders of ``manifest`` that no reader holds; returns the paths
    removed. Call with the writer lock held."""
    current = int(manifest.get("generation", 0))
    held = gens.held_generations(folder, current)
    gone = []
    for r in manifest.get("retired", []):
        lo, hi = int(r.get("from", 0)), int(r.get("to", current - 1))
        if any(lo <= g <= hi for g in held):
            continue
        p = Path(folder) / r["path"]
        if p.exists():
            gens.remove(p)
        for extra in ("-wal", "-shm", "-journal"):  # a retired document store's SQLite companions
            gens.remove(Path(f"{p}{extra}"))
        gone.append(r["path"])
    return gone


def oldest_held(folder: Path, current: int) -> int:
    held = gens.held_generations(folder, current)
    return min(held) if held else current


def store_name(generation: int) -> str:
    """The document store a format-1 folder's first change copies its store into."""
    return f"docs.g{int(generation)}.sqlite"


# ------------------------------------------------------------------------------ prepared generations (sharded commits)
# A change of a shard of a sharded index (retrieval.sharded.write) is made as usual, but its manifest is
# written as manifest.g<N>.json ("prepared") instead of replacing manifest.json: nothing of it is visible
# to the folder's own readers. The sharded index's record (SHARDED/shards.json, "generations") then names
# N for that shard in one os.replace, for every shard the write changed at once; from then on the prepared
# manifest IS generation N (the sharded index's readers open it by that name), and the next writer of the
# folder moves it onto manifest.json (settle), again one os.replace. A prepared manifest the record does
# not name was never committed: a leftover like any other, removed by clean_leftovers.
_deferring = threading.local()


def prepared_name(generation: int) -> str:
    return f"manifest.g{int(generation)}.json"


def read_prepared(path: Path | str, generation: int) -> Optional[dict]:
    """The prepared manifest of ``generation`` (validated as any manifest), or None when there is none
    (never prepared, or already switched in)."""
    name = prepared_name(generation)
    if not (Path(path) / name).is_file():
        return None
    try:
        m = mf.read_manifest(path, name)
    except IndexFormatError:
        if not (Path(path) / name).is_file():  # switched in while we read it
            return None
        raise
    if int(m.get("generation", -1)) != int(generation):
        raise IndexFormatError(f"{Path(path) / name}: records generation {m.get('generation')!r}, not {generation}")
    return m


def committed_prepared(path: Path | str, manifest: dict) -> Optional[int]:
    """The generation after ``manifest``'s that the sharded index holding this folder committed and that
    is still only prepared here (its writer died before switching it in), or None."""
    rec = manifest.get("sharded")
    if not isinstance(rec, dict):
        return None
    from indexes import sharded as sh

    parent = Path(path).parent
    try:
        record = sh.read(parent)
        g = sh.committed_generation(record, rec)
    except RetrError:
        return None
    if g is None or g <= int(manifest.get("generation", 0)) or not (Path(path) / prepared_name(g)).is_file():
        return None
    return g


def settle(path: Path | str, manifest: dict) -> dict:
    """Switch in a generation the sharded index committed but whose writer died before its own manifest
    moved (one ``os.replace``); returns the folder's manifest. Call with the writer lock held."""
    g = committed_prepared(path, manifest)
    if g is None:
        return manifest
    read_prepared(path, g)  # valid, or one error line and nothing moved
    os.replace(Path(path) / prepared_name(g), manifest_path(path))
    return mf.read_manifest(path)


def collect_all(path: Path | str, manifest: dict) -> None:
    """:meth:`Change.collect` outside a change (a sharded commit's step 5): the folders of generations
    nobody reads and the store's rows nobody can see. Call with the writer lock held."""
    collect(Path(path), manifest)
    store = docstore_path(path, manifest)
    if store.exists() and schema(store) == 2:
        ls = LiveStore(store)
        try:
            ls.purge(oldest_held(Path(path), int(manifest.get("generation", 0))))
        finally:
            ls.close()


@contextlib.contextmanager
def deferred(paths) -> Iterator[Dict[str, int]]:
    """Within (in this thread), a :class:`Change` of one of the folders ``paths`` that commits writes its
    manifest as the prepared ``manifest.g<N>.json`` and leaves ``manifest.json`` alone; yields
    ``{real path: N}`` of those prepared. The caller holds each folder's writer lock throughout, makes
    them visible (the sharded record) and then moves each in with :func:`settle` (see above)."""
    prev = getattr(_deferring, "paths", None)
    done: Dict[str, int] = {}
    _deferring.paths = ({os.path.realpath(p) for p in paths}, done)
    try:
        yield done
    finally:
        _deferring.paths = prev


# ------------------------------------------------------------------------------ builds
_staging_now: set = set()   # staging folders this process is filling (an inner build uses them as they are)


def what_is(path: Path | str) -> str:
    """``missing``, ``empty`` (an empty folder), ``index`` (a folder with a retr manifest),
    ``file`` (not a folder), or ``other`` (a folder of something else)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return "missing"
    if not path.is_dir() or path.is_symlink():
        return "file"
    mode = mf.lmode(path / MANIFEST)
    if mode is not None and not stat.S_ISREG(mode):  # a planted link or FIFO: not read through (it may hang)
        return "index"  # (which atomic_folder and the writer lock then refuse in one line: mf.refuse_links)
    try:
        m = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        if isinstance(m, dict) and m.get("format") == mf.FORMAT:
            return "index"
    except (OSError, ValueError, UnicodeDecodeError):
        pass
    return "empty" if not any(path.iterdir()) else "other"


def next_build_generation(target: Path | str) -> int:
    """The generation a new build of ``target`` starts at: after the one it replaces, so that
    readers of the old folder see the switch and no row of its store reads as one of theirs."""
    try:
        return int(mf.read_manifest(target).get("generation", 0)) + 1 if what_is(target) == "index" else 0
    except (IndexFormatError, InputError, ValueError, TypeError):
        return 0


@contextlib.contextmanager
def _staged(tmp: Path, final: Path) -> Iterator[Path]:
    """Work in ``tmp`` (fresh); on success swap it in as ``final`` (one atomic exchange
    when ``final`` exists, under its writer lock; the old folder is then removed); on
    failure remove it."""
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
    except OSError as e:
        raise InputError(f"cannot write the new index beside it ({e.strerror})", final) from None
    _staging_now.add(str(tmp))
    try:
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        gens.pause("index:before-swap")
        try:
            _swap_in(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        _staging_now.discard(str(tmp))


def _swap_in(tmp: Path, final: Path) -> None:
    kind = what_is(final)
    if kind == "missing":
        try:
            os.rename(tmp, final)
        except OSError as e:  # another process created it meanwhile
            raise InputError(f"appeared while this build ran ({e.strerror}); nothing was replaced", final) from None
        return
    if kind not in ("index", "empty"):
        raise _not_ours(kind, final)
    lock = gens.writer_lock(final) if kind == "index" else contextlib.nullcontext()
    with lock:  # no change of the old folder is cut off half-way
        exchange_in(tmp, final)


def exchange_in(tmp: Path, final: Path) -> None:
    """Put the folder ``tmp`` at the existing path ``final`` and remove the folder that was there:
    one atomic exchange where the system has one (a kill leaves the old folder or the new one at
    ``final``, and the other under ``tmp``'s name, which :func:`sibling_leftovers` finds when ``tmp``
    is ``FINAL.tmp-PID``), else two renames by way of ``.FINAL.old-PID``. The caller holds whatever
    lock ``final`` needs."""
    if gens.exchange(tmp, final):
        shutil.rmtree(tmp, ignore_errors=True)  # tmp is now the old folder
        return
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def _not_ours(kind: str, path: Path) -> ParameterError:
    # names the parameter (index_dir); the CLI calls it by its flag
    if kind == "file":
        return ParameterError("{_path}: is a file, not an index folder; refusing to replace it (remove it or choose "
                              "another {index_dir})", _path=str(path))
    return ParameterError("{_path}: is a folder that is not a retr index (it has no retr manifest.json); refusing "
                          "to replace it (remove it or choose another {index_dir})", _path=str(path))


@contextlib.contextmanager
def atomic_folder(target: Path | str, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary, empty folder that replaces ``target`` only if the block succeeds.
    ``target`` may be missing, an empty folder, or (with ``overwrite``) a retr index; anything
    else is refused. Staging folders of dead processes beside ``target`` are removed first."""
    target = Path(target)
    if str(target) in _staging_now:  # an inner build of our own staging folder
        yield target
        return
    kind = what_is(target)
    if kind in ("file", "other"):
        raise _not_ours(kind, target)
    if kind == "index" and not overwrite:
        raise ParameterError("{_path}: already exists (pass {overwrite} to replace it, or add to it)",
                             _path=str(target))
    if kind == "index":
        mf.refuse_links(target)  # planted links: refused before the build, not after it at the lock
    target.parent.mkdir(parents=True, exist_ok=True)
    for p, _pid in sibling_leftovers(target):
        gens.remove(p)
    with _staged(target.with_name(f"{target.name}.tmp-{os.getpid()}"), target) as tmp:
        yield tmp


def write_built(folder: Path | str, manifest: dict) -> None:
    """The manifest of a folder being built (inside :func:`atomic_folder`'s staging folder)."""
    mf.write_manifest(folder, manifest)


# ------------------------------------------------------------------------------ changes
class Change:
    """One change of a folder in progress: generation ``gen`` (the current one + 1). Folders it
    makes are removed again if it fails; :meth:`commit` switches the manifest to it."""

    def __init__(self, path: Path, manifest: dict, store: LiveStore, store_rel: str):
        self.path, self.old = path, manifest
        self.base = int(manifest.get("generation", 0))
        self.gen = self.base + 1
        self.new = copy.deepcopy(manifest)
        self.new["generation"] = self.gen
        self.new["format_version"] = mf.FORMAT_VERSION
        self.new.setdefault("retired", [])
        self.store, self.store_rel = store, store_rel
        self.made: List[Path] = []
        self.committed = False

    @property
    def store_path(self) -> Path:
        return self.path / self.store_rel

    # -- folders
    def fresh_folder(self, name: str) -> str:
        """A folder name for a sub-index built in this generation."""
        used = {str(e.get("path")) for e in self.old["subindexes"].values()}
        used |= {str(r.get("path")) for r in self.old.get("retired", [])}
        rel = name if name not in used and not (self.path / name).exists() else gen_path(name, self.gen)
        self.made.append(self.path / rel)
        (self.path / rel).mkdir()
        return rel

    def retire(self, entry: dict) -> None:
        """The folder of ``entry`` is no longer the current generation's (kept while read)."""
        rel = entry["path"]
        if not any(r["path"] == rel for r in self.new["retired"]):
            self.new["retired"].append({"path": rel, "from": int(entry.get("generation", 0)), "to": self.base})

    def stage(self, name: str) -> Path:
        """The sub-index ``name`` of the new generation: a hard-link copy of the current folder,
        which the kind then changes (aliases share their target's new folder). Nothing may write
        into a linked file: new content goes to new names, or replaces a name (os.replace)."""
        entry = self.new["subindexes"][name]
        old_rel = entry["path"]
        rel = gen_path(old_rel, self.gen)
        dst = self.path / rel
        self.made.append(dst)
        gens.link_tree(self.path / old_rel, dst)
        self.retire(entry)
        moved = _moved(entry, old_rel, rel)
        entry.clear()
        entry.update(moved, generation=self.gen)
        for e in self.new["subindexes"].values():
            if e.get("alias_of") == name:
                e.update(_moved(e, old_rel, rel), generation=self.gen)
        return dst

    # -- the switch
    def commit(self) -> None:
        m = self.new
        live = {str(e.get("path")) for e in m["subindexes"].values()} | {self.store_rel}
        m["retired"] = [r for r in m["retired"] if r["path"] not in live and (self.path / r["path"]).exists()]
        defer = getattr(_deferring, "paths", None)
        if defer is not None and os.path.realpath(self.path) in defer[0]:
            mf.write_manifest(self.path, m, prepared_name(self.gen))  # a sharded commit switches it in
            self.committed = True
            defer[1][os.path.realpath(self.path)] = self.gen
            gens.pause(f"sharded:prepared:{self.path.name}")
            return
        gens.pause("write:before-switch")
        mf.write_manifest(self.path, m)
        self.committed = True
        gens.pause("write:after-switch")
        self.collect()

    def collect(self) -> None:
        """Remove the folders of generations nobody reads and the rows nobody can see."""
        m = mf.read_manifest(self.path)
        collect(self.path, m)
        if schema(self.store_path) == 2:
            self.store.purge(oldest_held(self.path, int(m.get("generation", 0))))

    def rollback(self) -> None:
        if self.store is not None:
            self.store.rollback_after(self.base)
        for p in self.made:
            gens.remove(p)


def _moved(entry: dict, old: str, new: str) -> dict:
    """``entry`` with its folder and every path inside it (a selector's folder, ...) moved from
    ``old`` to ``new``: the values of ``path`` keys, and strings that start with ``old/``."""
    def walk(v, key=None):
        if isinstance(v, dict):
            return {k: walk(x, k) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str) and ((key == "path" and v == old) or v.startswith(old + "/")):
            return new + v[len(old):]
        return v
    return walk(entry)


def clean_leftovers(path: Path, manifest: dict) -> List[str]:
    """Remove what dead writers left in and beside ``path`` (call with the writer lock held):
    folders of generations that never got their manifest, retr's temporary folders, staging
    folders of dead builds, and document-store rows of uncommitted generations. Returns
    what was removed."""
    done = []
    for p in inner_leftovers(path, manifest):
        gens.remove(p)
        done.append(str(p))
    for p, _pid in sibling_leftovers(path):
        gens.remove(p)
        done.append(str(p))
    store = docstore_path(path, manifest)
    if store.exists() and schema(store) == 2:
        ls = LiveStore(store)
        try:  # (rows of a generation the sharded index committed stay: settle switches it in)
            n = ls.rollback_after(committed_prepared(path, manifest) or int(manifest.get("generation", 0)))
        finally:
            ls.close()
        if n:
            done.append(f"{n} document-store rows of an uncommitted generation")
    return done


@contextlib.contextmanager
def changing(path: Path | str, on_wait: Optional[Callable[[Optional[int]], None]] = None) -> Iterator[Change]:
    """Hold the folder's writer lock, clean leftovers, and yield the next generation's change
    (format 1 folders get a schema-2 document store in it: one copy of the store, once). The
    change is rolled back unless the block commits it."""
    path = Path(path)
    with gens.writer_lock(path, on_wait):
        m = settle(path, mf.read_manifest(path))  # a generation its sharded index committed comes first
        store_path = docstore_path(path, m)
        DocStore(store_path).check()  # a missing, empty or damaged store: one line, nothing made
        clean_leftovers(path, m)
        collect(path, m)
        store_rel = store_path.name  # (one name inside the folder: indexes.manifest checks it)
        migrated = None
        if schema(path / store_rel) == 1:
            new_rel = store_name(int(m.get("generation", 0)) + 1)
            migrated = path / new_rel
            migrate(path / store_rel, migrated, int(m.get("generation", 0)))
            old_rel, store_rel = store_rel, new_rel
        try:
            store = LiveStore(path / store_rel)
        except BaseException:
            if migrated is not None:
                gens.remove(migrated)
            raise
        ch = Change(path, m, store, store_rel)
        if migrated is not None:
            ch.made += [migrated, Path(f"{migrated}-wal"), Path(f"{migrated}-shm")]
            ch.new["docstore"] = dict(m.get("docstore") or {}, path=store_rel, schema=2)
            ch.new["retired"].append({"path": old_rel, "from": 0, "to": ch.base})
            ch.new["migrated"] = {"from_format": int(m.get("format_version", 1)), "at": mf.now(),
                                  "generation": ch.gen}
        try:
            yield ch
        except BaseException:
            if not ch.committed:
                ch.rollback()
            raise
        finally:
            store.close()


def commit_manifest(path: Path | str, edit: Callable[[Change], None], based_on: Optional[dict] = None) -> dict:
    """A change of the manifest alone (a tuned fusion, a retuned default, a selector's record) as
    generation N+1 under the writer lock: ``edit(change)`` changes ``change.new`` (and may
    :meth:`Change.stage` a sub-index to write new files into its copy). Readers holding N keep N
    until they move on. ``based_on``: the manifest the edit was computed from; if the documents
    changed since (another writer), nothing is committed and the caller is told to run again.
    Returns the committed manifest."""
    with changing(path) as ch:
        if based_on is not None and (based_on.get("corpus") or {}).get("fingerprint") != \
                (ch.old.get("corpus") or {}).get("fingerprint"):
            raise InputError("the documents changed (another writer) while this was computed on them; "
                             "nothing was recorded: run it again", path)
        edit(ch)
        ch.commit()
        return ch.new
