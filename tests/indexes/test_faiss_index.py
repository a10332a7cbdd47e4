"""FaissIndex on synthetic unit vectors: results equal numpy brute force, save/open (memory-mapped),
add after open, trained index types, search parameters, and clear errors."""
from __future__ import annotations

import json
import warnings

import faiss
import numpy as np
import pytest

from indexes.errors import IndexFormatError, InputError
from indexes.faiss_index import (DimensionMismatchError, FaissFactoryError, FaissIndex, FaissTrainError)

DIM = 32


def unit(n, seed=0, dim=DIM):
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def data():
    X, Q = unit(600, 0), unit(15, 1)
    return X, [f"doc-{i}" for i in range(len(X))], Q


def brute(X, ids, Q, k):
    sims = Q @ X.T
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, order, 1), [[ids[j] for j in row] for row in order]


def test_flat_equals_brute_force_batched_and_single(data):
    X, ids, Q = data
    idx = FaissIndex.build(X, ids, "Flat", use_gpu=False)
    scores, got = idx.search(Q, k=10)
    ref_s, ref = brute(X, ids, Q, 10)
    assert got == ref
    np.testing.assert_allclose(scores, ref_s, rtol=1e-5, atol=1e-6)
    assert [idx.search(q, 10)[1][0] for q in Q] == ref  # single-query (one-thread) path
    assert faiss.omp_get_max_threads() >= 1


def test_save_open_mmap_add_and_reopen(data, tmp_path):
    X, ids, Q = data
    folder = tmp_path / "dense"
    FaissIndex.build(X[:500], ids[:500], "Flat").save(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["docids.txt", "faiss.json", "index.faiss"]
    meta = json.loads((folder / "faiss.json").read_text())
    assert meta["factory"] == "Flat" and meta["dim"] == DIM and meta["ntotal"] == 500
    assert meta["metric"] == "inner_product" and meta["faiss_version"] == faiss.__version__
    assert meta["index_bytes"] == (folder / "index.faiss").stat().st_size

    idx = FaissIndex.open(folder, mmap=True)
    assert idx._mmapped_from is not None  # this faiss maps flat codes (IO_FLAG_MMAP_IFC)
    assert idx.search(Q, 10)[1] == brute(X[:500], ids[:500], Q, 10)[1]
    idx.add(X[500:], ids[500:])          # loads the mapped index fully before growing it
    assert len(idx) == 600 and idx.search(Q, 10)[1] == brute(X, ids, Q, 10)[1]
    idx.save(folder)
    again = FaissIndex.open(folder, mmap=False)
    assert again.ntotal == 600 and again.docids == ids
    assert again.search(Q, 10)[1] == brute(X, ids, Q, 10)[1]
    assert sorted(p.name for p in folder.iterdir()) == ["docids.txt", "faiss.json", "index.faiss"]  # no temporary files


def test_ivf_trained_from_batches_and_nprobe(data, tmp_path):
    X, ids, Q = data
    batches = ((X[i:i + 100], ids[i:i + 100]) for i in range(0, len(X), 100))
    idx = FaissIndex.build(batches, factory="IVF8,Flat", train_size=300)
    assert idx.index.is_trained and idx.ntotal == 600 and idx.docids == ids
    idx.set_search_params(nprobe=8)  # all lists probed: exact
    assert idx.search(Q, 10)[1] == brute(X, ids, Q, 10)[1]
    idx.save(tmp_path / "ivf")
    re = FaissIndex.open(tmp_path / "ivf")
    assert re.params == {"nprobe": 8} and re.search(Q, 10)[1] == brute(X, ids, Q, 10)[1]


def test_hnsw_ef_search_and_recall(data):
    X, ids, Q = data
    idx = FaissIndex.build(X, ids, "HNSW32")
    idx.set_search_params(ef_search=600)
    _, got = idx.search(Q, 10)
    _, ref = brute(X, ids, Q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, ref)])
    assert recall >= 0.98
    assert idx.describe()["params"] == {"ef_search": 600}
    with pytest.raises(InputError, match="nprobe does not apply"):
        idx.set_search_params(nprobe=4)


def test_fewer_than_k_and_docid_checks(data):
    X, ids, Q = data
    idx = FaissIndex.build(X[:3], ids[:3], "Flat")
    scores, got = idx.search(Q[:2], k=5)
    assert [len(g) for g in got] == [3, 3] and np.isinf(scores[:, 3:]).all()
    with pytest.raises(InputError, match="duplicate docid 'doc-1'"):
        idx.add(X[3:4], ["doc-1"])
    with pytest.raises(InputError, match="line breaks"):
        idx.add(X[3:4], ["a\nb"])
    with pytest.raises(InputError, match="2 vectors but 1 docids"):
        idx.add(X[3:5], ["x"])
    assert len(idx) == 3


def test_bad_input_errors(data, tmp_path):
    X, ids, Q = data
    idx = FaissIndex.build(X, ids, "Flat")
    with pytest.raises(DimensionMismatchError, match="dimension 16 but the index has 32"):
        idx.add(unit(2, dim=16), ["n1", "n2"])
    with pytest.raises(DimensionMismatchError):
        idx.search(unit(1, dim=48), 3)
    assert issubclass(DimensionMismatchError, InputError)
    with pytest.raises(FaissFactoryError, match="rejected the factory string 'NotAnIndex42'"):
        FaissIndex.build(X, ids, "NotAnIndex42")
    with pytest.raises(FaissTrainError, match="could not train 'IVF1024,Flat' on 600 vectors"):
        FaissIndex.build(X, ids, "IVF1024,Flat")
    with pytest.raises(IndexFormatError, match="missing"):
        FaissIndex.open(tmp_path)


def test_gpu_request_falls_back_to_cpu(data):
    X, ids, Q = data
    idx = FaissIndex.build(X, ids, "Flat", use_gpu=True)
    if hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        pytest.skip("a GPU is present; the fallback is not exercised")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        _, got = idx.search(Q, 10)
    assert any("GPU" in str(x.message) for x in w) and not idx.on_gpu
    assert got == brute(X, ids, Q, 10)[1]


def test_build_checks_the_count_it_was_to_hold(data):
    X, ids, _ = data
    assert FaissIndex.build(X, ids, expected=len(ids)).ntotal == len(ids)
    with pytest.raises(IndexFormatError, match=f"holds {len(ids)} vectors but was to hold {len(ids) + 1}"):
        FaissIndex.build(((X[i:i + 100], ids[i:i + 100]) for i in range(0, len(X), 100)), expected=len(ids) + 1)
