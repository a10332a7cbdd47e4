import json

import numpy as np
import pytest

import retrieval
from indexes.errors import InputError
from retrieval.collections import read_corpus, read_queries
from retrieval.dense.subindex import DenseSpec


@pytest.fixture(scope="module")
def dense_index(small_dense_index):
    return small_dense_index


def test_folder_answers_through_bm25_and_dense(dense_index, small_corpus):
    assert dense_index.retrievers == ["bm25", "dense"]
    entry = dense_index.manifest["subindexes"]["dense"]
    assert entry["doc_count"] == 400 and entry["config"]["dim"] == 384 and entry["model"]["sha256"]
    q = read_queries(small_corpus / "queries.jsonl")[0]
    for r in ("bm25", "dense"):
        hits = dense_index.search(q.text, k=5, retriever=r)
        assert len(hits) == 5 and all(h.text for h in hits)
    # no encoding cache is left beside the folder
    assert not [p for p in dense_index.path.parent.iterdir() if ".encode" in p.name]


def test_dense_top10_equals_brute_force(dense_index, small_corpus):
    """faiss's top 10 is the exact top 10 over the stored vectors, and the stored vectors are the
    encoder's vectors of the passages their ids name (checked on a spread of 50 of the 400: encoding
    all of them again costs half a minute and tests the same code)."""
    from tests.conftest import dense_vectors

    r = dense_index.snapshot().retriever("dense")
    ids, D = dense_vectors(dense_index.path)
    docs = {d.docid: d for d in read_corpus(small_corpus)}
    assert sorted(ids) == sorted(docs)
    sample = ids[::8]
    # the passages' encoder as recorded (the retriever's own encodes queries, onnx-int8 after a default build)
    from retrieval.dense.encoder import DenseEncoder

    passages = DenseEncoder.from_config(dense_index.manifest["subindexes"]["dense"]["encoder"], quiet=True)
    E = passages.encode([docs[d].contents for d in sample], quiet=True)
    assert np.abs(E - D[::8]).max() <= 1e-5  # another batch's padding moves the 7th decimal at most
    qs = read_queries(small_corpus / "queries.jsonl")[:10]
    Q = r.encode_queries([q.text for q in qs])
    S = Q @ D.T
    res = dense_index.batch_search(qs, k=10, retriever="dense")
    for i, q in enumerate(qs):
        want = [ids[j] for j in np.argsort(-S[i], kind="stable")[:10]]
        got = [h.docid for h in res[q.qid]]
        assert got == want
        np.testing.assert_allclose([h.score for h in res[q.qid]], np.sort(S[i])[::-1][:10], rtol=1e-4)


def test_add_twice_needs_overwrite_and_bad_pooling(dense_index):
    from retrieval.writer import add_subindex

    with pytest.raises(InputError, match="already has a 'dense'"):
        add_subindex(dense_index, DenseSpec(), quiet=True)
    with pytest.raises(InputError, match="pooling"):
        add_subindex(dense_index, DenseSpec(pooling="median"), name="d2", quiet=True)
    assert "d2" not in retrieval.open_index(dense_index.path).retrievers


def test_cli_adds_dense_to_existing_folder_only_for_same_corpus(retr, tmp_path, small_corpus):
    idx = tmp_path / "IDX"
    assert retr("index", "--corpus", small_corpus, "--index", idx, "-q").returncode == 0
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"_id": "x", "text": "something else"}) + "\n")
    r = retr("index", "--corpus", other, "--index", idx, "--dense", "-q")
    assert r.returncode == 2 and "different corpus" in r.stderr
    r = retr("index", "--corpus", small_corpus, "--index", idx, "-q")
    assert r.returncode == 2 and "already exists" in r.stderr
    r = retr("index", "--corpus", small_corpus, "--index", idx, "--dense", "--pooling", "nope", "-q")
    assert r.returncode == 2 and "pooling" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = retr("index", "--corpus", small_corpus, "--index", idx, "--dense", "--faiss", "Bogus42", "-q")
    assert r.returncode == 2 and "faiss" in r.stderr.lower()
    assert json.loads((idx / "manifest.json").read_text())["subindexes"].keys() == {"bm25"}
    assert not [p for p in tmp_path.iterdir() if ".encode" in p.name]  # rejected before any encoding
