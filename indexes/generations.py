"""Generations of an index folder: how it changes safely while it is read.

A folder holds one *current* generation, named by ``manifest.json``
(``"generation": N``); each sub-index entry points at the folder that holds
it in that generation (``bm25`` when built, ``bm25.g3`` after the third
change). A change never rewrites a file that a reader may have open: it makes
``<name>.g<N+1>`` as a hard-link copy of the current folder (Lucene files are
write-once, faiss and weight files get per-generation delta files beside the
shared base), changes the copy, and becomes visible with one ``os.replace`` of
the manifest. Folders of older generations are listed under ``"retired"`` in
the manifest (with the generations that used them) and removed once no reader
holds any of those generations.

Locks (``flock``, released by the kernel when a process dies):

- ``INDEX/.lock``: the writer lock. Writers of one folder take it in turn
  (re-entrant within a process and thread); it holds the writer's pid.
- ``INDEX/.readers/<N>``: a shared lock per generation, held by every open
  :class:`retrieval.index.Index` on generation N. A writer collecting garbage
  takes it exclusively (never waiting) to learn that nobody reads N any more.

Both are opened without following a symlink (``O_NOFOLLOW``; the pins by name in a
descriptor of ``.readers``), and a folder whose own entries are links is refused
before either is made (:func:`indexes.manifest.refuse_links`): a folder is untrusted
input, and a planted ``.lock`` or ``.readers`` would lead the writer outside it.

Anything a dead writer left (an uncommitted generation's folders, temporary
folders, staging folders beside the index) is found by :func:`indexes.folder.inner_leftovers` and
:func:`indexes.folder.sibling_leftovers` and removed by the next writer
(:func:`indexes.folder.clean_leftovers`); ``retr check`` reports it. The folder's names and its
commits are :mod:`indexes.folder`'s; this module holds the mechanisms it is built on.
A test-only environment variable, ``RETR_TEST_PAUSE=<point>``, stops a writer
at a named point (:func:`pause`) so that tests can kill it there.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional, Set

from indexes.errors import IndexFormatError
from indexes.manifest import LOCK, READERS, lmode, planted, refuse_links


# ------------------------------------------------------------------------------ opening the folder's own files
def _open_nofollow(where: Path, flags: int, dir_fd: Optional[int] = None) -> int:
    """``os.open`` of one of a folder's own files (``where``; with ``dir_fd``, its name in that folder)
    that never follows a symlink (``O_NOFOLLOW``) and never waits on a planted FIFO (``O_NONBLOCK``,
    which plain files ignore): a link, or anything but a plain file, is one line
    (:func:`indexes.manifest.planted`)."""
    flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(where.name if dir_fd is not None else where, flags, 0o666, dir_fd=dir_fd)  # (umask: the mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise planted(where) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise planted(where, mode)
    return fd


# ------------------------------------------------------------------------------ test pause points
def pause(point: str) -> None:
    """Stop here forever when ``RETR_TEST_PAUSE`` names ``point`` (for crash tests, which
    kill the process at that point; several points separated by commas). Prints
    ``retr-test-paused <point> <pid>`` on stderr first. With ``RETR_TEST_PAUSE_SECONDS``
    it goes on after that many seconds instead (tests that read while a writer is half-way)."""
    want = os.environ.get("RETR_TEST_PAUSE")
    if want and point in want.split(","):
        print(f"retr-test-paused {point} {os.getpid()}", file=sys.stderr, flush=True)
        seconds = os.environ.get("RETR_TEST_PAUSE_SECONDS")
        if seconds:
            time.sleep(float(seconds))
            return
        while True:
            time.sleep(3600)


# ------------------------------------------------------------------------------ processes
def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - not Linux
    _prctl = None


def child_dies_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` that makes the kernel send SIGKILL to the child when this process
    dies (``PR_SET_PDEATHSIG``), so a ``kill -9`` of retr takes its Java indexer with it.
    (The signal follows the thread that started the child; retr waits for the child in
    that thread.) Where prctl is missing it does nothing."""
    parent = os.getpid()

    def preexec():
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(1)

    return preexec


# ------------------------------------------------------------------------------ the writer lock
_held: Dict[str, list] = {}          # real path -> [thread lock, fd, depth, owner thread id]
_held_guard = threading.Lock()


class WriterLock:
    """The exclusive writer lock of ``folder`` (``INDEX/.lock``), re-entrant in one thread."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.key = os.path.realpath(self.folder)

    def holder(self) -> Optional[int]:
        """The pid recorded by the process holding the lock, or None when nobody holds it."""
        path = self.folder / LOCK
        try:
            fd = _open_nofollow(path, os.O_RDONLY)
        except (OSError, IndexFormatError):  # a planted link: nobody's lock
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                try:
                    return int(os.pread(fd, 32, 0).decode().strip() or 0) or -1
                except ValueError:
                    return -1
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def __call__(self, on_wait: Optional[Callable[[Optional[int]], None]] = None) -> Iterator[None]:
        with _held_guard:
            slot = _held.setdefault(self.key, [threading.RLock(), None, 0, None])
        tlock = slot[0]
        tlock.acquire()
        try:
            if slot[2] == 0:
                slot[1] = self._flock(on_wait)
            slot[2] += 1
            try:
                yield
            finally:
                slot[2] -= 1
                if slot[2] == 0:
                    fd, slot[1] = slot[1], None
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, 0)
                    os.close(fd)  # releases the flock
        finally:
            tlock.release()

    def _flock(self, on_wait) -> int:
        path = self.folder / LOCK
        refuse_links(self.folder)  # before the lock's file is made: a folder with planted links is not touched
        while True:
            try:
                fd = _open_nofollow(path, os.O_RDWR | os.O_CREAT)
            except OSError as e:
                from indexes.errors import InputError

                if not self.folder.is_dir():
                    raise InputError("index folder does not exist", self.folder) from None
                raise InputError(f"cannot change the index: its writer lock {LOCK} cannot be opened for writing "
                                 f"({e.strerror})", self.folder) from None
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if on_wait is not None:
                        try:
                            pid = int(os.pread(fd, 32, 0).decode().strip() or 0) or None
                        except ValueError:
                            pid = None
                        on_wait(pid)
                        on_wait = None
                    fcntl.flock(fd, fcntl.LOCK_EX)
                # the folder may have been replaced (retr index --overwrite) while we waited
                try:
                    same = os.lstat(path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if not same:
                    os.close(fd)
                    if not self.folder.exists():
                        from indexes.errors import InputError

                        raise InputError("index folder does not exist", self.folder)
                    continue
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
                return fd
            except BaseException:
                with contextlib.suppress(OSError):
                    os.close(fd)
                raise


def writer_lock(folder: Path | str, on_wait: Optional[Callable[[Optional[int]], None]] = None):
    """``with writer_lock(INDEX): ...``: hold the folder's writer lock (waiting for it)."""
    return WriterLock(Path(folder))(on_wait)


def writer_busy(folder: Path | str) -> Optional[int]:
    """The pid of a process holding the writer lock of ``folder`` (-1 if unknown), or None."""
    key = os.path.realpath(folder)
    slot = _held.get(key)
    if slot is not None and slot[2] > 0:
        return os.getpid()
    return WriterLock(Path(folder)).holder()


# ------------------------------------------------------------------------------ reader locks
def _readers_fd(folder: Path, create: bool) -> Optional[int]:
    """A file descriptor of ``folder/.readers`` (made first with ``create``), opened without following a
    link: the pins are then opened, checked and removed by name in it (``dir_fd``), so nothing swapped
    in for the folder meanwhile can send them elsewhere. None when it is missing (and not made)."""
    d = Path(folder) / READERS
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(d)
    try:
        return os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise planted(d, lmode(d)) from None
        raise


def hold_generation(folder: Path, generation: int) -> Optional[int]:
    """Take a shared lock on generation ``generation`` of ``folder``; returns the fd (close
    it to release), or None where the folder is read-only (no writer can change it then).
    Raises BlockingIOError while a writer is collecting that generation: the caller
    re-reads the manifest, which has moved on. A ``.readers`` or pin that is a link (or not
    a plain folder, file) is refused in one line (:func:`refuse_links`)."""
    name = str(int(generation))
    try:
        dfd = _readers_fd(Path(folder), create=True)
    except OSError as e:
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return None
        raise
    try:
        try:
            fd = _open_nofollow(Path(folder) / READERS / name, os.O_RDONLY | os.O_CREAT, dir_fd=dfd)
        except OSError as e:
            if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                return None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            try:
                same = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # collected between open and lock
                raise BlockingIOError(errno.EAGAIN, "generation is being collected")
        except BaseException:
            os.close(fd)
            raise
        return fd
    finally:
        os.close(dfd)


def held_generations(folder: Path, current: int) -> Set[int]:
    """Generations older than ``current`` that some reader holds. The lock files of the
    others are removed (taking each exclusively first, so no reader holds it meanwhile).
    Only plain files named by a number are pins: anything else in ``.readers`` is left alone,
    and a ``.readers`` that is a link is refused in one line."""
    held: Set[int] = set()
    dfd = _readers_fd(Path(folder), create=False)
    if dfd is None:
        return held
    try:
        for name in os.listdir(dfd):
            if not (name.isascii() and name.isdigit()):
                continue
            g = int(name)
            if g >= current:
                continue
            try:
                if not stat.S_ISREG(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                    continue
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except (FileNotFoundError, IsADirectoryError):
                continue
            except OSError as e:
                if e.errno == errno.ELOOP:  # swapped for a link since the lstat: not ours
                    continue
                raise
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    held.add(g)
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if os.stat(name, dir_fd=dfd, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                        os.unlink(name, dir_fd=dfd)
            finally:
                os.close(fd)
    finally:
        os.close(dfd)
    return held


# ------------------------------------------------------------------------------ copies that share files
def link_tree(src: Path, dst: Path) -> int:
    """Make ``dst`` a copy of the folder ``src`` whose files are hard links to ``src``'s
    (a copy where the file system refuses links). Returns the bytes actually copied.
    Lucene's ``write.lock`` is not carried. Nothing may later write into a linked file:
    new content goes to new names, or replaces a name with ``os.replace``."""
    copied = 0
    dst.mkdir()
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        out = dst if rel == "." else dst / rel
        for d in dirs:
            (out / d).mkdir()
        for f in files:
            if f == "write.lock":
                continue
            s, t = os.path.join(root, f), out / f
            try:
                os.link(s, t, follow_symlinks=False)  # a link stays a link: nothing outside is linked in
            except OSError as e:
                if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                    raise
                shutil.copy2(s, t, follow_symlinks=False)
                copied += os.lstat(t).st_size
    return copied


# ------------------------------------------------------------------------------ atomic exchange
_RENAME_EXCHANGE = 2
try:
    _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
except (OSError, AttributeError):  # pragma: no cover - glibc < 2.28
    _renameat2 = None


def exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``);
    False where the system cannot, and nothing changed."""
    if _renameat2 is None:
        return False
    AT_FDCWD = -100
    r = _renameat2(AT_FDCWD, os.fsencode(str(a)), AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE)
    if r == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a))


# ------------------------------------------------------------------------------ leftovers
def remove(p: Path) -> None:
    """Remove ``p`` without following a link: a link is unlinked itself, a folder removed by
    ``shutil.rmtree`` (which refuses a link as its root and unlinks links inside it)."""
    mode = lmode(p)
    if mode is None:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def size_of(p: Path) -> int:
    mode = lmode(p)
    if mode is None:
        return 0
    if not stat.S_ISDIR(mode):  # (a link's own size, not its target's)
        return os.lstat(p).st_size
    total = 0
    for root, _d, files in os.walk(p):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total
