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
    with pytest.raises(InputError, match="c.jsonl:2: .*empty text"):
        list(read_corpus(p))
    skipped = []
    assert [d.docid for d in read_corpus(p, empty="skip", skipped=skipped)] == ["a", "c"]
    assert skipped == ["b"]
    assert [d.docid for d in read_corpus(p, empty="keep")] == ["a", "b", "c"]
