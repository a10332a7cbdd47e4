"""The SPLADE encoder (Formal et al. 2021; SPLADE-max, Formal et al. 2021b): a masked
language model's logits turned into one weight per vocabulary word-piece.

For a text of tokens i and a vocabulary word-piece j with MLM logit ``l_ij``, the weight
is ``w_j = max_i log(1 + ReLU(l_ij))`` over the text's real tokens (padding masked out).
The MLM head predicts words a passage could have held, so ``w`` names word-pieces the text
lacks (expansion) as well as re-weighting those it has, and the ReLU with the sparsity
penalty of training keeps most of the vocabulary at exactly zero.

Weights become integer impacts as Pyserini's SPLADE encoders make them,
``round(w / 5 * 256)``, for passages and queries alike, so an index written here and one
written by Pyserini hold the same numbers and rank alike. Word-pieces are the terms, taken
as they are (``##ing`` included): the Lucene index is pre-tokenised.
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from retrieval.models import (ModelDirError, autocast, model_hash, pick_device, resolve_model_path, resolve_precision,
                              torch_threads)

DEFAULT_MODEL = "splade-tiny"
#: Where a SPLADE encoder's model runs: PyTorch, or ONNX Runtime on a CPU (fp32, each text alone; the
#: ``splade`` graph of :mod:`retrieval.onnxrt`), which the sub-index uses for queries where it can run.
BACKENDS = ("torch", "onnx")
WEIGHT_RANGE, QUANT_RANGE = 5, 256  # Pyserini's: impact = round(w / WEIGHT_RANGE * QUANT_RANGE)
QUANTIZATION = f"round(w / {WEIGHT_RANGE} * {QUANT_RANGE})"


def to_impacts(weights: Dict[str, float]) -> Dict[str, int]:
    """Integer impacts of float weights, Pyserini's way; terms that round to 0 are dropped
    (they would add nothing to any score)."""
    from indexes.impact import quantize

    return quantize(weights, QUANT_RANGE, lambda w: w / WEIGHT_RANGE)


def token_counts(tokenizer, texts: Sequence[str]) -> List[Dict[str, int]]:
    """Unweighted queries: each word-piece of the model's tokenizer with its count (Pyserini's
    ``TokFreqQueryEncoder`` given the model's tokenizer)."""
    return [dict(Counter(tokenizer.tokenize(t))) for t in texts]


def load_mlm(path: Path):
    """The masked LM in ``path`` with its trained MLM head; a folder whose weights are not a masked LM's,
    or that lacks the head (transformers would make a random one, as for MiniLM), is refused in one line."""
    from transformers import AutoModelForMaskedLM

    try:
        model, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True)
    except Exception as e:
        raise ModelDirError(f"{path}: not a masked language model SPLADE can use "
                            f"({str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__})")
    head = model.get_output_embeddings()
    missing = [k for k in info.get("missing_keys", []) if "embeddings" not in k or "decoder" in k]
    if head is None or missing:
        raise ModelDirError(f"{path}: has no trained MLM head ({len(missing)} weights missing, e.g. "
                            f"{missing[0] if missing else 'the output layer'}): SPLADE needs a masked LM such as "
                            "splade-tiny")
    return model


def can_run_onnx(device: str, precision: str, batch: int = 1) -> bool:
    """Whether SPLADE's ONNX graph can stand in for PyTorch: a CPU, fp32, one text at a time, onnx
    and onnxruntime installed."""
    from retrieval.models import onnx_available

    return str(device) == "cpu" and precision == "fp32" and batch == 1 and onnx_available()


def query_backend(recorded: Optional[str], device: str, precision: str, batch: int) -> str:
    """The backend of a sub-index's query encoder: ``RETR_QUERY_BACKEND`` when set (``torch``: PyTorch;
    ``auto``, ``onnx``, ``onnx-int8``: ONNX where it can run, for SPLADE has no int8 graph), else the
    one the build recorded (a folder from before it: torch); ONNX only where :func:`can_run_onnx`,
    else PyTorch (the two give the same impacts but for a rare rounding step)."""
    from retrieval.models import QUERY_BACKEND_ENV, check_backend

    if recorded not in (None, *BACKENDS):
        raise ModelDirError(f"the manifest's SPLADE query backend {recorded!r} is not one of {', '.join(BACKENDS)}")
    raw = os.environ.get(QUERY_BACKEND_ENV, "").strip()
    want = ("torch" if check_backend(raw) == "torch" else "onnx") if raw else (recorded or "torch")
    return "onnx" if want in ("onnx", "auto") and can_run_onnx(device, precision, batch) else "torch"


class SpladeEncoder:
    """Runs a masked language model as SPLADE-max over passages or queries."""

    def __init__(self, model: Optional[str | os.PathLike] = None, device: str = "auto", max_length: int = 256,
                 threads: Optional[int] = None, batch: int = 1, precision: str = "fp32", backend: str = "torch"):
        import torch
        from transformers import AutoTokenizer

        from retrieval.models import _quiet_transformers

        _quiet_transformers()
        self.name = str(model or DEFAULT_MODEL)
        self.model_dir = resolve_model_path(self.name)
        self.model = load_mlm(self.model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        head = self.model.get_output_embeddings()
        if head is None or head.weight.shape[0] != len(self.tokenizer):
            raise ModelDirError(f"{self.model_dir}: its MLM head does not cover its tokenizer's vocabulary")
        self.device = pick_device(device)
        self.model.to(self.device).eval()
        limit = int(getattr(self.model.config, "max_position_embeddings", 512) or 512)
        self.max_length = min(int(max_length), limit)
        self.vocab = np.array(self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer)))), dtype=object)
        self.threads = int(threads) if threads else None  # set around each encoding (models.torch_threads)
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            from indexes.errors import ParameterError

            raise ParameterError("{batch} must be a whole number of texts, at least 1, got {_got!r}", _got=batch)
        self.batch = batch
        self.precision = resolve_precision(precision, self.device)
        if backend not in BACKENDS:
            from indexes.errors import ParameterError

            raise ParameterError("{backend} {_got!r} is not a SPLADE backend (choose from: %s)" % ", ".join(BACKENDS),
                                 _got=backend)
        if backend == "onnx" and not can_run_onnx(self.device, self.precision, batch):
            from retrieval.onnxrt import OnnxUnavailable

            raise OnnxUnavailable(f"SPLADE on ONNX Runtime runs on a CPU in fp32, one text at a time (this "
                                  f"encoder: {self.device}, {self.precision}, batch {batch})")
        self.backend = backend
        self._onnx = None

    @property
    def model_hash(self) -> str:
        return model_hash(self.model_dir)

    def config(self) -> dict:
        return {"model": self.name, "model_dir": str(self.model_dir), "model_sha256": self.model_hash,
                "max_length": self.max_length, "vocabulary": len(self.vocab),
                "architecture": getattr(self.model.config, "model_type", None),
                "batch": self.batch, "precision": self.precision}

    def weights(self, texts: Sequence[str]) -> List[Dict[str, float]]:
        """SPLADE-max float weights ``{word-piece: w}`` (w > 0) of each text.

        Each text runs on its own, unpadded: a batch's padding and shape change the logits in
        their last bits, enough to move an impact across a rounding boundary (1 passage in 100
        of SciFact's moved when batched), and then a passage added later, or encoded on a Ray
        worker, would not score as it does in a fresh build. On CPU this costs nothing: the
        vocabulary-sized output dominates, and batching only adds padded rows to it."""
        import torch

        if self.backend == "onnx":
            return self._onnx_weights(texts)
        if self.batch > 1:
            return self._batched_weights(texts)
        out: List[Dict[str, float]] = []
        with torch.inference_mode(), torch_threads(self.threads), autocast(self.precision, self.device):
            for text in texts:
                enc = self.tokenizer([text], truncation=True, max_length=self.max_length,
                                     return_tensors="pt").to(self.device)
                logits = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[0]
                # log(1 + ReLU(.)) is monotone, so its max over the tokens is its value at the largest
                # logit: one pass over the tokens x vocabulary logits instead of three. It is written as
                # Pyserini writes it (log(1 + x), not log1p), so the weights agree to the bit.
                w = torch.log(1 + torch.relu(logits.float().amax(dim=0))).cpu().numpy()
                out.append(self._named(w))
        return out

    def _named(self, w: np.ndarray) -> Dict[str, float]:
        """``{word-piece: w}`` of one text's weight row over the vocabulary, the zeros left out."""
        nz = np.nonzero(w)[0]
        return dict(zip(self.vocab[nz].tolist(), w[nz].tolist()))

    @property
    def onnx_graph(self):
        """The ONNX Runtime session of this model's ``splade`` graph (exported and cached on first use)."""
        if self._onnx is None:
            from retrieval import onnxrt

            self._onnx = onnxrt.session(self.model, self.model_dir, self.tokenizer, graph="splade",
                                        threads=self.threads or 1)
        return self._onnx

    def _onnx_weights(self, texts: Sequence[str]) -> List[Dict[str, float]]:
        """:meth:`weights` on ONNX Runtime: each text alone, as the PyTorch path runs it, the same
        tokens in; the floats agree with PyTorch's to ~5e-6, so an impact can move one step across a
        rounding boundary (2 of the 848 test queries of SciFact, NFCorpus and Cranfield:
        benchmarks/results/encode.md)."""
        ids = self.tokenizer(list(texts), truncation=True, max_length=self.max_length)["input_ids"]
        return [self._named(w) for w in self.onnx_graph.map(ids)]

    def _batched_weights(self, texts: Sequence[str]) -> List[Dict[str, float]]:
        """:meth:`weights` with ``self.batch`` texts per forward, length-sorted, the padded positions'
        logits masked to -inf before the max (a padded row adds nothing). The floats equal one text at a
        time's to about 1e-5 (tests/retrieval/test_splade_batch.py), not to the bit: now and then an
        impact lands one step away across a rounding boundary. The promise is therefore per policy: a
        sub-index built with ``batch`` N encodes its added documents, its queries and its Ray workers'
        blocks with batch N too (recorded in its ``encoder`` config), and batch 1 (the default) keeps
        the impacts byte-identical to every earlier build."""
        import torch

        ids = self.tokenizer(list(texts), truncation=True, max_length=self.max_length)["input_ids"]
        order = np.argsort([-len(x) for x in ids], kind="stable")
        out: List[Optional[Dict[str, float]]] = [None] * len(ids)
        pad = self.tokenizer.pad_token_id or 0
        with torch.inference_mode(), torch_threads(self.threads), autocast(self.precision, self.device):
            for s in range(0, len(order), self.batch):
                idx = order[s:s + self.batch]
                t = max(len(ids[i]) for i in idx)
                arr = torch.full((len(idx), t), pad, dtype=torch.long)
                mask = torch.zeros((len(idx), t), dtype=torch.long)
                for r, i in enumerate(idx):
                    arr[r, :len(ids[i])] = torch.tensor(ids[i])
                    mask[r, :len(ids[i])] = 1
                logits = self.model(input_ids=arr.to(self.device), attention_mask=mask.to(self.device)).logits
                logits = logits.float().masked_fill(mask.to(self.device)[..., None] == 0, float("-inf"))
                w = torch.log(1 + torch.relu(logits.amax(dim=1))).cpu().numpy()
                for r, i in enumerate(idx):
                    out[i] = self._named(w[r])
        return out

    def impacts(self, texts: Sequence[str]) -> List[Dict[str, int]]:
        """Integer impacts of each text (:func:`to_impacts` of :meth:`weights`)."""
        return [to_impacts(w) for w in self.weights(texts)]

    def stage(self, block_size: int = 1024) -> "SpladeStage":
        """This encoder as an executor stage (:mod:`retrieval.executors`)."""
        return SpladeStage(self.name, str(self.model_dir), self.max_length, self.model_hash,
                           block_size, encoder=self, batch=self.batch, precision=self.precision)


class SpladeStage:
    """The SPLADE encoder as an executor stage: a block of texts in, their integer impacts
    out (ints travel lighter than the float weights, and are what the index takes)."""

    name = "splade"
    adaptive_blocks = False

    def __init__(self, name: str, model_dir: str, max_length: int, sha256: str,
                 block_size: int = 1024, encoder: Optional[SpladeEncoder] = None, batch: int = 1,
                 precision: str = "fp32"):
        self.model_name, self.model_dir, self.max_length = name, model_dir, int(max_length)
        self.batch, self.precision = batch, precision  # the build's policy, on every worker
        self.sha256, self.block_size = sha256, int(block_size)
        self._enc = encoder

    def __getstate__(self):
        return dict(self.__dict__, _enc=None)

    def setup(self, threads: Optional[int] = None, gpu: bool = False) -> None:
        if self._enc is None:
            where = self.model_dir if Path(self.model_dir).is_dir() else self.model_name
            self._enc = SpladeEncoder(where, device="cuda" if gpu else "cpu", max_length=self.max_length,
                                      threads=threads, batch=self.batch, precision=self.precision)
            if self._enc.model_hash != self.sha256:
                raise ModelDirError(f"SPLADE model at {self._enc.model_dir} on this worker (sha256 "
                                    f"{self._enc.model_hash}) differs from the driver's ({self.sha256})")

    def run(self, texts: List[str]) -> List[Dict[str, int]]:
        return self._enc.impacts(texts)

    def device(self) -> str:
        return str(self._enc.device) if self._enc is not None else "cpu"
