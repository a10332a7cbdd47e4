"""The dense kind's ONNX Runtime backends and the --precision / --backend options: vectors agree with
PyTorch's within the stated tolerances, the export is cached and reused, the sub-index records the
backend and precision, and an added document encodes as the build did."""
import json

import numpy as np
import pytest

import retrieval
from indexes.errors import InputError
from retrieval.dense import onnx_backend
from retrieval.types import Document

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

TEXTS = ["Aspirin lowers the risk of a second heart attack.", "x",
         "Microglia are the resident macrophages of the central nervous system and respond to injury " * 6,
         "What does vitamin D do for bones?"]


@pytest.fixture(autouse=True)
def onnx_cache(tmp_path_factory, monkeypatch):
    """Exports go to one test folder, not beside an installed model."""
    cache = tmp_path_factory.getbasetemp() / "onnx-cache"
    monkeypatch.setenv("RETR_ONNX_CACHE", str(cache))
    return cache


@pytest.fixture(scope="module")
def torch_vectors():
    from retrieval.dense.encoder import DenseEncoder

    return DenseEncoder(device="cpu").encode(TEXTS, quiet=True)


def test_onnx_vectors_agree_with_torch(torch_vectors, onnx_cache):
    from retrieval.dense.encoder import DenseEncoder

    enc = DenseEncoder(device="cpu", backend="onnx")
    v = enc.encode(TEXTS, quiet=True, batch_size=2)  # a padded batch as well as unpadded ones
    assert np.abs(v - torch_vectors).max() <= onnx_backend.ONNX_MAX_ABS
    assert enc.config()["backend"] == "onnx" and enc.config()["precision"] == "fp32"
    # the export is cached by the weights' key and reused: a second encoder loads the same file
    files = sorted(onnx_cache.glob("*.onnx"))
    assert [f.name for f in files] == [onnx_backend.export_key(enc.model_path, False) + ".onnx"]
    stamp = files[0].stat().st_mtime_ns
    again = DenseEncoder(device="cpu", backend="onnx")
    assert np.array_equal(again.encode(TEXTS, quiet=True, batch_size=2), v)
    assert again.onnx_body.path == files[0] and files[0].stat().st_mtime_ns == stamp


def test_int8_cosine_bound(torch_vectors):
    from retrieval.dense.encoder import DenseEncoder

    v = DenseEncoder(device="cpu", backend="onnx-int8").encode(TEXTS, quiet=True)
    cos = (v * torch_vectors).sum(1)
    assert cos.min() >= onnx_backend.INT8_MIN_COSINE
    assert not np.allclose(v, torch_vectors, atol=onnx_backend.ONNX_MAX_ABS)  # it is quantised


def test_onnx_refuses_what_it_cannot_run():
    from retrieval.dense.encoder import DenseEncoder

    with pytest.raises(onnx_backend.OnnxUnavailable, match="mean or cls"):
        DenseEncoder(device="cpu", backend="onnx", pooling="first-last")
    with pytest.raises(onnx_backend.OnnxUnavailable, match="precision"):
        DenseEncoder(device="cpu", backend="onnx", precision="bf16")


def test_precision_resolution():
    from retrieval.models import resolve_precision

    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision(None, "cpu") == "fp32"
    assert resolve_precision("bf16", "cpu") == "bf16"
    with pytest.raises(InputError, match="not a precision"):
        resolve_precision("fp8", "cpu")


def test_bf16_on_cpu_stays_close(torch_vectors):
    """bf16 autocast runs on a CPU as well (slower there, which is why auto picks fp32): the vectors
    differ from fp32's only at bf16's resolution."""
    from retrieval.dense.encoder import DenseEncoder

    v = DenseEncoder(device="cpu", precision="bf16").encode(TEXTS, quiet=True)
    assert (v * torch_vectors).sum(1).min() > 0.99


def _corpus(path):
    path.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    return path


def test_index_records_backend_and_added_document_encodes_alike(tmp_path, monkeypatch):
    """`retr index --dense --backend onnx` records the backend and the resolved precision; a document
    added later is encoded by the same backend (its stored vector is the onnx encoder's, not
    PyTorch's), and queries are encoded by it too."""
    from retrieval.dense.encoder import DenseEncoder
    from retrieval.writer import add_documents
    from tests.conftest import dense_vectors, retr_in_process

    p = retr_in_process("index", "--corpus", _corpus(tmp_path / "c.jsonl"), "--index", tmp_path / "I", "--dense",
                        "--backend", "onnx", "--device", "cpu", "--quiet")
    assert p.returncode == 0, p.stderr
    idx = retrieval.open_index(tmp_path / "I")
    entry = idx.manifest["subindexes"]["dense"]
    assert entry["encoder"]["backend"] == "onnx" and entry["encoder"]["precision"] == "fp32"
    assert entry["spec"]["backend"] == "onnx" and entry["config"]["backend"] == "onnx"
    new = "Statins reduce cholesterol in patients at risk of heart disease."
    idx = add_documents(idx, [Document("new", new)], quiet=True)
    ids, D = dense_vectors(idx.path)
    got = D[ids.index("new")]
    onnx_v = DenseEncoder(device="cpu", backend="onnx").encode([new], quiet=True)[0]
    torch_v = DenseEncoder(device="cpu").encode([new], quiet=True)[0]
    assert np.array_equal(got, onnx_v) and not np.array_equal(got, torch_v)
    assert idx.snapshot().retriever("dense").encoder.backend == "onnx"
    # RETR_QUERY_BACKEND overrides the recorded backend for queries only; a bad value is one error
    monkeypatch.setenv("RETR_QUERY_BACKEND", "torch")
    assert retrieval.open_index(tmp_path / "I").snapshot().retriever("dense").encoder.backend == "torch"
    monkeypatch.setenv("RETR_QUERY_BACKEND", "tensorrt")
    with pytest.raises(InputError, match="not an encoder backend"):
        retrieval.open_index(tmp_path / "I").snapshot().retriever("dense").encoder


@pytest.mark.parametrize("flag,value", [("--backend", "tensorrt"), ("--precision", "fp8")])
def test_bad_backend_or_precision_is_one_line(tmp_path, flag, value):
    from tests.conftest import run_retr

    p = run_retr("index", "--corpus", _corpus(tmp_path / "c.jsonl"), "--index", tmp_path / "I", "--dense", flag, value)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and value in p.stderr and flag in p.stderr


@pytest.mark.parametrize("kw,word", [({"backend": "tensorrt"}, "backend"), ({"precision": "fp8"}, "precision")])
def test_bad_values_in_the_api_name_the_parameter(tmp_path, kw, word):
    from retrieval.dense.subindex import DenseSpec

    with pytest.raises(InputError, match=f"{word} .* is not"):
        DenseSpec(**kw).validate()


def test_bad_training_precision_is_one_line(tmp_path):
    from tests.conftest import run_retr

    p = run_retr("train", "dense", "--corpus", _corpus(tmp_path / "c.jsonl"), "--output", tmp_path / "M",
                 "--precision", "fp8")
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "fp8" in p.stderr and "--precision" in p.stderr
    from retrieval.dense.train_config import DenseTrainConfig

    with pytest.raises(InputError, match="precision .* is not a precision"):
        DenseTrainConfig(precision="fp8").validate()
