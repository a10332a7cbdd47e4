"""Corpora and queries named ``irds:NAME`` (an ir_datasets dataset, read from its local cache only; the
evaluator's :mod:`eval.irds` holds the name, the offline guard and the qrels) and ``dmerit:PATH`` (D-MERIT's
evaluation set, :mod:`eval.dmerit`), as raw records: :mod:`retrieval.collections` validates them exactly as
it validates a file's lines, so the same document gives the same Document and the same errors either way.
This module imports nothing of ``retrieval`` (collections imports it)."""
from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Optional, Tuple

from indexes.errors import InputError

# (position, docid, title, text, metadata): what collections.read_corpus checks, per document
Record = Tuple[int, str, str, str, dict]


# eval.irds.PREFIX and eval.dmerit.PREFIX, spelled here so that telling a name from a file path imports
# no evaluator (numpy and pytrec_eval, ~0.3 s); tests/retrieval/test_irds.py checks they agree
PREFIXES = ("irds:", "dmerit:")


def is_named(source) -> bool:
    """Whether ``source`` names a collection (``irds:NAME`` or ``dmerit:PATH``) rather than a file."""
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        return isinstance(text, str) and text.startswith(PREFIXES)
    return False


def _input_error(e) -> InputError:
    return InputError(str(e))


def records(source) -> Iterator[Record]:
    """The documents of a named collection, in its order, as raw records."""
    from eval import dmerit, irds
    from eval.errors import EvalError

    try:
        if dmerit.path_of(source) is not None:
            for n, (docid, title, text) in enumerate(dmerit.read(source).passages(), 1):
                yield n, docid, title, text, {}
            return
        ds = irds.dataset(source, "docs")
        name = irds.name_of(source)
        for n, doc in enumerate(irds.guarded(name, "docs", ds.docs_iter), 1):
            yield (n,) + _fields(doc)
    except EvalError as e:
        raise _input_error(e) from None


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
    from eval import irds
    from eval.errors import EvalError

    name = irds.name_of(source)
    if name is None:
        return None
    try:
        ds = irds.dataset(source, "docs")
        with irds.offline(name, "docs"):
            n = ds.docs_count()
    except EvalError:
        return None
    return int(n) if isinstance(n, int) else None


def queries(source) -> list:
    """``[(qid, text), ...]`` of a named collection."""
    from eval import dmerit, irds
    from eval.errors import EvalError

    try:
        if dmerit.path_of(source) is not None:
            return list(dmerit.read(source).queries.items())
        return irds.read_queries(source)
    except EvalError as e:
        raise _input_error(e) from None


def split_qrels(source, split: str) -> str:
    """``--split test`` for ``irds:beir/scifact``: the dataset ``irds:beir/scifact/test``."""
    from eval import dmerit

    if dmerit.path_of(source) is not None:
        raise InputError("D-MERIT has one set of queries and no splits; leave --split out", source)
    return f"{str(source).rstrip('/')}/{split}"
