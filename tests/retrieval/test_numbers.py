"""Numbers at the edge: a number retr stores (document metadata) or compares (a filter) is finite and
within a double's range (retrieval.types.finite_number). Every write path refuses others with one
InputError naming the field, and a filter with one is a FilterError, never an OverflowError."""
from __future__ import annotations

import json
import shutil

import pytest

import retrieval
from indexes.errors import InputError
from retrieval.collections import read_corpus
from retrieval.filters import FilterError, MetadataTable, matches, parse_filter
from retrieval.types import Document
from retrieval.writer import add_documents, build_index, update_documents

HUGE = 10 ** 400  # a valid JSON number, beyond a double
BAD_NUMBERS = [HUGE, -HUGE, float("nan"), float("inf"), float("-inf")]


@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=["huge", "-huge", "nan", "inf", "-inf"])
def test_parse_filter_refuses_numbers_a_double_cannot_hold(bad):
    for flt in ({"year": {"gte": bad}}, {"year": {"gt": 1, "lt": bad}}, {"year": bad}, {"year": {"eq": bad}},
                {"year": {"in": [2000, bad]}}):
        with pytest.raises(FilterError, match="'year'"):
            parse_filter(flt)
    assert parse_filter({"year": {"gte": 10 ** 300}}).conditions == (("year", "gte", 1e300),)  # in range: fine


def test_stored_numbers_beyond_a_double_do_not_break_filters():
    """A folder written before writes were checked may hold such numbers: a range or equality
    filter skips them (no condition matches them), as the plain rules say."""
    rows = [("a", {"year": 2001}), ("b", {"year": HUGE}), ("c", {"year": [float("nan"), 2003]}),
            ("d", {"year": float("inf")}), ("e", {"year": 1999}), ("f", None)]
    table = MetadataTable(rows)
    for spec in ({"year": {"gte": 2000}}, {"year": {"lt": 2002}}, {"year": 2003}, {"year": {"in": [1999, 2001]}}):
        flt = parse_filter(spec)
        want = [d for d, m in rows if matches(d, m, flt)]
        assert table.allowed(flt).docids == want, spec
    assert table.allowed(parse_filter({"year": {"gte": 2000}})).docids == ["a", "c"]


def _line(obj_text: str) -> str:
    return obj_text + "\n"


@pytest.mark.parametrize("meta,needle", [
    ('{"year": %d}' % HUGE, "'year' holds an integer beyond"),
    ('{"year": -%d}' % HUGE, "'year' holds an integer beyond"),
    ('{"score": NaN}', "NaN"),
    ('{"score": Infinity}', "Infinity"),
    ('{"tags": ["x", {"w": -Infinity}]}', "-Infinity"),
    ('{"score": 1e400}', "'score' holds Infinity"),  # valid JSON that a double cannot hold
])
def test_corpus_reader_refuses_bad_numbers_with_file_and_line(tmp_path, meta, needle):
    p = tmp_path / "corpus.jsonl"
    p.write_text(_line(json.dumps({"_id": "ok", "text": "fine", "metadata": {"year": 2000}}))
                 + _line('{"_id": "bad", "text": "a passage", "metadata": %s}' % meta), encoding="utf-8")
    with pytest.raises(InputError) as e:
        list(read_corpus(p))
    assert str(e.value).startswith(f"{p}:2: ") and needle in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_corpus_reader_refuses_nan_tokens_anywhere_in_a_line(tmp_path):
    """Python's json reads NaN/Infinity, which JSON has not: not as an id either (it was the id 'nan')."""
    p = tmp_path / "corpus.jsonl"
    p.write_text('{"_id": NaN, "text": "a passage"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r":1: malformed JSON \(NaN is not a JSON number"):
        list(read_corpus(p))


@pytest.fixture
def meta_copy(tmp_path, meta_index):
    path = tmp_path / "IDX"
    shutil.copytree(meta_index.path, path)
    return path


@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=["huge", "-huge", "nan", "inf", "-inf"])
def test_writer_refuses_documents_with_bad_numbers_and_changes_nothing(meta_copy, bad):
    before = (meta_copy / "manifest.json").read_text()
    n = len(retrieval.open_index(meta_copy))
    docs = [Document("new-1", "a fresh passage", metadata={"year": 2020}),
            Document("new-2", "another passage", metadata={"year": bad, "shard": "odd"})]
    for write in (add_documents, update_documents):
        with pytest.raises(InputError, match=r"^item 2: document 'new-2': metadata 'year' holds "):
            write(meta_copy, docs, quiet=True)
    with pytest.raises(InputError, match="metadata 'w.x\\[1\\]' holds"):
        add_documents(meta_copy, [Document("new-3", "text", metadata={"w": {"x": [1, bad]}})], quiet=True)
    assert (meta_copy / "manifest.json").read_text() == before
    idx = retrieval.open_index(meta_copy)
    assert len(idx) == n
    hits = idx.search("cancer", k=20, filter={"year": {"gte": 2010}})
    assert hits and all(h.metadata["year"] >= 2010 for h in hits)


def test_build_from_documents_refuses_bad_numbers(tmp_path):
    docs = [Document("d1", "first passage", metadata={"n": 1}), Document("d2", "second", metadata={"n": float("nan")})]
    with pytest.raises(InputError, match=r"^item 2: document 'd2': metadata 'n' holds NaN"):
        build_index(docs, tmp_path / "IDX", quiet=True)
    assert not (tmp_path / "IDX").exists()
    with pytest.raises(InputError, match="metadata must be an object"):
        build_index([Document("d1", "first", metadata=[1, 2])], tmp_path / "IDX", quiet=True)
