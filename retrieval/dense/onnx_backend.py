"""ONNX Runtime for the dense kind's transformer on a CPU: the same weights exported once
(``torch.onnx.export``), optionally quantised to int8 (``onnxruntime.quantization.quantize_dynamic``),
and run by an ``onnxruntime.InferenceSession`` in place of the PyTorch forward.

The export only replaces the transformer body (token ids in, last hidden states out); tokenising,
padding, pooling and normalising stay :class:`~retrieval.dense.encoder.DenseEncoder`'s, so a
backend changes the floats of a vector, never how a text becomes one.

The exported file is cached in ``$RETR_ONNX_CACHE`` when that is set, else beside the model in
``MODEL/.retr-onnx/`` (a model folder of your own), else in ``~/.cache/retr/onnx`` (a model inside
site-packages is never written to), named by a key over the weights' hash,
the model's ``config.json``, the exporter's opset and whether it is quantised: changed weights get a
new export, the same weights reuse the file. A file is written to a temporary name and renamed, so a
concurrent or interrupted export never leaves half a model under the cached name.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from pathlib import Path
from typing import Optional

import numpy as np

from indexes.errors import InputError
from retrieval.models import model_hash

OPSET = 17
#: Stated agreement of the ``onnx`` backend with PyTorch fp32 on L2-normalised vectors: largest
#: absolute difference of a coordinate (tests/retrieval/test_onnx_backend.py checks it).
ONNX_MAX_ABS = 1e-4
#: The least cosine between an ``onnx-int8`` vector and PyTorch fp32's for the same text.
INT8_MIN_COSINE = 0.95
PER_CHANNEL = True  # int8 scales per output channel: closer to fp32 than one scale per tensor
_EXPORT_VERSION = "1"  # bump when the exported graph changes shape or inputs
_LOCK = threading.Lock()


class OnnxUnavailable(InputError):
    """The ONNX backend was asked for where it cannot run (a pooling that needs more than the last
    layer, a GPU device, or onnx/onnxruntime missing)."""


def export_key(model_path: Path, quantized: bool) -> str:
    """The cache key of an export: the weights' hash, config.json, opset, exporter version, int8 or not."""
    h = hashlib.sha256()
    for part in (model_hash(model_path), (Path(model_path) / "config.json").read_bytes().decode("utf-8", "replace"),
                 str(OPSET), _EXPORT_VERSION, "int8" if quantized else "fp32"):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def cache_dir(model_path: Path) -> Path:
    """Where exports of ``model_path`` go: ``$RETR_ONNX_CACHE`` when set; else ``MODEL/.retr-onnx``
    for a model folder of one's own that can be written; else (a model installed as a package, e.g.
    the bundled MiniLM, or a read-only folder) ``~/.cache/retr/onnx``."""
    env = os.environ.get("RETR_ONNX_CACHE")
    model_path = Path(model_path)
    installed = any(p in ("site-packages", "dist-packages") for p in model_path.parts)
    if not env and not installed and os.access(model_path, os.W_OK):
        beside = model_path / ".retr-onnx"
        try:
            beside.mkdir(exist_ok=True)
            return beside
        except OSError:
            pass
    base = Path(env) if env else Path.home() / ".cache" / "retr" / "onnx"
    base.mkdir(parents=True, exist_ok=True)
    return base


def _require():
    try:
        import onnx  # noqa: F401  (torch's exporter and the quantiser need it)
        import onnxruntime  # noqa: F401
    except ImportError as e:
        raise OnnxUnavailable(f"the ONNX backend needs onnx and onnxruntime ({e.name} is not installed): "
                              "pip install 'retr[onnx]'") from None


def _export(model, input_names: list[str], dest: Path) -> None:
    """The body of ``model`` (a Hugging Face encoder in eval mode) as ONNX at ``dest``."""
    import torch

    class Body(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *args):
            return self.m(**dict(zip(input_names, args)), return_dict=True).last_hidden_state

    dummy = tuple(torch.ones((2, 8), dtype=torch.long) for _ in input_names)
    axes = {n: {0: "batch", 1: "tokens"} for n in input_names}
    axes["last_hidden_state"] = {0: "batch", 1: "tokens"}
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".export-") as tmp:
        out = Path(tmp) / "model.onnx"
        with torch.inference_mode(False), torch.no_grad():
            torch.onnx.export(Body(model).eval(), dummy, str(out), input_names=input_names,
                              output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=OPSET,
                              dynamo=False)
        os.replace(out, dest)


def _quantize(src: Path, dest: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".quant-") as tmp:
        out = Path(tmp) / "model.onnx"
        quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8, per_channel=PER_CHANNEL)
        os.replace(out, dest)


def exported(model, model_path: Path, input_names: list[str], quantized: bool = False) -> Path:
    """The cached ONNX file of ``model`` (exported, and quantised, the first time)."""
    _require()
    folder = cache_dir(model_path)
    fp32 = folder / f"{export_key(model_path, False)}.onnx"
    with _LOCK:
        if not fp32.is_file():
            import logging
            import warnings

            logging.getLogger("onnxruntime").setLevel(logging.ERROR)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _export(model, input_names, fp32)
        if not quantized:
            return fp32
        int8 = folder / f"{export_key(model_path, True)}.onnx"
        if not int8.is_file():
            import logging

            root = logging.getLogger()
            level = root.level
            root.setLevel(max(level, logging.ERROR))  # the quantiser logs a pre-processing hint on the root logger
            try:
                _quantize(fp32, int8)
            finally:
                root.setLevel(level)
        return int8


class OnnxBody:
    """An ONNX Runtime session over an exported body: ``body(batch) -> last hidden states`` (numpy).
    ``threads``: the session's intra-op threads (None: torch's current count, so the process's
    thread policy, e.g. ``RETR_QUERY_THREADS``, holds for both backends)."""

    def __init__(self, path: Path, input_names: list[str], threads: Optional[int] = None):
        import onnxruntime as ort
        import torch

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(threads or torch.get_num_threads())
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        self.path, self.input_names = Path(path), list(input_names)
        self.session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])

    def __call__(self, batch: dict) -> np.ndarray:
        feed = {n: np.ascontiguousarray(np.asarray(batch[n]), dtype=np.int64) for n in self.input_names}
        return self.session.run(["last_hidden_state"], feed)[0]
