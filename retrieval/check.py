"""``retr check``: verify an index folder as readers see it.

For the current generation: the files the manifest names exist and open; every
sub-index (each physical index of it: a Lucene variant, the faiss rows) holds as
many live documents as the document store, and the manifest's counts agree; the
ids agree (a random sample of the store's ids looked up in every index, or with
``full`` every id both ways). Then what dead processes left: folders of a
generation that never got its manifest, temporary folders, document-store rows of
an uncommitted generation, staging folders beside the index. Those are harmless
(readers never see them) and the next write removes them, so they are reported as
notes, or as problems with ``strict``. Read-only: it changes nothing.
"""
from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Union

from indexes import folder as owner
from indexes import generations as gens
from indexes import manifest as mf
from indexes.errors import RetrError
from retrieval.index import Index
from retrieval.kinds import kind_of


@dataclass
class Report:
    path: str
    generation: int = 0
    documents: int = 0
    problems: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    checked: List[str] = field(default_factory=list)
    sharded: bool = False  # a sharded folder's report (every shard's, prefixed by its folder)

    @property
    def ok(self) -> bool:
        return not self.problems


def _first(xs) -> str:
    xs = sorted(xs)
    return ", ".join(repr(x) for x in xs[:3]) + (", ..." if len(xs) > 3 else "")


def check_index(path: Union[str, Path], full: bool = False, sample: int = 1000, strict: bool = False,
                seed: int = 0, at_least: Optional[int] = None) -> Report:
    """Check the folder at ``path``; the returned :class:`Report` lists one line per problem.
    ``at_least``: a shard's generation its sharded index committed (the ``Index`` constructor's)."""
    path = Path(path)
    rep = Report(str(path))
    try:
        idx = Index(path, auto_refresh=False, at_least=at_least)
    except RetrError as e:
        rep.problems.append(str(e))
        return rep
    try:
        _check_open(idx, rep, full, sample, seed)
    finally:
        idx.close()
    _check_leftovers(path, rep, strict)
    return rep


def _check_open(idx: Index, rep: Report, full: bool, sample: int, seed: int) -> None:
    m = idx.manifest
    rep.generation = idx.generation
    store = owner.docstore_path(idx.path, m)
    if not store.is_file():
        rep.problems.append(f"document store {store.name} is missing")
        return
    try:
        ds = idx.docstore
        ids = ds.ids()
    except sqlite3.Error as e:
        rep.problems.append(f"document store {store.name} cannot be read ({e})")
        return
    n = len(ids)
    rep.documents = n
    if len(set(ids)) != n:
        rep.problems.append(f"document store: {n - len(set(ids))} document id(s) appear twice in generation "
                            f"{rep.generation}")
    for what, v in (("corpus.doc_count", (m.get("corpus") or {}).get("doc_count")),
                    ("docstore.doc_count", (m.get("docstore") or {}).get("doc_count"))):
        if v is not None and int(v) != n:
            rep.problems.append(f"manifest {what} is {int(v):,}, the document store holds {n:,}")
    probe = ids if full or len(ids) <= sample else random.Random(seed).sample(ids, sample)
    for name, entry in m.get("subindexes", {}).items():
        if _check_entry(idx, name, entry, n, rep):
            _check_ids(idx.path / entry["path"], name, entry, n, ids if full else None, probe, rep)


def _check_entry(idx: Index, name: str, entry: dict, n: int, rep: Report) -> bool:
    """The manifest entry ``name`` against its folder and the document store's ``n`` documents (an alias
    against the entry it names); whether its ids are to be checked too."""
    m = idx.manifest
    if not (idx.path / entry["path"]).exists():
        rep.problems.append(f"{name}: folder {entry['path']} named by the manifest is missing")
        return False
    if int(entry.get("doc_count", n)) != n:
        rep.problems.append(f"{name}: manifest doc_count is {int(entry['doc_count']):,}, the document store "
                            f"holds {n:,}")
    if entry.get("alias_of"):
        target = m["subindexes"].get(entry["alias_of"])
        if target is None or target.get("path") != entry["path"]:
            rep.problems.append(f"{name}: alias of {entry['alias_of']!r} does not share its folder")
        return False
    return True


def _check_ids(folder, name: str, entry: dict, n: int, ids, probe, rep: Report) -> None:
    """The sub-index's counts against the store's ``n``, then its ids: every one (``ids``: the store's, for
    a full check) or the sampled ``probe``."""
    kind = kind_of(entry)
    try:
        counts = kind.count(folder, entry)
    except Exception as e:  # a damaged sub-index: report it, check the others
        rep.problems.append(f"{name}: cannot be opened ({_one_line(e)})")
        return
    for part, c in counts.items():
        if int(c) != n:
            rep.problems.append(f"{name} ({part}): holds {int(c):,} documents, the document store {n:,}")
    try:
        if ids is not None:
            idset = set(ids)
            for part, got in kind.ids(folder, entry).items():
                got = set(got)
                if got != idset:
                    miss, extra = idset - got, got - idset
                    rep.problems.append(f"{name} ({part}): ids differ from the document store's "
                                        f"({len(miss)} missing: {_first(miss) or '-'}; {len(extra)} not in the "
                                        f"store: {_first(extra) or '-'})")
        else:
            for part, got in kind.present(folder, entry, probe).items():
                miss = set(probe) - set(got)
                if miss:
                    rep.problems.append(f"{name} ({part}): {len(miss)} of {len(probe)} sampled ids of the "
                                        f"document store are missing: {_first(miss)}")
    except Exception as e:
        rep.problems.append(f"{name}: ids cannot be read ({_one_line(e)})")
    rep.checked.append(name)


def _one_line(e: Exception) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


def _check_leftovers(path: Path, rep: Report, strict: bool) -> None:
    out = rep.problems if strict else rep.notes
    for p, pid in owner.sibling_leftovers(path):
        out.append(f"leftover of dead process {pid}: {p} ({gens.size_of(p) / 1e6:.1f} MB); the next write or "
                   f"build of {path.name} removes it")
    busy = gens.writer_busy(path)
    if busy is not None:
        rep.notes.append(f"a writer (pid {busy}) is changing the folder; its work in progress is not checked")
        return
    try:
        m = mf.read_manifest(path)
    except RetrError:
        return
    for p in owner.inner_leftovers(path, m):
        out.append(f"leftover of a dead writer: {p} ({gens.size_of(p) / 1e6:.1f} MB); the next write removes it")
    store = owner.docstore_path(path, m)
    if store.is_file():
        g = int(m.get("generation", 0))
        con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        try:
            cols = {r[1] for r in con.execute("PRAGMA table_info(docs)")}
            if "added" in cols:
                k = con.execute("SELECT COUNT(*) FROM docs WHERE added > ? OR deleted > ?", (g, g)).fetchone()[0]
                if k:
                    out.append(f"leftover of a dead writer: {k} document-store row(s) of an uncommitted generation "
                               f"(invisible to readers); the next write removes them")
        except sqlite3.Error as e:
            rep.problems.append(f"document store {store.name} cannot be read ({e})")
        finally:
            con.close()
    pending = [r["path"] for r in m.get("retired", []) if (path / r["path"]).exists()]
    if pending:
        rep.notes.append(f"{len(pending)} folder(s) of older generations wait until no reader holds them: "
                         f"{', '.join(pending[:5])}")
