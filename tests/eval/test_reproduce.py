"""The published BM25 nDCG@10 figures, from the shipped runs (oracle: pytrec_eval computed here)."""
import numpy as np
import pytest
import pytrec_eval

import eval as E

CASES = [("dl19", "msmarco-passage-eval/qrels/dl19.tsv", 0.5058), ("dl20", "msmarco-passage-eval/qrels/dl20.tsv", 0.4796),
         ("covid", "trec-covid-eval/qrels/test.tsv", 0.5947)]


@pytest.mark.parametrize("name, qrels_path, published", CASES)
def test_published_bm25_ndcg10(msmarco, name, qrels_path, published):
    from .conftest import DATA, need
    qrels = E.read_qrels(need(DATA / qrels_path))
    run = E.read_run(msmarco / "runs" / f"BM25.{name}.top100.trec")
    # TREC DL convention: graded gains for nDCG, rel >= 2 for the binary measures; nDCG is unaffected.
    ours = E.evaluate(qrels, run, ["nDCG@10", "AP", "R@100"], rel_threshold=2)
    res = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map", "recall.100"}, relevance_level=2).evaluate(run)
    assert ours["nDCG@10"] == pytest.approx(np.mean([v["ndcg_cut_10"] for v in res.values()]), abs=1e-12)
    assert ours["AP"] == pytest.approx(np.mean([v["map"] for v in res.values()]), abs=1e-12)
    assert ours["R@100"] == pytest.approx(np.mean([v["recall_100"] for v in res.values()]), abs=1e-12)
    assert round(ours["nDCG@10"], 4) == published  # Pyserini/Anserini's published BM25 figure
