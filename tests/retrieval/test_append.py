import json

import pytest

import retrieval
from indexes.errors import InputError
from retrieval.append import add_documents
from retrieval.types import Document


def test_add_documents_to_bm25_and_dense(tmp_path, small_dense_index):
    import shutil

    path = tmp_path / "IDX"
    shutil.copytree(small_dense_index.path, path)
    idx = retrieval.open_index(path)
    new = [Document("new-1", "zyxwvut quokka habitat on rottnest island", "Quokka"),
           Document("new-2", "marsupial populations and island ecology of the quokka")]
    idx2 = add_documents(idx, new, quiet=True)
    assert len(idx2) == 402
    m = idx2.manifest
    assert m["subindexes"]["bm25"]["doc_count"] == 402 == m["subindexes"]["dense"]["doc_count"]
    assert m["corpus"]["fingerprint"] != idx.manifest["corpus"]["fingerprint"]
    assert idx2.search("zyxwvut quokka", k=1)[0].docid == "new-1"
    assert idx2.search("quokka habitat on rottnest island", k=1, retriever="dense")[0].docid == "new-1"
    assert idx2.get("new-2").text.startswith("marsupial")
    with pytest.raises(InputError, match="already in the index"):
        add_documents(idx2, [Document("new-1", "again")], quiet=True)
    assert len(retrieval.open_index(path)) == 402
    assert sorted(p.name for p in tmp_path.iterdir()) == ["IDX"]


def test_cli_add_rejects_bad_corpus_and_keeps_index(retr, tmp_path, small_corpus):
    path = tmp_path / "IDX"
    assert retr("index", "--corpus", small_corpus, "--index", path, "-q").returncode == 0
    before = (path / "manifest.json").read_text()
    bad = tmp_path / "new.jsonl"
    bad.write_text('{"_id": "n1", "text": "fine"}\n{"_id": "n2", "text": \n')
    r = retr("add", "--index", path, "--corpus", bad, "-q")
    assert r.returncode == 2 and "new.jsonl:2:" in r.stderr
    assert (path / "manifest.json").read_text() == before
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"_id": "n1", "text": "a brand new passage about zebrafish fins"}) + "\n")
    r = retr("add", "--index", path, "--corpus", good)
    assert r.returncode == 0, r.stderr
    assert "now 401" in r.stderr
    r = retr("search", "--index", path, "zebrafish fins", "--k", "1")
    assert "n1" in r.stdout
