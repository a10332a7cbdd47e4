"""Keep an index in step with the folder of documents it was built from (``retr sync``).

The folder is read as the index was built: its manifest's ``corpus.reader`` (chunking, include and
exclude globs). Each file is one document (its id is its relative path, :mod:`retrieval.documents`);
its passages (``DOCID#N`` when chunked) carry the file's ``sha256`` in their metadata. Against the
index's current generation a document is

- **added** when the folder has it and the index does not;
- **updated** when both have it and its hash differs (or the index's passages carry none): every old
  passage of it is removed and its new passages added, so a document that got shorter loses the
  passages it no longer has;
- **removed** when the index has it and the folder does not (also a file that can no longer be read,
  with its warning line, as a fresh build would leave it out);
- **unchanged** otherwise: its passages are neither encoded nor rewritten (a new modification time
  alone changes nothing).

The change is one generation (the writer's :func:`retrieval.writer._apply`, as ``retr update``
makes one): readers see all of it or none. Removed passages stay in Lucene and faiss, masked, until
``retr compact``, as after ``retr delete``.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

from indexes import folder
from indexes import manifest as mf
from indexes import sharded
from indexes.docstore import DocStore
from indexes.errors import InputError
from retrieval import writer
from retrieval.chunking import document_of
from retrieval.collections import is_documents, read_corpus
from retrieval.executors import open_executor
from retrieval.progress import progress
from retrieval.types import Document

_Old = Dict[str, Tuple[Optional[str], List[str]]]  # document id -> (its sha256, its passage ids)


def _reader(path: Path) -> dict:
    """The manifest's record of how the index read its folder of documents; one error line otherwise."""
    if sharded.is_sharded(path):
        raise InputError("retr sync does not support a sharded index yet; use retr update and retr delete "
                         "with the changed files and the removed documents' passage ids", path)
    return _documents_reader(mf.read_manifest(path), path)


def _documents_reader(m: dict, path: Path) -> dict:
    rec = (m.get("corpus") or {}).get("reader") or {}
    if rec.get("form") != "documents":
        was = {"file": "a JSONL/TSV/BEIR corpus", "iterable": "a Python iterable"}.get(rec.get("form"))
        raise InputError("was not built from a folder of documents" + (f" but from {was}" if was else "")
                         + "; retr sync compares such a folder with its index (use retr add, update and delete)",
                         path)
    return rec


def _read_folder(corpus, rec: dict, quiet: bool) -> Dict[str, List[Document]]:
    """The folder's passages, by document id, read as ``rec`` says."""
    if not isinstance(corpus, (str, Path)) or not is_documents(corpus):
        raise InputError("not a folder of documents (.txt/.md/.html/.pdf files)", corpus)
    docs: Dict[str, List[Document]] = {}
    stream = read_corpus(corpus, **writer._read_options(rec))
    for d in progress(stream, desc="sync: reading the folder", unit="passage", quiet=quiet):
        docs.setdefault(document_of(d.docid, d.metadata), []).append(d)
    return docs


def _held(store_path: Path, generation: int) -> _Old:
    """The documents generation ``generation`` of the store holds: hash and passage ids of each."""
    out: _Old = {}
    store = DocStore(store_path, generation)
    try:
        for pid, meta in store.iter_meta():
            doc = document_of(pid, meta)
            sha = (meta or {}).get("sha256")
            got = out.get(doc)
            if got is None:
                out[doc] = (sha if isinstance(sha, str) else None, [pid])
            else:
                if got[0] != sha:  # passages that disagree on the hash: the document is rewritten
                    out[doc] = (None, got[1])
                out[doc][1].append(pid)
    finally:
        store.close()
    return out


def _sha(passages: List[Document]) -> Optional[str]:
    sha = (passages[0].metadata or {}).get("sha256")
    return sha if isinstance(sha, str) else None


def _plan(new: Dict[str, List[Document]], old: _Old) -> dict:
    added = [d for d in new if d not in old]
    updated = [d for d in new if d in old and (old[d][0] is None or old[d][0] != _sha(new[d]))]
    removed = [d for d in old if d not in new]
    gone = [pid for d in (*updated, *removed) for pid in old[d][1]]
    put = [p for d in (*updated, *added) for p in new[d]]
    return {"added": sorted(added), "updated": sorted(updated), "removed": sorted(removed),
            "unchanged": len(new) - len(added) - len(updated),
            "passages_added": len(put), "passages_removed": len(gone), "_gone": gone, "_put": put}


def sync_index(index, corpus: Union[str, Path], *, dry_run: bool = False, threads: int = 2, quiet: bool = False,
               executor=None) -> dict:
    """Bring ``index`` (an Index or its folder, built from a folder of documents) in step with the
    folder ``corpus``, as one new generation: new files are added, changed ones (by the ``sha256``
    of their bytes) replaced, removed ones deleted with all their passages; unchanged documents are
    not encoded again. ``dry_run``: only compare. Returns what it did (or would do): ``added``,
    ``updated``, ``removed`` (document ids, sorted), ``unchanged`` (a count), ``passages_added``,
    ``passages_removed``, ``generation`` and ``passages`` (what the index holds afterwards),
    ``dry_run``. A generation is made only when something changed. ``executor``: where the model
    stages run, as in :func:`retrieval.writer.update_documents`."""
    path = writer._path_of(index)
    rec = _reader(path)
    executor = writer._executor_spec(executor)  # a bad option fails before the folder is read
    new = _read_folder(corpus, rec, quiet)  # read before the lock: a bad folder changes nothing
    t0 = time.perf_counter()
    if dry_run:
        m = mf.read_manifest(path)
        gen = int(m.get("generation", 0))
        plan = _plan(new, _held(folder.docstore_path(path, m), gen))
        return _report(plan, gen, int(m["corpus"]["doc_count"]) - plan["passages_removed"] + plan["passages_added"],
                       dry_run=True)
    with open_executor(executor) as ex, writer._changing(path, quiet, threads) as ch:
        # (the index may have been rebuilt from another corpus while the folder was read)
        _documents_reader(ch.old, path)
        plan = _plan(new, _held(ch.store_path, ch.base))
        gone, put = plan["_gone"], plan["_put"]
        if not gone and not put:
            return _report(plan, ch.base, int(ch.old["corpus"]["doc_count"]))
        if put:
            writer._check_kinds(ch.old, path, "append")
        if gone:
            writer._check_kinds(ch.old, path, "delete")
        kept = writer._pruned(ch.old.get("pruning"), put, quiet, path, ex)
        writer._pruning_record(ch, len(put), len(kept))
        counts = {k: len(plan[k]) for k in ("added", "updated", "removed")}
        writer._apply(ch, gone, kept, "sync", str(corpus), t0, extra={"documents": counts},
                      stages=writer._Stages(executor=ex))
        plan.update(passages_added=len(kept), pruned=len(put) - len(kept))
        return _report(plan, ch.gen, int(ch.new["corpus"]["doc_count"]))


def _report(plan: dict, generation: int, passages: int, dry_run: bool = False) -> dict:
    out = {k: v for k, v in plan.items() if not k.startswith("_")}
    out.update(generation=generation, passages=passages, dry_run=dry_run)
    return out
