"""The writer: every change to an index folder goes through here. A build
writes a new folder (document store, BM25, then each requested sub-index kind)
that appears only when everything succeeded; ``add_subindex`` adds a kind to an
existing folder; ``add_documents`` grows every sub-index by the same documents.

Each sub-index kind is driven through :mod:`retrieval.kinds` (build, append,
entries, ...); this module holds no per-kind logic. Reading is
:mod:`retrieval.index`, which imports nothing from here.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import AbstractSet, Callable, Dict, Iterable, List, Optional, Tuple, Union

from indexes import manifest as mf
from indexes.docstore import DocStoreWriter
from indexes.errors import InputError
from retrieval.bm25 import BM25Spec
from retrieval.collections import check_lengths, count_lines, read_corpus
from retrieval.dense.subindex import DenseSpec
from retrieval.index import DOCSTORE, Index
from retrieval.kinds import BuildContext, SubIndexKind, get_kind, kind_of
from retrieval.progress import progress
from retrieval.types import Document


def _fingerprint_update(h, doc: Document) -> None:
    h.update(doc.docid.encode())
    h.update(b"\x00")
    h.update(doc.contents.encode())
    h.update(b"\x01")


def build_index(corpus: Union[str, Path, Iterable[Document]], index_dir: Union[str, Path], *,
                k1: float = 0.9, b: float = 0.4, threads: int = 2, overwrite: bool = False,
                store_docvectors: bool = False, empty: str = "error", dense: Optional[DenseSpec] = None,
                quiet: bool = False, keep: Union[AbstractSet[str], Callable[[Document], bool], None] = None,
                pruning: Optional[dict] = None, dense_vectors: Optional[dict] = None) -> Index:
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
    ``dense_vectors`` (see :func:`retrieval.dense.subindex.build_dense`) are vectors
    already computed for the documents, used when their encoder is ``dense``'s.
    """
    index_dir = Path(index_dir)
    BM25Spec(k1, b, store_docvectors).validate()
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

        ctx = BuildContext(tmp / DOCSTORE, "", _cache_base(index_dir), quiet=quiet, threads=threads,
                           stream=stream(), meanwhile=fill_store if from_file else None)
        try:
            bm25 = get_kind("bm25").build(tmp / "bm25", "bm25", ctx, BM25Spec(k1, b, store_docvectors))
        finally:
            n_docs = store.close()
        if n_docs == 0:
            raise InputError("corpus has no documents", source)
        if n_docs != int(bm25["doc_count"]):
            raise InputError(f"the corpus changed while it was being indexed ({bm25['doc_count']} documents "
                             f"in the first pass, {n_docs} in the second)", source)
        m = mf.new_manifest({"threads": threads, "empty": empty})
        m["corpus"] = {"source": source, "doc_count": n_docs, "fingerprint": "sha256:" + h.hexdigest(),
                       "skipped_empty": len(skipped)}
        m["docstore"] = {"path": DOCSTORE, "doc_count": n_docs}
        if keep is not None or pruning is not None:
            m["pruning"] = {**(pruning or {}), "dropped": dropped[0], "kept": n_docs}
        m["subindexes"]["bm25"] = dict(bm25, build_seconds=round(time.perf_counter() - t0, 3))
        if dense is not None:
            ctx = BuildContext(tmp / DOCSTORE, m["corpus"]["fingerprint"], _cache_base(index_dir), quiet=quiet,
                               threads=threads, precomputed=dense_vectors)
            m["subindexes"]["dense"] = get_kind("dense").build(tmp / "dense", "dense", ctx, dense)
        mf.write_manifest(tmp, m)
    return Index.open(index_dir)


def _cache_base(index_dir: Path) -> Path:
    # Keyed by the final folder name, so a rerun after a crash (another pid) resumes the encoding.
    return index_dir.parent / f".{index_dir.name.split('.tmp-')[0]}.encode"


def index_corpus(corpus: Union[str, Path], index_dir: Union[str, Path], *, dense: Optional[DenseSpec] = None,
                 deepct=None, prune: Optional[float] = None, quality: Optional[str] = None,
                 k1: float = 0.9, b: float = 0.4, threads: int = 2, overwrite: bool = False,
                 empty: str = "error", store_docvectors: bool = False, quiet: bool = False) -> Index:
    """What `retr index` does, as one call.

    - A new folder (or ``overwrite``) gets the document store, BM25 and every
      requested sub-index (``dense``: a :class:`DenseSpec`; ``deepct``: a
      ``retrieval.deepct.subindex.DeepCTSpec``), optionally pruned to the top
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
        from retrieval.quality.prune import check_share
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
            idx = add_deepct(idx, deepct, overwrite=overwrite, quiet=quiet)
        return idx
    kw = dict(k1=k1, b=b, threads=threads, overwrite=True, store_docvectors=store_docvectors, empty=empty,
              dense=dense, quiet=quiet)
    with mf.atomic_folder(index_dir, overwrite=overwrite) as stage:
        if prune is not None:
            idx = build_pruned_index(corpus, stage, prune, quality, **kw)
        else:
            idx = build_index(corpus, stage, **kw)
        if deepct is not None:
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


def add_subindex(index: Index, kind: str, spec, name: Optional[str] = None, overwrite: bool = False,
                 quiet: bool = False, **options) -> Index:
    """Build a sub-index of ``kind`` from the folder's document store and list it.
    It is built beside the others and becomes visible only when the manifest that
    lists it is swapped in. ``options`` go to the kind's ``after_add`` step."""
    k = get_kind(kind)
    name = name or kind
    spec.validate()
    if name in index.manifest["subindexes"] and not overwrite:
        raise InputError(f"index already has a {name!r} sub-index (pass --overwrite to rebuild it)", index.path)
    ctx = BuildContext(index.path / DOCSTORE, index.manifest["corpus"]["fingerprint"], _cache_base(index.path),
                       quiet=quiet)
    with mf.staged_subindex(index.path, name) as tmp:
        entry = k.build(tmp, name, ctx, spec)
    for n, e in k.entries(name, entry).items():
        mf.add_subindex_entry(index.path, n, e)
    k.after_add(Index.open(index.path), name, quiet=quiet, **options)
    return Index.open(index.path)


def add_dense(index: Index, spec: DenseSpec, name: str = "dense", overwrite: bool = False,
              quiet: bool = False) -> Index:
    """Add a dense sub-index (:class:`DenseSpec`) to an existing folder."""
    return add_subindex(index, "dense", spec, name, overwrite=overwrite, quiet=quiet)


def add_deepct(index: Index, spec, name: str = "deepct", overwrite: bool = False, quiet: bool = False,
               tune_fusion: bool = True) -> Index:
    """Add a DeepCT sub-index (``retrieval.deepct.subindex.DeepCTSpec``) to an existing folder.
    Also records ``<name>-query``: the same sub-index searched with DeepCT-Query. With
    ``tune_fusion`` the default fusion of ``bm25+<name>`` is tuned on the model's held-out
    training queries (when the model card names them)."""
    return add_subindex(index, "deepct", spec, name, overwrite=overwrite, quiet=quiet, tune_fusion=tune_fusion)


def build_pruned_index(corpus, index_dir, prune: float, quality: Optional[str] = None, empty: str = "error",
                       quiet: bool = False, **build_kwargs) -> Index:
    """:func:`build_index` on the top ``1 - prune`` share of ``corpus`` by passage quality
    (:func:`retrieval.quality.prune.prune_keep_set`)."""
    from retrieval.quality.prune import prune_keep_set

    vectors: dict = {}
    keep, record = prune_keep_set(corpus, prune, quality, empty=empty, quiet=quiet, vectors=vectors)
    return build_index(corpus, index_dir, empty=empty, quiet=quiet, keep=keep, pruning=record,
                       dense_vectors=vectors or None, **build_kwargs)


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
        check_lengths(d.docid, d.title, d.text, f"item {i}")
        seen.add(d.docid)
        yield d



def add_documents(index, corpus: Union[str, Path, Iterable[Document]], threads: int = 2, empty: str = "error",
                  quiet: bool = False, report: Optional[dict] = None):
    """Add the documents of ``corpus`` to every sub-index of ``index``; returns the reopened Index.
    In a folder pruned by passage quality, new documents pass the same estimator and
    threshold first, and only those it keeps are added. ``report`` (a dict) receives
    the counts: ``read``, ``added``, ``pruned``."""
    m = index.manifest
    kinds = {name: kind_of(e) for name, e in m["subindexes"].items()}
    fixed = sorted({k.name for k in kinds.values() if type(k).append is SubIndexKind.append})
    if fixed:  # fail before any work
        raise InputError(f"sub-index kind(s) {', '.join(fixed)} cannot take new documents; rebuild the "
                         f"index from the full corpus instead", index.path)
    pruning = m.get("pruning")
    docs = list(read_corpus(corpus, empty=empty) if isinstance(corpus, (str, Path)) else _checked(corpus))
    if not docs:
        raise InputError("no documents to add", corpus if isinstance(corpus, (str, Path)) else None)
    existing = set(index.docstore.get_many(d.docid for d in docs))
    if existing:
        first = next(d.docid for d in docs if d.docid in existing)
        raise InputError(f"{len(existing)} document id(s) are already in the index (first: {first!r})",
                         corpus if isinstance(corpus, (str, Path)) else None)
    read = len(docs)
    if pruning:
        from retrieval.quality.prune import QualityError, prune_additions

        try:
            docs = prune_additions(pruning, docs, quiet=quiet)
        except QualityError as e:
            raise InputError(str(e), index.path) from None
    if report is not None:
        report.update(read=read, added=len(docs), pruned=read - len(docs))
    if not docs:
        return index  # every new document fell below the pruning threshold: nothing changes
    t0 = time.perf_counter()
    with mf.atomic_folder(index.path, overwrite=True, copy_from=index.path) as tmp:
        con = sqlite3.connect(tmp / DOCSTORE)
        con.executemany("INSERT INTO docs VALUES (?,?,?,?)",
                        [(d.docid, d.title, d.text, json.dumps(d.metadata, ensure_ascii=False) if d.metadata else None)
                         for d in docs])
        con.commit()
        con.close()
        new = dict(m)
        new["subindexes"] = {}
        ctx = BuildContext(tmp / DOCSTORE, m["corpus"]["fingerprint"], _cache_base(index.path), quiet=quiet,
                           threads=threads)
        for name, entry in m["subindexes"].items():
            e = kinds[name].append(tmp / entry["path"], entry, docs, ctx)
            new["subindexes"][name] = dict(e, doc_count=int(e["doc_count"]) + len(docs), updated_at=mf.now())
        for name, e in new["subindexes"].items():  # an alias (deepct-query) mirrors its target's new state
            if e.get("alias_of") in new["subindexes"]:
                t = new["subindexes"][e["alias_of"]]
                new["subindexes"][name] = dict(e, **{k: t[k] for k in ("variant_bytes", "documents_without_terms")
                                                     if k in t})
        h = hashlib.sha256(m["corpus"]["fingerprint"].encode())
        for d in docs:
            h.update(f"{d.docid}\x00{d.contents}\x01".encode())
        n = int(m["corpus"]["doc_count"]) + len(docs)
        new["corpus"] = dict(m["corpus"], doc_count=n, fingerprint="sha256:" + h.hexdigest(),
                             additions=m["corpus"].get("additions", []) + [
                                 {"source": str(corpus) if isinstance(corpus, (str, Path)) else "<python iterable>",
                                  "documents": len(docs), "at": mf.now(),
                                  "seconds": round(time.perf_counter() - t0, 2)}])
        new["docstore"] = dict(m["docstore"], doc_count=n)
        if pruning:
            new["pruning"] = dict(pruning, considered=int(pruning.get("considered", 0)) + read,
                                  dropped=int(pruning.get("dropped", 0)) + read - len(docs), kept=n)
        new.pop("pipelines", None)  # tuned on the old collection: retune
        mf.write_manifest(tmp, new)
    return Index.open(index.path)
