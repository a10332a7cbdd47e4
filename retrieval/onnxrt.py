"""ONNX Runtime for retr's transformers on a CPU: the same weights exported once
(``torch.onnx.export``), optionally quantised to int8 (``onnxruntime.quantization.quantize_dynamic``),
and run by an ``onnxruntime.InferenceSession`` in place of the PyTorch forward. Two graphs are made:

- ``body``: the dense kind's transformer body (token ids in, last hidden states out); tokenising,
  pooling and normalising stay :class:`~retrieval.dense.encoder.DenseEncoder`'s, so a backend changes
  the floats of a vector, never how a text becomes one.
- ``splade``: a masked LM with SPLADE-max on top (token ids in, ``max_i log(1 + ReLU(l_ij))`` per
  vocabulary word-piece out), for the SPLADE kind's queries: the vocabulary-sized logits never leave
  the graph.

A graph is exported with eager attention and then fused by ONNX Runtime's transformer optimiser (one
``Attention``, ``SkipLayerNormalization`` and ``BiasGelu`` node per layer) where the architecture is
one it knows (BERT-like); else the plain export is used. The int8 file leaves attention unfused and
quantises only products with weights (see :func:`exported`). Unfused, the exported body ran passages
at 0.27x PyTorch's rate (benchmarks/results/encode.md before issue 46's CPU work).

Every text runs alone (no padding, no neighbours): int8 dynamic quantisation scales activations per
tensor, so in a batch a passage's vector moved with its neighbours (by up to 5e-2); alone, a vector
is the same whatever the batch and the thread count. Parallelism is over texts: each run computes
on its calling thread (one intra-op thread), and :meth:`OnnxBody.map` runs up to ``threads`` texts
at a time.

The exported file is cached in ``$RETR_ONNX_CACHE`` when that is set, else beside the model in
``MODEL/.retr-onnx/`` (a model folder of your own), else in ``~/.cache/retr/onnx`` (a model inside
site-packages is never written to), named by a key over the weights' hash,
the model's ``config.json``, the exporter's opset, the graph and whether it is quantised: changed weights get a
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
from retrieval.models import map_alone, model_hash

# ONNX Runtime 1.29 and later send usage telemetry from Linux and macOS as well (events to Microsoft,
# cached on disk and uploaded by a later process) unless ORT_DISABLE_TELEMETRY=1 is set before it
# initialises. retr sends nothing anywhere: the variable is set here, before this module (the only one
# that imports onnxruntime) does; a value the user set is kept.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

OPSET = 17
#: Stated agreement of the ``onnx`` backend with PyTorch fp32 on L2-normalised vectors: largest
#: absolute difference of a coordinate (tests/retrieval/test_onnx_backend.py checks it).
ONNX_MAX_ABS = 1e-4
#: The least cosine between an ``onnx-int8`` vector and PyTorch fp32's for the same text.
INT8_MIN_COSINE = 0.95
PER_CHANNEL = True  # int8 scales per output channel: closer to fp32 than one scale per tensor
_EXPORT_VERSION = "3"  # bump when the exported graph changes (2: eager attention fused by ORT's optimiser; 3: int8 keeps attention unfused)
_LOCK = threading.Lock()


class OnnxUnavailable(InputError):
    """The ONNX backend was asked for where it cannot run (a pooling that needs more than the last
    layer, a GPU device, or onnx/onnxruntime missing)."""


GRAPHS = {"body": "last_hidden_state", "splade": "weights"}  # graph -> its one output


def export_key(model_path: Path, quantized: bool, graph: str = "body") -> str:
    """The cache key of an export: the weights' hash, config.json, opset, exporter version, int8 or
    not, and the graph (``body`` adds nothing, so bodies exported before SPLADE's graph keep their key)."""
    h = hashlib.sha256()
    for part in (model_hash(model_path), (Path(model_path) / "config.json").read_bytes().decode("utf-8", "replace"),
                 str(OPSET), _EXPORT_VERSION, "int8" if quantized else "fp32") + (() if graph == "body" else (graph,)):
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


def _export(model, input_names: list[str], dest: Path, attention: bool = True, graph: str = "body") -> None:
    """``graph`` of ``model`` (a Hugging Face model in eval mode; for ``splade`` a masked LM) as ONNX at
    ``dest``, fused by :func:`_fuse` (its attention into one node when ``attention``)."""
    import torch

    class Body(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *args):
            out = self.m(**dict(zip(input_names, args)), return_dict=True)
            if graph == "body":
                return out.last_hidden_state
            # SPLADE-max over one unpadded text: log(1 + ReLU) is monotone, so it is taken of the
            # largest logit per word-piece, written as retrieval.splade.model writes it
            return torch.log(1 + torch.relu(out.logits.amax(dim=1)))

    output = GRAPHS[graph]
    dummy = tuple(torch.ones((2, 8), dtype=torch.long) for _ in input_names)
    axes = {n: {0: "batch", 1: "tokens"} for n in input_names}
    axes[output] = {0: "batch", 1: "tokens"} if graph == "body" else {0: "batch"}
    attn = getattr(model.config, "_attn_implementation", None)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".export-") as tmp:
        out = Path(tmp) / "model.onnx"
        try:
            if attn not in (None, "eager"):
                model.set_attn_implementation("eager")  # the pattern ORT's optimiser fuses into one Attention
            with torch.inference_mode(False), torch.no_grad():
                torch.onnx.export(Body(model).eval(), dummy, str(out), input_names=input_names,
                                  output_names=[output], dynamic_axes=axes, opset_version=OPSET,
                                  dynamo=False)
        finally:
            if attn not in (None, "eager"):
                model.set_attn_implementation(attn)
        fused = _fuse(out, Path(tmp) / "fused.onnx", model.config, attention)
        os.replace(fused, dest)


#: Architectures whose attention ONNX Runtime's transformer optimiser fuses (its ``model_type``).
_FUSABLE = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "distilbert": "bert", "mpnet": "bert",
            "electra": "bert"}


def _fuse(src: Path, dest: Path, config, attention: bool = True) -> Path:
    """``src`` fused by ORT's transformer optimiser at ``dest`` (returned), or ``src`` itself when the
    architecture is not one it knows or the fusion fails (the plain graph computes the same)."""
    kind = _FUSABLE.get(getattr(config, "model_type", None))
    if kind is None:
        return src
    try:
        from onnxruntime.transformers import optimizer
        from onnxruntime.transformers.fusion_options import FusionOptions

        options = FusionOptions(kind)
        options.enable_attention = attention
        opt = optimizer.optimize_model(str(src), model_type=kind, num_heads=int(config.num_attention_heads),
                                       hidden_size=int(config.hidden_size), opt_level=0,
                                       optimization_options=options)
        opt.save_model_to_file(str(dest))
    except Exception:  # an optimiser that does not know the graph: the plain export is still right
        return src
    return dest


def _quantize(src: Path, dest: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".quant-") as tmp:
        out = Path(tmp) / "model.onnx"
        # DefaultTensorType: the fused contrib nodes (SkipLayerNormalization, BiasGelu) have no types
        # ONNX's shape inference knows; their outputs are float. MatMulConstBOnly: the weights' products
        # in int8, attention's own (query x key, weights x value) in fp32
        quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8, per_channel=PER_CHANNEL,
                         extra_options={"DefaultTensorType": 1, "MatMulConstBOnly": True})
        os.replace(out, dest)


def exported(model, model_path: Path, input_names: list[str], quantized: bool = False, graph: str = "body") -> Path:
    """The cached ONNX file of ``graph`` of ``model`` (exported, and quantised, the first time). fp32: attention
    fused into one node (the fastest for passages). int8: attention left as plain nodes, the weights'
    products quantised: the fused ``QAttention`` quantises the query/key/value projection per tensor,
    and its queries lost 0.0034 nDCG@10 on Cranfield against 0.0002 for this graph."""
    _require()
    import logging
    import warnings

    folder = cache_dir(model_path)
    dest = folder / f"{export_key(model_path, quantized, graph)}.onnx"
    with _LOCK:
        if dest.is_file():
            return dest
        logging.getLogger("onnxruntime").setLevel(logging.ERROR)
        root = logging.getLogger()
        level = root.level
        root.setLevel(max(level, logging.ERROR))  # the quantiser logs a pre-processing hint on the root logger
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if not quantized:
                    _export(model, input_names, dest, graph=graph)
                else:
                    with tempfile.TemporaryDirectory(dir=folder, prefix=".int8-") as tmp:
                        plain = Path(tmp) / "plain.onnx"
                        _export(model, input_names, plain, attention=False, graph=graph)
                        _quantize(plain, dest)
        finally:
            root.setLevel(level)
        return dest


class OnnxBody:
    """An ONNX Runtime session over an exported graph: ``body(batch) -> its output`` (numpy: the last
    hidden states of a body, the SPLADE weights of a ``splade`` graph), and :meth:`map` over single texts. ``threads``: how many texts run at once (None: torch's count
    at each call, so the process's thread policy, e.g. ``RETR_QUERY_THREADS`` or
    :func:`retrieval.models.torch_threads`, holds for both backends); each run computes on its
    calling thread, so a text's floats do not depend on how many run beside it."""

    def __init__(self, path: Path, input_names: list[str], threads: Optional[int] = None, graph: str = "body"):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        self.path, self.input_names, self.threads = Path(path), list(input_names), threads
        self.output = GRAPHS[graph]
        self.session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])

    def __call__(self, batch: dict) -> np.ndarray:
        feed = {n: np.ascontiguousarray(np.asarray(batch[n]), dtype=np.int64) for n in self.input_names}
        return self.session.run([self.output], feed)[0]

    def one(self, ids: list[int]) -> np.ndarray:
        """The output for one unpadded text's token ids: its last hidden states (tokens, dim), or its
        SPLADE weights (vocabulary,)."""
        x = np.asarray(ids, dtype=np.int64)[None, :]
        feed = {"input_ids": x, "attention_mask": np.ones_like(x), "token_type_ids": np.zeros_like(x)}
        return self.session.run([self.output], {n: feed[n] for n in self.input_names})[0][0]

    def map(self, ids: list[list[int]]) -> list:
        """:meth:`one` over ``ids``, in order, up to ``threads`` at a time."""
        import torch

        return map_alone(self.one, ids, int(self.threads or torch.get_num_threads()))


def session(model, model_path: Path, tokenizer, quantized: bool = False, graph: str = "body",
            threads: Optional[int] = None) -> OnnxBody:
    """An :class:`OnnxBody` over :func:`exported`'s file of ``graph`` of ``model``, fed the inputs its
    tokenizer makes (token type ids where the tokenizer has them)."""
    names = ["input_ids", "attention_mask"] + \
        (["token_type_ids"] if "token_type_ids" in tokenizer.model_input_names else [])
    return OnnxBody(exported(model, model_path, names, quantized=quantized, graph=graph), names, threads=threads,
                    graph=graph)
