"""Property: the corpus and query readers either parse a file or raise InputError, never anything
else, whatever the bytes (issue #15). What they return is what the rest of retr can store: unique ids
without whitespace, text that encodes as UTF-8, JSON-serialisable metadata."""
from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from indexes.errors import InputError
from retrieval.collections import read_corpus, read_queries

# Random every run (a fixed seed missed a lone surrogate that random runs found each time); a failure
# prints its example and a @reproduce_failure blob. No example database: nothing is written to the tree.
SETTINGS = settings(max_examples=600, deadline=None, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow])

# Text with whitespace of every kind, controls, astral characters and lone surrogates (as JSON escapes).
TEXT = st.text(st.characters(categories=["L", "N", "P", "Z", "Cc", "Cs", "So"]), max_size=12)
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=8)


def weighted(*choices):
    """One of several strategies, each drawn in proportion to its weight (st.one_of drops repeats)."""
    return st.sampled_from([s for s, w in choices for _ in range(w)]).flatmap(lambda s: s)


# Mostly well-formed files, so that the readers get past the first line and meet the odd value.
WORD = st.sampled_from(["", " ", "q 1", "d\u00a01", "\ud800", "a\udfffb", "\U0001F600", "\u3000", "#", "1e400"])
GOOD_ID = st.integers(0, 30).map(lambda i: f"d{i}")
GOOD_TEXT = st.text(st.characters(categories=["L", "N", "Zs", "So"]), min_size=1, max_size=16)
ID = weighted((GOOD_ID, 8), (WORD, 1), (TEXT, 1))
TEXT_VALUE = weighted((GOOD_TEXT, 6), (WORD, 1), (TEXT, 1))
RECORD = st.fixed_dictionaries({"_id": weighted((ID, 10), (JSON, 1)), "text": weighted((TEXT_VALUE, 10), (JSON, 1))},
                               optional={"title": weighted((TEXT_VALUE, 5), (JSON, 1)), "metadata": JSON})
KEYS = ["_id", "id", "docid", "doc_id", "qid", "query_id", "text", "contents", "body", "title", "query", "metadata"]
LOOSE = st.dictionaries(st.sampled_from(KEYS), st.one_of(TEXT_VALUE, JSON), max_size=4)
TOKEN = st.sampled_from(["<top>", "</top>", "<num>", "<title>", "Number:", "{", '"_id"', "\r", "\x00", "\t"])


def _lines(rows, end):
    return ("\n".join(rows) + end).encode("utf-8", "surrogatepass")


@st.composite
def json_lines(draw):
    rows = draw(st.lists(weighted((RECORD, 12), (LOOSE, 1), (JSON, 1)).map(json.dumps), min_size=1, max_size=5))
    return _lines(rows, draw(st.sampled_from(["", "\n", "\n\n"])))


@st.composite
def tsv_lines(draw):
    cols = weighted((st.lists(TEXT_VALUE, min_size=1, max_size=2), 10), (st.lists(TOKEN, max_size=3), 1))
    rows = draw(st.lists(st.tuples(ID, cols).map(lambda r: "\t".join([r[0], *r[1]])), min_size=1, max_size=5))
    return _lines(rows, draw(st.sampled_from(["", "\n", "\r\n"])))


@st.composite
def topics(draw):
    top = st.tuples(ID, TEXT_VALUE, st.sampled_from(["", "<desc> more\n"])).map(
        lambda t: f"<top>\n<num> Number: {t[0]}\n<title> {t[1]}\n{t[2]}</top>")
    return _lines(draw(st.lists(weighted((top, 4), (TOKEN, 1)), min_size=1, max_size=4)), "\n")


# (bytes, the suffix that suits them)
CONTENT = weighted((st.tuples(st.binary(max_size=300), st.sampled_from([".jsonl", ".tsv", ".txt"])), 1),
                   (json_lines().map(lambda b: (b, ".jsonl")), 3), (tsv_lines().map(lambda b: (b, ".tsv")), 3),
                   (topics().map(lambda b: (b, ".txt")), 2))


@st.composite
def stored(draw):
    """(bytes, suffix, gzipped): the bytes as they are, gzipped, or gzipped and then damaged; the suffix
    that suits them, mostly, else any."""
    data, suffix = draw(CONTENT)
    suffix = draw(st.sampled_from([suffix] * 4 + [".jsonl", ".tsv", ".json", ".txt", ".dat"]))
    how = draw(st.sampled_from(["plain"] * 6 + ["gzip", "damaged-gzip"]))
    if how == "plain":
        return data, suffix, False
    packed = bytearray(gzip.compress(data))
    if how == "damaged-gzip":
        i = draw(st.integers(0, len(packed) - 1))
        packed[i] ^= draw(st.integers(1, 255))
    return bytes(packed), suffix, True


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("property")


def _check_storable(ids, texts):
    assert len(set(ids)) == len(ids)
    for i in ids:
        assert i and not any(c.isspace() for c in i), repr(i)
        i.encode("utf-8")
    for t in texts:
        t.encode("utf-8")


@pytest.mark.filterwarnings("ignore::retrieval.documents.DocumentWarning")  # a corpus.txt that is not UTF-8
@SETTINGS
@given(file=stored(), empty=st.sampled_from(["error", "skip", "keep"]))
def test_corpus_reader_parses_or_raises_input_error(folder, file, empty):
    data, suffix, gz = file
    path = folder / ("corpus" + suffix + (".gz" if gz else ""))
    path.write_bytes(data)
    try:
        docs = list(read_corpus(path, empty=empty))
    except InputError:
        event("refused")
        return
    event("parsed" if docs else "parsed, empty")
    _check_storable([d.docid for d in docs], [d.title + d.text for d in docs])
    for d in docs:
        assert isinstance(d.metadata, dict)
        json.dumps(d.metadata, ensure_ascii=False, allow_nan=False).encode("utf-8")  # strict JSON
        assert empty == "keep" or (d.title + d.text).strip()


@SETTINGS
@given(file=stored())
def test_query_reader_parses_or_raises_input_error(folder, file):
    data, suffix, gz = file
    path = folder / ("queries" + suffix + (".gz" if gz else ""))
    path.write_bytes(data)
    try:
        queries = read_queries(path)
    except InputError:
        event("refused")
        return
    event("parsed")
    assert queries
    _check_storable([q.qid for q in queries], [q.text for q in queries])
    assert all(q.text.strip() for q in queries)


# ------------------------------------------------------------------ a folder of documents, chunking
NAME = st.text(st.sampled_from(list("ab %#é.-_") + ["\u3000", "\U0001F600"]), min_size=1, max_size=6)
DOC_SUFFIX = st.sampled_from([".md", ".txt", ".html", ".htm", ".pdf", ".MD", ".jsonl", ""])
DOC_BYTES = weighted((GOOD_TEXT.map(lambda s: s.encode("utf-8")), 4), (st.binary(max_size=64), 2),
                     (TEXT.map(lambda s: s.encode("utf-8", "surrogatepass")), 1),
                     (st.just(b"%PDF-1.4\n%%EOF"), 1), (st.just(b"<html><title>t</title><p>x</p>"), 1))


@settings(max_examples=150, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.tuples(NAME, DOC_SUFFIX, DOC_BYTES, st.booleans()), min_size=1, max_size=5),
       chunk=st.sampled_from([None, False, 16]))
def test_document_folder_reader_parses_or_raises_input_error(tmp_path_factory, files, chunk):
    import warnings

    from retrieval.documents import DocumentWarning

    root = tmp_path_factory.mktemp("docfolder")
    for name, suffix, data, nested in files:
        if name.strip(".") == "" or name.startswith("."):
            continue
        p = (root / "sub" / (name + suffix)) if nested else root / (name + suffix)
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            docs = list(read_corpus(root, chunk=chunk))
        except InputError:
            event("refused")
            return
    assert all(issubclass(w.category, DocumentWarning) for w in caught), [str(w.message) for w in caught]
    event("parsed")
    assert docs
    _check_storable([d.docid for d in docs], [d.title + d.text for d in docs])
    for d in docs:
        json.dumps(d.metadata, ensure_ascii=False, allow_nan=False).encode("utf-8")
        assert (root / d.metadata["path"]).is_file()


CHUNK_TEXT = st.lists(weighted((GOOD_TEXT, 6), (st.sampled_from([". ", "\n\n", "! ", " ", "\n", "-", "…"]), 3),
                               (st.text(st.characters(categories=["L", "N"]), min_size=20, max_size=80), 1)),
                      max_size=120).map("".join)


@settings(max_examples=200, deadline=None, database=None, print_blob=True)
@given(text=CHUNK_TEXT, title=st.sampled_from(["", "A title", "x " * 40]), tokens=st.integers(16, 64),
       share=st.floats(0, 0.5))
def test_chunks_are_slices_that_fit_and_lose_no_token(text, title, tokens, share):
    from retrieval.chunking import Chunker, Chunking, _tokenizer, chunk_document, token_count

    chunking = Chunking(tokens=tokens, overlap=int(tokens * share) if int(tokens * share) <= tokens // 2 else 0)
    passages = list(chunk_document(Chunker(chunking), "d", title, text, {"k": 1}))
    if not text.strip():
        assert len(passages) == (1 if title.strip() else 0)  # a title alone is one passage
        return
    starts = [m["start"] for _i, _t, _x, m in passages]
    assert starts == sorted(set(starts))
    for n, (pid, ptitle, ptext, meta) in enumerate(passages):
        assert pid == f"d#{n}" and meta["passage"] == n and meta["document"] == "d" and meta["k"] == 1
        assert text[meta["start"]:meta["end"]] == ptext and ptext.strip() == ptext
    fits = token_count([f"{t} {x}" if t else x for _i, t, x, _m in passages])
    assert max(fits) <= tokens, fits
    spans = _tokenizer(None).encode(text, add_special_tokens=False).offsets
    covered = [(m["start"], m["end"]) for _i, _t, _x, m in passages]
    for s, e in spans:  # every word-piece is in some passage
        assert any(a <= s and e <= b for a, b in covered), (s, e, covered)
