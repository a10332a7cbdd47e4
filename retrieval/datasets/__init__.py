"""Collections by name: ``irds:NAME`` (an ir_datasets dataset, read from its local cache only:
:mod:`retrieval.datasets.irds` holds the offline guard) and ``dmerit:PATH`` (D-MERIT's evaluation set,
:mod:`retrieval.datasets.dmerit`). Their documents go out as raw records that :mod:`retrieval.collections`
validates exactly as it validates a file's lines, so the same document gives the same Document and the same
errors either way; their queries as (qid, text) pairs; their judgments as ``{qid: {docid: grade}}``
(:func:`qrels`), which the CLI hands to the evaluator: ``eval/`` reads runs and qrels files only.

This package imports nothing of ``eval`` (the corpus of ``retr index`` never passes through the evaluator:
tests/test_layout.py) and nothing of ``retrieval`` but its errors; ``qrels.read_qrels`` (a file or a name)
is the one part that calls the evaluator's file reader."""
from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Dict, Optional, Tuple

from indexes.errors import InputError

from . import dmerit, irds

# (position, docid, title, text, metadata): what collections.read_corpus checks, per document
Record = Tuple[int, str, str, str, dict]

PREFIXES = (irds.PREFIX, dmerit.PREFIX)


def is_named(source) -> bool:
    """Whether ``source`` names a collection (``irds:NAME`` or ``dmerit:PATH``) rather than a file."""
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        return isinstance(text, str) and text.startswith(PREFIXES)
    return False


def records(source) -> Iterator[Record]:
    """The documents of a named collection, in its order, as raw records."""
    if dmerit.path_of(source) is not None:
        for n, (docid, title, text) in enumerate(dmerit.read(source).passages(), 1):
            yield n, docid, title, text, {}
        return
    ds = irds.dataset(source, "docs")
    name = irds.name_of(source)
    for n, doc in enumerate(irds.guarded(name, "docs", ds.docs_iter), 1):
        yield (n,) + _fields(doc)


def _fields(doc) -> Tuple[str, str, str, dict]:
    """An ir_datasets document as (docid, title, text, metadata): ``title`` and ``text`` where its type has
    them (else its ``default_text()``), a ``metadata`` mapping merged in, and its other plain fields (strings,
    numbers, lists and mappings of them) as metadata; anything else (bytes, dates) is left out."""
    fields = doc._asdict()
    docid = str(fields.pop("doc_id"))
    title = fields.pop("title", "") or ""
    text = fields.pop("text") if "text" in fields else doc.default_text()
    meta = dict(fields.pop("metadata", None) or {})
    meta.update({k: v for k, v in fields.items() if _plain(v)})
    return docid, str(title), "" if text is None else str(text), meta


def _plain(v) -> bool:
    if v is None or isinstance(v, (str, bool, int)):
        return True
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, (list, tuple)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain(x) for k, x in v.items())
    return False


def count(source) -> Optional[int]:
    """The collection's document count where ir_datasets knows it without reading the documents (its
    metadata: a progress bar's total, not a check); None otherwise. Errors are left to the read itself."""
    name = irds.name_of(source)
    if name is None:
        return None
    try:
        ds = irds.dataset(source, "docs")
        with irds.offline(name, "docs"):
            n = ds.docs_count()
    except InputError:
        return None
    return int(n) if isinstance(n, int) else None


def queries(source) -> list:
    """``[(qid, text), ...]`` of a named collection."""
    if dmerit.path_of(source) is not None:
        return list(dmerit.read(source).queries.items())
    return irds.read_queries(source)


def qrels(source) -> Dict[str, Dict[str, int]]:
    """``{qid: {docid: grade}}`` of a named collection (its judgments, for the evaluator)."""
    if dmerit.path_of(source) is not None:
        return dmerit.read_qrels(source)
    return irds.read_qrels(source)


def split_qrels(source, split: str) -> str:
    """``--split test`` for ``irds:beir/scifact``: the dataset ``irds:beir/scifact/test``."""
    if dmerit.path_of(source) is not None:
        raise InputError("D-MERIT has one set of queries and no splits; leave --split out", source)
    return f"{str(source).rstrip('/')}/{split}"
