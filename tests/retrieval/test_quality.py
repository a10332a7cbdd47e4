"""Passage quality estimators and pruned indexing, on real models and real Lucene/faiss."""
from __future__ import annotations

import json

import numpy as np
import pytest

import retrieval
from retrieval.collections import read_corpus, read_queries
from retrieval.quality import (ESTIMATORS, QualityError, get_estimator, prune_keep_set, read_scores, select_keep,
                               write_scores)
from retrieval.writer import build_pruned_index


@pytest.fixture(scope="module")
def docs(small_corpus):
    return list(read_corpus(small_corpus))


@pytest.fixture(scope="module")
def texts(docs):
    # 24 passages plus awkward cases: one word, digits only, very long
    return [d.contents for d in docs[:24]] + ["fever", "1 2 3 4 5", " ".join(["cell"] * 600)]


@pytest.mark.parametrize("name", [n for n in ESTIMATORS if n != "learned" and not n.startswith("deepct")])
def test_each_estimator_gives_one_finite_score_per_passage(name, texts):
    kw = {"positions": 4, "per_copy": 2} if name == "pseudo-ppl" else {}
    s = get_estimator(name, **kw).score(texts, batch_size=16, quiet=True)
    assert s.shape == (len(texts),) and np.isfinite(s).all()
    assert np.ptp(s) > 0  # it discriminates
    assert get_estimator(name).score([], quiet=True).shape == (0,)


def test_deepct_estimators_score_with_a_model_folder(texts, tmp_path):
    from retrieval.deepct.model import init_model, save_model

    model, tok, base = init_model("splade-tiny")  # untrained head: enough to exercise the path
    save_model(model, tok, tmp_path / "dct", {"base_model": str(base), "max_length": 128})
    for stat in ("mass", "max"):
        s = get_estimator(f"deepct-{stat}:{tmp_path / 'dct'}").score(texts, batch_size=16, quiet=True)
        assert s.shape == (len(texts),) and np.isfinite(s).all() and np.ptp(s) > 0
    with pytest.raises(QualityError, match="needs a DeepCT model folder"):
        get_estimator("deepct-mass")


def test_length_and_random_behave(texts):
    s = get_estimator("length").score(texts, quiet=True)
    assert s[-1] > s[0] > s[-3]  # 600 words > an abstract > one word
    a = get_estimator("random", seed=3).score(texts, quiet=True)
    assert np.array_equal(a, get_estimator("random", seed=3).score(texts, quiet=True))
    assert not np.array_equal(a, get_estimator("random", seed=4).score(texts, quiet=True))


def test_learned_head_trains_deterministically_and_scores(docs, small_corpus, tmp_path):
    from eval.io import read_qrels
    from retrieval.quality.learned import LearnedQuality, train_head

    qrels = read_qrels(small_corpus / "qrels" / "test.tsv")  # stands in for training qrels here
    sub = docs[:120]
    h1 = train_head([(sub, qrels)], body="splade-tiny", seed=1, output=tmp_path / "h.json", quiet=True)
    h2 = train_head([(sub, qrels)], body="splade-tiny", seed=1, quiet=True)
    assert h1["weights"] == h2["weights"] and h1["bias"] == h2["bias"]
    card = json.loads((tmp_path / "h.json").read_text())["card"]
    assert card["examples"]["sources"][0]["positives"] > 0 and card["seed"] == 1
    est = LearnedQuality(tmp_path / "h.json")
    s = est.score([d.contents for d in sub], quiet=True)
    assert s.shape == (120,) and np.isfinite(s).all()
    rel = {d for q in qrels.values() for d in q}
    pos = np.array([d.docid in rel for d in sub])
    assert s[pos].mean() > s[~pos].mean()  # it learnt its training labels
    # the default head has a lexical part (tf-idf), stored with its vocabulary
    assert h1["features"] == "tfidf+emb" and len(h1["lexical"]["vocabulary"]) == len(h1["lexical"]["weights"]) > 0
    assert h1["card"]["examples"]["sources"][0]["negatives"] == 120 - card["examples"]["sources"][0]["positives"]
    # the body-only head (format 1) still trains and scores
    h3 = train_head([(sub, qrels)], body="splade-tiny", seed=1, quiet=True, feature_set="emb", neg_ratio=1.0)
    assert "lexical" not in h3 and h3["card"]["examples"]["sources"][0]["negatives"] <= card["examples"]["sources"][0]["positives"]
    s3 = LearnedQuality(h3).score([d.contents for d in sub], quiet=True)
    assert s3[pos].mean() > s3[~pos].mean()
    with pytest.raises(QualityError, match="feature set"):
        train_head([(sub, qrels)], body="splade-tiny", feature_set="bm25", quiet=True)
    with pytest.raises(QualityError, match="not found"):
        LearnedQuality(tmp_path / "nope.json")


def test_shipped_learned_estimator_scores(texts):
    s = get_estimator("learned").score(texts[:8], quiet=True)
    assert s.shape == (8,) and np.isfinite(s).all()


def test_select_keep_drops_floor_share_lowest():
    ids = [f"d{i}" for i in range(10)]
    s = np.array([5, 1, 9, 3, 3, 7, 0, 8, 2, 6], dtype=float)
    assert select_keep(ids, s, 0.3) == set(ids) - {"d6", "d1", "d8"}
    assert select_keep(ids, s, 0.0) == set(ids)
    assert len(select_keep(ids, np.zeros(10), 0.25)) == 8  # ties: still exactly floor(2.5) dropped
    for bad in (1.0, -0.1, 1.5, "x"):
        with pytest.raises(QualityError, match=r"\[0, 1\)"):
            select_keep(ids, s, bad)


def test_pruned_index_holds_exactly_the_kept_ids(small_corpus, tmp_path, docs):
    keep, rec = prune_keep_set(small_corpus, 0.3, "length")
    assert len(keep) == len(docs) - int(0.3 * len(docs))
    idx = build_pruned_index(small_corpus, tmp_path / "P", 0.3, "length", quiet=True)
    stored = {row[0] for row in idx.docstore.iter_docs()}
    assert stored == keep and len(idx) == len(keep)
    assert idx.manifest["subindexes"]["bm25"]["doc_count"] == len(keep)
    pr = idx.manifest["pruning"]
    assert pr["estimator"] == "length" and pr["share"] == 0.3 and pr["dropped"] == len(docs) - len(keep)
    qs = read_queries(small_corpus / "queries.jsonl")
    hits = idx.batch_search(qs, k=1000)
    seen = {h.docid for hs in hits.values() for h in hs}
    assert seen and seen <= keep


def test_prune_zero_reproduces_the_unpruned_index(small_corpus, tmp_path, small_index):
    idx = build_pruned_index(small_corpus, tmp_path / "P0", 0.0, "random", quiet=True)
    assert idx.manifest["pruning"]["dropped"] == 0
    assert idx.manifest["corpus"]["fingerprint"] == small_index.manifest["corpus"]["fingerprint"]
    qs = read_queries(small_corpus / "queries.jsonl")
    a = idx.batch_search(qs, k=100)
    b = small_index.batch_search(qs, k=100)
    assert {q: [(h.docid, round(h.score, 4)) for h in hs] for q, hs in a.items()} == \
           {q: [(h.docid, round(h.score, 4)) for h in hs] for q, hs in b.items()}


def test_scores_file_round_trip_and_missing_ids(small_corpus, tmp_path, docs):
    ids = [d.docid for d in docs]
    s = np.arange(len(ids), dtype=float)
    write_scores(tmp_path / "s.tsv", ids, s)
    assert read_scores(tmp_path / "s.tsv") == dict(zip(ids, s))
    keep, rec = prune_keep_set(small_corpus, 0.5, str(tmp_path / "s.tsv"))
    assert keep == set(ids[len(ids) // 2:]) and rec["estimator"] == "scores-file"
    write_scores(tmp_path / "short.tsv", ids[:-3], s[:-3])
    with pytest.raises(QualityError, match="lacks 3 of the corpus's"):
        prune_keep_set(small_corpus, 0.3, str(tmp_path / "short.tsv"))
    (tmp_path / "bad.tsv").write_text("a\tnan\n")
    with pytest.raises(QualityError, match="not finite"):
        read_scores(tmp_path / "bad.tsv")


def test_pruned_dense_build_reuses_the_learned_estimators_vectors(small_corpus, pruned_dense_index, small_dense_index):
    """The estimator's vectors stand in for encoding: they are the vectors the dense encoder gives the
    kept passages (compared with the full in-process dense build's, which encoded them), and the
    pruned folder's dense search ranks as an exact search over those encoded vectors does."""
    from retrieval.dense.subindex import _reusable
    from tests.conftest import dense_vectors

    idx = pruned_dense_index
    e = idx.manifest["subindexes"]["dense"]
    assert e["vectors_from"].startswith("quality estimator") and e["doc_count"] == len(idx) == 280
    keep = {row[0] for row in idx.docstore.iter_docs()}
    fresh = small_dense_index
    assert fresh.manifest["subindexes"]["dense"]["vectors_from"] == "encoded"
    ids_p, vp = dense_vectors(idx.path)
    ids_f, vf = dense_vectors(fresh.path)
    row = {d: i for i, d in enumerate(ids_f)}
    assert set(ids_p) == keep
    encoded = vf[[row[d] for d in ids_p]]
    assert np.abs(vp - encoded).max() <= 1e-4  # the same vectors up to float noise from other batch padding
    qs = read_queries(small_corpus / "queries.jsonl")[:20]
    a = idx.batch_search(qs, k=10, retriever="dense")
    qv = fresh.snapshot().retriever("dense").encode_queries([q.text for q in qs])
    for q, s in zip(qs, qv @ encoded.T):  # the ranking of a dense index freshly encoded from the kept passages
        sa = {h.docid: h.score for h in a[q.qid]}
        sb = {ids_p[j]: float(s[j]) for j in np.argsort(-s, kind="stable")[:10]}
        common = set(sa) & set(sb)
        assert len(common) >= 9 and all(abs(sa[d] - sb[d]) < 1e-4 for d in common)
    # another encoder, or a document the vectors lack: encode instead
    cfg = fresh.manifest["subindexes"]["dense"]["encoder"]
    pre = {"config": dict(cfg), "docids": ["a", "b"], "array": np.eye(2, dtype=np.float32)}
    assert _reusable(pre, cfg, ["b", "a"]).tolist() == [[0, 1], [1, 0]]
    assert _reusable(pre, cfg, ["a", "c"]) is None
    assert _reusable(dict(pre, config=dict(cfg, pooling="cls")), cfg, ["a"]) is None
    assert _reusable(dict(pre, config=dict(cfg, max_length=128)), cfg, ["a"]) is None
