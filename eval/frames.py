"""Runs and qrels as pandas DataFrames with PyTerrier's column names, and TREC files to and from them.

- a run frame: ``qid``, ``docno``, ``score``, ``rank`` (0-based, as PyTerrier numbers ranks:
  ``pyterrier.model.FIRST_RANK`` is 0) and, read from a file, ``name`` (the run's tag, the column
  PyTerrier's ``pt.io.read_results`` gives it);
- a qrels frame: ``qid``, ``docno``, ``label`` (``pt.io.read_qrels``'s columns).

``eval.evaluate`` takes both frames as they are (``eval.io.as_run``, ``eval.io.as_qrels``).
A run file's rank column is 1-based (TREC's convention); a frame's rank is the file's position
by score, 0-based: ``rank = file rank - 1`` for a file whose lines are in rank order, as every
file retr writes is. pandas is imported when one of these functions is called, never at
``import eval``.

The readers keep the file's line order and raise what :func:`eval.io.read_run` /
:func:`eval.io.read_qrels` raise (one ``EvalError`` naming ``file:line``): a run is read by pandas'
C parser when every line is a plain run line, else line by line through ``read_run``.
"""
from __future__ import annotations

import gc
import os
import re
from .errors import EvalError
from .io import _open_text, as_qrels, as_run, frame_columns, is_frame, ranked, read_qrels, read_run

RUN_FRAME = ("qid", "docno", "score", "rank")
QRELS_FRAME = ("qid", "docno", "label")


def _pandas():
    import pandas as pd

    return pd


def _ranks(pd, qids, scores) -> "object":
    """0-based ranks by score within each query, ties in row order: PyTerrier's ``add_ranks``."""
    frame = pd.DataFrame({"qid": qids, "score": scores})
    if not len(frame):
        return pd.Series([], dtype="int64")
    return frame.groupby("qid", sort=False)["score"].rank(ascending=False, method="first").astype("int64") - 1


def run_frame(run, tag: str | None = None):
    """A run in any form :func:`eval.io.as_run` takes (``{qid: {docid: score}}``, hit lists, a
    frame) as a run frame, each query's documents in trec_eval's order (score descending, then
    docid descending) and ranked 0.. in it; ``tag`` adds a ``name`` column."""
    pd = _pandas()
    rows = [(q, d, s) for q, docs in as_run(run).items() for d, s in ranked(docs)]
    out = pd.DataFrame({"qid": pd.Series([r[0] for r in rows], dtype=object).astype(str),
                        "docno": pd.Series([r[1] for r in rows], dtype=object).astype(str),
                        "score": pd.Series([r[2] for r in rows], dtype="float64")})
    out["rank"] = out.groupby("qid", sort=False).cumcount().astype("int64") if rows else pd.Series([], dtype="int64")
    if tag is not None:
        out["name"] = tag
    return out


def qrels_frame(qrels):
    """Judgments (``{qid: {docid: grade}}`` or a frame) as a qrels frame, in their order."""
    pd = _pandas()
    rows = [(q, d, g) for q, docs in as_qrels(qrels).items() for d, g in docs.items()]
    return pd.DataFrame({"qid": pd.Series([r[0] for r in rows], dtype=object).astype(str),
                         "docno": pd.Series([r[1] for r in rows], dtype=object).astype(str),
                         "label": pd.Series([r[2] for r in rows], dtype="int64")})


# What Python's str.split() splits on that pandas' whitespace tokenizer (spaces, tabs, line ends)
# does not, NUL, and a byte-order mark pandas would drop: a file holding any is read the way
# read_run reads it. Searched one character at a time: str's substring search is ~10x a regex class.
_ODD_CHARS = ("\x00\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
              "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff")
# Q0 and the rank are not used: as categories (a few values each) they cost less than strings. Not the
# ids or the tag: a category's values are converted ("001" would become 1.0).
_RUN_DTYPES = {0: str, 1: "category", 2: str, 3: "category", 4: "float64", 5: str}


def _run_source(path):
    """The file as pandas should read it, with its bytes: a BytesIO of plain ASCII, else a StringIO
    of the text as read_run decodes it (UTF-8 with replacement); gunzipped. (None, None) to leave the
    file to read_run: unreadable, a corrupt gzip, empty, or holding a character pandas splits on
    otherwise than str.split() (see _ODD_CHARS)."""
    import gzip
    import io
    import zlib

    try:
        with open(path, "rb") as fh:
            data = fh.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        return None, None
    if data.isascii():   # most runs: pandas reads the bytes as they are (no decoding, no copy)
        odd = any(c.encode() in data for c in _ODD_CHARS[:7])
        return (None, None) if odd or not data else (io.BytesIO(data), data)
    text = data.decode("utf-8", errors="replace")
    return (None, None) if any(c in text for c in _ODD_CHARS) else (io.StringIO(text), data)


def _fast_run_frame(pd, path):
    """The run frame read by pandas' C parser, or None when the file holds anything read_run would
    refuse or read another way: then the caller reads it line by line, with read_run's errors.

    Taken here: six whitespace-separated fields on every non-blank line, a finite score pandas
    reads as Python's float() does (pandas 3 parses decimals exactly; NaN, ``1_0``, other scripts'
    digits make it fail, and a TRUE/false it reads as 1/0 is looked for), no document twice for a
    query. Hand-written checks around pandas' reader: it has no strict column count or
    float()-equivalent mode of its own."""
    import csv

    import numpy as np

    source, data = _run_source(path)
    if source is None:
        return None
    try:
        raw = pd.read_csv(source, sep=r"\s+", header=None, engine="c", quoting=csv.QUOTE_NONE,
                          na_filter=False, dtype=_RUN_DTYPES)
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None   # a line of 7+ fields, a score that is not a number, nothing but blank lines
    if raw.shape[1] != 6 or str(raw[4].dtype) != "float64" or not len(raw) or (raw[5].str.len() == 0).any():
        return None   # a line of fewer fields (a comment, a missing tag)
    scores = raw[4].to_numpy()
    if not np.isfinite(scores).all():
        return None   # NaN or infinity
    if ((scores == 0) | (scores == 1)).any() and any(w in data.lower() for w in (b"true", b"false")):
        return None   # perhaps a boolean pandas took for a number
    qcodes, qids = pd.factorize(raw[0])
    dcodes, docs = pd.factorize(raw[2])
    if pd.Series(qcodes.astype("int64") * len(docs) + dcodes).duplicated().any():
        return None   # a document listed twice for a query
    out = pd.DataFrame({"qid": raw[0], "docno": raw[2], "score": raw[4]})
    ranks = _sorted_ranks(qcodes, len(qids), scores)
    out["rank"] = _ranks(pd, out["qid"], out["score"]) if ranks is None else pd.Series(ranks, dtype="int64")
    out["name"] = raw[5]
    return out


def _sorted_ranks(codes, n_queries: int, scores):
    """Ranks as :func:`_ranks` gives them, without a groupby, for a run whose queries each fill one
    block of lines with scores that never rise (every run retr or trec_eval-era tools write): the
    position in the block. None for any other run."""
    import numpy as np

    starts = np.flatnonzero(np.diff(codes)) + 1
    if len(starts) + 1 != n_queries:
        return None   # a query's lines are apart
    rising = np.diff(scores) > 0
    rising[starts - 1] = False   # a new query may start higher
    if rising.any():
        return None
    first = np.zeros(len(codes), dtype="int64")
    first[starts] = starts
    return np.arange(len(codes), dtype="int64") - np.maximum.accumulate(first)


def read_run_frame(path: str | os.PathLike, strict: bool = True):
    """A TREC run file (plain or gzip) as a run frame with its tag in ``name``, rows in file order;
    ``rank`` is recomputed from the scores (0-based, ties in file order) since trec_eval ignores
    the file's. Errors as :func:`eval.io.read_run` raises them.

    pandas' C parser reads the file when every line is a plain six-field run line (most files;
    ~10x faster on a million lines); anything else (comments, extra fields, a bad score, a
    duplicate) is read by :func:`eval.io.read_run`, so errors keep its ``file:line``. Both give the
    same frame (tests/retrieval/test_frames.py compares them)."""
    pd = _pandas()
    fast = _fast_run_frame(pd, path)
    return fast if fast is not None else _slow_run_frame(pd, path, strict)


def _slow_run_frame(pd, path, strict: bool):
    """read_run_frame line by line: read_run's validation, then the lines it took in order."""
    read_run(path, strict)  # validation: columns, numbers, duplicates, with file:line
    enabled = gc.isenabled()
    gc.disable()  # a million split lines made the cyclic GC run over and over (8 s instead of 3.7 s)
    try:
        with _open_text(path) as fh:  # the lines read_run took, in order (it skips the same ones)
            rows = [p for p in map(str.split, fh) if len(p) == 6 or (p and not p[0].startswith("#"))]
    finally:
        if enabled:
            gc.enable()
    qids, _q0, docnos, _rank, scores, names = zip(*(r[:6] for r in rows)) if rows else ((),) * 6
    out = pd.DataFrame({"qid": pd.Series(qids, dtype=object).astype(str),
                        "docno": pd.Series(docnos, dtype=object).astype(str),
                        "score": pd.Series(scores, dtype=object).astype("float64")})
    out["rank"] = _ranks(pd, out["qid"], out["score"])
    out["name"] = pd.Series(names, dtype=object).astype(str)
    return out


def _words(series, what: str) -> list:
    """A column as a list of strings, each one word (a TREC run's fields are split on whitespace)."""
    values = list(map(str, series.tolist()))   # the values iteration gives; a Series' own iteration is ~10x slower
    # one regular-expression scan of them all: pandas' str.contains went value by value (1 s a million)
    if values and (min(map(len, values)) == 0 or re.search(r"\s", "".join(values))):
        raise EvalError(f"a run's {what} must be one word without whitespace")
    return values


def write_run_frame(frame, path: str | os.PathLike, tag: str | None = None, digits: int | None = None) -> int:
    """Write a run frame as a TREC run ``qid Q0 docno rank+1 score tag``, rows in the frame's
    order; returns the lines written. Columns: PyTerrier's (``qid``, ``docno``, ``score``) or
    ir_measures' (``query_id``, ``doc_id``, ``score``); ``rank`` (0-based) when present, else
    ranks by score as PyTerrier assigns them. The tag is ``tag``, else the frame's ``name``
    column, else ``retr``. Scores are written as Python's shortest exact form (``repr``), or
    with ``digits`` decimals (``digits=6`` is ``retr search``'s ``%.6f``, so a run it wrote
    comes back byte for byte)."""
    if not is_frame(frame):
        raise EvalError(f"write_run_frame takes a pandas DataFrame, got {type(frame).__name__}")
    if digits is not None and (isinstance(digits, bool) or not isinstance(digits, int) or digits < 0):
        raise EvalError(f"digits must be a non-negative integer, got {digits!r}")
    import numpy as np

    pd = _pandas()
    qcol, dcol, scol = frame_columns(frame, "run")
    qids, docnos = _words(frame[qcol], "query ids"), _words(frame[dcol], "document ids")
    scores = pd.to_numeric(frame[scol], errors="coerce")
    if (scores.isna() & frame[scol].notna()).any() or pd.DataFrame({"q": qids, "d": docnos}).duplicated().any():
        as_run(frame)  # raises the evaluator's own message: a score that is not a number, a document listed twice
    values = scores.to_numpy(dtype="float64")
    if not np.isfinite(values).all():
        raise EvalError("a run DataFrame's scores must be finite numbers (NaN or infinity found)")
    if "rank" in frame.columns:
        ranks = pd.to_numeric(frame["rank"], errors="coerce").to_numpy(dtype="float64")
        if len(ranks) and not ((ranks >= 0) & (ranks % 1 == 0)).all():
            raise EvalError("a run DataFrame's rank column must hold integers from 0 (PyTerrier's ranks)")
        ranks = ranks.astype("int64")
    else:
        ranks = _ranks(pd, qids, values).to_numpy()
    if tag is not None:
        tags = _words(pd.Series([tag] * len(qids), dtype=object), "tag")
    else:
        tags = _words(frame["name"], "tag") if "name" in frame.columns else ["retr"] * len(qids)
    fmt = repr if digits is None else (lambda x: f"{x:.{digits}f}")
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(f"{q} Q0 {d} {r} {fmt(s)} {t}\n"
                      for q, d, r, s, t in zip(qids, docnos, (ranks + 1).tolist(), values.tolist(), tags))
    return len(qids)


def read_qrels_frame(path: str | os.PathLike):
    """A qrels file (TREC ``qid 0 docid rel`` or BEIR tsv; plain or gzip) as a qrels frame, each
    query's judgments in file order. Errors as :func:`eval.io.read_qrels` raises them."""
    return qrels_frame(read_qrels(path))


def write_qrels_frame(frame, path: str | os.PathLike) -> int:
    """Write judgments (a qrels frame, or ``{qid: {docid: grade}}``) as TREC qrels
    ``qid 0 docno label``, grouped by query in order of first appearance; returns the lines written."""
    judged = as_qrels(frame)
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for qid, docs in judged.items():
            for docid, label in docs.items():
                fh.write(f"{qid} 0 {docid} {label}\n")
                n += 1
    return n


__all__ = ["RUN_FRAME", "QRELS_FRAME", "run_frame", "qrels_frame", "read_run_frame", "write_run_frame",
           "read_qrels_frame", "write_qrels_frame"]
