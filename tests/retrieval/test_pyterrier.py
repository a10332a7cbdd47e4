"""Issue #29: retr's retrievers as PyTerrier 1.1 transformers, through the real PyTerrier (no Java:
Terrier's jars are never started) over a real small index: ``>>``, ``%``, ``pt.Experiment``, and an
index path, an Index and a Client over HTTP as the source."""
from __future__ import annotations

import pandas as pd
import pytest

pt = pytest.importorskip("pyterrier")

import eval as E  # noqa: E402
import retrieval  # noqa: E402
from retrieval.frames import read_topics  # noqa: E402
from retrieval.integrations.pyterrier import RetrRetriever  # noqa: E402

MEASURES = {"ndcg_cut_10": "nDCG@10", "map": "AP", "recip_rank": "RR", "P_5": "P@5"}


@pytest.fixture(scope="module")
def topics(small_corpus):
    return read_topics(small_corpus)


@pytest.fixture(scope="module")
def qrels(small_corpus):
    return E.read_qrels_frame(small_corpus / "qrels" / "test.tsv")


def test_transform_is_batch_search(small_index, topics):
    bm25 = RetrRetriever(small_index, retriever="bm25", k=20)
    assert isinstance(bm25, pt.Transformer)
    res = bm25(topics)
    assert list(res.columns) == ["qid", "query", "docno", "score", "rank"]
    assert res.equals(small_index.batch_search(topics, k=20, as_frame=True))
    assert res.groupby("qid")["rank"].min().eq(pt.model.FIRST_RANK).all()
    # PyTerrier's own single-query call, and extra query columns kept
    one = bm25.search("aspirin colorectal cancer")
    assert one.drop(columns="query").equals(small_index.search_df("aspirin colorectal cancer", k=20)
                                            .drop(columns="query"))
    extra = bm25(topics.assign(query_0=topics["query"].str.upper()))
    assert list(extra.columns) == ["qid", "query", "query_0", "docno", "score", "rank"]
    assert extra.drop(columns="query_0").equals(res)
    assert pt.inspect.transformer_outputs(bm25, ["qid", "query"]) == list(res.columns)


def test_source_may_be_a_path_and_text_comes_when_asked(small_index, topics):
    by_path = RetrRetriever(str(small_index.path), k=5, text=True)
    res = by_path(topics.head(3))
    assert list(res.columns) == ["qid", "query", "docno", "score", "rank", "title", "text"]
    want = small_index.batch_search(topics.head(3), k=5, text=True)
    assert res[["docno", "title", "text"]].values.tolist() == [[h.docid, h.title, h.text]
                                                               for hs in want.values() for h in hs]


def test_rank_cutoff_and_composition(small_index, topics):
    bm25 = RetrRetriever(small_index, k=50, text=True)
    full = bm25(topics)
    cut = (bm25 % 5)(topics)
    assert cut.equals(full[full["rank"] < 5].reset_index(drop=True))
    compiled = (bm25 % 5).compile()
    assert isinstance(compiled, RetrRetriever) and compiled.k == 5     # the cut-off folded into one search
    assert compiled(topics).equals(cut)
    assert (bm25 % 500).compile() is bm25
    # >> a PyTerrier re-ranker: passages re-scored by length; PyTerrier re-ranks them (0-based)
    by_length = bm25 % 10 >> pt.apply.doc_score(lambda row: float(len(row["text"])))
    res = by_length(topics)
    for qid, group in res.groupby("qid", sort=False):
        texts = full[(full["qid"] == qid) & (full["rank"] < 10)]["text"]
        assert sorted(group["score"], reverse=True) == sorted((float(len(t)) for t in texts), reverse=True)
        assert sorted(group["rank"]) == list(range(len(group)))
        best = group.sort_values("rank").iloc[0]
        assert best["score"] == group["score"].max()


def test_experiment_numbers_equal_retrs_evaluator(small_dense_index, topics, qrels):
    bm25 = RetrRetriever(small_dense_index, retriever="bm25", k=100)
    hybrid = RetrRetriever(small_dense_index, retriever="bm25+dense", k=100)
    table = pt.Experiment([bm25, hybrid], topics, qrels, eval_metrics=list(MEASURES), names=["bm25", "hybrid"])
    assert list(table["name"]) == ["bm25", "hybrid"]
    qrels_dict = E.as_qrels(qrels)
    for name, spec in (("bm25", "bm25"), ("hybrid", "bm25+dense")):
        ours = E.evaluate(qrels_dict, small_dense_index.batch_search(topics, k=100, retriever=spec),
                          list(MEASURES.values()))
        row = table[table["name"] == name].iloc[0]
        for theirs, mine in MEASURES.items():
            assert row[theirs] == pytest.approx(ours[mine], rel=1e-12, abs=1e-15)
    assert not table.loc[0, list(MEASURES)].equals(table.loc[1, list(MEASURES)])   # two different systems
    assert pt.java.started() is False                                              # no Terrier, no JVM of PyTerrier's


def test_a_client_over_http_is_a_source(small_index, topics, tmp_path):
    from tests.server.conftest import Server

    srv = Server("--index", f"sm={small_index.path}", tmp=tmp_path)
    try:
        client = retrieval.Client(srv.url, index="sm")
        want = RetrRetriever(small_index, k=10)(topics)
        got = RetrRetriever(client, k=10)(topics)
        assert got[["qid", "query", "docno", "rank"]].equals(want[["qid", "query", "docno", "rank"]])
        assert got["score"].tolist() == pytest.approx(want["score"].tolist(), rel=1e-6)
        df = client.search_df("aspirin colorectal cancer", k=5, text=True)
        assert df.drop(columns="score").equals(
            small_index.search_df("aspirin colorectal cancer", k=5, text=True).drop(columns="score"))
        client.close()
    finally:
        srv.stop()


def test_bad_input_is_refused_clearly(small_index, topics):
    bm25 = RetrRetriever(small_index, k=5)
    with pytest.raises(pt.validate.InputValidationError, match="query"):
        bm25(pd.DataFrame({"qid": ["1"], "text": ["no query column"]}))
    with pytest.raises(pt.validate.InputValidationError, match="docno"):
        bm25(bm25(topics))                                       # it retrieves; it does not re-rank
    with pytest.raises(TypeError, match="index path"):
        RetrRetriever(42)
    with pytest.raises(ValueError, match="positive"):
        RetrRetriever(small_index, k=0)
    with pytest.raises(retrieval.InputError, match="has no .nope. sub-index"):
        RetrRetriever(small_index, retriever="nope")(topics)
