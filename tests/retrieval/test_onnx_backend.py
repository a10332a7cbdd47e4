"""The dense kind's ONNX Runtime backends and the --precision / --backend options: vectors agree with
PyTorch's within the stated tolerances, the export is cached and reused, the sub-index records the
backend and precision, and an added document encodes as the build did."""
import json

import numpy as np
import pytest

import retrieval
from indexes.errors import InputError
from retrieval import onnxrt as onnx_backend
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


@pytest.mark.parametrize("backend,precision", [("onnx", "fp32"), ("onnx-int8", "fp32"), ("torch", "bf16")])
def test_vector_does_not_depend_on_its_batch(backend, precision):
    """The ONNX backends, and bf16 on a CPU, run each text alone: a text's vector is bit-identical
    whatever its neighbours, the batch size, the order and the thread count (in a shared padded batch,
    int8's per-tensor activation scales moved a vector by up to 5e-2, bf16's rounding by ~1e-3)."""
    import torch

    from retrieval.dense.encoder import DenseEncoder

    enc = DenseEncoder(device="cpu", backend=backend, precision=precision)
    v = enc.encode(TEXTS, quiet=True, batch_size=4)
    assert np.array_equal(enc.encode(TEXTS[::-1], quiet=True, batch_size=3)[::-1], v)
    assert np.array_equal(np.concatenate([enc.encode([t], quiet=True) for t in TEXTS]), v)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert np.array_equal(enc.encode(TEXTS, quiet=True, batch_size=2), v)
    finally:
        torch.set_num_threads(before)


def test_auto_resolution_is_decided_in_one_table():
    """``auto`` takes the first of retrieval.models.CPU_DEFAULT's pairs that can run on this CPU: bf16
    passages only where the CPU computes bf16 in hardware and the pooling reads the last states, ONNX
    Runtime only for mean or cls pooling in fp32; an explicit backend or precision is kept."""
    from retrieval.models import CPU_DEFAULT, cpu_has_fast_bf16, resolve_encoding

    assert CPU_DEFAULT["passages"][-1] == CPU_DEFAULT["queries"][-1] == ("torch", "fp32")  # always runs
    fast = cpu_has_fast_bf16()
    assert resolve_encoding("auto", "auto", "cpu", "mean", "passages") == \
        (("torch", "bf16") if fast else ("onnx", "fp32"))
    assert resolve_encoding("auto", "auto", "cpu", "cls", "passages") == resolve_encoding("auto", None, "cpu", "mean")
    assert resolve_encoding("auto", "auto", "cpu", "ditto", "passages") == ("torch", "fp32")  # needs all states
    assert resolve_encoding("auto", "fp32", "cpu", "mean", "passages") == ("onnx", "fp32")
    assert resolve_encoding("auto", "auto", "cpu", "mean", "queries") == ("onnx-int8", "fp32")
    assert resolve_encoding("auto", "auto", "cpu", "ditto", "queries") == ("torch", "fp32")
    assert resolve_encoding("auto", "bf16", "cpu", "mean", "queries") == ("torch", "bf16")
    assert resolve_encoding("auto", "fp16", "cpu", "mean", "passages") == ("torch", "fp16")
    assert resolve_encoding("torch", "auto", "cpu", "mean", "queries") == ("torch", "fp32")
    assert resolve_encoding("onnx", None, "cpu", "mean") == ("onnx", "fp32")
    assert resolve_encoding("auto", "auto", "cuda", "mean", "passages")[0] == "torch"
    with pytest.raises(InputError, match="not an encoder backend"):
        resolve_encoding("tensorrt", "auto", "cpu")


def test_auto_bf16_needs_the_cpu_and_a_last_state_pooling(monkeypatch):
    """Without bf16 in hardware, ``auto`` passages fall to ONNX fp32, and to torch fp32 where ONNX
    Runtime is missing too."""
    import retrieval.models as M

    monkeypatch.setattr(M, "cpu_has_fast_bf16", lambda: False)
    assert M.resolve_encoding("auto", "auto", "cpu", "mean", "passages") == ("onnx", "fp32")
    monkeypatch.setattr(M, "onnx_available", lambda: False)
    assert M.resolve_encoding("auto", "auto", "cpu", "mean", "passages") == ("torch", "fp32")
    assert M.resolve_encoding("auto", "auto", "cpu", "mean", "queries") == ("torch", "fp32")
    monkeypatch.setattr(M, "cpu_has_fast_bf16", lambda: True)
    assert M.resolve_encoding("auto", "auto", "cpu", "mean", "passages") == ("torch", "bf16")
    assert M.resolve_encoding("auto", "auto", "cpu", "ditto", "passages") == ("torch", "fp32")


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
    assert idx.snapshot().retriever("dense").encoder.backend == "onnx"  # an explicit backend holds for queries too
    # RETR_QUERY_BACKEND overrides the recorded backend for queries only; a bad value is one error
    monkeypatch.setenv("RETR_QUERY_BACKEND", "torch")
    assert retrieval.open_index(tmp_path / "I").snapshot().retriever("dense").encoder.backend == "torch"
    monkeypatch.setenv("RETR_QUERY_BACKEND", "tensorrt")
    with pytest.raises(InputError, match="not an encoder backend"):
        retrieval.open_index(tmp_path / "I").snapshot().retriever("dense").encoder


def test_default_build_records_int8_queries(tmp_path, monkeypatch):
    """A build with the default backend (auto) on a CPU encodes passages as CPU_DEFAULT says and records
    onnx-int8 for queries: the folder's query encoder is int8, its searches rank by int8 query vectors
    against the stored passages, and RETR_QUERY_BACKEND=torch gives torch queries again."""
    from retrieval.dense.encoder import DenseEncoder
    from retrieval.models import resolve_encoding
    from tests.conftest import dense_vectors, retr_in_process

    monkeypatch.delenv("RETR_QUERY_BACKEND", raising=False)
    p = retr_in_process("index", "--corpus", _corpus(tmp_path / "c.jsonl"), "--index", tmp_path / "I", "--dense",
                        "--device", "cpu", "--quiet")
    assert p.returncode == 0, p.stderr
    idx = retrieval.open_index(tmp_path / "I")
    entry = idx.manifest["subindexes"]["dense"]
    assert entry["spec"]["backend"] == "auto"
    cfg = entry["encoder"]
    assert (cfg["backend"], cfg["precision"]) == resolve_encoding("auto", "auto", "cpu", "mean", "passages")
    assert (cfg["query_backend"], cfg["query_precision"]) == ("onnx-int8", "fp32")
    ids, D = dense_vectors(idx.path)
    passages = DenseEncoder.from_config(cfg)
    assert np.abs(passages.encode([TEXTS[i] for i in range(len(TEXTS))], quiet=True) -
                  D[[ids.index(f"d{i}") for i in range(len(TEXTS))]]).max() <= 1e-5
    r = idx.snapshot().retriever("dense")
    assert (r.encoder.backend, r.encoder.precision) == ("onnx-int8", "fp32")
    q = "vitamin D and bones"
    qv = DenseEncoder(device="cpu", backend="onnx-int8").encode([q], quiet=True)
    assert np.array_equal(r.encode_queries([q]), qv)
    want = [ids[j] for j in np.argsort(-(D @ qv[0]), kind="stable")[:3]]
    assert [h.docid for h in idx.search(q, k=3, retriever="dense")] == want
    monkeypatch.setenv("RETR_QUERY_BACKEND", "torch")
    assert retrieval.open_index(tmp_path / "I").snapshot().retriever("dense").encoder.backend == "torch"
    monkeypatch.setenv("RETR_QUERY_BACKEND", "auto")  # the queries' default, not the passages'
    assert retrieval.open_index(tmp_path / "I").snapshot().retriever("dense").encoder.backend == "onnx-int8"


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


def test_onnx_runtime_telemetry_is_off_unless_the_user_turns_it_on(tmp_path):
    """ONNX Runtime (1.29+) uploads usage events unless ORT_DISABLE_TELEMETRY=1 is set before it starts;
    a suite run caught one such upload through the no-download proxy. A process that encodes on ONNX
    has it set, and a value of the user's own is kept."""
    import os
    import subprocess
    import sys

    code = ("import os\nfrom retrieval.dense.encoder import DenseEncoder\n"
            "DenseEncoder(device='cpu', backend='onnx', quiet=True).encode(['statins'], quiet=True)\n"
            "import onnxruntime\nprint(os.environ.get('ORT_DISABLE_TELEMETRY'))")
    for given, want in ((None, "1"), ("0", "0")):
        env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
        if given is not None:
            env["ORT_DISABLE_TELEMETRY"] = given
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip().splitlines()[-1] == want
