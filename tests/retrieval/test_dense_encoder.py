"""DenseEncoder on the bundled MiniLM: order-preserving sorted batches, dtypes, config round trip,
resumable shards, dense search equal to brute force, and clear errors on bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest

from indexes.errors import InputError
from indexes.faiss_index import FaissIndex
from retrieval.dense.encoder import DenseEncoder, load_shards
from retrieval.models import ModelDirError, bundled_model_path, resolve_model_path
from retrieval.dense.pooling import UnknownPoolingError

TEXTS = ["Aspirin reduces fever.", "", "Dense retrieval encodes passages into vectors that are compared by "
         "inner product; long passages are truncated to the model's limit.",
         "cats", "The mitochondria is the powerhouse of the cell.", "Vitamin D and bone density in older adults."]


@pytest.fixture(scope="module")
def enc():
    return DenseEncoder(device="cpu")


@pytest.fixture(scope="module")
def scifact_small(scifact_dir):
    docs = []
    with open(scifact_dir / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            # first 30 words only: keeps the test fast on 2 cores
            docs.append((o["_id"], " ".join((o.get("title", "") + " " + o["text"]).split()[:30])))
            if len(docs) == 150:
                break
    queries = []
    with open(scifact_dir / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            queries.append(json.loads(line)["text"])
            if len(queries) == 12:
                break
    return docs, queries


def test_encode_shape_norm_and_input_order(enc):
    X = enc.encode(TEXTS, batch_size=2, quiet=True)
    assert X.shape == (len(TEXTS), 384) and X.dtype == np.float32 and enc.dim == 384
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-5)
    # Length sorting must not change which row belongs to which text: encode one at a time.
    single = np.stack([enc.encode([t], quiet=True)[0] for t in TEXTS])
    np.testing.assert_allclose(X, single, atol=2e-5)
    assert enc.encode([], quiet=True).shape == (0, 384)


def test_fp16_output_and_config_round_trip(enc):
    cfg = enc.config()
    assert cfg["pooling"] == "mean" and cfg["max_length"] == 256 and cfg["normalize"] is True
    assert len(cfg["model_sha256"]) == 16 and cfg["dim"] == 384
    half = DenseEncoder.from_config({**cfg, "dtype": "float16"}, device="cpu")
    H = half.encode(TEXTS, quiet=True)
    assert H.dtype == np.float16
    np.testing.assert_allclose(H.astype(np.float32), enc.encode(TEXTS, quiet=True), atol=2e-3)
    # a manifest whose model folder moved still finds the bundled model by its weights hash
    moved = DenseEncoder.from_config({**cfg, "model": "/nonexistent/place/model"}, device="cpu")
    assert moved.model_path == bundled_model_path("minilm").resolve()
    with pytest.raises(ModelDirError, match="differ"):
        DenseEncoder.from_config({**cfg, "model_sha256": "0" * 16}, device="cpu")


def test_other_poolers_give_different_vectors(enc):
    cls = DenseEncoder(pooling="cls", device="cpu").encode(TEXTS[:3], quiet=True)
    fl = DenseEncoder(pooling="first-last", device="cpu").encode(TEXTS[:3], quiet=True)
    mean = enc.encode(TEXTS[:3], quiet=True)
    assert not np.allclose(cls, mean, atol=1e-3) and not np.allclose(fl, mean, atol=1e-3)
    np.testing.assert_allclose(np.linalg.norm(fl, axis=1), 1.0, atol=1e-5)


def test_resumable_shards(enc, tmp_path):
    texts = [f"passage number {i} about topic {i % 7}" for i in range(45)]
    out = tmp_path / "vec"
    paths = enc.encode_to_shards(iter(texts), out, shard_size=20, batch_size=8, quiet=True)
    assert [p.name for p in paths] == ["shard-00000.npy", "shard-00001.npy", "shard-00002.npy"]
    full = enc.encode(texts, quiet=True)
    np.testing.assert_allclose(load_shards(out), full, atol=2e-5)
    # Simulate an interrupted run: shard 1 missing. A rerun rewrites only shard 1.
    before = {p.name: p.stat().st_mtime_ns for p in paths}
    paths[1].unlink()
    enc.encode_to_shards(iter(texts), out, shard_size=20, batch_size=8, quiet=True)
    after = {p.name: p.stat().st_mtime_ns for p in paths}
    assert after["shard-00000.npy"] == before["shard-00000.npy"]
    assert after["shard-00002.npy"] == before["shard-00002.npy"]
    assert paths[1].exists()
    np.testing.assert_allclose(load_shards(out), full, atol=2e-5)
    assert sorted(p.name for p in out.iterdir()) == ["meta.json"] + [p.name for p in paths]  # no temporary files
    with pytest.raises(InputError, match="different encoder or shard size"):
        enc.encode_to_shards(iter(texts), out, shard_size=10, quiet=True)


def test_dense_search_top10_equals_brute_force(enc, scifact_small):
    docs, queries = scifact_small
    D = enc.encode([t for _, t in docs], quiet=True)
    Q = enc.encode(queries, quiet=True)
    ids = [d for d, _ in docs]
    idx = FaissIndex.build(D, ids, "Flat", use_gpu=False)
    scores, got = idx.search(Q, k=10)
    sims = Q @ D.T
    for qi in range(len(queries)):
        order = np.argsort(-sims[qi], kind="stable")[:10]
        assert got[qi] == [ids[j] for j in order]
        np.testing.assert_allclose(scores[qi], sims[qi, order], rtol=1e-5, atol=1e-5)
    # one query at a time (the single-thread path) gives the same lists
    assert [idx.search(Q[i], k=10)[1][0] for i in range(len(queries))] == got


def test_bad_inputs(tmp_path):
    empty = tmp_path / "nomodel"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    (empty / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelDirError, match="no weights"):
        DenseEncoder(empty)
    with pytest.raises(ModelDirError, match="not found"):
        DenseEncoder(tmp_path / "missing")
    assert issubclass(ModelDirError, InputError)
    with pytest.raises(UnknownPoolingError, match="unknown pooling"):
        DenseEncoder(pooling="maxpool")
    with pytest.raises(InputError, match="dtype"):
        DenseEncoder(dtype="int8")
    with pytest.raises(UnknownPoolingError, match="out of range"):
        DenseEncoder(pooling="ditto", ditto_layer_head=(6, 0), device="cpu")
    assert resolve_model_path("splade-tiny").name == "model"
