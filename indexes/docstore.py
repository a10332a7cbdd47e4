"""SQLite document store: docid -> (title, text, metadata), per generation.

SQLite is in the standard library, streams inserts and gives fast random
access, so hits can carry their passage text without holding the corpus in RAM.
Readers open one read-only connection per thread, so a DocStore is safe to
share between threads.

Schema 2 (index format 2) keeps every version of a document with the
generation that added it and the one that deleted it::

    docs(docid, title, text, meta, added INTEGER, deleted INTEGER NULL)

A reader of generation G sees the rows with ``added <= G`` and ``deleted`` NULL
or ``> G``, so one file serves every generation: a writer adds the rows of
generation G+1 and marks the rows it deletes before the manifest names G+1,
and readers of G do not see them. The database is in WAL mode, so readers never
wait for the writer. Rows of a generation whose manifest never appeared (the
writer died) are removed by the next writer (:meth:`LiveStore.rollback_after`);
rows no generation in use can see are purged (:meth:`LiveStore.purge`).

Schema 1 (format 1 folders) is ``docs(docid PRIMARY KEY, title, text, meta)``:
read as it is, copied into a schema-2 file on the folder's first change
(:func:`migrate`).
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat as _stat
import threading
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from indexes.atomic import follow_umask
from indexes.errors import IndexFormatError

Row = Tuple[str, str, str, Optional[dict]]  # docid, title, text, metadata

_SCHEMA_V1 = "CREATE TABLE docs (docid TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL, meta TEXT)"
_SCHEMA = ("CREATE TABLE docs (docid TEXT NOT NULL, title TEXT NOT NULL, text TEXT NOT NULL, meta TEXT, "
           "added INTEGER NOT NULL DEFAULT 0, deleted INTEGER)")
_INDEXES = ("CREATE INDEX IF NOT EXISTS docs_docid ON docs(docid)",
            "CREATE INDEX IF NOT EXISTS docs_deleted ON docs(deleted) WHERE deleted IS NOT NULL")
SCHEMA_VERSION = 2


@contextlib.contextmanager
def _readable(path: Path) -> Iterator[None]:
    """A missing, truncated or foreign file surfaces as sqlite3 errors: report it as a damaged folder."""
    try:
        yield
    except sqlite3.Error as e:
        raise IndexFormatError(f"{path}: the document store cannot be read ({e})") from None


def _wal_may_hold(path: Path, size: int) -> bool:
    """Whether pages past the end of the main file can be in its write-ahead log (a writer grew
    the database and no checkpoint has copied the pages back yet): then the file is not short."""
    if os.path.exists(f"{path}-wal"):
        return True
    try:  # a checkpoint may have copied them and removed the log since we read the page count
        return os.stat(path).st_size >= size
    except OSError:
        return False


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)


def _meta(meta: Optional[dict]) -> Optional[str]:
    return json.dumps(meta, ensure_ascii=False) if meta else None


def _row(r) -> Row:
    return (r[0], r[1], r[2], json.loads(r[3]) if r[3] else None)


def schema_of(con: sqlite3.Connection) -> int:
    cols = {r[1] for r in con.execute("PRAGMA table_info(docs)")}
    return 2 if "added" in cols else 1


class DocStoreWriter:
    """Writes a new store (a build): every row is added in ``generation``."""

    def __init__(self, path: Path | str, batch: int = 5000, generation: int = 0):
        self.path = Path(path)
        self.generation = int(generation)
        self._con = sqlite3.connect(self.path)
        follow_umask(self.path)  # SQLite creates 0644 whatever the umask; -wal/-shm take the file's mode
        self._con.execute("PRAGMA journal_mode=OFF")
        self._con.execute("PRAGMA synchronous=OFF")
        self._con.execute(_SCHEMA)
        self._buf: List[tuple] = []
        self._batch = batch
        self.count = 0

    def add(self, docid: str, title: str, text: str, meta: Optional[dict] = None) -> None:
        self._buf.append((docid, title, text, _meta(meta), self.generation))
        if len(self._buf) >= self._batch:
            self._flush()

    def _flush(self) -> None:
        if self._buf:
            self._con.executemany("INSERT INTO docs (docid, title, text, meta, added) VALUES (?,?,?,?,?)", self._buf)
            self.count += len(self._buf)
            self._buf.clear()

    def close(self) -> int:
        self._flush()
        for sql in _INDEXES:  # built once at the end: faster than growing them row by row
            self._con.execute(sql)
        self._con.commit()
        self._con.execute("PRAGMA journal_mode=WAL")  # stays set in the file: readers never wait for writers
        self._con.close()
        return self.count


class DocStore:
    """Read access to one generation (``generation``; None: the rows not deleted); any SQLite
    error (a missing, empty or truncated file) raises IndexFormatError."""

    def __init__(self, path: Path | str, generation: Optional[int] = None):
        self.path = Path(path)
        self.generation = generation
        self._local = threading.local()
        self._where: Optional[Tuple[str, tuple]] = None

    def check(self) -> None:
        """Raise IndexFormatError unless the file is a readable document store. Cheap (no scan): the
        size SQLite's header promises (a truncated copy is shorter), the docs table and its last row.

        The file is never opened outside SQLite: closing any descriptor of a file drops every POSIX
        lock this process holds on it, SQLite's included, and a writer in another process could then
        take itself for the last connection and remove the ``-wal`` and ``-shm`` files under our
        live connections. So the header is read through SQLite (``PRAGMA page_size/page_count``)
        and the file itself only ``stat``-ed."""
        p = self.path
        try:
            st = os.stat(p)
        except FileNotFoundError:
            raise IndexFormatError(f"{p}: the document store is missing") from None
        except OSError as e:
            raise IndexFormatError(f"{p}: the document store cannot be read ({e.strerror or e})") from None
        if not _stat.S_ISREG(st.st_mode):
            raise IndexFormatError(f"{p}: the document store is missing (not a file)")
        if st.st_size == 0:
            raise IndexFormatError(f"{p}: the document store is empty (0 bytes)")
        try:
            con = _read_only(p)
            try:
                page = con.execute("PRAGMA page_size").fetchone()[0]
                pages = con.execute("PRAGMA page_count").fetchone()[0]
                con.execute("SELECT docid, title, text, meta FROM docs ORDER BY rowid DESC LIMIT 1").fetchall()
            finally:
                con.close()
        except sqlite3.DatabaseError as e:
            if "not a database" in str(e):
                raise IndexFormatError(f"{p}: the document store is not a SQLite database "
                                       f"({st.st_size:,} bytes)") from None
            raise IndexFormatError(f"{p}: the document store cannot be read ({e})") from None
        except sqlite3.Error as e:
            raise IndexFormatError(f"{p}: the document store cannot be read ({e})") from None
        if pages * page > st.st_size and not _wal_may_hold(p, pages * page):
            raise IndexFormatError(f"{p}: the document store is truncated ({st.st_size:,} of "
                                   f"{pages * page:,} bytes)")

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            with _readable(self.path):
                con = _read_only(self.path)
            self._local.con = con
        return con

    def _visible(self) -> Tuple[str, tuple]:
        """The SQL condition (and its parameters) for the rows this reader sees."""
        if self._where is None:
            with _readable(self.path):
                schema = schema_of(self._con())
            if schema == 1:
                self._where = ("1", ())
            elif self.generation is None:
                self._where = ("deleted IS NULL", ())
            else:
                g = int(self.generation)
                self._where = ("added <= ? AND (deleted IS NULL OR deleted > ?)", (g, g))
        return self._where

    def __len__(self) -> int:
        w, p = self._visible()
        with _readable(self.path):
            return self._con().execute(f"SELECT COUNT(*) FROM docs WHERE {w}", p).fetchone()[0]

    def get(self, docid: str) -> Optional[Row]:
        w, p = self._visible()
        with _readable(self.path):
            r = self._con().execute(f"SELECT docid, title, text, meta FROM docs WHERE docid=? AND {w}",
                                    (docid, *p)).fetchone()
        return None if r is None else _row(r)

    def get_many(self, docids: Iterable[str]) -> Dict[str, Row]:
        ids = list(dict.fromkeys(docids))
        out: Dict[str, Row] = {}
        con = self._con()
        w, p = self._visible()
        with _readable(self.path):
            for i in range(0, len(ids), 900):  # stay under SQLite's bound-parameter limit
                chunk = ids[i:i + 900]
                q = f"SELECT docid, title, text, meta FROM docs WHERE docid IN ({','.join('?' * len(chunk))}) AND {w}"
                for r in con.execute(q, (*chunk, *p)):
                    out[r[0]] = _row(r)
        return out

    def _scan(self, cols: str, batch: int, where: str = "", params: tuple = ()) -> Iterator[tuple]:
        """Rows ``cols`` of every visible document (and ``where``), in rowid order, ``batch`` at a
        time on a connection of its own (a generator may be left half-read)."""
        w, p = self._visible()
        with _readable(self.path):
            con = _read_only(self.path)
        try:
            with _readable(self.path):
                cur = con.execute(f"SELECT {cols} FROM docs WHERE {w}{where} ORDER BY rowid", (*p, *params))
            while True:
                with _readable(self.path):
                    rows = cur.fetchmany(batch)
                if not rows:
                    break
                yield from rows
        finally:
            con.close()

    def iter_docs(self, batch: int = 10000) -> Iterator[Row]:
        """Every visible document, in the order they were added (the order builds follow)."""
        for r in self._scan("docid, title, text, meta", batch):
            yield _row(r)

    def iter_meta(self, batch: int = 10000) -> Iterator[Tuple[str, Optional[dict]]]:
        """``(docid, metadata or None)`` for every visible document, in the store's order (no text read)."""
        for r in self._scan("docid, meta", batch):
            yield r[0], (json.loads(r[1]) if r[1] else None)

    def rowid_ranges(self, block: int) -> List[Tuple[int, int]]:
        """Half-open rowid ranges holding ``block`` visible documents each, in order (one pass over
        rowids): what :meth:`range_docs` reads back, for workers that each take a range."""
        out: List[Tuple[int, int]] = []
        lo, n, last = None, 0, None
        for (rid,) in self._scan("rowid", 10000):
            if lo is None:
                lo = rid
            n += 1
            last = rid
            if n == block:
                out.append((lo, rid + 1))
                lo, n = None, 0
        if lo is not None:
            out.append((lo, last + 1))
        return out

    def range_docs(self, lo: int, hi: int) -> List[Tuple[str, str, str]]:
        """``(docid, title, text)`` of the visible documents with ``lo <= rowid < hi``, in order."""
        return list(self._scan("docid, title, text", 10000, " AND rowid >= ? AND rowid < ?", (int(lo), int(hi))))

    def ids(self) -> List[str]:
        w, p = self._visible()
        return [r[0] for r in self._con().execute(f"SELECT docid FROM docs WHERE {w} ORDER BY rowid", p)]

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None


class LiveStore:
    """The writer's connection to a schema-2 store (one writer at a time: the folder lock)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._con = sqlite3.connect(self.path, isolation_level=None, timeout=60)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA synchronous=NORMAL")
        if schema_of(self._con) != 2:
            raise ValueError(f"{self.path}: not a schema-2 document store")

    def visible(self, docids: Sequence[str], generation: int) -> Dict[str, int]:
        """Which of ``docids`` generation ``generation`` holds: docid -> rowid."""
        out: Dict[str, int] = {}
        ids = list(dict.fromkeys(docids))
        g = int(generation)
        for i in range(0, len(ids), 900):
            chunk = ids[i:i + 900]
            q = (f"SELECT docid, rowid FROM docs WHERE docid IN ({','.join('?' * len(chunk))}) "
                 "AND added <= ? AND (deleted IS NULL OR deleted > ?)")
            out.update(self._con.execute(q, (*chunk, g, g)).fetchall())
        return out

    def change(self, generation: int, deleted: Sequence[str], added: Sequence) -> None:
        """In one transaction: mark the visible rows of ``deleted`` as deleted in ``generation`` and
        add ``added`` (Documents) in it. Readers of older generations see neither."""
        g = int(generation)
        con = self._con
        con.execute("BEGIN IMMEDIATE")
        try:
            ids = list(deleted)
            for i in range(0, len(ids), 900):
                chunk = ids[i:i + 900]
                con.execute(f"UPDATE docs SET deleted=? WHERE docid IN ({','.join('?' * len(chunk))}) "
                            "AND deleted IS NULL", (g, *chunk))
            con.executemany("INSERT INTO docs (docid, title, text, meta, added) VALUES (?,?,?,?,?)",
                            [(d.docid, d.title, d.text, _meta(d.metadata), g) for d in added])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def uncommitted(self, generation: int) -> int:
        """Rows that belong to generations after ``generation`` (a writer that died before its switch)."""
        g = int(generation)
        return self._con.execute("SELECT COUNT(*) FROM docs WHERE added > ? OR deleted > ?", (g, g)).fetchone()[0]

    def rollback_after(self, generation: int) -> int:
        """Undo every change of generations after ``generation``; returns the rows touched."""
        g = int(generation)
        con = self._con
        con.execute("BEGIN IMMEDIATE")
        try:
            n = con.execute("DELETE FROM docs WHERE added > ?", (g,)).rowcount
            n += con.execute("UPDATE docs SET deleted=NULL WHERE deleted > ?", (g,)).rowcount
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return n

    def purge(self, upto: int) -> int:
        """Remove the rows deleted in generation ``upto`` or before: no reader of ``upto`` or later sees them."""
        return self._con.execute("DELETE FROM docs WHERE deleted IS NOT NULL AND deleted <= ?",
                                 (int(upto),)).rowcount

    def count(self, generation: int) -> int:
        g = int(generation)
        return self._con.execute("SELECT COUNT(*) FROM docs WHERE added <= ? AND (deleted IS NULL OR deleted > ?)",
                                 (g, g)).fetchone()[0]

    def close(self) -> None:
        self._con.close()


def schema(path: Path | str) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return schema_of(con)
    finally:
        con.close()


def migrate(old: Path | str, new: Path | str, generation: int) -> int:
    """Copy a schema-1 store into a new schema-2 file, every row added in ``generation``, in the
    same order; returns the rows copied. One pass over the store (its size in writes), once."""
    new = Path(new)
    if new.exists():
        new.unlink()
    con = sqlite3.connect(new)
    follow_umask(new)
    try:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute(_SCHEMA)
        con.execute("ATTACH DATABASE ? AS old", (str(old),))
        n = con.execute("INSERT INTO docs (docid, title, text, meta, added) "
                        "SELECT docid, title, text, meta, ? FROM old.docs ORDER BY rowid", (int(generation),)).rowcount
        con.commit()
        con.execute("DETACH DATABASE old")
        for sql in _INDEXES:
            con.execute(sql)
        con.commit()
        con.execute("PRAGMA journal_mode=WAL")
    finally:
        con.close()
    return n
