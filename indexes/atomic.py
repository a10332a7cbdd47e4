"""Atomic file writes, with the mode every other file gets: the one rule for files retr writes.

A file is written under a temporary name beside its target, flushed to disk (``fsync``), given the
mode ``open()`` would have given it (``0o666 & ~umask``) and moved over the target with one
``os.replace``, so a reader sees the old file or the new one, never half of one. On an error the
temporary file is removed and the target is left as it was.

Why the chmod: ``tempfile.mkstemp`` creates its file 0600 whatever the umask, and ``os.replace``
keeps that mode, so ``index.faiss``, ``docids.txt`` and ``faiss.json`` of a dense build were 0600
while Lucene's files and the document store beside them were 0644.

Temporary names are ``.<name>.<random>.tmp-<pid>``: unique per call (two threads writing the same
target do not meet), and of the form :mod:`indexes.generations` recognises as retr's own leftovers.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from pathlib import Path
from typing import IO, Iterator, Union

PathLike = Union[str, "os.PathLike[str]"]

_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask, read without changing it (``/proc/self/status``, Linux ≥ 4.7). Only
    where that is missing is it read by setting and restoring it, which another thread creating a
    file at that moment could notice."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a new file gets from ``open()``: ``0o666`` less the umask."""
    return 0o666 & ~current_umask()


def follow_umask(path: PathLike) -> None:
    """Give a file another library wrote the mode ``open()`` would have given it (safetensors
    writes its files 0600, as ``mkstemp`` does)."""
    os.chmod(path, file_mode())


def _finish(tmp: Path, path: Path) -> None:
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.fchmod(fd, file_mode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """A temporary file name beside ``path``, for writers that take a name (``faiss.write_index``,
    ``torch.save``, ``gzip.open``); when the block ends without an error the file is synced, given
    :func:`file_mode` and moved to ``path``, else removed."""
    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp-{os.getpid()}")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        _finish(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_write(path: PathLike, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """``open(path, mode, **open_kwargs)`` that replaces ``path`` atomically (see :func:`atomic_path`);
    ``mode`` is a write mode (``"w"``, ``"wb"``)."""
    if not mode.startswith("w"):
        raise ValueError(f"atomic_write writes a new file (mode 'w' or 'wb'), not {mode!r}")
    with atomic_path(path) as tmp:
        with open(tmp, mode, **open_kwargs) as f:
            yield f


def write_text(path: PathLike, text: str, encoding: str = "utf-8") -> None:
    """Replace ``path`` atomically with ``text`` (newlines written as they are)."""
    with atomic_write(path, "w", encoding=encoding, newline="") as f:
        f.write(text)


def write_bytes(path: PathLike, data: bytes) -> None:
    """Replace ``path`` atomically with ``data``."""
    with atomic_write(path, "wb") as f:
        f.write(data)
