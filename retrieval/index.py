"""The reader: open an index folder and search it. Every change to a folder
(build, add, delete, ...) is in :mod:`retrieval.writer`; this module imports no builder.

    INDEX/manifest.json   generation, config, counts, versions, sub-indexes (see indexes.manifest)
    INDEX/docs.sqlite     document store (title, text, metadata), every generation in one file
    INDEX/bm25/           Lucene BM25 index (Anserini); bm25.g<N>/ after the N-th change
    INDEX/<name>/         further sub-indexes (dense, deepct, ...)

An open :class:`Index` reads one generation (see :mod:`indexes.generations`) and holds
it (a shared lock) so that no writer removes its files; every search runs on one
generation from start to end. Before each search it checks (one ``os.stat``) whether
the manifest changed and, if so, moves to the newest generation; ``refresh()`` does
that on demand and ``auto_refresh=False`` leaves it to the caller.
"""
from __future__ import annotations

import dataclasses

import os
import threading
import time
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from typing_extensions import Unpack

from indexes import generations as gens
from indexes import folder
from indexes import manifest as mf
from indexes.bulk import no_gc
from indexes.docstore import DocStore
from indexes.errors import FilterWarning, IndexFormatError, InputError, NotFound, ParameterError
from retrieval.frames import batch_result, search_df
from retrieval.filters import Allowed, MetadataTable, first_allowed, parse_filter, unknown_fields_message
from retrieval.fusion import Pipeline, explain_fusion, fuse, list_confidences, parse_pipeline
from retrieval.kinds import PRIMARY, Explained, Retriever, kind_of
from retrieval.progress import progress
from retrieval.request import (DEFAULT_K, BatchOptions, DefaultPipeline, SearchOptions, SearchRequest,
                               batch_request, default_pipeline, request_of, search_request)
from retrieval.types import Document, Hit, Hits, QueriesArg, Query, as_queries

DEPTH = 100  # candidates each fused retriever returns, at least (more when k is larger)
FOLLOW_GRACE = 2.0  # seconds a reader answers from its generation while the newest one cannot be opened
DEEPEN_SHARE = 0.25  # filters allowing this share of the documents or more read the ranking deeper instead


def _per_search(p: Pipeline, rs: Dict[str, Retriever], prf) -> Dict[str, Retriever]:
    """The pipeline's retrievers with ``prf`` (one search's pseudo-relevance feedback) on each member
    that takes it per search (its ``call_options``); one ParameterError naming the pipeline where
    none does. None: ``rs`` as they are."""
    if prf is None:
        return rs
    takers = [n for n, r in rs.items() if "prf" in r.call_options]
    if not takers:
        raise ParameterError("{prf} (pseudo-relevance feedback) applies to no retriever of {_p}: none of its "
                             "retrievers ({_names}) takes it", _p=str(p), _names=", ".join(rs))
    return {n: r.with_options(prf=prf) if n in takers else r for n, r in rs.items()}


def _tick(timings: Optional[Dict[str, float]], stage: str, t0: float) -> None:
    if timings is not None:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - t0


def _stat_key(path: Path) -> Optional[Tuple[int, int, int, int]]:
    try:
        st = os.stat(folder.manifest_path(path))
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)




class _Generation:
    """One generation of a folder as a reader holds it: its manifest, document store and
    retrievers, and the shared lock (``fd``) that keeps writers from removing its files."""

    def __init__(self, path: Path, manifest: dict, key, fd: Optional[int]):
        self.path = path
        self.manifest = manifest
        self.key = key
        self.number = int(manifest.get("generation", 0))
        self._fd = fd
        self._docstore: Optional[DocStore] = None
        self._metadata: Optional[MetadataTable] = None  # filters' view of the documents (first filter)
        self.retrievers: Dict[str, Retriever] = {}
        self.previous: Dict[str, Retriever] = {}   # retrievers of the generation before, for kind.reopen
        self.users = 0
        self.retired = False
        self.lock = threading.Lock()

    @property
    def docstore(self) -> DocStore:
        if self._docstore is None:
            self._docstore = DocStore(folder.docstore_path(self.path, self.manifest), generation=self.number)
        return self._docstore

    @property
    def metadata(self) -> MetadataTable:
        """This generation's documents and their metadata, indexed for filters (read on first use)."""
        if self._metadata is None:
            with self.lock:
                if self._metadata is None:
                    self._metadata = MetadataTable(self.docstore.iter_meta())
        return self._metadata

    def entry(self, name: str) -> dict:
        entries = self.manifest.get("subindexes", {})
        if name not in entries:
            raise InputError(f"index has no {name!r} sub-index (it has: {', '.join(entries) or 'none'})", self.path)
        return entries[name]

    def retriever(self, name: str, options: Optional[dict] = None) -> Retriever:
        with self.lock:
            r = self.retrievers.get(name)
            if r is None:
                entry = self.entry(name)
                kind = kind_of(entry)
                old = self.previous.pop(name, None)
                folder = self.path / entry["path"]
                r = kind.reopen(old, folder, entry) if old is not None else kind.retriever(folder, entry)
                if options:
                    r.configure(**{k: v for k, v in options.items() if k in r.options})
                self.retrievers[name] = r
            return r

    def inherit(self, old: "_Generation") -> None:
        """Take over what ``old`` opened and this generation shares: retrievers of entries
        that did not change (same folder, same settings), the document store of the same
        generation; the others are kept for ``kind.reopen`` (a loaded encoder stays loaded)."""
        with old.lock:
            for name, r in list(old.retrievers.items()):
                new_entry = self.manifest.get("subindexes", {}).get(name)
                if new_entry is not None and new_entry == old.manifest.get("subindexes", {}).get(name):
                    self.retrievers[name] = old.retrievers.pop(name)
                elif new_entry is not None and new_entry.get("kind") == old.manifest["subindexes"][name].get("kind"):
                    self.previous[name] = r
            if (old._docstore is not None and old.number == self.number
                    and folder.docstore_path(old.path, old.manifest) == folder.docstore_path(self.path, self.manifest)):
                self._docstore, old._docstore = old._docstore, None
                self._metadata = old._metadata

    def release(self) -> None:
        """Close what only this generation uses and let writers remove its files (the next writer
        does: readers delete nothing, as Lucene's readers delete nothing)."""
        with self.lock:
            for r in list(self.retrievers.values()):
                try:
                    r.close()
                except Exception:  # pragma: no cover - closing must not fail a search
                    pass
            self.retrievers.clear()
            if self._docstore is not None:
                self._docstore.close()
                self._docstore = None
            self.drop_lock()

    def drop_lock(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:  # pragma: no cover
                pass

    def __del__(self):  # only the lock: no JVM calls at interpreter shutdown
        try:
            self.drop_lock()
        except Exception:  # pragma: no cover - modules already torn down
            pass


def _open_generation(path: Path, at_least: Optional[int] = None) -> _Generation:
    """The current generation of ``path``, held: the manifest is read, its generation
    locked, and the manifest checked again (a writer may have switched in between).
    ``at_least``: a generation a sharded index committed for this shard folder; while the
    folder's own manifest is older, that generation's prepared manifest is opened instead
    (see :func:`indexes.folder.deferred`)."""
    for _ in range(1000):
        key = _stat_key(path)
        m = mf.read_manifest(path)
        g = int(m.get("generation", 0))
        ahead = at_least is not None and g < at_least
        if ahead:
            m = folder.read_prepared(path, at_least)
            if m is None:  # switched in meanwhile, or gone
                if int(mf.read_manifest(path).get("generation", 0)) < at_least:
                    raise IndexFormatError(f"{path}: generation {at_least}, which its sharded index committed, "
                                           f"is missing")
                continue
            g = at_least
        try:
            fd = gens.hold_generation(path, g)
        except BlockingIOError:
            continue
        if key is not None and _stat_key(path) == key and (not ahead or folder.read_prepared(path, g) is not None):
            gen = _Generation(path, m, key, fd)
            for name, entry in m.get("subindexes", {}).items():
                if not (path / entry["path"]).exists():
                    gen.drop_lock()
                    raise IndexFormatError(f"{path}: sub-index {name!r} is listed in the manifest but missing "
                                           f"on disk")
            try:
                DocStore(folder.docstore_path(path, m)).check()
            except BaseException:
                gen.drop_lock()
                raise
            return gen
        if fd is not None:
            os.close(fd)
    raise IndexFormatError(f"{path}: the manifest changed on every read; cannot open it")


class Index:
    """An opened index folder. Sub-indexes and the JVM/models load lazily, on
    first use; after that, searching is safe from several threads.

    It reads one generation of the folder (:attr:`generation`). With ``auto_refresh``
    (the default) each search first moves to the newest generation if a writer made
    one; :meth:`refresh` does it on demand. A search never mixes two generations.
    :meth:`close` (or leaving a ``with`` block) lets writers remove the generation's
    files; a closed Index opens the newest generation again on its next use."""

    def __init__(self, path: Union[str, Path], auto_refresh: bool = True, at_least: Optional[int] = None):
        self.path = Path(path)
        self.auto_refresh = auto_refresh
        self._lock = threading.RLock()
        self._options: Dict[str, dict] = {}     # Index.configure, applied again in each new generation
        self._overrides: Dict[str, object] = {}  # use_retriever
        self._failing: Optional[tuple] = None     # (manifest stat, since) of a generation follow() cannot open
        self._at = at_least                       # pinned (a shard of a sharded index): refresh keeps it
        self._gen: Optional[_Generation] = _open_generation(self.path, at_least)

    @classmethod
    def open(cls, path: Union[str, Path], auto_refresh: bool = True) -> "Index":
        """The folder at ``path``; ``auto_refresh``: each call first moves to the newest generation a
        writer made (False: only :meth:`refresh` moves it). (The constructor's ``at_least`` opens a shard
        folder at the generation its sharded index committed and keeps it there: a sharded index's
        reader, :class:`retrieval.sharded.shard.ShardReader`, moves it with the other shards.)"""
        return cls(path, auto_refresh=auto_refresh)

    # -- generations -----------------------------------------------------
    def _current(self) -> _Generation:
        g = self._gen
        if g is None:
            with self._lock:
                if self._gen is None:
                    self._gen = _open_generation(self.path, self._at)
                g = self._gen
        return g

    @property
    def generation(self) -> int:
        return self._current().number

    def refresh(self) -> bool:
        """Move to the newest generation if the folder changed; True if it did. Searches
        running meanwhile finish on the generation they started on."""
        with self._lock:
            old = self._current()
            if self._at is not None or _stat_key(self.path) == old.key:
                return False  # (a pinned shard moves with its sharded index: ShardReader.pin)
            self._install(old, _open_generation(self.path))
            return True

    def _open(self, at_least: Optional[int] = None) -> _Generation:
        """Generation ``at_least`` of this folder (or a later one its own manifest names; None: the newest),
        opened and held but not yet read (a pinned reader, :class:`retrieval.sharded.shard.ShardReader`,
        installs it)."""
        return _open_generation(self.path, at_least)

    def local(self) -> List["Index"]:
        """The folder readers this index reads in this process: itself (a sharded index: its shards')."""
        return [self]

    def begin_change(self, what: str):
        """Start a change of the index's record (a tuning): refuses a shard folder of a sharded index
        (``what``: the command named in the error). Returns ``commit(edit)``, which records
        ``edit(change)`` as one new generation of the folder and moves this reader to it."""
        from indexes.sharded import refuse_one_shard

        refuse_one_shard(self.manifest, self.path, what)

        def commit(edit) -> None:
            folder.commit_manifest(self.path, edit, based_on=self.manifest)
            self.refresh()
        return commit

    def _install(self, old: _Generation, new: _Generation) -> None:
        """(self._lock held) Move from ``old`` to ``new``."""
        new.inherit(old)
        for name, o in list(self._overrides.items()):
            moved = (o.rebind(new.retriever(name, self._options.get(name)))
                     if name in new.manifest.get("subindexes", {}) else None)
            if moved is not None:
                new.retrievers[name] = self._overrides[name] = moved
            else:
                self._overrides.pop(name)
        self._gen = new
        with old.lock:
            old.retired = True
            idle = old.users == 0
        if idle:
            old.release()

    def follow(self) -> bool:
        """:meth:`refresh`, for a long-lived reader (a server, each search with ``auto_refresh``): a
        newer generation that cannot be opened is retried on every call and its error raised once
        it has lasted ``FOLLOW_GRACE`` seconds, so a reader never keeps answering from an old
        generation in silence. Until then the held generation answers (a folder being replaced)."""
        if self._gen is None or _stat_key(self.path) == self._gen.key:
            return False
        try:
            moved = self.refresh()
        except (IndexFormatError, InputError) as e:
            now = time.monotonic()
            key = _stat_key(self.path)
            first = self._failing
            if first is None or first[0] != key:
                self._failing = first = (key, now)
            if now - first[1] >= FOLLOW_GRACE:
                raise IndexFormatError(f"{e} (this reader cannot move to the folder's newest generation and has "
                                       f"stopped answering from generation {self._gen.number})") from None
            return False
        self._failing = None
        return moved

    def _enter(self) -> _Generation:
        if self.auto_refresh:
            self.follow()
        with self._lock:
            g = self._current()
            with g.lock:
                g.users += 1
        return g

    def _leave(self, g: _Generation) -> None:
        with g.lock:
            g.users -= 1
            done = g.retired and g.users == 0
        if done:
            g.release()

    def close(self) -> None:
        with self._lock:
            g, self._gen = self._gen, None
        if g is not None:
            with g.lock:
                g.retired = True
                idle = g.users == 0
            if idle:
                g.release()

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- introspection -------------------------------------------------
    @property
    def manifest(self) -> dict:
        return self._current().manifest


    @property
    def retrievers(self) -> List[str]:
        return list(self.manifest.get("subindexes", {}))

    def __len__(self) -> int:
        return int(self.manifest["corpus"]["doc_count"])

    def info(self) -> dict:
        m = self.manifest
        out = {"path": str(self.path), "documents": len(self), "generation": int(m.get("generation", 0)),
               "created_at": m.get("created_at"), "updated_at": m.get("updated_at"),
               "corpus": m.get("corpus", {}), "versions": m.get("versions", {}),
               "pruning": m.get("pruning"), "subindexes": {}}
        for name, e in m.get("subindexes", {}).items():
            out["subindexes"][name] = {"kind": e["kind"], "path": e["path"], "doc_count": e.get("doc_count"),
                                       "size_bytes": mf.folder_size(self.path / e["path"]),
                                       "config": e.get("config", {}), "model": e.get("model"),
                                       "built_at": e.get("built_at"),
                                       "deleted_pending": int(e.get("deleted_pending", 0)),
                                       "dimsel": e.get("dimsel"),
                                       "stats": {} if e.get("alias_of") else kind_of(e).stats(self.path / e["path"], e)}
        out["pipelines"] = {base: {k: v for k, v in rec.items() if k != "top"}
                            for base, rec in m.get("pipelines", {}).items()}
        out["default_pipeline"] = self.default_pipeline().to_dict()
        out["fields"] = self.fields()
        store = folder.docstore_path(self.path, m)
        out["docstore_bytes"] = sum(p.stat().st_size for p in (store, Path(f"{store}-wal")) if p.exists())
        return out

    # -- components ----------------------------------------------------
    @property
    def docstore(self) -> DocStore:
        return self._current().docstore

    def _retriever(self, name: str) -> Retriever:
        o = self._overrides.get(name)
        if o is not None:
            return o
        return self._current().retriever(name, self._options.get(name))

    def _use_retriever(self, name: str, retriever: Retriever) -> None:
        """Answer sub-index ``name`` through ``retriever`` from now on (:meth:`Snapshot.use_retriever`,
        dimension selection's ``attach``); one whose ``rebind(new)`` returns a retriever follows the
        index to new generations."""
        if not isinstance(retriever, Retriever):
            raise InputError(f"use_retriever takes a retrieval.kinds.Retriever (a RetrieverBase), not "
                             f"{type(retriever).__name__}")
        self._current().entry(name)
        with self._lock:
            self._overrides[name] = retriever

    def configure(self, retriever: str = PRIMARY, **options) -> List[str]:
        """Set search options (each retriever's ``options``: BM25's ``k1``, ``b``, ...) on every
        member of the pipeline ``retriever`` whose retriever takes them (its ``options``);
        options left None are kept. Returns the names configured; an option that no
        member takes is an error, naming the pipeline. They stay set in later generations."""
        given = {k: v for k, v in options.items() if v is not None}
        if not given:
            return []
        p = self.pipeline(retriever)
        done = []
        for key in given:
            takers = [n for n in p.retrievers if key in self._retriever(n).options]
            if not takers:
                # the option and those there are, as parameters (the CLI names them by its flags)
                there = sorted({o for n in p.retrievers for o in self._retriever(n).options})
                takes = ("its retrievers take " + ", ".join("{%s}" % o for o in there)) if there else \
                    "its retrievers take no options"
                raise ParameterError("{%s} applies to no retriever of {_p} (%s)" % (key, takes), _p=str(p))
            done += [n for n in takers if n not in done]
        for n in done:
            r = self._retriever(n)
            mine = {k: v for k, v in given.items() if k in r.options}
            r.configure(**mine)
            self._options[n] = dict(self._options.get(n, {}), **mine)
        return done

    # -- search --------------------------------------------------------
    def pipeline(self, retriever: Optional[str] = None, fusion: Optional[str] = None) -> Pipeline:
        """Parse a retriever spec; a bare ``a+b`` takes the folder's tuned fusion (``retr tune``), else
        ``retrieval.fusion.DEFAULT_FUSION`` (chosen without training queries, benchmarks/results/defaults.md).
        None: the folder's default pipeline (:meth:`default_pipeline`)."""
        return self._pipeline(self.manifest, retriever, fusion)

    def default_pipeline(self) -> DefaultPipeline:
        """What a search that names no retriever runs, and why: :func:`retrieval.request.default_pipeline`."""
        m = self.manifest
        return default_pipeline(m.get("subindexes", {}), m.get("pipelines", {}))

    def _pipeline(self, m: dict, retriever: Optional[str], fusion: Optional[str]) -> Pipeline:
        if retriever is None:
            retriever = default_pipeline(m.get("subindexes", {}), m.get("pipelines", {})).spec
        base = retriever.split(":", 1)[0].strip()
        tuned = m.get("pipelines", {}).get(base, {}).get("spec")
        p = parse_pipeline(retriever, fusion, default=tuned)
        entries = m.get("subindexes", {})
        for name in p.retrievers:
            if name not in entries:
                raise InputError(f"index has no {name!r} sub-index (it has: {', '.join(entries) or 'none'})",
                                 self.path)
        return p

    @staticmethod
    def _allowed(g: "_Generation", filter) -> Optional[Allowed]:
        """The documents of generation ``g`` a filter (see :mod:`retrieval.filters`) allows; None for no
        filter (a snapshot's :meth:`Snapshot.allowed`)."""
        flt = parse_filter(filter)
        if flt is None:
            return None
        unknown = g.metadata.unknown(flt)
        if unknown:  # a misspelt or absent field matches nothing: say so rather than return no hits in silence
            warnings.warn(unknown_fields_message(unknown, g.metadata.fields()), FilterWarning, stacklevel=4)
        return g.metadata.allowed(flt)

    def fields(self) -> Dict[str, int]:
        """The metadata fields the current generation's documents carry, for filters: ``{field name:
        number of documents carrying it}``, sorted by name (``{}`` when no document has metadata).
        ``docid`` is not listed: a filter can always name it."""
        return dict(self._current().metadata.fields())

    def unknown_fields(self, filter) -> List[str]:
        """The fields of ``filter`` (a filter object, see :mod:`retrieval.filters`) that no document
        carries, in the filter's order: conditions on them match nothing (what the
        :class:`~indexes.errors.FilterWarning` of :meth:`search` names)."""
        return self._current().metadata.unknown(parse_filter(filter))

    def search(self, query: str, k: int = DEFAULT_K, retriever: Optional[str] = None, *,
               request: Optional[SearchRequest] = None, **options: Unpack[SearchOptions]) -> Hits:
        """Top-``k`` hits for one query, with title, text and metadata unless ``text=False``.

        ``retriever`` is a sub-index name or a fused pipeline spec such as
        ``bm25+dense`` or ``bm25+dense:rrf(k=60)`` (see :mod:`retrieval.fusion`);
        fused retrievers each return ``max(k, depth or 100)`` candidates. The other options are
        keywords (:class:`~retrieval.request.SearchOptions`: ``fusion``, ``text``, ``depth``,
        ``timings``, ``dimsel``, ``filter``, ``ranks``, ``prf``, ``per_document``; another keyword is a
        TypeError naming it). ``timings``, when given, accumulates seconds per stage. ``dimsel``: query-aware
        dimension selection on the dense retriever(s) (see :func:`retrieval.dense.dimsel.search.wrap`).

        ``filter`` (see :mod:`retrieval.filters`) restricts the hits to matching documents,
        before any cut-off. One retriever: the first ``k`` matching documents of its full
        ranking, with their unfiltered scores. A fused pipeline: each member's list is its
        own filtered ranking cut at the fusion depth (``max(k, depth or 100)`` matching
        documents), and those lists are fused as an unfiltered search fuses (same
        normalisation over the lists given, same rule for a document a list lacks); the
        first ``k`` fused. A filter that matches every document returns the unfiltered hits.

        ``ranks``: each hit's ``ranks`` holds its rank in each retriever's own list (None where a
        member's list, cut at the fusion depth, lacks it), as ``scores`` holds their scores.

        ``prf``: pseudo-relevance feedback for this search alone, in any form ``configure``'s ``prf``
        takes (``"rm3"``, ``"rocchio(gamma=0.15)"``, a dict, ``"none"``), on the members whose
        retriever takes it per search (BM25); a pipeline with none is a ParameterError.

        ``per_document``: at most one hit per document, its best passage (the passages of a chunked
        document share their metadata's ``document``, :mod:`retrieval.chunking`; a passage without
        it is a document of its own): the ranking is read deeper until it holds ``k`` documents or
        ends, and ranks count documents. A hit keeps its passage's id.

        ``request``: these options as one :class:`retrieval.request.SearchRequest` (then give no
        other option). Returns :class:`~retrieval.types.Hits`, whose ``pipeline`` names what ran (the
        folder's default pipeline when ``retriever`` is None: :meth:`default_pipeline`)."""
        req = search_request("Index.search", request, k, retriever, options)
        g = self._enter()
        try:
            return self._search(g, query, req)
        finally:
            self._leave(g)

    def _search(self, g: "_Generation", query: str, req: SearchRequest) -> Hits:
        if not isinstance(query, str) or not query.strip():
            raise InputError("query text is empty")
        p = self._pipeline(g.manifest, req.retriever, req.fusion)
        if req.per_document:
            return Hits(per_document_hits(
                lambda kk: self._search(g, query, req.but(k=kk, text=True, per_document=False)),
                req.k, int(g.manifest["corpus"]["doc_count"]), req.text), str(p))
        allowed = self._allowed(g, req.filter)
        lists, rs = {}, _per_search(p, {n: self._pick(g, n, req.dimsel, p.fused) for n in p.retrievers}, req.prf)
        kk = req.k if not p.fused else max(req.k, req.depth or DEPTH)
        for name in p.retrievers:
            t0 = time.perf_counter()
            r = rs[name]
            lists[name] = r.search(query, kk) if allowed is None else self._filtered(g, r, query, kk, allowed)
            _tick(req.timings, name, t0)
        conf = self._confidences(g, p, rs, [query], {n: [v] for n, v in lists.items()}, req.timings)
        hits = self._result(g, p, lists, req.k, req.text, None, req.timings, conf and conf[0])
        if req.ranks:
            _member_ranks(hits, p, lists)
        return Hits(hits, str(p))

    def highlight(self, query: str, texts: Sequence[str], retriever: Optional[str] = None,
                  fusion: Optional[str] = None) -> Optional[List[List[Tuple[int, int]]]]:
        """Per text, the ``(start, end)`` character spans of its words that match ``query``'s terms
        as a retriever's own analysis matches them (BM25: Anserini's English analyser, so
        "effects" matches "effect"): the first member of the pipeline ``retriever`` that analyses
        text, else the primary sub-index. None where no sub-index can tell."""
        g = self._enter()
        try:
            p = self._pipeline(g.manifest, retriever, fusion)
            for name in dict.fromkeys([*p.retrievers, PRIMARY]):
                if name not in g.manifest["subindexes"]:
                    continue
                mark = getattr(self._pick(g, name), "highlight", None)
                out = mark(query, list(texts)) if mark is not None else None
                if out is not None:
                    return out
            return None
        finally:
            self._leave(g)

    def confidences(self, texts: Sequence[str], lists: Dict[str, Sequence[list]]) -> List[dict]:
        """Per text, each retriever's ``(kind, value)`` confidence in its list (``lists``: {name: one
        list per text}), as a fused search weighs them (:func:`retrieval.fusion.list_confidences`);
        a sharded index answers the same under its global statistics."""
        return list_confidences({n: self._retriever(n) for n in lists}, list(texts), lists)

    @staticmethod
    def _confidences(g, p: Pipeline, rs, texts, lists, timings):
        """Per query, each fused list's (kind, value) confidence for a fusion that weighs by it
        (``retrieval.fusion``), else None. ``lists``: {retriever: [list per text]}."""
        if not p.fused or not p.fusion.confidence:
            return None
        t0 = time.perf_counter()
        out = list_confidences(rs, texts, lists)
        _tick(timings, "confidence", t0)
        return out

    def _filtered(self, g: "_Generation", r: Retriever, query: str, k: int, allowed: Allowed):
        """Retriever ``r``'s first ``k`` documents among ``allowed``, exactly. A filter that allows
        at least ``DEEPEN_SHARE`` of the collection reads the unfiltered ranking deep enough to
        hold ``k`` of them (about ``2k / share``, deeper until found or the ranking ends): cheaper
        than a Lucene filter of that many ids. A smaller one uses the retriever's own filtered
        search (a Lucene FILTER clause, a faiss selector); a retriever without one has its full
        ranking filtered."""
        n, total = len(allowed), max(len(g.metadata), 1)
        if not n:
            return []
        native = r.native_filter
        if not native or n >= DEEPEN_SHARE * total:
            return first_allowed(lambda depth: [r.search(query, depth)], k, allowed, total,
                                 depth=None if native else total)[0]
        return r.search_filtered(query, k, allowed)

    def batch_search(self, queries: QueriesArg, qids: Optional[Sequence[str]] = None, k: int = DEFAULT_K,
                     retriever: Optional[str] = None, *, request: Optional[SearchRequest] = None,
                     **options: Unpack[BatchOptions]) -> Dict[str, List[Hit]]:
        """Search many queries; returns ``{qid: hits}`` in the order of ``queries``.

        ``queries`` is a list of :class:`Query`, a mapping ``{qid: text}``, a list of
        texts: with ``qids`` (Pyserini's ``batch_search(queries, qids, k=...)``) those are their
        ids, else plain strings get ids "0", "1", ... (An int in ``qids``' place is ``k``, as
        ``batch_search(queries, 10)`` meant before ``qids`` came.), or a topics DataFrame (``qid``,
        ``query``: PyTerrier's). Queries go to the backends in
        batches of ``batch_size`` (default: all at once when quiet, else
        about 20 batches so the progress bar moves). All of them search one generation.
        ``filter``, ``prf`` and ``per_document`` apply to every query, as in :meth:`search`. The
        options are keywords (:class:`~retrieval.request.BatchOptions`: those of :meth:`search` but
        ``ranks``, and ``threads``, ``quiet``, ``batch_size``, ``as_frame``).

        ``as_frame``: a pandas DataFrame instead, PyTerrier's columns ``qid, query, docno, score,
        rank`` (rank 0-based, as PyTerrier's; ``title`` and ``text`` too with ``text=True``): see
        :mod:`retrieval.frames`. ``request``: the search options as one
        :class:`retrieval.request.SearchRequest`, as :meth:`search` takes it."""
        qs, k = as_queries(queries, qids, k)
        req, run = batch_request("Index.batch_search", request, k, retriever, options)
        g = self._enter()
        try:
            got = self._batch_search(g, qs, req, run["threads"], run["quiet"], run["batch_size"])
            return batch_result(got, qs, req.text, run["as_frame"])
        finally:
            self._leave(g)

    def search_df(self, query: str, k: int = DEFAULT_K, retriever: Optional[str] = None, fusion: Optional[str] = None,
                  qid: str = "1", text: bool = False, **options):
        """:meth:`search` as a pandas DataFrame with PyTerrier's columns ``qid, query, docno, score,
        rank`` (rank 0-based, as PyTerrier numbers ranks; ``qid`` "1" as its ``Transformer.search``),
        plus ``title`` and ``text`` with ``text=True``; ``options`` as :meth:`search` takes them
        (``depth``, ``dimsel``, ``filter``). See :mod:`retrieval.frames`."""
        return search_df(self, query, qid, text, k=k, retriever=retriever, fusion=fusion, **options)

    def _batch_search(self, g: "_Generation", queries: List[Query], req: SearchRequest, threads: int = 1,
                      quiet: bool = True, batch_size: Optional[int] = None) -> Dict[str, List[Hit]]:
        if req.per_document:
            return self._batch_documents(g, queries, req, threads, quiet, batch_size)
        p = self._pipeline(g.manifest, req.retriever, req.fusion)
        qs, k, text, timings = queries, req.k, req.text, req.timings
        allowed = self._allowed(g, req.filter)
        rs = _per_search(p, {name: self._pick(g, name, req.dimsel, p.fused) for name in p.retrievers}, req.prf)
        kk = k if not p.fused else max(k, req.depth or DEPTH)
        if batch_size is None:
            batch_size = max(len(qs), 1) if quiet else max(256, len(qs) // 20)
        out: Dict[str, List[Hit]] = {}
        with progress(total=len(qs), desc=f"searching ({p})", unit="q", quiet=quiet) as bar:
            for i in range(0, len(qs), batch_size):
                chunk = qs[i:i + batch_size]
                res = {}
                for name, r in rs.items():
                    t0 = time.perf_counter()
                    if allowed is None:
                        res[name] = r.batch_search(chunk, kk, threads)
                    else:
                        res[name] = {q.qid: self._filtered(g, r, q.text, kk, allowed) for q in chunk}
                    _tick(timings, name, t0)
                conf = self._confidences(g, p, rs, [q.text for q in chunk],
                                         {n: [res[n].get(q.qid, []) for q in chunk] for n in rs}, timings)
                with no_gc():  # a batch's hits at once: see indexes.bulk
                    for j, q in enumerate(chunk):
                        out[q.qid] = Hits(self._result(g, p, {n: res[n].get(q.qid, []) for n in rs}, k, text,
                                                       q.qid, timings, conf and conf[j]), str(p))
                bar.update(len(chunk))
        return out

    def _batch_documents(self, g: "_Generation", queries: List[Query], req: SearchRequest, threads: int,
                         quiet: bool, batch_size: Optional[int]) -> Dict[str, List[Hit]]:
        """A per-document batch: the whole batch read PER_DOCUMENT times deeper, then the queries still
        short of k documents (a long document's passages fill the list) one by one, deeper."""
        p = self._pipeline(g.manifest, req.retriever, req.fusion)
        total, k = int(g.manifest["corpus"]["doc_count"]), req.k
        kk = min(max(k * PER_DOCUMENT, k), max(total, 1))
        first = self._batch_search(g, queries, req.but(k=kk, text=True, per_document=False), threads, quiet,
                                   batch_size)
        out = {}
        for q in queries:
            hits = first.get(q.qid, [])
            got = collapse(hits, k)
            if len(got) < k and len(hits) >= kk and kk < total:
                got = per_document_hits(
                    lambda n, q=q: [dataclasses.replace(h, qid=q.qid) for h in self._search(
                        g, q.text, req.but(k=n, text=True, per_document=False, ranks=False))],
                    k, total, True, start=kk * PER_DOCUMENT)
            out[q.qid] = Hits(_plain(got, req.text), str(p))
        return out

    def explain(self, query: str, docid: str, retriever: Optional[str] = None, fusion: Optional[str] = None,
                depth: Optional[int] = None, dimsel=None, filter=None, request: Optional[SearchRequest] = None) -> dict:
        """How ``docid`` got its score and rank for ``query`` under the pipeline ``retriever`` (with
        ``fusion``, ``dimsel``, ``filter`` as :meth:`search` takes them), as a JSON-ready dict:

        - ``docid``, ``query``, ``retriever`` (the pipeline as run), ``depth``;
        - ``score`` and ``rank``: what the search gives the document (a fused pipeline: its fused
          score and its rank among every document of the members' lists, as a search with ``k`` that
          large returns them; one retriever: its rank in the top ``depth``), None for a rank where it
          is not there;
        - ``retrievers``: per member, its score of the document and its rank in its own list (each
          member's list is what the search fuses: its top ``max(k, depth)``, here ``depth or 100``),
          and the parts of that score (the kind's ``Retriever.explain``: BM25's terms through
          Lucene's own explanation, impacts, a vector's inner product), which add up to it;
        - ``fusion``: the fusion arithmetic (:func:`retrieval.fusion.explain_fusion`), None for one
          retriever.

        A document a list does not hold within its depth says so in the member's ``notes`` (its
        score is still explained: what its retriever gives it). An unknown ``docid`` raises
        :class:`indexes.errors.NotFound`; an unknown retriever InputError. ``request``: these options
        as one :class:`retrieval.request.SearchRequest` (its ``k`` and hit options are not used)."""
        req = request_of(request, retriever=retriever, fusion=fusion, depth=depth, dimsel=dimsel, filter=filter)
        g = self._enter()
        try:
            return self._explain(g, query, docid, req)
        finally:
            self._leave(g)

    def _explain(self, g: "_Generation", query: str, docid: str, req: SearchRequest) -> dict:
        if not isinstance(query, str) or not query.strip():
            raise InputError("query text is empty")
        p = self._pipeline(g.manifest, req.retriever, req.fusion)
        depth, dimsel, filter = req.depth, req.dimsel, req.filter
        if not isinstance(docid, str) or not docid or g.docstore.get(docid) is None:
            raise NotFound(f"no document {str(docid)[:200]!r} in the index")
        n = depth or DEPTH
        allowed = self._allowed(g, filter)
        rs = {name: self._pick(g, name, dimsel, p.fused) for name in p.retrievers}
        lists = {name: r.search(query, n) if allowed is None else self._filtered(g, r, query, n, allowed)
                 for name, r in rs.items()}
        members = {name: _member(r, query, docid, lists[name], n, allowed, p.fused) for name, r in rs.items()}
        conf = self._confidences(g, p, rs, [query], {name: [v] for name, v in lists.items()}, None)
        return explanation(p, query, docid, n, filter, lists, members, conf and conf[0])

    def _pick(self, g: _Generation, name: str, dimsel=None, fused: bool = False) -> Retriever:
        """The retriever for ``name`` in generation ``g``; with ``dimsel`` (a mode name, a dict of
        options or a retrieval.dense.dimsel.search.DimSel) the dense one searches with masked query vectors.
        In a fused pipeline only the members whose kind takes dimension selection are wrapped."""
        kind = kind_of(g.manifest["subindexes"][name])
        if dimsel is None or (fused and not kind.dimsel):
            o = self._overrides.get(name)
            return o if o is not None else g.retriever(name, self._options.get(name))
        return kind.with_dimsel(_View(self, g), name, dimsel)

    def _result(self, g: _Generation, p: Pipeline, lists, k, text, qid, timings, conf=None) -> List[Hit]:
        if not p.fused:
            one = p.retrievers[0]
            hits = [Hit(docid=d, score=s, rank=i, qid=qid, scores={one: s})
                    for i, (d, s) in enumerate(lists[one], 1)]
        else:
            t0 = time.perf_counter()
            hits = [Hit(docid=d, score=s, rank=i, qid=qid, scores=raw)
                    for i, (d, s, raw) in enumerate(fuse(lists, p.fusion, conf)[:k], 1)]
            _tick(timings, "fusion", t0)
        if text and hits:
            t0 = time.perf_counter()
            rows = g.docstore.get_many(h.docid for h in hits)
            for h in hits:
                row = rows.get(h.docid)
                if row is not None:
                    h.title, h.text, h.metadata = row[1], row[2], row[3] or {}
            _tick(timings, "text", t0)
        return hits

    def get(self, docid: str) -> Optional[Document]:
        g = self._enter()
        try:
            return _document(g.docstore.get(docid))
        finally:
            self._leave(g)

    def snapshot(self) -> "Snapshot":
        """The current generation, held until the snapshot is closed (``with idx.snapshot() as s``):
        its searches, counts and documents all read that one generation, whatever writers commit
        meanwhile, as a Lucene ``IndexReader`` reads its commit. The Index itself moves on."""
        return Snapshot(self, self._enter())


PER_DOCUMENT = 4  # a per-document search first reads this many passages per document asked for


def collapse(hits: List[Hit], k: int) -> List[Hit]:
    """The first ``k`` hits of distinct documents (:func:`retrieval.chunking.document_of`), ranked
    anew; ``hits`` must carry their metadata."""
    from retrieval.chunking import document_of

    out, seen = [], set()
    for h in hits:
        d = document_of(h.docid, h.metadata)
        if d in seen:
            continue
        seen.add(d)
        out.append(h)
        if len(out) == k:
            break
    for i, h in enumerate(out, 1):
        h.rank = i
    return out


def _plain(hits: List[Hit], text: bool) -> List[Hit]:
    """``hits`` as a search with ``text=False`` returns them (no title, text or metadata)."""
    if not text:
        for h in hits:
            h.title, h.text, h.metadata = "", "", None
    return hits


def per_document_hits(search, k: int, total: int, text: bool, start: Optional[int] = None) -> List[Hit]:
    """``k`` documents' best passages from ``search(n)`` (the top ``n`` passages with metadata),
    reading ``PER_DOCUMENT`` times deeper each round until ``k`` documents are found or the
    ranking (of ``total`` passages) ends."""
    n = min(start or max(k * PER_DOCUMENT, k), max(total, 1))
    while True:
        hits = search(n)
        got = collapse(hits, k)
        if len(got) >= k or len(hits) < n or n >= total:
            return _plain(got, text)
        n = min(n * PER_DOCUMENT, total)


def _member_ranks(hits: List[Hit], p: Pipeline, lists) -> None:
    """Each hit's rank in each member's list (``Hit.ranks``; None where the list lacks it)."""
    want = {h.docid for h in hits}
    pos = {n: {d: i for i, (d, _s) in enumerate(lists[n], 1) if d in want} for n in p.retrievers}
    for h in hits:
        h.ranks = {n: pos[n].get(h.docid) for n in p.retrievers}


def explanation(p: Pipeline, query: str, docid: str, depth: int, filter, lists, members: dict, conf) -> dict:
    """:meth:`Index.explain`'s dict from the members' lists (``lists``: {name: its ranked list}),
    their parts (``members``: :func:`member_of`'s) and, for a fusion that weighs by confidence, each
    list's confidence (``conf``); a sharded index's router builds its answer with it too."""
    out = {"docid": docid, "query": query, "retriever": str(p), "depth": depth, "filter": filter,
           "retrievers": members, "fusion": None, "notes": []}
    if not p.fused:
        m = members[p.retrievers[0]]
        out.update(score=m["score"], rank=m["rank"])
        if m["rank"] is None:
            out["notes"].append(f"not in the top {depth} (the depth): the score is what its retriever gives it")
        return out
    out["fusion"] = explain_fusion(lists, p.fusion, docid, conf)
    out.update(score=out["fusion"]["score"], rank=out["fusion"]["rank"])
    if out["rank"] is None:
        out["notes"].append(f"no member's top {depth} (the depth) holds it: the fusion never sees it")
    return out


def _member(r: Retriever, query: str, docid: str, ranked, depth: int, allowed, fused: bool) -> dict:
    """One member's part of :meth:`Index.explain`: its explanation of ``docid`` and where the
    document stands in ``ranked``, the list the member's search returned."""
    return member_of(r.kind, r.explain(query, docid, ranked), docid, ranked, depth,
                     allowed is not None and docid not in allowed, fused)


def member_of(kind: str, e: Explained, docid: str, ranked, depth: int, refused: bool, fused: bool) -> dict:
    """:func:`_member` from a retriever's explanation ``e`` (``refused``: a filter does not allow
    the document); a sharded index's router builds its members with it from the owning shard's."""
    rank = next((i for i, (d, _s) in enumerate(ranked, 1) if d == docid), None)
    notes = list(e.notes)
    if refused:
        notes.append("the filter does not allow it: no list of this search holds it")
    elif rank is None:
        notes.append(f"not in its top {depth} (the depth)" +
                     (": the fusion takes it as missing from this list" if fused else ""))
    return {"kind": kind, "score": ranked[rank - 1][1] if rank else e.score, "rank": rank,
            "in_list": rank is not None, "list_length": len(ranked), "explained": e.total if e.parts else e.score,
            "formula": e.formula, "columns": [list(c) for c in e.columns], "parts": e.parts, "details": e.details,
            "notes": notes}


def _document(row) -> Optional[Document]:
    return None if row is None else Document(row[0], row[2], row[1], row[3] or {})


class _View:
    """One generation of an Index, seen as an Index (for code that takes one, such as dimension
    selection), so that a search does not switch generations half-way. It holds nothing itself:
    whoever made it keeps the generation entered (:class:`Snapshot` does)."""

    def __init__(self, index: Index, g: _Generation):
        self._index, self._held = index, g
        self.path = index.path

    @property
    def _g(self) -> _Generation:
        if self._held is None:
            raise InputError("this snapshot is closed")
        return self._held

    @property
    def generation(self) -> int:
        return self._g.number

    @property
    def manifest(self) -> dict:
        return self._g.manifest

    @property
    def docstore(self) -> DocStore:
        return self._g.docstore

    @property
    def retrievers(self) -> List[str]:
        return list(self.manifest.get("subindexes", {}))

    def __len__(self) -> int:
        return int(self._g.manifest["corpus"]["doc_count"])

    def get(self, docid: str) -> Optional[Document]:
        return _document(self._g.docstore.get(docid))

    def retriever(self, name: str) -> Retriever:
        """Sub-index ``name``'s retriever in this generation (the one :meth:`use_retriever` set, if any),
        with the index's :meth:`Index.configure` options: a kind's own methods (``encode_queries``,
        ``feedback``, ...) for code that reads below the search."""
        return self._index._pick(self._g, name)

    def member(self, name: str, dimsel=None, fused: bool = False) -> Retriever:
        """The retriever a search of this generation runs for member ``name`` of its pipeline (``dimsel``,
        ``fused``: as that search; see :meth:`Index.search`): the step a shard's search shares with a folder's."""
        return self._index._pick(self._g, name, dimsel, fused)

    @property
    def metadata(self) -> MetadataTable:
        """This generation's documents and metadata, indexed for filters."""
        return self._g.metadata

    def allowed(self, filter) -> Optional[Allowed]:
        """The documents of this generation a filter (see :mod:`retrieval.filters`) allows; None for no
        filter. A condition on a field no document carries warns (:class:`~indexes.errors.FilterWarning`)."""
        return self._index._allowed(self._g, filter)

    def filtered(self, r: Retriever, query: str, k: int, allowed: Allowed):
        """Retriever ``r``'s first ``k`` documents among ``allowed`` in this generation, exactly as a
        filtered search of the folder reads them."""
        return self._index._filtered(self._g, r, query, k, allowed)

    def pipeline(self, retriever: Optional[str] = None, fusion: Optional[str] = None) -> Pipeline:
        """:meth:`Index.pipeline` as this generation's manifest has it (its tuned defaults)."""
        return self._index._pipeline(self.manifest, retriever, fusion)

    def use_retriever(self, name: str, retriever) -> None:
        """Make the index (this generation and the later ones: see :meth:`Index.refresh`) answer
        sub-index ``name`` through ``retriever``, a :class:`retrieval.kinds.Retriever` (dimension
        selection's ``attach``); one whose ``rebind(new)`` returns a retriever follows the index to
        new generations, another is dropped there for the new generation's own."""
        self._index._use_retriever(name, retriever)


class Snapshot(_View):
    """One generation of an :class:`Index`, held until closed (see :meth:`Index.snapshot`)."""

    def search(self, query: str, k: int = DEFAULT_K, retriever: Optional[str] = None, *,
               request: Optional[SearchRequest] = None, **options: Unpack[SearchOptions]) -> Hits:
        """:meth:`Index.search` on this generation."""
        req = search_request("Snapshot.search", request, k, retriever, options)
        return self._index._search(self._g, query, req)

    def batch_search(self, queries: QueriesArg, qids: Optional[Sequence[str]] = None, k: int = DEFAULT_K,
                     retriever: Optional[str] = None, *, request: Optional[SearchRequest] = None,
                     **options: Unpack[BatchOptions]) -> Dict[str, List[Hit]]:
        """:meth:`Index.batch_search` on this generation (the same forms of ``queries``, ``as_frame``)."""
        qs, k = as_queries(queries, qids, k)
        req, run = batch_request("Snapshot.batch_search", request, k, retriever, options)
        got = self._index._batch_search(self._g, qs, req, run["threads"], run["quiet"], run["batch_size"])
        return batch_result(got, qs, req.text, run["as_frame"])

    def search_df(self, query: str, k: int = DEFAULT_K, retriever: Optional[str] = None, fusion: Optional[str] = None,
                  qid: str = "1", text: bool = False, **options):
        """:meth:`Index.search_df` on this generation."""
        return search_df(self, query, qid, text, k=k, retriever=retriever, fusion=fusion, **options)

    def explain(self, query: str, docid: str, retriever: Optional[str] = None, fusion: Optional[str] = None,
                depth: Optional[int] = None, dimsel=None, filter=None, request: Optional[SearchRequest] = None) -> dict:
        """:meth:`Index.explain` on this generation."""
        req = request_of(request, retriever=retriever, fusion=fusion, depth=depth, dimsel=dimsel, filter=filter)
        return self._index._explain(self._g, query, docid, req)

    def close(self) -> None:
        g, self._held = self._held, None
        if g is not None:
            self._index._leave(g)

    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_index(path: Union[str, Path], auto_refresh: bool = True) -> Index:
    """Open an index folder built by ``retr index`` / :func:`retrieval.writer.build_index`."""
    return Index.open(path, auto_refresh=auto_refresh)
