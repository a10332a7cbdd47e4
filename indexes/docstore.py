"""SQLite document store: docid -> (title, text, metadata).

SQLite is in the standard library, streams inserts and gives fast random
access, so hits can carry their passage text without holding the corpus in RAM.
Readers open one read-only connection per thread, so a DocStore is safe to
share between threads.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

Row = Tuple[str, str, str, Optional[dict]]  # docid, title, text, metadata

_SCHEMA = "CREATE TABLE docs (docid TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL, meta TEXT)"


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
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._local = threading.local()

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            self._local.con = con
        return con

    def __len__(self) -> int:
        return self._con().execute("SELECT COUNT(*) FROM docs").fetchone()[0]

    def get(self, docid: str) -> Optional[Row]:
        r = self._con().execute("SELECT docid, title, text, meta FROM docs WHERE docid=?", (docid,)).fetchone()
        return None if r is None else (r[0], r[1], r[2], json.loads(r[3]) if r[3] else None)

    def get_many(self, docids: Iterable[str]) -> Dict[str, Row]:
        ids = list(dict.fromkeys(docids))
        out: Dict[str, Row] = {}
        con = self._con()
        for i in range(0, len(ids), 900):  # stay under SQLite's bound-parameter limit
            chunk = ids[i:i + 900]
            q = f"SELECT docid, title, text, meta FROM docs WHERE docid IN ({','.join('?' * len(chunk))})"
            for r in con.execute(q, chunk):
                out[r[0]] = (r[0], r[1], r[2], json.loads(r[3]) if r[3] else None)
        return out

    def iter_docs(self, batch: int = 10000):
        con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            cur = con.execute("SELECT docid, title, text, meta FROM docs ORDER BY rowid")
            while True:
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
