"""SQLite document store: docid -> (title, text, metadata).

SQLite is in the standard library, streams inserts and gives fast random
access, so hits can carry their passage text without holding the corpus in RAM.
Readers open one read-only connection per thread, so a DocStore is safe to
share between threads.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from indexes.errors import IndexFormatError

Row = Tuple[str, str, str, Optional[dict]]  # docid, title, text, metadata

_SCHEMA = "CREATE TABLE docs (docid TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL, meta TEXT)"
_MAGIC = b"SQLite format 3\x00"


@contextlib.contextmanager
def _readable(path: Path) -> Iterator[None]:
    """A missing, truncated or foreign file surfaces as sqlite3 errors: report it as a damaged folder."""
    try:
        yield
    except sqlite3.Error as e:
        raise IndexFormatError(f"{path}: the document store cannot be read ({e})") from None


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)


class DocStoreWriter:
    def __init__(self, path: Path | str, batch: int = 5000):
        self.path = Path(path)
        self._con = sqlite3.connect(self.path)
        self._con.execute("PRAGMA journal_mode=OFF")
        self._con.execute("PRAGMA synchronous=OFF")
        self._con.execute(_SCHEMA)
        self._buf: List[tuple] = []
        self._batch = batch
        self.count = 0

    def add(self, docid: str, title: str, text: str, meta: Optional[dict] = None) -> None:
        self._buf.append((docid, title, text, json.dumps(meta, ensure_ascii=False) if meta else None))
        if len(self._buf) >= self._batch:
            self._flush()

    def _flush(self) -> None:
        if self._buf:
            self._con.executemany("INSERT INTO docs VALUES (?,?,?,?)", self._buf)
            self.count += len(self._buf)
            self._buf.clear()

    def close(self) -> int:
        self._flush()
        self._con.commit()
        self._con.close()
        return self.count


class DocStore:
    """Read access; any SQLite error (a missing, empty or truncated file) raises IndexFormatError."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._local = threading.local()

    def check(self) -> None:
        """Raise IndexFormatError unless the file is a readable document store. Cheap (no scan): the
        SQLite header, the size it promises (a truncated copy is shorter), the docs table and its last row."""
        p = self.path
        if not p.is_file():
            raise IndexFormatError(f"{p}: the document store is missing")
        try:
            size = p.stat().st_size
            with open(p, "rb") as f:
                head = f.read(100)
        except OSError as e:
            raise IndexFormatError(f"{p}: the document store cannot be read ({e.strerror or e})") from None
        if size == 0:
            raise IndexFormatError(f"{p}: the document store is empty (0 bytes)")
        if len(head) < 100 or not head.startswith(_MAGIC):
            raise IndexFormatError(f"{p}: the document store is not a SQLite database ({size:,} bytes)")
        page = int.from_bytes(head[16:18], "big")
        page = 65536 if page == 1 else page
        pages = int.from_bytes(head[28:32], "big")
        if head[24:28] == head[92:96] and pages * page > size:  # the in-header page count is valid
            raise IndexFormatError(f"{p}: the document store is truncated ({size:,} of {pages * page:,} bytes)")
        with _readable(p):
            con = _read_only(p)
            try:
                con.execute("SELECT docid, title, text, meta FROM docs ORDER BY rowid DESC LIMIT 1").fetchall()
            finally:
                con.close()

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            with _readable(self.path):
                con = _read_only(self.path)
            self._local.con = con
        return con

    def __len__(self) -> int:
        with _readable(self.path):
            return self._con().execute("SELECT COUNT(*) FROM docs").fetchone()[0]

    def get(self, docid: str) -> Optional[Row]:
        with _readable(self.path):
            r = self._con().execute("SELECT docid, title, text, meta FROM docs WHERE docid=?", (docid,)).fetchone()
        return None if r is None else (r[0], r[1], r[2], json.loads(r[3]) if r[3] else None)

    def get_many(self, docids: Iterable[str]) -> Dict[str, Row]:
        ids = list(dict.fromkeys(docids))
        out: Dict[str, Row] = {}
        con = self._con()
        with _readable(self.path):
            for i in range(0, len(ids), 900):  # stay under SQLite's bound-parameter limit
                chunk = ids[i:i + 900]
                q = f"SELECT docid, title, text, meta FROM docs WHERE docid IN ({','.join('?' * len(chunk))})"
                for r in con.execute(q, chunk):
                    out[r[0]] = (r[0], r[1], r[2], json.loads(r[3]) if r[3] else None)
        return out

    def iter_docs(self, batch: int = 10000):
        with _readable(self.path):
            con = _read_only(self.path)
        try:
            with _readable(self.path):
                cur = con.execute("SELECT docid, title, text, meta FROM docs ORDER BY rowid")
            while True:
                with _readable(self.path):
                    rows = cur.fetchmany(batch)
                if not rows:
                    break
                for r in rows:
                    yield (r[0], r[1], r[2], json.loads(r[3]) if r[3] else None)
        finally:
            con.close()

    def iter_meta(self, batch: int = 10000):
        """``(docid, metadata or None)`` for every document, in the store's order (no text read)."""
        con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            cur = con.execute("SELECT docid, meta FROM docs ORDER BY rowid")
            while True:
                rows = cur.fetchmany(batch)
                if not rows:
                    break
                for r in rows:
                    yield r[0], (json.loads(r[1]) if r[1] else None)
        finally:
            con.close()
