"""Query-aware dimension selection: DIME maths, masks, the learned selector, and search
through the real dense sub-index of a 400-passage SciFact folder."""
import json

import numpy as np
import pytest

import retrieval
from retrieval.dense.dimsel.masks import (DimSelError, adaptive_mask, apply_mask, dime_importance, doc_matrix,
                                          keep_count, oracle_importance, top_mask)
from retrieval.dense.dimsel.search import DimSel, attach, wrap
from retrieval.dense.dimsel.selector import Selector, SelectorConfig
from retrieval.dense.dimsel.training import fit, training_data
from retrieval.collections import read_queries
from retrieval.dense.subindex import DenseSpec


@pytest.fixture(scope="module")
def dense_index(tmp_path_factory, small_corpus, small_dense_index):
    """BM25 + MiniLM dense over 150 SciFact passages (the judged ones come first); their vectors are
    the shared dense index's (MiniLM encoded them in this session), not encoded again."""
    from retrieval.collections import read_corpus
    from tests.conftest import encoded_by

    docs = list(read_corpus(small_corpus))[:150]
    path = tmp_path_factory.mktemp("dimsel") / "IDX"
    pre = encoded_by(small_dense_index)
    idx = retrieval.build_index(docs, path, subindexes={"dense": DenseSpec()}, quiet=True, precomputed=pre)
    assert idx.manifest["subindexes"]["dense"]["vectors_from"] == pre["source"]
    return idx


def _synthetic(n=120, dim=16, n_docs=300, seed=0):
    """Queries whose relevant document agrees with them only on a query-dependent half of the
    dimensions: a setting where selection helps and the oracle is learnable from q."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_docs, dim)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    rel_rows = rng.choice(n_docs, n, replace=False)
    Q = X[rel_rows] + 0.8 * rng.normal(size=(n, dim)).astype(np.float32) * (np.arange(dim) >= dim // 2)
    Q = (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)
    qrels = {f"q{i}": {f"d{r}": 1} for i, r in enumerate(rel_rows)}

    class _Vectors:  # the two things training_data reads from a dense retriever
        class _index:
            docids = [f"d{i}" for i in range(n_docs)]
            ntotal = n_docs

            class index:
                @staticmethod
                def reconstruct_n(start, count):
                    return X[start:start + count]

    qs = [retrieval.Query(f"q{i}", "unused") for i in range(n)]
    return training_data(_Vectors, qs, qrels, SelectorConfig(cand_k=50), Q=Q)


# --------------------------------------------------------------------------- maths
def test_dime_importance_on_a_hand_made_example():
    q = np.array([1.0, 2.0, -1.0, 0.5])
    docs = np.array([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, -1.0, 1.0]])
    # mean doc = [0.5, 1, 0, 0.5]; q ⊙ mean = [0.5, 2, 0, 0.25]
    np.testing.assert_allclose(dime_importance(q, docs), [0.5, 2.0, 0.0, 0.25])
    assert top_mask(dime_importance(q, docs), 0.5).tolist() == [True, True, False, False]
    # oracle: q ⊙ (mean relevant - mean non-relevant)
    np.testing.assert_allclose(oracle_importance(q, docs[:1], docs[1:]), q * (docs[0] - docs[1]))


@pytest.mark.parametrize("alpha", [0.1, 0.25, 0.5, 0.77, 1.0])
def test_masking_keeps_exactly_the_chosen_dims(alpha):
    rng = np.random.default_rng(1)
    imp = rng.normal(size=(7, 384))
    q = rng.normal(size=(7, 384)).astype(np.float32)
    mask = top_mask(imp, alpha)
    m = keep_count(384, alpha)
    assert m == max(1, int(np.floor(alpha * 384 + 0.5)))
    assert (mask.sum(axis=1) == m).all()
    for i in range(7):
        assert set(np.flatnonzero(mask[i])) == set(np.argsort(-imp[i])[:m])
    qm = apply_mask(q, mask)
    assert (qm[~mask] == 0).all() and np.array_equal(qm[mask], q[mask])
    # adaptive: counts vary per query but always within [min, dim] and are top-ranked dims
    am = adaptive_mask(imp, 0.8)
    for i in range(7):
        c = am[i].sum()
        assert keep_count(384, 0.05) <= c <= 384
        assert set(np.flatnonzero(am[i])) == set(np.argsort(-imp[i], kind="stable")[:c])


@pytest.mark.parametrize("alpha", [0, -0.1, 1.01, float("nan"), "x"])
def test_alpha_outside_the_unit_interval_is_rejected(alpha):
    with pytest.raises(DimSelError, match=r"alpha must be"):
        top_mask(np.ones((1, 8)), alpha)


# --------------------------------------------------------------------------- learned selector
def test_training_lowers_loss_is_deterministic_and_round_trips(tmp_path):
    data = _synthetic()
    cfg = SelectorConfig(arch="free", hidden=32, epochs=15, lr=3e-3, batch_size=32, seed=3, cand_k=50)
    sel = fit(data, cfg)
    t = sel.config["training"]
    assert t["final_train_loss"] < 0.9 * t["first_train_loss"]
    imp = sel.importance(data.Q[:5])
    assert imp.shape == (5, 16) and np.isfinite(imp).all()
    np.testing.assert_allclose(imp, sel.importance_torch(data.Q[:5]), atol=1e-5)  # numpy search path = torch
    assert sel.mask(data.Q[:5]).sum(axis=1).tolist() == [keep_count(16, sel.config["alpha"])] * 5
    again = fit(data, cfg)  # same seed, same weights
    np.testing.assert_array_equal(again.importance(data.Q), sel.importance(data.Q))
    sel.save(tmp_path / "sel")
    back = Selector.load(tmp_path / "sel")
    np.testing.assert_array_equal(back.importance(data.Q), sel.importance(data.Q))
    assert json.loads((tmp_path / "sel" / "selector.json").read_text())["model"]["seed"] == 3
    # on held-out queries, keeping the learned half beats full dims by far (the noisy half is dropped)
    assert t["dev_ndcg10_by_alpha"]["0.5"] > t["dev_full_ndcg10"] + 0.2


# --------------------------------------------------------------------------- search
def test_dimsel_none_reproduces_plain_dense_search(dense_index, small_corpus):
    qs = read_queries(small_corpus / "queries.jsonl")[:20]
    dense = dense_index.snapshot().retriever("dense")
    plain = dense.batch_search(qs, 50)
    none = DimSel(dense, "none").batch_search(qs, 50)
    assert none == plain  # same ids, same float scores, same order
    # through the Index, with the wrapper attached to the dense sub-index
    ref = dense_index.search(qs[0].text, k=10, retriever="dense", text=False)
    attach(dense_index, DimSel(dense, "none"))
    try:
        got = dense_index.search(qs[0].text, k=10, retriever="dense", text=False)
    finally:
        attach(dense_index, dense)
    assert [(h.docid, h.score) for h in got] == [(h.docid, h.score) for h in ref]
    got = dense_index.search(qs[0].text, k=10, retriever="dense", text=False, dimsel="none")
    assert [(h.docid, h.score) for h in got] == [(h.docid, h.score) for h in ref]
    # a selection mode through Index.batch_search equals the wrapper used directly
    opts = {"mode": "prf", "alpha": 0.25, "prf_k": 3}
    via_index = dense_index.batch_search(qs[:5], k=10, retriever="dense", dimsel=opts)
    direct = DimSel(dense, **opts).batch_search(qs[:5], 10)
    assert {q: [(h.docid, h.score) for h in hs] for q, hs in via_index.items()} == direct
    assert direct != {q.qid: plain[q.qid][:10] for q in qs[:5]}


def test_an_attached_selection_follows_the_index_to_a_new_generation(dense_index, tmp_path):
    """Index.refresh rebinds an attached DimSel (RetrieverBase.rebind) to the new generation's dense
    retriever; an attached plain retriever (rebind None) is dropped for the new generation's own."""
    import shutil

    from retrieval.writer import add_documents

    path = tmp_path / "IDX"
    shutil.copytree(dense_index.path, path, ignore=shutil.ignore_patterns(".lock", ".readers"))
    idx = retrieval.open_index(path)
    old = idx.snapshot().retriever("dense")
    attach(idx, DimSel(old, "none"))
    before = idx.search("zebrafish regeneration", k=5, retriever="dense", text=False)
    add_documents(path, [retrieval.Document("new-1", "zebrafish fin regeneration after amputation")], quiet=True)
    got = idx.search("zebrafish regeneration", k=5, retriever="dense", text=False)
    now = idx.snapshot().retriever("dense")
    assert isinstance(now, DimSel) and now.dense is not old and now.dense.kind == "dense"
    assert idx.generation == 1 and "new-1" in [h.docid for h in got] and got != before
    attach(idx, now.dense)  # a plain retriever does not follow: the next generation answers with its own
    add_documents(path, [retrieval.Document("new-2", "zebrafish heart regeneration")], quiet=True)
    idx.refresh()
    assert not isinstance(idx.snapshot().retriever("dense"), DimSel) and idx.snapshot().retriever("dense") is not now.dense
    idx.close()


def test_prf_and_oracle_search_with_masked_queries(dense_index, small_corpus):
    qs = read_queries(small_corpus / "queries.jsonl")[:10]
    dense = dense_index.snapshot().retriever("dense")
    Q = dense.encode_queries([q.text for q in qs])
    prf = DimSel(dense, "prf", alpha=0.25, prf_k=3)
    res = prf.batch_search(qs, 10)
    assert (prf.last_kept == keep_count(384, 0.25)).all()
    # same as doing DIME by hand against the stored vectors
    _, X = doc_matrix(dense)
    pos = {d: i for i, d in enumerate(dense._index.docids)}
    first = dense.search_vectors(Q, 3)
    imp = np.stack([dime_importance(Q[i], X[[pos[d] for d, _ in first[i]]]) for i in range(len(qs))])
    S = apply_mask(Q, top_mask(imp, 0.25)) @ X.T
    for i, q in enumerate(qs):
        assert [d for d, _ in res[q.qid]] == [dense._index.docids[j] for j in np.argsort(-S[i], kind="stable")[:10]]
    with pytest.raises(DimSelError, match="needs relevance labels"):
        DimSel(dense, "oracle")
    qrels = small_corpus / "qrels" / "test.tsv"
    orc = DimSel(dense, "oracle", alpha=0.3, qrels=str(qrels)).batch_search(qs, 10)
    base = dense.batch_search(qs, 10)
    from eval import evaluate, read_qrels

    qr = read_qrels(qrels)
    m = lambda r: evaluate(qr, {q: dict(v) for q, v in r.items()}, ["nDCG@10"])["nDCG@10"]
    assert m(orc) > m(base)  # the label oracle is an upper bound


def test_bad_input_fails_clearly(dense_index, small_index, tmp_path):
    with pytest.raises(DimSelError, match="needs a dense sub-index"):
        wrap(small_index, "dense", "prf")
    with pytest.raises(DimSelError, match="needs a dense sub-index"):
        dense_index.search("fever", retriever="bm25", dimsel="prf")
    with pytest.raises(DimSelError, match="unknown dimension selection mode"):
        DimSel(dense_index.snapshot().retriever("dense"), "magic")
    with pytest.raises(DimSelError, match="no trained dimension selector"):
        DimSel(dense_index.snapshot().retriever("dense"), "learned", selector=tmp_path / "none")
    sel = fit(_synthetic(n=40), SelectorConfig(hidden=8, epochs=2, cand_k=50))
    sel.save(tmp_path / "sel16")
    with pytest.raises(DimSelError, match="trained for dimension 16.*384"):
        DimSel(dense_index.snapshot().retriever("dense"), "learned", selector=tmp_path / "sel16")
    with pytest.raises(DimSelError, match="alpha must be in"):
        DimSel(dense_index.snapshot().retriever("dense"), "prf", alpha=1.5)


def test_cli_train_and_search(dense_index, small_corpus, tmp_path, retr):
    """Training, one search and one refusal in real `retr` processes; the other searches and refusals
    through the same entry point (cli.main.main) in this process."""
    from tests.conftest import retr_in_process, run_retr

    idx, queries = dense_index.path, small_corpus / "queries.jsonl"
    qrels = small_corpus / "qrels" / "test.tsv"  # the only labels this tiny corpus has
    r = run_retr("train", "dimsel", "--index", idx, "--queries", queries, "--qrels", qrels, "--epochs", "3",
                 "--hidden", "16", "--dev-share", "0", "--alpha", "0.5")
    assert r.returncode == 0, r.stderr
    entry = json.loads((idx / "manifest.json").read_text())["subindexes"]["dense"]["dimsel"]
    cfg = json.loads((idx / entry["path"] / "selector.json").read_text())
    assert entry["dim"] == cfg["dim"] == 384 and cfg["alpha"] == 0.5 and cfg["model"]["epochs"] == 3
    runs = {}
    for mode in (None, "none", "learned"):
        out = tmp_path / f"{mode}.run"
        args = ["search", "--index", idx, "--queries", queries, "--retriever", "dense", "--k", "20", "-o", out, "-q"]
        r = (run_retr if mode is None else retr_in_process)(*args, *(["--dimsel", mode] if mode else []))
        assert r.returncode == 0, r.stderr
        runs[mode] = [l.split()[:5] for l in out.read_text().splitlines()]
    assert runs["none"] == runs[None] and len(runs[None]) == 20 * len(read_queries(queries))
    assert runs["learned"] != runs[None]
    for args, msg in ((["--dimsel", "prf", "--alpha", "1.5"], "0<x<=1"),
                      (["--dimsel", "oracle"], "oracle mode needs relevance labels"),
                      (["--alpha", "0.5"], "need --dimsel")):
        r = (run_retr if "prf" in args else retr_in_process)("search", "fever", "--index", idx, "--retriever", "dense",
                                                             *args)
        assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
