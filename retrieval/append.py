"""Add documents to an existing index folder: every sub-index gains them and
the manifest is updated, or nothing changes at all.

The folder is copied to ``INDEX.tmp-<pid>``, the additions are applied to the
copy, and the copy replaces the folder only when every sub-index succeeded
(the same atomic swap a fresh build uses). A sub-index kind that cannot take
new documents makes the whole call fail with a clear error before any work.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Union

from indexes import manifest as mf
from indexes.errors import InputError
from retrieval.collections import read_corpus
from retrieval.types import Document

NewDocs = List[Document]


def _add_bm25(folder: Path, entry: dict, docs: NewDocs, threads: int, quiet: bool) -> dict:
    from indexes.lucene import build_lucene

    build_lucene(((d.docid, d.contents) for d in docs), folder, threads=threads, quiet=True, append=True,
                 store_docvectors=bool(entry.get("config", {}).get("store_docvectors")))
    return entry


def _add_dense(folder: Path, entry: dict, docs: NewDocs, threads: int, quiet: bool) -> dict:
    from indexes.faiss_index import FaissIndex
    from retrieval.encoders.dense import DenseEncoder

    enc = DenseEncoder.from_config(entry["encoder"], quiet=True)
    vectors = enc.encode([d.contents for d in docs], quiet=quiet).astype("float32", copy=False)
    fi = FaissIndex.open(folder, mmap=False)
    fi.add(vectors, [d.docid for d in docs])
    fi.save(folder)
    return dict(entry, faiss=fi.describe(folder))


def _add_deepct(folder: Path, entry: dict, docs: NewDocs, threads: int, quiet: bool) -> dict:
    if entry.get("alias_of"):  # deepct-query shares its target's folder: updated with it, below
        return entry
    from retrieval.deepct_index import append_deepct

    return append_deepct(folder, entry, [(d.docid, d.contents) for d in docs], threads=threads, quiet=quiet)


ADDERS: Dict[str, Callable] = {"bm25": _add_bm25, "dense": _add_dense, "deepct": _add_deepct}


def add_documents(index, corpus: Union[str, Path, Iterable[Document]], threads: int = 2, empty: str = "error",
                  quiet: bool = False, report: Optional[dict] = None):
    """Add the documents of ``corpus`` to every sub-index of ``index``; returns the reopened Index.
    In a folder pruned by passage quality, new documents pass the same estimator and
    threshold first, and only those it keeps are added. ``report`` (a dict) receives
    the counts: ``read``, ``added``, ``pruned``."""
    from retrieval.index import DOCSTORE, Index, _checked

    m = index.manifest
    unsupported = sorted({e["kind"] for e in m["subindexes"].values() if e["kind"] not in ADDERS})
    if unsupported:
        raise InputError(f"sub-index kind(s) {', '.join(unsupported)} cannot take new documents; rebuild the "
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
        from retrieval.quality import QualityError, prune_additions

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
        for name, entry in m["subindexes"].items():
            e = ADDERS[entry["kind"]](tmp / entry["path"], entry, docs, threads, quiet)
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
