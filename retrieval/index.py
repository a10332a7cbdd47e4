"""The reader: open an index folder and search it. Every change to a folder
(build, add, ...) is in :mod:`retrieval.writer`; this module imports no builder.

    INDEX/manifest.json   config, counts, versions, sub-indexes (see indexes.manifest)
    INDEX/docs.sqlite     document store (title, text, metadata)
    INDEX/bm25/           Lucene BM25 index (Anserini)
    INDEX/<name>/         further sub-indexes (dense, deepct, ...)
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

from indexes import manifest as mf
from indexes.docstore import DocStore
from indexes.errors import IndexFormatError, InputError
from retrieval.filters import Allowed, MetadataTable, parse_filter
from retrieval.fusion import Pipeline, fuse, parse_pipeline
from retrieval.kinds import kind_of
from retrieval.progress import progress
from retrieval.types import Document, Hit, Query

DOCSTORE = "docs.sqlite"
DEPTH = 100  # candidates each fused retriever returns, at least (more when k is larger)
DEEPEN_SHARE = 0.25  # filters allowing this share of the documents or more read the ranking deeper instead


def _tick(timings: Optional[Dict[str, float]], stage: str, t0: float) -> None:
    if timings is not None:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - t0


class Index:
    """An opened index folder. Sub-indexes and the JVM/models load lazily, on
    first use; after that, searching is safe from several threads."""

    def __init__(self, path: Path, manifest: dict):
        self.path = Path(path)
        self.manifest = manifest
        self._docstore: Optional[DocStore] = None
        self._retrievers: Dict[str, object] = {}
        self._metadata: Optional[MetadataTable] = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Union[str, Path]) -> "Index":
        path = Path(path)
        m = mf.read_manifest(path)
        for name, entry in m.get("subindexes", {}).items():
            if not (path / entry["path"]).exists():
                raise IndexFormatError(f"{path}: sub-index {name!r} is listed in the manifest but missing on disk")
        DocStore(path / DOCSTORE).check()
        return cls(path, m)

    # -- introspection -------------------------------------------------
    @property
    def retrievers(self) -> List[str]:
        return list(self.manifest.get("subindexes", {}))

    def __len__(self) -> int:
        return int(self.manifest["corpus"]["doc_count"])

    def info(self) -> dict:
        out = {"path": str(self.path), "documents": len(self), "created_at": self.manifest.get("created_at"),
               "corpus": self.manifest.get("corpus", {}), "versions": self.manifest.get("versions", {}),
               "pruning": self.manifest.get("pruning"), "subindexes": {}}
        for name, e in self.manifest.get("subindexes", {}).items():
            out["subindexes"][name] = {"kind": e["kind"], "doc_count": e.get("doc_count"),
                                       "size_bytes": mf.folder_size(self.path / e["path"]),
                                       "config": e.get("config", {}), "model": e.get("model"),
                                       "built_at": e.get("built_at")}
        store = self.path / DOCSTORE
        out["docstore_bytes"] = store.stat().st_size if store.exists() else 0
        return out

    # -- components ----------------------------------------------------
    @property
    def docstore(self) -> DocStore:
        if self._docstore is None:
            self._docstore = DocStore(self.path / DOCSTORE)
        return self._docstore

    def retriever(self, name: str):
        with self._lock:
            r = self._retrievers.get(name)
            if r is None:
                entries = self.manifest.get("subindexes", {})
                if name not in entries:
                    raise InputError(f"index has no {name!r} sub-index (it has: {', '.join(entries) or 'none'})",
                                     self.path)
                entry = entries[name]
                r = kind_of(entry).retriever(self.path / entry["path"], entry)
                self._retrievers[name] = r
            return r

    def configure(self, retriever: str = "bm25", **options) -> List[str]:
        """Set search options (``k1``, ``b``; DeepCT's ``mode``, ``scale``, ``query``) on every
        member of the pipeline ``retriever`` whose retriever takes them (its ``options``);
        options left None are kept. Returns the names configured; an option that no
        member takes is an error, naming the pipeline."""
        given = {k: v for k, v in options.items() if v is not None}
        if not given:
            return []
        p = self.pipeline(retriever)
        done = []
        for key in given:
            takers = [n for n in p.retrievers if key in getattr(self.retriever(n), "options", ())]
            if not takers:
                what = {"k1": "--k1/--b", "b": "--k1/--b", "mode": "--deepct-mode/--deepct-scale",
                        "scale": "--deepct-mode/--deepct-scale"}.get(key, key)
                who = "BM25" if key in ("k1", "b") else "DeepCT"
                raise InputError(f"{what} apply to {who} retrievers, and {p} has none")
            done += [n for n in takers if n not in done]
        for n in done:
            r = self.retriever(n)
            r.configure(**{k: v for k, v in given.items() if k in r.options})
        return done

    # -- search --------------------------------------------------------
    def pipeline(self, retriever: str = "bm25", fusion: Optional[str] = None) -> Pipeline:
        """Parse a retriever spec; a bare ``a+b`` takes the folder's tuned fusion (``retr tune``), else rrf."""
        base = retriever.split(":", 1)[0].strip()
        tuned = self.manifest.get("pipelines", {}).get(base, {}).get("spec")
        p = parse_pipeline(retriever, fusion, default=tuned)
        entries = self.manifest.get("subindexes", {})
        for name in p.retrievers:
            if name not in entries:
                raise InputError(f"index has no {name!r} sub-index (it has: {', '.join(entries) or 'none'})",
                                 self.path)
        return p

    @property
    def metadata(self) -> MetadataTable:
        """Every document's metadata, indexed for filters (read from the store on first use)."""
        if self._metadata is None:
            with self._lock:
                if self._metadata is None:
                    self._metadata = MetadataTable(self.docstore.iter_meta())
        return self._metadata

    def allowed(self, filter) -> Optional[Allowed]:
        """The documents a filter (see :mod:`retrieval.filters`) allows; None for no filter."""
        flt = parse_filter(filter)
        return None if flt is None else self.metadata.allowed(flt)

    def search(self, query: str, k: int = 10, retriever: str = "bm25", fusion: Optional[str] = None,
               text: bool = True, depth: Optional[int] = None, timings: Optional[Dict[str, float]] = None,
               dimsel=None, filter=None) -> List[Hit]:
        """Top-``k`` hits for one query, with title, text and metadata unless ``text=False``.

        ``retriever`` is a sub-index name or a fused pipeline spec such as
        ``bm25+dense`` or ``bm25+dense:rrf(k=60)`` (see :mod:`retrieval.fusion`);
        fused retrievers each return ``max(k, depth or 100)`` candidates.
        ``timings``, when given, accumulates seconds per stage. ``dimsel``: query-aware
        dimension selection on the dense retriever(s) (see :func:`retrieval.dense.dimsel.wrap`).

        ``filter`` (see :mod:`retrieval.filters`) restricts the hits to matching documents,
        before any cut-off. One retriever: the first ``k`` matching documents of its full
        ranking, with their unfiltered scores. A fused pipeline: each member's list is its
        own filtered ranking cut at the fusion depth (``max(k, depth or 100)`` matching
        documents), and those lists are fused as an unfiltered search fuses (same
        normalisation over the lists given, same rule for a document a list lacks); the
        first ``k`` fused. A filter that matches every document returns the unfiltered hits."""
        if not isinstance(query, str) or not query.strip():
            raise InputError("query text is empty")
        _check_k(k)
        p = self.pipeline(retriever, fusion)
        allowed = self.allowed(filter)
        lists = {}
        for name in p.retrievers:
            t0 = time.perf_counter()
            r = self._pick(name, dimsel, p.fused)
            kk = k if not p.fused else max(k, depth or DEPTH)
            lists[name] = r.search(query, kk) if allowed is None else self._filtered(r, query, kk, allowed)
            _tick(timings, name, t0)
        return self._result(p, lists, k, text, None, timings)

    def _filtered(self, r, query: str, k: int, allowed: Allowed):
        """Retriever ``r``'s first ``k`` documents among ``allowed``, exactly. A filter that allows
        at least ``DEEPEN_SHARE`` of the collection reads the unfiltered ranking deep enough to
        hold ``k`` of them (about ``2k / share``, deeper until found or the ranking ends): cheaper
        than a Lucene filter of that many ids. A smaller one uses the retriever's own filtered
        search (a Lucene FILTER clause, a faiss selector); a retriever without one has its full
        ranking filtered."""
        n, total = len(allowed), max(len(self), 1)
        if not n:
            return []
        native = getattr(r, "search_filtered", None)
        if native is None or n >= DEEPEN_SHARE * total:
            depth = total if native is None else min(total, max(k + 10, -(-2 * k * total // n)))
            while True:
                ranked = r.search(query, depth)
                hits = [x for x in ranked if x[0] in allowed.set]
                if len(hits) >= k or len(ranked) < depth or depth >= total:
                    return hits[:k]
                depth = min(total, depth * 4)
        return native(query, k, allowed)

    def batch_search(self, queries: Sequence[Union[Query, str]], k: int = 10, retriever: str = "bm25",
                     fusion: Optional[str] = None, threads: int = 1, text: bool = False, quiet: bool = True,
                     depth: Optional[int] = None, batch_size: Optional[int] = None,
                     timings: Optional[Dict[str, float]] = None, dimsel=None, filter=None
                     ) -> Dict[str, List[Hit]]:
        """Search many queries; returns ``{qid: hits}`` in the order of ``queries``.
        Plain strings get ids "0", "1", ... Queries go to the backends in
        batches of ``batch_size`` (default: all at once when quiet, else
        about 20 batches so the progress bar moves). ``filter`` applies to every
        query, as in :meth:`search`."""
        _check_k(k)
        qs = [q if isinstance(q, Query) else Query(str(i), q) for i, q in enumerate(queries)]
        p = self.pipeline(retriever, fusion)
        allowed = self.allowed(filter)
        rs = {name: self._pick(name, dimsel, p.fused) for name in p.retrievers}
        kk = k if not p.fused else max(k, depth or DEPTH)
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
                        res[name] = {q.qid: self._filtered(r, q.text, kk, allowed) for q in chunk}
                    _tick(timings, name, t0)
                for q in chunk:
                    out[q.qid] = self._result(p, {n: res[n].get(q.qid, []) for n in rs}, k, text, q.qid, timings)
                bar.update(len(chunk))
        return out

    def _pick(self, name: str, dimsel=None, fused: bool = False):
        """The retriever for ``name``; with ``dimsel`` (a mode name, a dict of options or a
        retrieval.dense.dimsel.DimSel) the dense one searches with masked query vectors. In a fused
        pipeline only the members whose kind takes dimension selection are wrapped."""
        kind = kind_of(self.manifest["subindexes"][name])
        if dimsel is None or (fused and not kind.dimsel):
            return self.retriever(name)
        return kind.with_dimsel(self, name, dimsel)

    def _result(self, p: Pipeline, lists, k, text, qid, timings) -> List[Hit]:
        if not p.fused:
            hits = [Hit(docid=d, score=s, rank=i, qid=qid) for i, (d, s) in enumerate(lists[p.retrievers[0]], 1)]
        else:
            t0 = time.perf_counter()
            hits = [Hit(docid=d, score=s, rank=i, qid=qid, scores=raw)
                    for i, (d, s, raw) in enumerate(fuse(lists, p.fusion)[:k], 1)]
            _tick(timings, "fusion", t0)
        if text and hits:
            t0 = time.perf_counter()
            rows = self.docstore.get_many(h.docid for h in hits)
            for h in hits:
                row = rows.get(h.docid)
                if row is not None:
                    h.title, h.text, h.metadata = row[1], row[2], row[3] or {}
            _tick(timings, "text", t0)
        return hits

    def get(self, docid: str) -> Optional[Document]:
        row = self.docstore.get(docid)
        return None if row is None else Document(row[0], row[2], row[1], row[3] or {})


def _check_k(k: int) -> None:
    if not isinstance(k, int) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")


def open_index(path: Union[str, Path]) -> Index:
    """Open an index folder built by ``retr index`` / :func:`build_index`."""
    return Index.open(path)
