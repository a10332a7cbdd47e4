"""Streaming readers for corpora and queries, with validation.

Formats (each may be gzipped, ``.gz``):
- BEIR: a folder holding ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/*.tsv``;
- a folder of documents (one without ``corpus.jsonl``/``corpus.tsv``), or one document file: .txt, .md,
  .html/.htm and .pdf files, read by :mod:`retrieval.documents` (ids are relative paths, metadata the
  path, title, modification time, size and sha256); a file that cannot be read is a warning, not an
  error; such documents are chunked by default (:mod:`retrieval.chunking`);
- JSONL documents ``{"_id"|"id"|"docid"|"doc_id", "title"?, "text"|"contents"|"body", "metadata"?}``;
- TSV documents ``docid<TAB>text`` or ``docid<TAB>title<TAB>text``;
- queries as BEIR JSONL ``{"_id", "text"}``, TSV ``qid<TAB>text``, or TREC topics (``<top><num>…<title>…``);
- collections by name instead of a path: ``irds:NAME`` (an ir_datasets dataset, read from its local cache,
  never downloaded: ``irds:beir/scifact`` for the documents, ``irds:beir/scifact/test`` for a split's queries
  and qrels) and ``dmerit:PATH`` (D-MERIT's evaluation set); ``retrieval.datasets`` hands their documents over
  as raw records, checked below like a file's lines (the document's position standing for the line).

Every problem is reported as an InputError naming the file and line: a
malformed line, a missing id, a duplicate id, an id with whitespace (document
or query: a TREC run could not hold it), empty text, bad UTF-8 or a lone
surrogate escape, a missing path, NaN/Infinity (Python's json reads them; JSON
has no such numbers), metadata that is not an object or holds a number that is
not finite or beyond a double's range (:func:`check_metadata`). Corpora are
streamed; only the set of seen ids is kept in memory.

Over-long passages are refused, not truncated: a document whose title and text
together exceed ``MAX_CONTENTS_CHARS`` (20,000,000 UTF-16 code units, the
longest string Anserini's JSON reader accepts), or whose id exceeds Lucene's
32,766 UTF-8 bytes for one term, fails the read with its line number.
Truncating would index a different passage than the document store holds.
"""
from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from indexes.errors import InputError, ParameterError
from indexes.lucene import MAX_CONTENTS_CHARS, MAX_DOCID_BYTES
from retrieval.types import Document, Query, contents, finite_number

_ID_KEYS = ("_id", "id", "docid", "doc_id")
_SPACE = re.compile(r"\s")
_TEXT_KEYS = ("text", "contents", "body")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _open_lines(path: Path) -> Iterator[Tuple[int, str]]:
    """Yield (line number, decoded line) with a clear error on bad UTF-8."""
    if not path.exists():
        raise InputError("no such file or folder", path)
    if path.is_dir():
        raise InputError("is a folder, expected a file", path)
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                try:
                    yield n, raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise InputError(f"invalid UTF-8 at byte {e.start} of the line", path, n) from None
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise InputError(f"cannot read ({e})", path) from None


_CORPUS_FILES = ("corpus.jsonl", "corpus.jsonl.gz", "corpus.tsv", "corpus.tsv.gz", "collection.tsv")


def resolve_corpus(path: Path | str) -> Path:
    """The corpus file of ``path`` (a BEIR folder's ``corpus.jsonl``, ...), or ``path`` itself: a
    corpus file, a document file or a folder of documents (:func:`is_documents`)."""
    path = Path(path)
    if path.is_dir():
        for name in _CORPUS_FILES:
            if (path / name).exists():
                return path / name
        if any((path / n).exists() for n in ("queries.jsonl", "queries.jsonl.gz", "qrels")):
            # a BEIR folder that lacks its corpus: not a folder of documents (its README would be one)
            raise InputError("folder has queries or qrels (BEIR layout) but no corpus.jsonl or corpus.tsv", path)
        return path
    if not path.exists():
        raise InputError("no such file or folder", path)
    return path


def is_documents(path) -> bool:
    """Whether ``path`` is read as documents (:mod:`retrieval.documents`): a folder without a
    corpus file, or one .txt/.md/.html/.htm/.pdf file."""
    from retrieval import datasets
    from retrieval.documents import is_document_file

    if not isinstance(path, (str, Path)) or datasets.is_named(path):
        return False
    p = resolve_corpus(path)
    return p.is_dir() or is_document_file(p)


def _base_suffix(path: Path) -> str:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return Path(name).suffix.lower()


class _NotJSON(ValueError):
    pass


def _no_constant(name: str):
    # Python's json reads NaN, Infinity and -Infinity, which JSON does not have; refuse them
    raise _NotJSON(f"{name} is not a JSON number; numbers must be finite")


def _json_object(line: str, path: Path, n: int) -> dict:
    try:
        obj = json.loads(line, parse_constant=_no_constant)
    except _NotJSON as e:
        raise InputError(f"malformed JSON ({e})", path, n) from None
    except json.JSONDecodeError as e:
        raise InputError(f"malformed JSON ({e.msg} at column {e.colno})", path, n) from None
    except ValueError as e:  # e.g. an integer over Python's 4,300-digit conversion limit
        raise InputError(f"malformed JSON ({str(e).split(':')[0]})", path, n) from None
    except RecursionError:
        raise InputError("malformed JSON (nested too deeply)", path, n) from None
    if not isinstance(obj, dict):
        raise InputError("expected a JSON object", path, n)
    if _SURROGATE_ESCAPE.search(line):  # "\ud800" alone decodes to a str that no UTF-8 writer accepts
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InputError("invalid Unicode (a \\u surrogate escape without its pair)", path, n) from None
    return obj


def _utf16_length(s: str) -> int:
    """Length in UTF-16 code units, as Java (Anserini) counts it: astral characters count twice."""
    return len(s) if s.isascii() else len(s.encode("utf-16-le")) // 2


def check_lengths(docid: str, title: str, text: str, path: Optional[Path] = None, n: Optional[int] = None) -> None:
    """Refuse a document id or passage longer than Lucene can hold (one line, with the place)."""
    if len(docid.encode("utf-8")) > MAX_DOCID_BYTES:
        raise InputError(f"document id of {len(docid.encode('utf-8')):,} bytes is longer than Lucene's limit "
                         f"of {MAX_DOCID_BYTES:,} (UTF-8)", path, n)
    chars = _utf16_length(contents(title, text))
    if chars > MAX_CONTENTS_CHARS:
        raise InputError(f"document {docid[:80]!r} is {chars:,} characters long, over the {MAX_CONTENTS_CHARS:,} "
                         f"that Lucene's indexer reads (title and text together); split or shorten it", path, n)


def check_metadata(docid: str, metadata: object, path: Optional[object] = None, n: Optional[int] = None) -> None:
    """Refuse metadata retr could not store or filter on (one line, naming the field): it is an
    object (a dict, or None for none), and every number in it, at any depth, is finite and within a
    double's range (:func:`retrieval.types.finite_number`). Every write path checks documents with it:
    the corpus readers, the Documents given to :mod:`retrieval.writer`, and so the HTTP API."""
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise InputError(f"document {docid[:80]!r}: metadata must be an object, got {type(metadata).__name__}",
                         path, n)
    todo = [(str(k), v) for k, v in metadata.items()]
    seen = set()
    while todo:
        where, v = todo.pop()
        if isinstance(v, bool) or v is None or isinstance(v, str):
            continue
        if isinstance(v, (int, float)):
            try:
                finite_number(v)
            except ValueError as e:
                raise InputError(f"document {docid[:80]!r}: metadata {where[:200]!r} holds {e}", path, n) from None
        elif isinstance(v, (dict, list, tuple)):
            if id(v) in seen:
                continue
            seen.add(id(v))
            items = v.items() if isinstance(v, dict) else enumerate(v)
            todo.extend((f"{where}.{k}" if isinstance(v, dict) else f"{where}[{k}]", x) for k, x in items)


def _first(obj: dict, keys) -> Optional[object]:
    for k in keys:
        if k in obj:
            return obj[k]
    return None


EMPTY_POLICIES = ("error", "skip", "keep")


def _empty_document(docid: str, path: Path, line: int) -> ParameterError:
    e = ParameterError("{_at}: document {_docid!r} has empty text ({empty=skip} drops such documents)",
                       _at=f"{path}:{line}", _docid=docid)
    e.path, e.line = path, line
    return e


def _file_records(path: Path) -> Iterator[Tuple[int, str, str, str, object]]:
    """(line number, docid, title, text, metadata) of each document line of a corpus file, parsed."""
    suffix = _base_suffix(path)
    for n, line in _open_lines(path):
        if not line.strip():
            continue
        if suffix == ".tsv":
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) == 2:
                docid, title, text = parts[0], "", parts[1]
            elif len(parts) == 3:
                docid, title, text = parts
            else:
                raise InputError(f"expected 2 or 3 tab-separated columns, found {len(parts)}", path, n)
            meta: object = {}
        else:
            obj = _json_object(line, path, n)
            docid = _first(obj, _ID_KEYS)
            if docid is None:
                raise InputError("document has no '_id' (or 'id'/'docid') field", path, n)
            text = _first(obj, _TEXT_KEYS)
            title = obj.get("title") or ""
            if text is not None and not isinstance(text, str) or not isinstance(title, str):
                raise InputError("'text' and 'title' must be strings", path, n)
            text = text or ""
            meta = obj.get("metadata") or {}
        yield n, docid, title, text, meta


def read_corpus(path: Path | str, check_duplicates: bool = True, empty: str = "error",
                skipped: Optional[List[str]] = None, *, chunk=None, include=None,
                exclude=None) -> Iterator[Document]:
    """Stream the documents of a corpus (BEIR folder, JSONL or TSV, optionally .gz; a folder of
    .txt/.md/.html/.pdf documents, or one such file), or of a collection named ``irds:NAME``
    (ir_datasets, from its local cache) or ``dmerit:PATH`` (D-MERIT's passages): all are checked
    alike, a named collection's errors giving the document's position for the line.

    ``empty`` says what a document with neither title nor text does: ``error``
    (the default), ``skip`` (its id is appended to ``skipped``) or ``keep``. In a folder of
    documents a file without text is a warning and left out, whatever ``empty`` says.

    ``chunk`` (:func:`retrieval.chunking.resolve`): None chunks a folder of documents with the
    defaults and leaves other corpora's passages as they are; False never chunks; True, a token
    count or a :class:`retrieval.chunking.Chunking` chunks any corpus. ``include``/``exclude``:
    globs choosing the files of a folder of documents (:mod:`retrieval.documents`).
    """
    if empty not in EMPTY_POLICIES:
        raise InputError(f"unknown empty-document policy {empty!r}; choose one of {', '.join(EMPTY_POLICIES)}")
    from retrieval import chunking, datasets

    documents = False
    if datasets.is_named(path):
        where, records = str(path), datasets.records(path)
    else:
        where = resolve_corpus(path)
        documents = is_documents(where)
        if documents:
            from retrieval import documents as docs_mod

            single = None if where.is_dir() else where
            records = docs_mod.records(where, include, exclude, single=single)
        else:
            records = _file_records(where)
    if (include or exclude) and not (documents and where.is_dir()):
        raise ParameterError("{include} and {exclude} choose the files of a folder of documents; {_w} is not one",
                             _w=str(where))
    chunker = None
    plan = chunking.resolve(chunk, documents)
    if plan is not None:
        chunker = chunking.Chunker(plan)
    return _checked_records(records, where, check_duplicates, empty, skipped, chunker, documents)


def _checked_records(records, where, check_duplicates: bool, empty: str, skipped: Optional[List[str]],
                     chunker, documents: bool) -> Iterator[Document]:
    from retrieval.chunking import chunk_document

    seen: set = set()
    read = 0
    for n, docid, title, text, meta in records:
        docid = str(docid).strip()
        if not docid:
            raise InputError("empty document id", where, n)
        if _SPACE.search(docid):
            raise InputError(f"document id {docid[:80]!r} contains whitespace (TREC runs cannot hold it)", where, n)
        if chunker is None and (2 * (len(title) + 1 + len(text)) > MAX_CONTENTS_CHARS
                                or 4 * len(docid) > MAX_DOCID_BYTES):
            check_lengths(docid, title, text, where, n)
        if not (text.strip() or title.strip()) and empty != "keep":
            if empty == "error":
                raise _empty_document(docid, where, n)
            if skipped is not None:
                skipped.append(docid)
            continue
        if meta and isinstance(meta, dict):
            check_metadata(docid, meta, where, n)
        if check_duplicates:
            if docid in seen:
                raise InputError(f"duplicate document id {docid!r}", where, n)
            seen.add(docid)
        read += 1
        meta = meta if isinstance(meta, dict) else {}
        if chunker is None:
            yield Document(docid=docid, text=text, title=title, metadata=meta)
            continue
        for pid, ptitle, ptext, pmeta in chunk_document(chunker, docid, title, text, meta):
            if check_duplicates:
                if pid in seen:
                    raise InputError(f"passage id {pid!r} of document {docid!r} is also a document's id", where, n)
                seen.add(pid)
            if 2 * (len(ptitle) + 1 + len(ptext)) > MAX_CONTENTS_CHARS or 4 * len(pid) > MAX_DOCID_BYTES:
                check_lengths(pid, ptitle, ptext, where, n)
            yield Document(docid=pid, text=ptext, title=ptitle, metadata=pmeta)
    if documents and not read:
        raise InputError("no readable documents (.txt, .md, .html, .htm or .pdf files) found", where)


def count_lines(path: Path | str) -> Optional[int]:
    """Cheap line count of an uncompressed corpus file, for progress bars (a named collection: its
    document count where known)."""
    from retrieval import datasets

    if datasets.is_named(path):
        return datasets.count(path)
    path = resolve_corpus(path)
    if path.name.endswith(".gz") or is_documents(path):
        return None
    with open(path, "rb") as f:
        return sum(buf.count(b"\n") for buf in iter(lambda: f.read(1 << 20), b""))


_TREC_TOPIC = re.compile(r"<top>(.*?)</top>", re.S | re.I)
_TREC_NUM = re.compile(r"<num>\s*(?:Number:)?\s*(\S+)", re.I)
_TREC_TITLE = re.compile(r"<title>\s*(?:Topic:)?(.*?)(?=<\w+>|</top>|$)", re.S | re.I)


def resolve_queries(path: Path | str) -> Path:
    path = Path(path)
    if path.is_dir():
        for name in ("queries.jsonl", "queries.jsonl.gz", "queries.tsv", "topics.txt"):
            if (path / name).exists():
                return path / name
        raise InputError("folder has no queries.jsonl", path)
    if not path.exists():
        raise InputError("no such file or folder", path)
    return path


def read_queries(path: Path | str) -> List[Query]:
    """Read queries from BEIR JSONL, TSV or TREC topics (optionally .gz), or those of a collection named
    ``irds:NAME`` (e.g. ``irds:beir/scifact/test``) or ``dmerit:PATH``."""
    from retrieval import datasets

    if datasets.is_named(path):
        named: List[Query] = []
        named_ids: set = set()
        for n, (qid, qtext) in enumerate(datasets.queries(path), 1):
            _add_query(named, named_ids, str(qid).strip(), qtext, str(path), n)
        return _nonempty(named, str(path))
    path = resolve_queries(path)
    suffix = _base_suffix(path)
    out: List[Query] = []
    seen: set = set()
    lines = _open_lines(path)
    if suffix not in (".jsonl", ".json", ".tsv", ".txt"):
        suffix = ".txt"
    if suffix == ".txt":
        text = "".join(line for _, line in lines)
        if "<top>" in text.lower():
            for block in _TREC_TOPIC.findall(text):
                num, title = _TREC_NUM.search(block), _TREC_TITLE.search(block)
                if not num or not title:
                    raise InputError("TREC topic without <num> or <title>", path)
                qid, qtext = num.group(1), " ".join(title.group(1).split())
                _add_query(out, seen, qid, qtext, path, None)
            return _nonempty(out, path)
        lines = enumerate(text.splitlines(True), 1)
        suffix = ".tsv"
    for n, line in lines:
        if not line.strip():
            continue
        if suffix == ".tsv":
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) != 2:
                raise InputError(f"expected 'qid<TAB>text', found {len(parts)} columns", path, n)
            qid, qtext = parts
        else:
            obj = _json_object(line, path, n)
            qid = _first(obj, ("_id", "id", "qid", "query_id"))
            qtext = _first(obj, ("text", "query", "title"))
            if qid is None:
                raise InputError("query has no '_id' field", path, n)
            if not isinstance(qtext, str):
                raise InputError("query has no 'text' string", path, n)
        _add_query(out, seen, str(qid).strip(), qtext, path, n)
    return _nonempty(out, path)


def _add_query(out, seen, qid, text, path, n):
    if not qid:
        raise InputError("empty query id", path, n)
    if _SPACE.search(qid):
        raise InputError(f"query id {qid[:80]!r} contains whitespace (TREC runs cannot hold it)", path, n)
    if qid in seen:
        raise InputError(f"duplicate query id {qid!r}", path, n)
    if not text.strip():
        raise InputError(f"query {qid!r} has empty text", path, n)
    seen.add(qid)
    out.append(Query(qid, text.strip()))


def _nonempty(out, path):
    if not out:
        raise InputError("no queries found", path)
    return out


def split_qrels(queries_path: Path | str, split: str) -> Path:
    """The BEIR qrels file for ``split`` that sits beside a queries file or in a BEIR folder; for a named
    collection, its split (``irds:beir/scifact`` -> ``irds:beir/scifact/test``)."""
    from retrieval import datasets

    if datasets.is_named(queries_path):
        return datasets.split_qrels(queries_path, split)
    p = Path(queries_path)
    root = p if p.is_dir() else p.parent
    for name in (f"{split}.tsv", f"{split}.tsv.gz"):
        if (root / "qrels" / name).exists():
            return root / "qrels" / name
    raise InputError(f"no qrels/{split}.tsv next to the queries", root)

