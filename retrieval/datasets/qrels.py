"""Relevance judgments from a file or a collection's name, for the library and the CLI: a collection named
``irds:NAME`` or ``dmerit:PATH`` is read here (:mod:`retrieval.datasets`), anything else by the evaluator's
file reader (TREC or BEIR qrels, ``subtopics:FILE``). The evaluator itself reads files only, so the CLI
reads ``--qrels`` through this function and hands the evaluator the judgments. Kept apart from the
package's ``__init__`` so that reading a corpus (``retrieval.collections``) imports no evaluator."""
from __future__ import annotations

import os
from typing import Dict

from pathlib import Path

from indexes.errors import InputError

from . import is_named, qrels


def looks_like_test(path: str | os.PathLike) -> bool:
    """Whether a qrels file is named like a test split (``test.tsv``): tuning and training refuse it, as
    test queries are for scoring, never for choosing settings."""
    return "test" in Path(path).name.lower()


def read_qrels(source: str | os.PathLike) -> Dict[str, Dict[str, int]]:
    """``{qid: {docid: grade}}`` of a qrels file (TREC or BEIR, header line allowed; ``subtopics:FILE``
    for diversity judgments) or of a named collection; the evaluator's errors become :class:`InputError`
    (one line at the CLI)."""
    if is_named(source):
        return qrels(source)
    from eval.errors import EvalError
    from eval.io import read_qrels as read_file

    try:
        return read_file(source)
    except EvalError as e:
        raise InputError(str(e)) from None
