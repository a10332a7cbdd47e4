"""Issue #29: batch_search's query forms (a {qid: text} mapping, Pyserini's positional
``(queries, qids, k)``), a short Hit repr, warnings for filters on fields no document carries,
and a batch_search result fed straight to the evaluator (real Lucene, real pytrec_eval)."""
import json
import warnings

import pytest

import retrieval
from indexes.errors import InputError

QS = {"q1": "aspirin colorectal cancer", "q2": "cerebral white matter newborn", "q3": "statin side effects"}


def test_batch_search_takes_a_mapping_and_keeps_its_qids(small_index):
    got = small_index.batch_search(QS, k=5)
    assert list(got) == ["q1", "q2", "q3"]          # not the keys searched as text, not "0", "1", "2"
    for qid, text in QS.items():
        assert [(h.docid, h.score) for h in got[qid]] == [(h.docid, h.score) for h in small_index.search(text, k=5)]


def test_batch_search_pyserini_positional_form(small_index):
    texts, qids = list(QS.values()), list(QS)
    got = small_index.batch_search(texts, qids, k=4)
    assert list(got) == qids and all(len(v) == 4 for v in got.values())
    assert got == small_index.batch_search(texts, qids, 4)          # k positional too, as Pyserini takes it
    assert got == small_index.batch_search([retrieval.Query(q, t) for q, t in QS.items()], k=4)
    with small_index.snapshot() as s:                                 # the same forms on a pinned generation
        assert s.batch_search(texts, qids, k=4) == got and s.batch_search(QS, k=4) == got


def test_batch_search_older_forms_still_work(small_index):
    plain = small_index.batch_search(list(QS.values()), k=3)
    assert list(plain) == ["0", "1", "2"]
    assert small_index.batch_search(list(QS.values()), 3) == plain   # k in second place, as before qids came


@pytest.mark.parametrize("args, kw, says", [
    ((["a", "b"], ["x"]), {}, "2 queries but 1 qids"),
    ((QS, ["x", "y", "z"]), {}, "not with a {qid: text} mapping"),
    ((["a", "b"], ["x", "x"]), {}, "repeat"),
    (("aspirin",), {}, "not one string"),
    (([retrieval.Query("a", "b")], ["x"]), {}, "not Query objects"),
])
def test_batch_search_refuses_mismatched_forms(small_index, args, kw, says):
    with pytest.raises(InputError, match=says.replace("{", r"\{").replace("}", r"\}")):
        small_index.batch_search(*args, **kw)


def test_hit_repr_is_short(small_index):
    hits = small_index.search("cerebral white matter newborn", k=10)
    assert sum(len(h.text) for h in hits) > 5000                      # the text is there ...
    r = repr(hits)
    assert len(r) < 1600, len(r)                                      # ... but not in the repr
    h = hits[0]
    assert repr(h).startswith(f"Hit(rank=1, docid={h.docid!r}, score={h.score:.4f}, ")
    assert len(repr(h)) < 140 and h.title[:30] in repr(h)


def test_filter_on_unknown_field_warns_and_names_the_fields(meta_index):
    assert meta_index.fields() == {"shard": 400, "tags": 400, "year": 400 - len(range(0, 400, 7))}
    with pytest.warns(retrieval.FilterWarning, match=r"'shrad'.*shard \(400\).*year \(342\)"):
        assert meta_index.search("cancer", k=5, filter={"shrad": "odd"}) == []
    with pytest.warns(retrieval.FilterWarning, match="'colour'"):
        meta_index.batch_search(QS, k=5, filter={"colour": "red", "shard": "odd"})
    assert meta_index.unknown_fields({"shrad": "odd", "docid": {"in": ["1"]}, "year": 2000}) == ["shrad"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                # a known field, and docid, warn nothing
        assert meta_index.search("cancer", k=5, filter={"shard": "odd"})
        meta_index.search("cancer", k=5, filter={"docid": {"in": ["4983"]}})
    assert issubclass(retrieval.FilterWarning, UserWarning)


def test_filter_warns_on_an_index_without_metadata(small_index):
    assert small_index.fields() == {}
    with pytest.warns(retrieval.FilterWarning, match="'year'.*no metadata"):
        small_index.search("cancer", k=5, filter={"year": {"gte": 2000}})


def test_evaluate_takes_a_batch_search_result(small_index, small_corpus):
    import eval
    from eval.io import read_qrels

    qrels = read_qrels(small_corpus / "qrels" / "test.tsv")
    queries = {json.loads(l)["_id"]: json.loads(l)["text"]
               for l in (small_corpus / "queries.jsonl").read_text().splitlines()}
    res = small_index.batch_search(queries, k=100)
    got = eval.evaluate(qrels, res, ["nDCG@10", "P@5"])
    want = eval.evaluate(qrels, {q: {h.docid: h.score for h in hs} for q, hs in res.items()}, ["nDCG@10", "P@5"])
    assert got == want and got["nDCG@10"] > 0.3


def test_search_options_are_declared_keywords_checked_once(small_index):
    """Issue #44: search/batch_search take query, k, retriever and the rest as keywords declared in one
    place (SearchOptions / BatchOptions beside SearchRequest); the old keyword calls give what a request
    gives, and a keyword not declared is Python's own TypeError naming it, before any search."""
    from retrieval.request import BatchOptions, SearchOptions, SearchRequest

    q = QS["q1"]
    got = small_index.search(q, 3, "bm25", text=False, depth=50, ranks=True, filter=None)
    want = small_index.search(q, request=SearchRequest(k=3, retriever="bm25", text=False, depth=50, ranks=True))
    assert [(h.docid, h.score, h.ranks, h.text) for h in got] == [(h.docid, h.score, h.ranks, h.text) for h in want]
    assert got[0].ranks == {"bm25": 1} and got[0].text == ""
    batch = small_index.batch_search([q], None, 3, "bm25", threads=2, quiet=True, batch_size=1, text=True)
    assert [(h.docid, h.text) for h in batch["0"]] == [(h.docid, h.text) for h in small_index.search(q, k=3)]
    assert set(SearchOptions.__optional_keys__) - set(BatchOptions.__optional_keys__) == {"ranks"}
    with small_index.snapshot() as s:
        for call, name, key in ((lambda: small_index.search(q, bogus=1), "Index.search", "bogus"),
                                (lambda: small_index.batch_search([q], bogus=1), "Index.batch_search", "bogus"),
                                (lambda: small_index.batch_search([q], ranks=True), "Index.batch_search", "ranks"),
                                (lambda: s.search(q, threads=2), "Snapshot.search", "threads"),
                                (lambda: s.batch_search([q], bogus=1), "Snapshot.batch_search", "bogus")):
            with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument '{key}'$"):
                call()
    with pytest.raises(TypeError, match="'bogus'"):
        retrieval.Client("http://127.0.0.1:9", index="x").search(q, bogus=1)  # refused before any request
