"""Training examples for dense fine-tuning (retrieval/pairs.py) on the small BM25 index over the
SciFact slice, with the slice's own queries and judgments as the training qrels (in memory, so no test
file name is involved, except in the refusal test): hard negatives never relevant, positives always
relevant, determinism under a seed, the query-level dev split, and errors on bad input."""
from __future__ import annotations

import json

import pytest

from indexes.errors import InputError, ParameterError
from retrieval.pairs import Example, split_dev, training_examples
from retrieval.types import Query, contents


@pytest.fixture(scope="module")
def data(small_corpus, small_index):
    """Queries and qrels of the slice, plus: a judged non-relevant (grade 0) document at the top of one
    query's ranking, and one judged query whose only relevant document is not in the folder."""
    queries = [Query(o["_id"], o["text"]) for o in map(json.loads, (small_corpus / "queries.jsonl")
                                                         .read_text().splitlines())]
    qrels: dict = {}
    for line in (small_corpus / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, r = line.split("\t")
        qrels.setdefault(q, {})[d] = int(r)
    first = queries[0]
    top = [h.docid for h in small_index.search(first.text, k=5, text=False) if h.docid not in qrels[first.qid]]
    qrels[first.qid][top[0]] = 0
    queries.append(Query("absent-q", "a query about nothing in this folder"))
    qrels["absent-q"] = {"no-such-document": 1}
    return queries, qrels, first.qid, top[0]


def test_examples_have_relevant_positives_and_no_relevant_negatives(small_index, data):
    queries, qrels, _, _ = data
    ex, report = training_examples(small_index, queries, qrels, negatives=5, depth=20, seed=1)
    assert ex and all(isinstance(e, Example) for e in ex)
    for e in ex:
        assert qrels[e.qid][e.positive_id] >= 1
        assert not set(e.negative_ids) & {d for d, r in qrels[e.qid].items() if r > 0}
        assert len(e.negative_ids) == len(e.negatives) == 5 == len(set(e.negative_ids))
        doc = small_index.get(e.positive_id)
        assert e.positive == contents(doc.title, doc.text)
        assert e.query == next(q.text for q in queries if q.qid == e.qid)
    # one example per relevant document in the folder, for every used query
    want = sum(1 for q in queries for d, r in qrels[q.qid].items() if r >= 1 and small_index.get(d) is not None)
    assert report["examples"] == len(ex) == want
    assert report["queries_skipped"] == 1 and "absent-q" not in {e.qid for e in ex}
    assert report["queries_used"] == len({e.qid for e in ex}) == len(queries) - 1
    assert report["negatives_per_example"] == 5 and report["short_examples"] == 0


def test_judged_non_relevant_documents_may_be_negatives(small_index, data):
    queries, qrels, qid, zero = data
    ex, _ = training_examples(small_index, queries, qrels, negatives=10, depth=10, seed=0)
    # negatives == depth takes the whole pool: the grade-0 document at the top stays in it
    mine = [e for e in ex if e.qid == qid]
    assert mine and all(zero in e.negative_ids for e in mine)
    ranked = [h.docid for h in small_index.search(mine[0].query, k=10, text=False)]
    assert list(mine[0].negative_ids) == [d for d in ranked if qrels[qid].get(d, 0) <= 0]


def test_sampling_is_deterministic_under_a_seed_and_differs_across_seeds(small_index, data):
    queries, qrels, _, _ = data
    a, _ = training_examples(small_index, queries, qrels, negatives=3, depth=30, seed=7)
    b, _ = training_examples(small_index, queries, qrels, negatives=3, depth=30, seed=7)
    c, _ = training_examples(small_index, queries, qrels, negatives=3, depth=30, seed=8)
    assert a == b
    assert [e.negative_ids for e in a] != [e.negative_ids for e in c]
    assert [(e.qid, e.positive_id) for e in a] == [(e.qid, e.positive_id) for e in c]


def test_dev_split_keeps_a_query_s_examples_together_with_the_stated_size(small_index, data):
    queries, qrels, _, _ = data
    ex, _ = training_examples(small_index, queries, qrels, negatives=2, depth=10, seed=0)
    qids = sorted({e.qid for e in ex})
    assert len(qids) > len(ex) / 2 and len(ex) > len(qids)  # some queries have several examples
    for share in (0.1, 0.25, 0.5):
        train, dev = split_dev(ex, share, seed=3)
        tq, dq = {e.qid for e in train}, {e.qid for e in dev}
        assert not tq & dq and tq | dq == set(qids)
        assert len(train) + len(dev) == len(ex)
        assert len(dq) == int(share * len(qids) + 0.5)  # rounded half up
        assert [e for e in ex if e.qid in dq] == dev  # every example of a dev query, in order
    assert split_dev(ex, 0.25, seed=3) == split_dev(ex, 0.25, seed=3)
    assert split_dev(list(reversed(qids)), 0.25, seed=3)[1] == [q for q in reversed(qids)
                                                              if q in {e.qid for e in split_dev(ex, 0.25, 3)[1]}]
    assert {e.qid for e in split_dev(ex, 0.25, seed=3)[1]} != {e.qid for e in split_dev(ex, 0.25, seed=4)[1]}
    assert split_dev(ex, 0.0, seed=0) == (ex, [])
    assert split_dev(["a"], 0.9, seed=0) == (["a"], [])  # training keeps at least one query
    assert split_dev([Query("a", "x"), Query("b", "y")], 0.5, 0)[1][0].qid in {"a", "b"}


def test_test_qrels_are_refused(small_corpus, small_index, data):
    queries, qrels, _, _ = data
    path = small_corpus / "qrels" / "test.tsv"
    with pytest.raises(InputError, match="looks like test qrels"):
        training_examples(small_index, queries, qrels, qrels_path=str(path))
    ex, _ = training_examples(small_index, queries, qrels, qrels_path=str(path), allow_test=True)
    assert ex
    training_examples(small_index, queries, qrels, qrels_path="qrels/train.tsv")


def test_bad_input_fails_with_one_clear_error(small_index, data):
    queries, qrels, _, _ = data
    with pytest.raises(InputError, match="none of the queries has judgments"):
        training_examples(small_index, queries, {"no-such-query": {"x": 1}})
    with pytest.raises(InputError, match="no training query has a relevant document"):
        training_examples(small_index, queries, {queries[0].qid: {"no-such-document": 1}})
    with pytest.raises(InputError, match="no training query has a relevant document"):
        training_examples(small_index, queries, qrels, min_rel=5)
    with pytest.raises(ParameterError, match="negatives must be at least 0"):
        training_examples(small_index, queries, qrels, negatives=-1)
    with pytest.raises(ParameterError, match="depth must be at least negatives"):
        training_examples(small_index, queries, qrels, negatives=10, depth=5)
    with pytest.raises(ParameterError, match="min_rel must be at least 1"):
        training_examples(small_index, queries, qrels, min_rel=0)
    for share in (-0.1, 1.0, 1.5):
        with pytest.raises(ParameterError, match=r"share must be in \[0, 1\)"):
            split_dev(queries, share, seed=0)
