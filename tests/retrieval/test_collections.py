import gzip
import json

import pytest

from indexes.errors import InputError
from retrieval.collections import read_corpus, read_queries


def test_beir_folder_streams_documents(small_corpus):
    docs = list(read_corpus(small_corpus))
    assert len(docs) == 400
    assert all(d.docid and (d.text or d.title) for d in docs)
    assert len({d.docid for d in docs}) == 400


def test_jsonl_tsv_and_gz_agree(tmp_path):
    rows = [("d1", "Title one", "first text"), ("d2", "", "second text")]
    jl = tmp_path / "c.jsonl"
    jl.write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in rows))
    tsv = tmp_path / "c.tsv"
    tsv.write_text("".join(f"{i}\t{t}\t{x}\n" for i, t, x in rows))
    gz = tmp_path / "c.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write(jl.read_text())
    a, b, c = (list(read_corpus(p)) for p in (jl, tsv, gz))
    assert [(d.docid, d.title, d.text) for d in a] == [(d.docid, d.title, d.text) for d in b] == \
           [(d.docid, d.title, d.text) for d in c] == rows
    assert a[0].contents == "Title one first text"


@pytest.mark.parametrize("content,needle,line", [
    (b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": \n', "malformed JSON", 2),
    (b'{"_id": "a", "text": "ok"}\n{"text": "no id"}\n', "no '_id'", 2),
    (b'{"_id": "a", "text": "ok"}\n{"_id": "a", "text": "again"}\n', "duplicate document id 'a'", 2),
    (b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "  ", "title": ""}\n', "empty text", 2),
    (b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "caf\xe9"}\n', "invalid UTF-8", 2),
])
def test_bad_corpus_lines_name_file_and_line(tmp_path, content, needle, line):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(content)
    with pytest.raises(InputError) as e:
        list(read_corpus(p))
    assert needle in str(e.value)
    assert f"bad.jsonl:{line}:" in str(e.value)


def test_missing_path(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        list(read_corpus(tmp_path / "nope.jsonl"))


def test_queries_jsonl_tsv_trec(tmp_path):
    (tmp_path / "q.jsonl").write_text('{"_id": "1", "text": "a b"}\n{"_id": "2", "text": "c"}\n')
    (tmp_path / "q.tsv").write_text("1\ta b\n2\tc\n")
    (tmp_path / "topics.txt").write_text(
        "<top>\n<num> Number: 1\n<title> a b\n<desc> Description:\nlong\n</top>\n"
        "<top>\n<num> Number: 2\n<title> c\n</top>\n")
    got = [[(q.qid, q.text) for q in read_queries(tmp_path / n)] for n in ("q.jsonl", "q.tsv", "topics.txt")]
    assert got[0] == got[1] == got[2] == [("1", "a b"), ("2", "c")]


def test_duplicate_query_id(tmp_path):
    (tmp_path / "q.tsv").write_text("1\ta\n1\tb\n")
    with pytest.raises(InputError, match=r"q.tsv:2: duplicate query id"):
        read_queries(tmp_path / "q.tsv")


def test_empty_document_policy(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text('{"_id": "a", "text": "ok"}\n{"_id": "b", "text": ""}\n{"_id": "c", "text": "fine"}\n')
    with pytest.raises(InputError, match=r"c.jsonl:2: .*empty text \(empty=skip drops") as e:
        list(read_corpus(p))
    assert (e.value.path, e.value.line) == (p, 2)
    skipped = []
    assert [d.docid for d in read_corpus(p, empty="skip", skipped=skipped)] == ["a", "c"]
    assert skipped == ["b"]
    assert [d.docid for d in read_corpus(p, empty="keep")] == ["a", "b", "c"]


@pytest.mark.parametrize("content,needle", [
    (b'{"_id": "a", "text": "x \\ud800 y"}\n', "surrogate escape without its pair"),
    (b'{"_id": "a", "text": "x", "metadata": {"k": "\\udfff"}}\n', "surrogate escape without its pair"),
    (b'{"_id": "a", "text": "x", "m": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n", "nested too deeply"),
    (b'{"_id": ' + b"7" * 5000 + b', "text": "x"}\n', "malformed JSON"),
    (b'{"_id": {"a": 1}, "text": "x"}\n', "contains whitespace"),
])
def test_json_that_python_parses_but_no_store_could_hold_is_refused(tmp_path, content, needle):
    p = tmp_path / "c.jsonl"
    p.write_bytes(content)
    with pytest.raises(InputError, match=needle) as e:
        list(read_corpus(p))
    assert "c.jsonl:1:" in str(e.value)


def test_a_surrogate_pair_is_one_character_not_an_error(tmp_path):
    (tmp_path / "c.jsonl").write_text(json.dumps({"_id": "a", "text": "smile \U0001F600"}) + "\n")
    assert [d.text for d in read_corpus(tmp_path / "c.jsonl")] == ["smile \U0001F600"]


def test_corrupt_gzip_is_an_input_error(tmp_path):
    data = gzip.compress(b'{"_id": "a", "text": "ok"}\n' * 200)
    p = tmp_path / "c.jsonl.gz"
    p.write_bytes(data[:20] + bytes(20) + data[40:])  # a valid header, then a damaged deflate stream
    with pytest.raises(InputError, match="c.jsonl.gz: cannot read"):
        list(read_corpus(p))


def test_passage_length_is_counted_as_anserini_counts_it(tmp_path):
    """The limit is on title + " " + text in UTF-16 code units: an astral character counts twice, so
    10,000,001 emoji (20,000,002 units) are refused though len() is half the limit."""
    from indexes.lucene import MAX_CONTENTS_CHARS

    p = tmp_path / "c.tsv"
    p.write_text(f"ok\tfine\nbig\t{chr(0x1F600) * (MAX_CONTENTS_CHARS // 2)}x\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"c.tsv:2: document 'big' is 20,000,001 characters long"):
        list(read_corpus(p))
    p.write_text(f"ok\tfine\nbig\tT\t{'y' * (MAX_CONTENTS_CHARS - 2)}\n", encoding="utf-8")  # "T " + text: the limit
    assert [len(d.contents) for d in read_corpus(p)] == [4, MAX_CONTENTS_CHARS]
    p.write_text(f"big\tTi\t{'y' * (MAX_CONTENTS_CHARS - 2)}\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"c.tsv:1: .* 20,000,001 characters long"):
        list(read_corpus(p))


def test_docid_longer_than_a_lucene_term_is_refused(tmp_path):
    from indexes.lucene import MAX_DOCID_BYTES

    p = tmp_path / "c.tsv"
    p.write_text(f"{'é' * (MAX_DOCID_BYTES // 2)}\tfits\n", encoding="utf-8")
    assert len(list(read_corpus(p))) == 1
    p.write_text(f"ok\tfine\n{'é' * (MAX_DOCID_BYTES // 2)}x\ttoo long\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"c.tsv:2: document id of 32,767 bytes is longer than Lucene's limit"):
        list(read_corpus(p))


@pytest.mark.parametrize("name,content", [
    ("q.tsv", "1\tfine\nq 2\taspirin\n"),
    ("q.jsonl", '{"_id": "1", "text": "fine"}\n{"_id": "q\\u00a02", "text": "aspirin"}\n'),
    ("q.jsonl", '{"_id": "1", "text": "fine"}\n{"_id": ["q", 2], "text": "aspirin"}\n'),
])
def test_query_ids_with_whitespace_are_refused_like_document_ids(tmp_path, name, content):
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=rf"{name}:2: query id .* contains whitespace"):
        read_queries(tmp_path / name)
