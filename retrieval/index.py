"""The index folder as one object: build it, open it, search it.

    INDEX/manifest.json   config, counts, versions, sub-indexes (see indexes.manifest)
    INDEX/docs.sqlite     document store (title, text, metadata)
    INDEX/bm25/           Lucene BM25 index (Anserini)
    INDEX/<name>/         further sub-indexes (dense, deepct, ...)
"""
from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import AbstractSet, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from indexes import manifest as mf
from indexes.bulk import no_gc
from indexes.docstore import DocStore, DocStoreWriter
from indexes.errors import IndexFormatError, InputError
from retrieval.collections import count_lines, read_corpus
from retrieval.fusion import Pipeline, fuse, parse_pipeline
from retrieval.progress import progress
from retrieval.subindexes import DenseSpec, build_dense
from retrieval.types import Document, Hit, Query

DOCSTORE = "docs.sqlite"
DEPTH = 100  # candidates each fused retriever returns, at least (more when k is larger)


def _tick(timings: Optional[Dict[str, float]], stage: str, t0: float) -> None:
    if timings is not None:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - t0


def _fingerprint_update(h, doc: Document) -> None:
    h.update(doc.docid.encode())
    h.update(b"\x00")
    h.update(doc.contents.encode())
    h.update(b"\x01")


def build_index(corpus: Union[str, Path, Iterable[Document]], index_dir: Union[str, Path], *,
                k1: float = 0.9, b: float = 0.4, threads: int = 2, overwrite: bool = False,
                store_docvectors: bool = False, empty: str = "error", dense: Optional[DenseSpec] = None,
                quiet: bool = False, keep: Union[AbstractSet[str], Callable[[Document], bool], None] = None,
                pruning: Optional[dict] = None, dense_vectors: Optional[dict] = None) -> "Index":
    """Build an index folder with a document store and a Lucene BM25 sub-index.

    ``corpus`` is a path (BEIR folder, JSONL, TSV, .gz) or an iterable of
    :class:`Document`. ``empty`` is the policy for documents without text
    (``error``, ``skip`` or ``keep``). With ``dense`` a dense sub-index is
    built too. The folder appears only when every sub-index is built.

    ``keep`` (a set of docids or a predicate on :class:`Document`) filters the
    document stream: other documents enter no sub-index and no document store,
    so they are never encoded (static pruning, see :mod:`retrieval.quality`).
    The corpus fingerprint still covers every document. ``pruning`` is recorded
    in the manifest as-is, with the number of documents dropped added.
    ``dense_vectors`` (see :func:`retrieval.subindexes.build_dense`) are vectors
    already computed for the documents, used when their encoder is ``dense``'s.
    """
    from indexes.lucene import build_lucene

    index_dir = Path(index_dir)
    if dense is not None:
        dense.validate()  # fail on a bad option before reading the corpus
    source = str(corpus) if isinstance(corpus, (str, Path)) else "<python iterable>"
    total = count_lines(corpus) if isinstance(corpus, (str, Path)) else None
    skipped: List[str] = []
    docs = (read_corpus(corpus, empty=empty, skipped=skipped) if isinstance(corpus, (str, Path))
            else _checked(corpus))
    t0 = time.perf_counter()
    with mf.atomic_folder(index_dir, overwrite=overwrite) as tmp:
        store = DocStoreWriter(tmp / DOCSTORE)
        h = hashlib.sha256()
        kept = keep if keep is None or callable(keep) else (lambda d, ids=keep: d.docid in ids)
        dropped = [0]

        # A corpus file is read twice: the first pass validates, fingerprints and
        # writes Anserini's input; the document store is filled by the second
        # pass while the JVM indexes, so the two overlap. A Python iterable can
        # be read once only, so it fills the store in the first pass.
        from_file = isinstance(corpus, (str, Path))

        def stream():
            for doc in progress(docs, total=total, desc="reading corpus", unit="doc", quiet=quiet):
                _fingerprint_update(h, doc)
                if kept is not None and not kept(doc):
                    dropped[0] += 1
                    continue
                if not from_file:
                    store.add(doc.docid, doc.title, doc.text, doc.metadata or None)
                yield doc.docid, doc.contents

        def fill_store():
            for doc in read_corpus(corpus, empty=empty, check_duplicates=False):
                if kept is None or kept(doc):
                    store.add(doc.docid, doc.title, doc.text, doc.metadata or None)

        (tmp / "bm25").mkdir()
        try:
            info = build_lucene(stream(), tmp / "bm25", threads=threads, store_docvectors=store_docvectors,
                                quiet=quiet, meanwhile=fill_store if from_file else None)
        finally:
            n_docs = store.close()
        if n_docs == 0:
            raise InputError("corpus has no documents", source)
        if n_docs != int(info["doc_count"]):
            raise InputError(f"the corpus changed while it was being indexed ({info['doc_count']} documents "
                             f"in the first pass, {n_docs} in the second)", source)
        m = mf.new_manifest({"threads": threads, "empty": empty})
        m["corpus"] = {"source": source, "doc_count": n_docs, "fingerprint": "sha256:" + h.hexdigest(),
                       "skipped_empty": len(skipped)}
        m["docstore"] = {"path": DOCSTORE, "doc_count": n_docs}
        if keep is not None or pruning is not None:
            m["pruning"] = {**(pruning or {}), "dropped": dropped[0], "kept": n_docs}
        m["subindexes"]["bm25"] = {
            "kind": "bm25", "path": "bm25", "built_at": mf.now(), "doc_count": int(info["doc_count"]),
            "config": {"k1": k1, "b": b, "analyzer": "anserini-default-english", "store_docvectors": store_docvectors},
            "model": None, "build_seconds": round(time.perf_counter() - t0, 3),
        }
        if dense is not None:
            m["subindexes"]["dense"] = build_dense(tmp / "dense", "dense", tmp / DOCSTORE, dense,
                                                   m["corpus"]["fingerprint"], _cache_base(index_dir), quiet,
                                                   precomputed=dense_vectors)
        mf.write_manifest(tmp, m)
    return Index.open(index_dir)


def _cache_base(index_dir: Path) -> Path:
    # Keyed by the final folder name, so a rerun after a crash (another pid) resumes the encoding.
    return index_dir.parent / f".{index_dir.name.split('.tmp-')[0]}.encode"


def index_corpus(corpus: Union[str, Path], index_dir: Union[str, Path], *, dense: Optional[DenseSpec] = None,
                 deepct=None, prune: Optional[float] = None, quality: Optional[str] = None,
                 k1: float = 0.9, b: float = 0.4, threads: int = 2, overwrite: bool = False,
                 empty: str = "error", store_docvectors: bool = False, quiet: bool = False) -> "Index":
    """What `retr index` does, as one call.

    - A new folder (or ``overwrite``) gets the document store, BM25 and every
      requested sub-index (``dense``: a :class:`DenseSpec`; ``deepct``: a
      ``retrieval.deepct_index.DeepCTSpec``), optionally pruned to the top
      ``1 - prune`` share by the ``quality`` estimator. All of it is built in
      a staging folder that replaces ``index_dir`` only when everything succeeded.
    - An existing folder built from the same corpus (same fingerprint) gains
      the requested sub-indexes; ``overwrite`` then rebuilds those only.
    """
    index_dir = Path(index_dir)
    if dense is not None:
        dense.validate()
    if deepct is not None:
        deepct.validate()
    if quality is not None and prune is None:
        raise InputError("a quality estimator only applies with a pruning share (prune=P, --prune P)")
    if prune is not None:
        from retrieval.quality import check_share
        check_share(prune)
    existing = (index_dir / "manifest.json").exists()
    adding = existing and prune is None and (dense is not None or deepct is not None)
    if existing and not adding and not overwrite:
        hint = "pass --overwrite to rebuild it" + (" pruned" if prune is not None else
                                                     ", or --dense / --deepct to add a sub-index")
        raise InputError(f"index folder already exists; {hint}", index_dir)
    if adding:
        idx = Index.open(index_dir)
        fp, _ = corpus_fingerprint(corpus, empty=idx.manifest.get("config", {}).get("empty", "error"))
        if fp != idx.manifest["corpus"]["fingerprint"]:
            raise InputError("was built from a different corpus; pass a new --index or rebuild it with --overwrite",
                             index_dir)
        if dense is not None:
            idx = add_dense(idx, dense, overwrite=overwrite, quiet=quiet)
        if deepct is not None:
            from retrieval.deepct_index import add_deepct
            idx = add_deepct(idx, deepct, overwrite=overwrite, quiet=quiet)
        return idx
    kw = dict(k1=k1, b=b, threads=threads, overwrite=True, store_docvectors=store_docvectors, empty=empty,
              dense=dense, quiet=quiet)
    with mf.atomic_folder(index_dir, overwrite=overwrite) as stage:
        if prune is not None:
            from retrieval.quality import build_pruned_index
            idx = build_pruned_index(corpus, stage, prune, quality, **kw)
        else:
            idx = build_index(corpus, stage, **kw)
        if deepct is not None:
            from retrieval.deepct_index import add_deepct
            add_deepct(idx, deepct, quiet=quiet)
    return Index.open(index_dir)


def corpus_fingerprint(corpus: Union[str, Path], empty: str = "error") -> Tuple[str, int]:
    """The fingerprint ``build_index`` records, without building anything."""
    h = hashlib.sha256()
    n = 0
    for doc in read_corpus(corpus, empty=empty):
        _fingerprint_update(h, doc)
        n += 1
    return "sha256:" + h.hexdigest(), n


def add_dense(index: "Index", spec: DenseSpec, name: str = "dense", overwrite: bool = False,
              quiet: bool = False) -> "Index":
    """Add a dense sub-index to an existing folder, from its document store.
    It becomes visible only when the manifest that lists it is swapped in."""
    spec.validate()
    if name in index.manifest["subindexes"] and not overwrite:
        raise InputError(f"index already has a {name!r} sub-index (pass --overwrite to rebuild it)", index.path)
    with mf.staged_subindex(index.path, name) as tmp:
        entry = build_dense(tmp, name, index.path / DOCSTORE, spec, index.manifest["corpus"]["fingerprint"],
                            _cache_base(index.path), quiet)
    mf.add_subindex_entry(index.path, name, entry)
    return Index.open(index.path)


def _checked(docs: Iterable[Document]) -> Iterable[Document]:
    seen = set()
    for i, d in enumerate(docs, 1):
        if not isinstance(d, Document):
            raise InputError(f"item {i} is a {type(d).__name__}, expected retrieval.Document")
        if not d.docid or any(c.isspace() for c in d.docid):
            raise InputError(f"item {i}: invalid document id {d.docid!r}")
        if d.docid in seen:
            raise InputError(f"item {i}: duplicate document id {d.docid!r}")
        if not d.contents.strip():
            raise InputError(f"item {i}: document {d.docid!r} has empty text")
        seen.add(d.docid)
        yield d


class Index:
    """An opened index folder. Sub-indexes and the JVM/models load lazily, on
    first use; after that, searching is safe from several threads."""

    def __init__(self, path: Path, manifest: dict):
        self.path = Path(path)
        self.manifest = manifest
        self._docstore: Optional[DocStore] = None
        self._retrievers: Dict[str, object] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Union[str, Path]) -> "Index":
        path = Path(path)
        m = mf.read_manifest(path)
        for name, entry in m.get("subindexes", {}).items():
            if not (path / entry["path"]).exists():
                raise IndexFormatError(f"{path}: sub-index {name!r} is listed in the manifest but missing on disk")
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
        from retrieval.retrievers import RETRIEVERS

        with self._lock:
            r = self._retrievers.get(name)
            if r is None:
                entries = self.manifest.get("subindexes", {})
                if name not in entries:
                    raise InputError(f"index has no {name!r} sub-index (it has: {', '.join(entries) or 'none'})",
                                     self.path)
                entry = entries[name]
                cls = RETRIEVERS.get(entry["kind"])
                if cls is None:
                    raise IndexFormatError(f"{self.path}: unknown sub-index kind {entry['kind']!r}")
                r = cls(self.path / entry["path"], entry)
                self._retrievers[name] = r
            return r

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

    def search(self, query: str, k: int = 10, retriever: str = "bm25", fusion: Optional[str] = None,
               text: bool = True, depth: Optional[int] = None, timings: Optional[Dict[str, float]] = None,
               dimsel=None) -> List[Hit]:
        """Top-``k`` hits for one query, with title and text unless ``text=False``.

        ``retriever`` is a sub-index name or a fused pipeline spec such as
        ``bm25+dense`` or ``bm25+dense:rrf(k=60)`` (see :mod:`retrieval.fusion`);
        fused retrievers each return ``max(k, depth or 100)`` candidates.
        ``timings``, when given, accumulates seconds per stage. ``dimsel``: query-aware
        dimension selection on the dense retriever(s) (see :func:`retrieval.dimsel.wrap`)."""
        if not isinstance(query, str) or not query.strip():
            raise InputError("query text is empty")
        _check_k(k)
        p = self.pipeline(retriever, fusion)
        lists = {}
        for name in p.retrievers:
            t0 = time.perf_counter()
            r = self._pick(name, dimsel, p.fused)
            lists[name] = r.search(query, k if not p.fused else max(k, depth or DEPTH))
            _tick(timings, name, t0)
        return self._result(p, lists, k, text, None, timings)

    def batch_search(self, queries: Sequence[Union[Query, str]], k: int = 10, retriever: str = "bm25",
                     fusion: Optional[str] = None, threads: int = 1, text: bool = False, quiet: bool = True,
                     depth: Optional[int] = None, batch_size: Optional[int] = None,
                     timings: Optional[Dict[str, float]] = None, dimsel=None) -> Dict[str, List[Hit]]:
        """Search many queries; returns ``{qid: hits}`` in the order of ``queries``.
        Plain strings get ids "0", "1", ... Queries go to the backends in
        batches of ``batch_size`` (default: all at once when quiet, else
        about 20 batches so the progress bar moves)."""
        _check_k(k)
        qs = [q if isinstance(q, Query) else Query(str(i), q) for i, q in enumerate(queries)]
        p = self.pipeline(retriever, fusion)
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
                    res[name] = r.batch_search(chunk, kk, threads)
                    _tick(timings, name, t0)
                with no_gc():  # a batch's hits at once: see indexes.bulk
                    for q in chunk:
                        out[q.qid] = self._result(p, {n: res[n].get(q.qid, []) for n in rs}, k, text, q.qid, timings)
                bar.update(len(chunk))
        return out

    def _pick(self, name: str, dimsel=None, fused: bool = False):
        """The retriever for ``name``; with ``dimsel`` (a mode name, a dict of options or a
        retrieval.dimsel.DimSel) the dense one searches with masked query vectors. In a fused
        pipeline only the dense members are wrapped."""
        if dimsel is None or (fused and self.manifest["subindexes"][name].get("kind") != "dense"):
            return self.retriever(name)
        from retrieval.dimsel import wrap

        return wrap(self, name, dimsel)

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
                    h.title, h.text = row[1], row[2]
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
