"""Readers and writers for TREC / BEIR qrels and TREC runs (plain or gzip, auto-detected).

Hand-written rather than pytrec_eval.parse_run/parse_qrel: those only assert on bad lines, while we
need ``file:line`` error messages, the BEIR tsv format and gzip.
"""
from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import IO

from .errors import EvalError

Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]
_BEIR_HEADER = ("query-id", "corpus-id", "score")


def _open_text(path: str | os.PathLike) -> IO[str]:
    """Open a text file, transparently gunzipping when the file starts with the gzip magic bytes."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
    except OSError as exc:
        raise EvalError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _lines(path: str | os.PathLike) -> Iterator[tuple[int, list[str]]]:
    """Yield (line number, fields) for non-empty, non-comment lines."""
    with _open_text(path) as fh:
        try:
            for lineno, line in enumerate(fh, 1):
                parts = line.split()
                if parts and not parts[0].startswith("#"):
                    yield lineno, parts
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise EvalError(f"{path}: corrupt gzip file ({exc})") from None


def read_qrels(path: str | os.PathLike) -> Qrels:
    """Read relevance judgments: TREC ``qid 0 docid rel`` or BEIR tsv (``query-id corpus-id score``).

    The format is detected from the first data line; lines starting with ``#`` are comments.
    Raises EvalError (with ``file:line``) on a wrong column count, a non-integer grade or a
    document judged twice for one query. ``subtopics:PATH`` reads a TREC diversity qrels file
    (``read_subtopic_qrels``). Collections by name (``irds:NAME``, ``dmerit:PATH``) are the library's to
    read (``retrieval.datasets.qrels.read_qrels``, what ``retr eval --qrels`` uses): the evaluator reads
    files only, and refuses such a name with one line.
    """
    named = _named_qrels(path)
    if named is not None:
        return named
    qrels: Qrels = {}
    first_line: dict[tuple[str, str], int] = {}
    ncols = 0
    for lineno, parts in _lines(path):
        if not ncols:
            if tuple(p.lower() for p in parts) == _BEIR_HEADER:
                ncols = 3
                continue
            if len(parts) not in (3, 4):
                raise EvalError(f"{path}:{lineno}: expected 4 columns 'qid 0 docid rel' (TREC) or 3 "
                                f"'query-id corpus-id score' (BEIR), got {len(parts)}")
            ncols = len(parts)
        if len(parts) != ncols:
            want = "'qid 0 docid rel'" if ncols == 4 else "'query-id corpus-id score'"
            raise EvalError(f"{path}:{lineno}: expected {ncols} columns {want}, got {len(parts)}")
        qid, docid, grade = (parts[0], parts[2], parts[3]) if ncols == 4 else parts
        try:
            rel = int(grade)
        except ValueError:
            try:
                value = float(grade)
            except ValueError:
                value = float("nan")
            if not value.is_integer():
                raise EvalError(f"{path}:{lineno}: relevance {grade!r} is not an integer") from None
            rel = int(value)
        if not -2**31 <= rel < 2**31:  # pytrec_eval holds grades as C ints
            raise EvalError(f"{path}:{lineno}: relevance {grade!r} is out of range")
        judged = qrels.setdefault(qid, {})
        if docid in judged:
            hint = "; diversity qrels 'topic subtopic docid judgment'? read them as subtopics:FILE" if ncols == 4 else ""
            raise EvalError(f"{path}:{lineno}: document {docid!r} judged twice for query {qid!r} "
                            f"(first at line {first_line[qid, docid]}){hint}")
        judged[docid] = rel
        first_line[qid, docid] = lineno
    return qrels


def _named_qrels(source) -> Qrels | None:
    """The subtopic qrels of ``subtopics:PATH``; None for a file; a collection's name is refused."""
    if isinstance(source, str) and source.startswith(SUBTOPICS_PREFIX):
        return read_subtopic_qrels(source[len(SUBTOPICS_PREFIX):])
    if isinstance(source, str) and source.startswith(COLLECTION_PREFIXES):
        raise EvalError(f"{source}: the evaluator reads qrels files only; read a collection's judgments by name "
                        f"with retrieval.datasets.qrels.read_qrels (as `retr eval --qrels` does) and pass them as a "
                        f"mapping")
    return None


SUBTOPICS_PREFIX = "subtopics:"
#: collections by name, read by the library (retrieval.datasets), not by the evaluator
COLLECTION_PREFIXES = ("irds:", "dmerit:")


class SubtopicQrels(dict):
    """Diversity judgments: ``subtopics`` holds {qid: {subtopic: {docid: grade}}}, what the diversity
    measures (alpha-nDCG, ERR-IA, ...) read; the mapping itself is {qid: {docid: grade}} with each
    document's highest grade over the query's subtopics, what every other measure reads (a document
    relevant to some subtopic is relevant to the query)."""

    def __init__(self, subtopics: Mapping[str, Mapping[str, Mapping[str, int]]]):
        super().__init__()
        self.subtopics = {q: {s: dict(docs) for s, docs in subs.items()} for q, subs in subtopics.items()}
        for q, subs in self.subtopics.items():
            best = self.setdefault(q, {})
            for docs in subs.values():
                for d, g in docs.items():
                    best[d] = max(g, best.get(d, g))


def read_subtopic_qrels(path: str | os.PathLike) -> SubtopicQrels:
    """Read TREC diversity qrels (the Web track's ``qrels.diversity``): ``topic subtopic docid judgment``,
    subtopics numbered from 1, a document listed once per subtopic it was judged for. Ad hoc qrels
    (``qid 0 docid rel``) also have 4 columns, so this form is asked for explicitly (``subtopics:PATH``
    for ``--qrels``), and a subtopic 0 or Q0 is refused as ad hoc qrels. EvalError with ``file:line`` on
    a wrong column count, a subtopic that is not a positive integer, a non-integer grade, or a document
    judged twice for one subtopic."""
    subtopics: dict[str, dict[str, dict[str, int]]] = {}
    first_line: dict[tuple[str, str, str], int] = {}
    for lineno, parts in _lines(path):
        if len(parts) != 4:
            raise EvalError(f"{path}:{lineno}: expected 4 columns 'topic subtopic docid judgment' (TREC diversity "
                            f"qrels), got {len(parts)}")
        qid, sub, docid, grade = parts
        if not sub.isdigit() or int(sub) < 1:
            raise EvalError(f"{path}:{lineno}: subtopic {sub!r} is not a positive integer (diversity qrels number "
                            "subtopics from 1; 'qid 0 docid rel' is the ad hoc form: pass it without subtopics:)")
        try:
            rel = int(grade)
        except ValueError:
            raise EvalError(f"{path}:{lineno}: judgment {grade!r} is not an integer") from None
        sub = str(int(sub))
        judged = subtopics.setdefault(qid, {}).setdefault(sub, {})
        if docid in judged:
            raise EvalError(f"{path}:{lineno}: document {docid!r} judged twice for query {qid!r}, subtopic {sub} "
                            f"(first at line {first_line[qid, sub, docid]})")
        judged[docid] = rel
        first_line[qid, sub, docid] = lineno
    return SubtopicQrels(subtopics)


def read_run(path: str | os.PathLike, strict: bool = True) -> Run:
    """Read a TREC run ``qid Q0 docid rank score tag`` into {qid: {docid: score}}.

    The rank column is ignored (as trec_eval does: it sorts by score, ties broken by docid descending).
    ``strict=False`` tolerates trailing fields after the tag, as trec_eval does.
    Raises EvalError (with ``file:line``) on a wrong column count, a non-numeric score or a docid
    listed twice for one query.
    """
    run: Run = {}
    count = 0
    with _open_text(path) as fh:
        try:
            # Hot loop (7M lines for MS MARCO dev): keep it minimal, check duplicates afterwards by counting.
            for lineno, line in enumerate(fh, 1):
                parts = line.split()
                if len(parts) != 6:
                    if not parts or parts[0].startswith("#"):
                        continue
                    if strict or len(parts) < 6:
                        raise EvalError(f"{path}:{lineno}: expected 6 columns 'qid Q0 docid rank score tag', "
                                        f"got {len(parts)}")
                qid, docid, score = parts[0], parts[2], parts[4]
                try:
                    value = float(score)
                except ValueError:
                    raise EvalError(f"{path}:{lineno}: score {score!r} is not a number") from None
                if value != value or value in (float("inf"), float("-inf")):
                    raise EvalError(f"{path}:{lineno}: score {score!r} is not a finite number")
                docs = run.get(qid)
                if docs is None:
                    docs = run[qid] = {}
                docs[docid] = value
                count += 1
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise EvalError(f"{path}: corrupt gzip file ({exc})") from None
    if sum(map(len, run.values())) != count:
        _raise_duplicate(path)
    return run


# A frame's columns: PyTerrier's names first, then ir_measures'.
RUN_COLUMNS = (("qid", "docno", "score"), ("query_id", "doc_id", "score"))
QRELS_COLUMNS = (("qid", "docno", "label"), ("query_id", "doc_id", "relevance"))


def is_frame(obj) -> bool:
    """Whether ``obj`` is a pandas DataFrame, told without importing pandas (the evaluator's other
    callers never load it)."""
    return hasattr(obj, "columns") and hasattr(obj, "itertuples")


def frame_columns(frame, what: str, conventions=RUN_COLUMNS) -> tuple[str, str, str]:
    """The (query, document, value) column names ``frame`` uses: PyTerrier's or ir_measures'.
    One EvalError naming both sets and what is missing when it has neither."""
    have = set(map(str, frame.columns))
    for names in conventions:
        if set(names) <= have:
            return names
    ours, theirs = conventions
    near = theirs if have & {"query_id", "doc_id"} else ours
    missing = ", ".join(c for c in near if c not in have)
    raise EvalError(f"a {what} DataFrame needs the columns {', '.join(ours)} (PyTerrier's) or "
                    f"{', '.join(theirs)} (ir_measures'); missing: {missing}")


def as_run(run) -> Mapping[str, Mapping[str, float]]:
    """A run in any form the evaluator takes, as ``{qid: {docid: score}}`` (which passes unchanged):

    - ``{qid: [hit, ...]}`` where a hit has ``.docid`` and ``.score`` (what retr's
      ``Index.batch_search`` returns; duck-typed, so the evaluator imports no retrieval code),
      or is a ``(docid, score)`` pair (what a Pyserini-style ranking list holds);
    - a pandas DataFrame with PyTerrier's columns ``qid``, ``docno``, ``score`` (a transformer's
      results, ``Index.batch_search(as_frame=True)``) or ir_measures' ``query_id``, ``doc_id``,
      ``score``; other columns (``rank``, ``query``, ...) are ignored.

    A document listed twice for one query is an error, as in a run file."""
    if is_frame(run):
        qcol, dcol, scol = frame_columns(run, "run")
        out: dict[str, dict[str, float]] = {}
        for q, d, sc in zip(run[qcol], run[dcol], run[scol]):
            _put(out.setdefault(str(q), {}), str(q), str(d), sc)
        return out
    if not isinstance(run, Mapping):
        raise EvalError(f"a run is a mapping {{qid: {{docid: score}}}} or {{qid: [hits]}}, got {type(run).__name__}")
    if all(isinstance(docs, Mapping) for docs in run.values()):
        return run
    out = {}
    for qid, docs in run.items():
        if isinstance(docs, Mapping):
            out[qid] = docs
            continue
        if isinstance(docs, (str, bytes)) or not isinstance(docs, Iterable):
            raise EvalError(f"run query {qid!r}: expected {{docid: score}} or a list of hits, got "
                            f"{type(docs).__name__}")
        row: dict[str, float] = {}
        for h in docs:
            if hasattr(h, "docid") and hasattr(h, "score"):
                _put(row, qid, h.docid, h.score)
            elif isinstance(h, (tuple, list)) and len(h) == 2:
                _put(row, qid, h[0], h[1])
            else:
                raise EvalError(f"run query {qid!r}: a hit needs .docid and .score (or is a (docid, score) "
                                f"pair), got {type(h).__name__}")
        out[qid] = row
    return out


def _put(row: dict, qid, docid, score) -> None:
    docid = str(docid)
    if docid in row:
        raise EvalError(f"run query {qid!r}: document {docid!r} listed twice")
    try:
        row[docid] = float(score)
    except (TypeError, ValueError):
        raise EvalError(f"run query {qid!r}: document {docid!r} has score {score!r}, not a number") from None


def as_qrels(qrels) -> Mapping[str, Mapping[str, int]]:
    """Judgments in any form the evaluator takes, as ``{qid: {docid: grade}}`` (which passes
    unchanged): that mapping, or a pandas DataFrame with PyTerrier's columns ``qid``, ``docno``,
    ``label`` (``pt.io.read_qrels``, a dataset's ``get_qrels()``) or ir_measures' ``query_id``,
    ``doc_id``, ``relevance``. Grades must be integers; a document judged twice is an error."""
    if not is_frame(qrels):
        if not isinstance(qrels, Mapping):
            raise EvalError(f"qrels are a mapping {{qid: {{docid: grade}}}} or a DataFrame, got {type(qrels).__name__}")
        return qrels
    qcol, dcol, lcol = frame_columns(qrels, "qrels", QRELS_COLUMNS)
    out: dict[str, dict[str, int]] = {}
    for q, d, g in zip(qrels[qcol], qrels[dcol], qrels[lcol]):
        q, d = str(q), str(d)
        judged = out.setdefault(q, {})
        if d in judged:
            raise EvalError(f"qrels query {q!r}: document {d!r} judged twice")
        try:
            grade = float(g)
        except (TypeError, ValueError):
            grade = float("nan")
        if not grade.is_integer() or not -2**31 <= grade < 2**31:  # pytrec_eval holds grades as C ints
            raise EvalError(f"qrels query {q!r}: document {d!r} has relevance {g!r}, not an integer")
        judged[d] = int(grade)
    return out


def query_overlap(run: Mapping[str, Mapping], qrels: Mapping[str, Mapping]) -> tuple[int, int, int]:
    """(queries with results in the run, queries with judgments in the qrels, queries in both):
    a run scored against the wrong qrels shares few or none."""
    in_run = {q for q, docs in run.items() if docs}
    in_qrels = {q for q, docs in qrels.items() if docs}
    return len(in_run), len(in_qrels), len(in_run & in_qrels)


def _raise_duplicate(path: str | os.PathLike) -> None:
    seen: dict[tuple[str, str], int] = {}
    for lineno, parts in _lines(path):
        key = (parts[0], parts[2])
        if key in seen:
            raise EvalError(f"{path}:{lineno}: document {parts[2]!r} listed twice for query {parts[0]!r} "
                            f"(first at line {seen[key]})")
        seen[key] = lineno
    raise EvalError(f"{path}: duplicate documents within a query")  # pragma: no cover


def ranked(docs: Mapping[str, float]) -> list[tuple[str, float]]:
    """Documents in trec_eval order: score descending, ties broken by docid descending."""
    return sorted(docs.items(), key=lambda item: (item[1], item[0]), reverse=True)


def write_run(run: Mapping[str, Mapping[str, float]], path: str | os.PathLike, tag: str = "retr") -> None:
    """Write a TREC run, ranks assigned in trec_eval order."""
    with open(path, "w", encoding="utf-8") as fh:
        for qid, docs in run.items():
            for rank, (docid, score) in enumerate(ranked(docs), 1):
                fh.write(f"{qid} Q0 {docid} {rank} {float(score)!r} {tag}\n")


def write_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | os.PathLike) -> None:
    """Write qrels in TREC format."""
    with open(path, "w", encoding="utf-8") as fh:
        for qid, docs in qrels.items():
            for docid, rel in docs.items():
                fh.write(f"{qid} 0 {docid} {rel}\n")
