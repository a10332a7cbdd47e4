"""D-MERIT, the fully annotated evaluation set of Rassin et al. 2024 ("Evaluating D-MERIT of Partial-annotation
on Information Retrieval", arXiv:2406.16048; https://D-MERIT.github.io): Wikipedia passages, queries that each
describe a group ("names of Indian Marathi romance films") and, per query, every passage found to be evidence
that some entity (a *member*) belongs to the group. It is the kind of set the evaluator's ``eval.partial`` needs: judgments as
complete as one can get, to subsample.

``dmerit:PATH`` names a copy on disk: a file (``.jsonl``, ``.json`` holding a list, ``.parquet``; JSON may be
``.gz``) or a folder of them, read in name order. The project page describes a record as a query, a member,
a candidate (the Wikipedia article the passage comes from) and the evidence passage; the release's exact file
layout and column names could not be checked when this reader was written, so each field is looked up under
the spellings below, and a record whose fields fit none is refused with the fields it has:

- flat: one record per evidence passage: the query (``query``/``query_text``/``question``, optionally
  ``query_id``/``qid``), the passage (``evidence``/``evidence_text``/``passage``/``text``, optionally
  ``evidence_id``/``passage_id``/``doc_id``/``docid``/``corpus_id``/``pid``), its article (``candidate``/
  ``title``/``article``) and optionally ``member`` and a grade (``label``/``relevance``/``relevant``;
  without one every listed passage counts relevant, grade 1);
- nested: one record per query whose ``evidence`` (or ``evidences``/``passages``) is a list of passages, each
  a string (its text) or an object with the passage fields above (``id``/``_id`` also name it there).

Where the release gives no ids, they are derived from the text (``q`` + 12 hex digits of the query's SHA-1;
``dm`` + 16 of the article title and passage's): the same in the queries, the qrels and the corpus read from
the same copy, so `retr index --corpus dmerit:PATH`, `retr search --queries dmerit:PATH` and
`retr eval --qrels dmerit:PATH` agree (the CLI reads the qrels here and hands them to the evaluator).
Hand-written: no library reads this set.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from indexes.errors import InputError

PREFIX = "dmerit:"
_QUERY_TEXT = ("query", "query_text", "question")
_QUERY_ID = ("query_id", "qid", "query-id")
_LIST = ("evidence", "evidences", "passages")
_TEXT = ("evidence", "evidence_text", "passage", "passage_text", "text", "contents")
_PID = ("evidence_id", "passage_id", "doc_id", "docid", "corpus_id", "pid")
_TITLE = ("candidate", "title", "candidate_title", "article")
_GRADE = ("label", "relevance", "relevant")
_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".parquet")


def path_of(source) -> Path | None:
    """The path of a ``dmerit:PATH`` source (a str or a path object), else None."""
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if isinstance(text, str) and text.startswith(PREFIX):
            return Path(text[len(PREFIX):]).expanduser()
    return None


@dataclass
class DMerit:
    """One copy of D-MERIT: ``queries`` {qid: text}, ``qrels`` {qid: {docid: grade}} and its passages."""
    queries: dict[str, str] = field(default_factory=dict)
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    texts: dict[str, tuple[str, str]] = field(default_factory=dict)

    def passages(self):
        """(docid, title, text) of every passage, in the order first seen."""
        for docid, (title, text) in self.texts.items():
            yield docid, title, text


def read(source) -> DMerit:
    """Read a ``dmerit:PATH`` copy (cached while its files are unchanged: a build reads it more than once)."""
    path = path_of(source)
    if path is None:
        raise InputError(f"{source}: not a D-MERIT source (dmerit:PATH)")
    files = _files(path)
    return _read(tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files))


def read_qrels(source) -> dict[str, dict[str, int]]:
    return {q: dict(d) for q, d in read(source).qrels.items()}


def _files(path: Path) -> list[Path]:
    if not path.exists():
        raise InputError(f"{PREFIX}{path}: no such file or folder")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(_SUFFIXES))
        if not files:
            raise InputError(f"{PREFIX}{path}: the folder holds no {', '.join(_SUFFIXES)} file")
        return files
    if not path.name.lower().endswith(_SUFFIXES):
        raise InputError(f"{PREFIX}{path}: expected a {', '.join(_SUFFIXES)} file or a folder of them")
    return [path]


@functools.lru_cache(maxsize=4)
def _read(stamped: tuple) -> DMerit:
    out = DMerit()
    for name, _, _ in stamped:
        for n, record in _records(Path(name)):
            _add(out, record, f"{name}:{n}")
    if not out.qrels:
        raise InputError(f"{PREFIX}{stamped[0][0]}: no D-MERIT records found")
    return out


def _records(path: Path):
    """(record number, object) of a JSONL, JSON or Parquet file."""
    lower = path.name.lower()
    try:
        if lower.endswith(".parquet"):
            import pyarrow.parquet as pq

            yield from enumerate(pq.read_table(path).to_pylist(), 1)
            return
        opener = gzip.open if lower.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:
            if lower.endswith((".jsonl", ".jsonl.gz")):
                for n, line in enumerate(fh, 1):
                    if line.strip():
                        yield n, _json(line, path, n)
                return
            data = _json(fh.read(), path, None)
    except InputError:
        raise
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as e:  # gzip, parquet, UTF-8, pyarrow errors
        raise InputError(f"{path}: cannot read ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    rows = data.get("data") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise InputError(f"{path}: expected a JSON list of records (or {{\"data\": [...]}})")
    yield from enumerate(rows, 1)


def _json(text: str, path: Path, n):
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        where = f"{path}:{n}" if n else str(path)
        raise InputError(f"{where}: malformed JSON ({getattr(e, 'msg', 'nested too deeply')})") from None


def _first(obj: dict, keys):
    return next((obj[k] for k in keys if obj.get(k) not in (None, "")), None)


def _digest(*parts: str) -> str:
    return hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()


def _add(out: DMerit, record, where: str) -> None:
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(record).__name__}")
    qtext, qid = _first(record, _QUERY_TEXT), _first(record, _QUERY_ID)
    if not isinstance(qtext, str) or not qtext.strip():
        raise InputError(f"{where}: no query text ({' or '.join(_QUERY_TEXT)}); the record has "
                        f"{', '.join(sorted(map(str, record))) or 'no fields'}")
    qtext = " ".join(qtext.split())
    qid = "q" + _digest(qtext)[:12] if qid is None else str(qid).strip()
    if any(c.isspace() for c in qid) or not qid:
        raise InputError(f"{where}: query id {qid!r} is empty or holds whitespace (TREC runs cannot hold it)")
    if out.queries.setdefault(qid, qtext) != qtext:
        raise InputError(f"{where}: query {qid!r} has two texts ({out.queries[qid]!r} and {qtext!r})")
    listed = _first(record, _LIST)
    items = listed if isinstance(listed, list) else [record]
    judged = out.qrels.setdefault(qid, {})
    for item in items:
        docid, grade = _passage(out, item if isinstance(item, dict) else {"text": item}, where,
                                nested=items is listed)
        judged[docid] = max(grade, judged.get(docid, grade))


def _passage(out: DMerit, item: dict, where: str, nested: bool) -> tuple[str, int]:
    """The passage of one evidence entry: (docid, grade), its text added to the corpus."""
    text, title = _first(item, _TEXT), _first(item, _TITLE) or ""
    pid = _first(item, _PID + (("id", "_id") if nested else ()))
    if text is not None and not isinstance(text, str) or not isinstance(title, str):
        raise InputError(f"{where}: the passage and its article title must be strings")
    if pid is None and not (text or "").strip():
        raise InputError(f"{where}: an evidence entry with neither a passage id ({', '.join(_PID)}) nor its text "
                        f"({', '.join(_TEXT)})")
    docid = "dm" + _digest(title, text)[:16] if pid is None else str(pid).strip()
    if not docid or any(c.isspace() for c in docid):
        raise InputError(f"{where}: passage id {docid!r} is empty or holds whitespace (TREC runs cannot hold it)")
    if text is not None:
        if out.texts.setdefault(docid, (title, text)) != (title, text):
            raise InputError(f"{where}: passage {docid!r} appears with two different texts")
    grade = _first(item, _GRADE)
    if grade is None:
        return docid, 1
    try:
        value = float(grade)
    except (TypeError, ValueError):
        value = float("nan")
    if not value.is_integer() or not -2**31 <= value < 2**31:
        raise InputError(f"{where}: relevance {grade!r} is not an integer")
    return docid, int(value)
