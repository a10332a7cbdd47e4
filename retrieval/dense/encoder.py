"""Dense sentence/passage encoder over any local Hugging Face model, with selectable pooling.

Usage::

    enc = DenseEncoder()                      # bundled all-MiniLM-L6-v2, mean pooling, normalised
    X = enc.encode(["a passage", "another"])  # (2, 384) float32
    enc.config()                              # dict for an index manifest
    DenseEncoder.from_config(cfg)             # the same encoder again (e.g. for queries)

Texts are tokenised once, sorted by token length and batched, so each batch pads to similar
lengths; the model runs under ``torch.inference_mode``.
"""
from __future__ import annotations

import json
import os
import sys
from itertools import islice
from pathlib import Path
from types import SimpleNamespace
from typing import Iterable, Iterator, Optional, Sequence, TypedDict, Union

import numpy as np
import torch
from tqdm import tqdm
from typing_extensions import Unpack

from indexes.atomic import atomic_write, write_text
from indexes.errors import InputError
from retrieval.dense import ditto_store
from retrieval.models import (ModelDirError, _quiet_transformers, autocast, bundled_model_path, check_backend,
                              map_alone, model_hash, pick_device, resolve_encoding, resolve_model_path, torch_threads)
from retrieval.dense.pooling import UnknownPoolingError, canonical_name, get_pooler
from retrieval.options import check_keywords

_DTYPES = {"float32": np.float32, "fp32": np.float32, "float16": np.float16, "fp16": np.float16}


def get_pooler_needs_attn(name: str) -> bool:
    return canonical_name(name) == "ditto"


class EncoderOptions(TypedDict, total=False):
    """The keywords of :class:`DenseEncoder` beside model, pooling, device, max_length, quiet, precision and
    backend (``**options: Unpack[EncoderOptions]``; another keyword is a TypeError naming it):
    ``ditto_layer_head`` (None), ``ditto_states`` (None), ``normalize`` (True), ``dtype`` ("float32"),
    ``auto_select`` (True), ``sts_dir`` (None); see :class:`DenseEncoder`."""

    ditto_layer_head: Optional[Sequence[int]]
    ditto_states: Optional[str]
    normalize: bool
    dtype: str
    auto_select: bool
    sts_dir: Union[str, os.PathLike, None]


class DenseEncoder:
    """Encode texts into L2-normalised vectors.

    Args:
        model: a local Hugging Face folder, ``"minilm"``/``"splade-tiny"``, or None for the bundled
            all-MiniLM-L6-v2. Only the transformer body is used (an MLM head is ignored).
        pooling: ``mean`` | ``cls`` | ``first-last`` | ``ditto`` (see :mod:`retrieval.dense.pooling`).
        ditto_layer_head: (layer, head) for Ditto. If None: the choice stored by ``retr ditto-select``
            for this model's weights, else the paper's pair for the checkpoints it names, else (when
            ``auto_select``) a selection on STS-B dev is run now and stored.
        ditto_states: ``first-last`` (the authors') or ``last``: the token states Ditto weights.
            If None: the stored choice's, else ``first-last``.
        device: ``auto`` | ``cpu`` | ``cuda``.
        max_length: token limit; None = the model's ``sentence_bert_config.json`` value, else
            min(512, the position-embedding size).
        normalize: L2-normalise vectors (inner product = cosine).
        dtype: ``float32`` or ``float16`` for the returned/stored vectors.
        precision: compute precision, ``auto`` | ``fp32`` | ``bf16`` | ``fp16`` (autocast; ``auto``: bf16 on
            a GPU that has it, fp16 on one that does not, fp32 on a CPU; see :func:`retrieval.models.resolve_precision`;
            with ``backend="auto"`` on a CPU: :func:`retrieval.models.resolve_encoding`).
        backend: ``torch`` | ``onnx`` | ``onnx-int8``: the transformer body in PyTorch, or exported to ONNX
            Runtime (CPU only; mean or cls pooling; see :mod:`retrieval.onnxrt`); ``auto``: the
            CPU default where ONNX Runtime can run it, else torch (:func:`retrieval.models.resolve_encoding`).
    """

    def __init__(self, model: str | os.PathLike | None = None, pooling: str = "mean", *, device: str = "auto",
                 max_length: Optional[int] = None, quiet: bool = False, precision: str = "auto",
                 backend: str = "torch", **options: Unpack[EncoderOptions]):
        check_keywords("DenseEncoder.__init__", options, EncoderOptions)
        ditto_layer_head, ditto_states = options.get("ditto_layer_head"), options.get("ditto_states")
        normalize, dtype = options.get("normalize", True), options.get("dtype", "float32")
        auto_select, sts_dir = options.get("auto_select", True), options.get("sts_dir")
        if str(dtype).lower() not in _DTYPES:
            raise InputError(f"unknown vector dtype {dtype!r} (choose from: float32, float16)")
        self.out_dtype = _DTYPES[str(dtype).lower()]
        self.pooling = canonical_name(pooling)
        self._sts_dir = sts_dir  # where Ditto's (layer, head) is chosen when none is stored
        self.model_path = resolve_model_path(model)
        self.device = pick_device(device)
        self._asked = (check_backend(backend), precision)
        self.backend, self.precision = resolve_encoding(backend, precision, self.device, self.pooling)
        self._onnx = None  # the ONNX Runtime session, made on first use
        self.normalize = bool(normalize)
        _quiet_transformers()
        from transformers import AutoConfig, AutoModel, AutoTokenizer
        try:
            self.hf_config = AutoConfig.from_pretrained(self.model_path)
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            # Under SDPA transformers 5 returns no attentions, so a pooler that needs them (Ditto)
            # gets eager attention; forward_batches() switches over if attentions are asked later.
            impl = "eager" if get_pooler_needs_attn(self.pooling) else None
            self.model = AutoModel.from_pretrained(self.model_path, **({"attn_implementation": impl} if impl else {}))
        except (OSError, ValueError) as e:
            raise ModelDirError(f"cannot load model from {self.model_path}: {str(e).splitlines()[0]}")
        self.model.eval().to(self.device)
        self.max_length = int(max_length) if max_length else self._default_max_length()
        self.n_layers = int(self.hf_config.num_hidden_layers)
        self.n_heads = int(self.hf_config.num_attention_heads)
        self.ditto_source = None
        layer = head = None
        states = ditto_states or "first-last"
        if self.pooling == "ditto":
            layer, head, states = self._resolve_ditto(ditto_layer_head, ditto_states, auto_select, quiet)
        self.pooler = get_pooler(self.pooling, layer, head, states)
        if self.backend != "torch":
            self._check_onnx()

    def _check_onnx(self) -> None:
        from retrieval.onnxrt import OnnxUnavailable

        if self.pooler.needs_hidden_states or self.pooler.needs_attentions:
            raise OnnxUnavailable(f"backend {self.backend} runs mean or cls pooling, not {self.pooling} (use torch)")
        if self.device != "cpu":
            raise OnnxUnavailable(f"backend {self.backend} runs on a CPU; on {self.device} use torch")
        if self.precision != "fp32":
            raise OnnxUnavailable(f"backend {self.backend} computes in its own precision; give precision fp32 or "
                                  f"auto, not {self.precision}")

    # -- setup -----------------------------------------------------------------------------------
    def _default_max_length(self) -> int:
        sb = self.model_path / "sentence_bert_config.json"
        if sb.is_file():
            try:
                return int(json.loads(sb.read_text())["max_seq_length"])
            except (KeyError, ValueError):
                pass
        return int(min(512, getattr(self.hf_config, "max_position_embeddings", 512) or 512))

    @property
    def model_hash(self) -> str:
        return model_hash(self.model_path)

    def _resolve_ditto(self, pair, states, auto_select: bool, quiet: bool) -> tuple[int, int, str]:
        if pair is not None:
            self.ditto_source = "given"
        else:
            rec = ditto_store.load_choice(self.model_hash)
            if rec is not None:
                pair, self.ditto_source = (rec["layer"], rec["head"]), f"stored:{ditto_store.choice_path(self.model_hash)}"
                states = states or rec.get("states")
            elif ditto_store.paper_default(self.model_path) is not None:
                pair, self.ditto_source = ditto_store.paper_default(self.model_path), "paper"
            elif auto_select:
                from retrieval.dense import sts  # lazy: sts imports this module
                if not quiet:
                    print(f"retr: no Ditto (layer, head) stored for {self.model_path.name}; selecting on STS-B dev "
                          f"(stored in {ditto_store.choice_path(self.model_hash)})", file=sys.stderr)
                rec = sts.select_ditto_head(self, store=True, quiet=quiet, sts_dir=self._sts_dir)
                pair, self.ditto_source = (rec["layer"], rec["head"]), "selected"
                states = states or rec.get("states")
            else:
                raise UnknownPoolingError(f"no Ditto (layer, head) stored for {self.model_path}; run "
                                          f"`retr ditto-select --model {self.model_path}` or pass ditto_layer_head")
        try:
            layer, head = (int(x) for x in pair)
        except (TypeError, ValueError):
            raise UnknownPoolingError(f"ditto_layer_head must be two integers, got {pair!r}")
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            raise UnknownPoolingError(f"Ditto (layer, head)=({layer}, {head}) out of range for this model "
                                      f"({self.n_layers} layers x {self.n_heads} heads)")
        return layer, head, states or "first-last"

    # -- properties ------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        """Vector dimension (the model's hidden size for every pooler)."""
        return int(self.hf_config.hidden_size)

    @property
    def ditto_layer_head(self) -> Optional[tuple[int, int]]:
        return (self.pooler.layer, self.pooler.head) if self.pooling == "ditto" else None

    @property
    def ditto_states(self) -> Optional[str]:
        return self.pooler.states if self.pooling == "ditto" else None

    def config(self) -> dict:
        """Everything needed to rebuild this encoder (:meth:`from_config`) and to check it later."""
        lh, (query_backend, query_precision) = self.ditto_layer_head, self.query_encoding
        return {"model": str(self.model_path), "model_sha256": self.model_hash,
                "architecture": getattr(self.hf_config, "model_type", None),
                "pooling": self.pooling, "ditto_layer": lh[0] if lh else None, "ditto_head": lh[1] if lh else None,
                "ditto_states": self.ditto_states,
                "max_length": self.max_length, "normalize": self.normalize,
                "dtype": np.dtype(self.out_dtype).name, "dim": self.dim,
                "precision": self.precision, "backend": self.backend,
                "query_backend": query_backend, "query_precision": query_precision}

    @property
    def query_encoding(self) -> tuple[str, str]:
        """(backend, precision) that queries against these passages run by default: ``auto``'s choice
        for queries when this encoder's backend was ``auto``, else its own (an explicit choice holds
        for both)."""
        if self._asked[0] != "auto":
            return self.backend, self.precision
        return resolve_encoding("auto", self._asked[1], self.device, self.pooling, role="queries")

    @classmethod
    def from_config(cls, cfg: dict, device: str = "auto", verify: bool = True, **overrides) -> "DenseEncoder":
        """Rebuild the encoder described by :meth:`config`. If the recorded folder is gone but the
        weights hash equals a bundled model's, that model is used (an index moved between machines)."""
        path = cfg.get("model")
        if path and not Path(path).exists():
            for name in ("minilm", "splade-tiny"):
                try:
                    cand = bundled_model_path(name)
                except ModelDirError:
                    continue
                if cand.exists() and model_hash(cand) == cfg.get("model_sha256"):
                    path = str(cand)
                    break
        lh = (cfg["ditto_layer"], cfg["ditto_head"]) if cfg.get("pooling") == "ditto" else None
        # Indexes written before Ditto had a states choice used the authors' first-last average.
        st = (cfg.get("ditto_states") or "first-last") if lh else None
        kw = dict(model=path, pooling=cfg.get("pooling", "mean"), ditto_layer_head=lh, ditto_states=st, device=device,
                  max_length=cfg.get("max_length"), normalize=cfg.get("normalize", True),
                  dtype=cfg.get("dtype", "float32"),
                  # recorded since issue 46; an older index computed in fp32 PyTorch
                  precision=cfg.get("precision", "fp32"), backend=cfg.get("backend", "torch"))
        kw.update(overrides)
        if kw.get("backend") not in (None, "torch", "auto") and device == "auto":
            kw["device"] = "cpu"  # passages encoded by ONNX Runtime: queries and added ones run it too, on a CPU
        enc = cls(**kw)
        if verify and cfg.get("model_sha256") and enc.model_hash != cfg["model_sha256"]:
            raise ModelDirError(f"model weights at {enc.model_path} (sha256 {enc.model_hash}) differ from the ones "
                                f"this index was built with ({cfg['model_sha256']})")
        return enc

    # -- encoding --------------------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text (truncated to ``max_length``, special tokens added)."""
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise InputError(f"text {bad} is not a string: {type(texts[bad]).__name__}")
        enc = self.tokenizer(list(texts), truncation=True, max_length=self.max_length, padding=False,
                             return_attention_mask=False, return_token_type_ids=False)
        return enc["input_ids"]

    def _pad(self, ids: list[list[int]]) -> dict:
        # Hand-written padding: the tokenizer's pad() on pre-tokenised input is slower and warns.
        n, t = len(ids), max(len(x) for x in ids)
        pad = self.tokenizer.pad_token_id or 0
        arr = np.full((n, t), pad, dtype=np.int64)
        mask = np.zeros((n, t), dtype=np.int64)
        for i, x in enumerate(ids):
            arr[i, :len(x)] = x
            mask[i, :len(x)] = 1
        batch = {"input_ids": torch.from_numpy(arr), "attention_mask": torch.from_numpy(mask)}
        if "token_type_ids" in self.tokenizer.model_input_names:
            batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])
        return {k: v.to(self.device) for k, v in batch.items()}

    def forward_batches(self, texts: Sequence[str], batch_size: int = 64, hidden_states: bool = False,
                        attentions: bool = False, bar: Optional[tqdm] = None) -> Iterator[tuple[np.ndarray, object, torch.Tensor]]:
        """Yield ``(original_indices, model_outputs, mask)`` per length-sorted batch (for custom pooling)."""
        if batch_size < 1:
            raise InputError(f"batch size must be positive, got {batch_size}")
        if attentions and getattr(self.model.config, "_attn_implementation", "eager") != "eager":
            self.model.set_attn_implementation("eager")
        with torch.inference_mode(), autocast(self.precision, self.device):
            for idx, batch in self._batches(texts, batch_size):
                out = self.model(**batch, output_hidden_states=hidden_states, output_attentions=attentions,
                                 return_dict=True)
                yield idx, out, batch["attention_mask"]
                if bar is not None:
                    bar.update(len(idx))

    def _batches(self, texts: Sequence[str], batch_size: int):
        """``(original indices, padded batch)`` per length-sorted batch."""
        ids = self.tokenize(texts)
        order = np.argsort([-len(x) for x in ids], kind="stable")
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            yield idx, self._pad([ids[i] for i in idx])

    @property
    def onnx_body(self):
        """The ONNX Runtime session of this encoder's body (exported and cached on first use)."""
        if self._onnx is None:
            from retrieval import onnxrt

            self._onnx = onnxrt.session(self.model, self.model_path, self.tokenizer,
                                        quantized=self.backend == "onnx-int8")
        return self._onnx

    @property
    def _alone_in_torch(self) -> bool:
        """Reduced precision on a CPU, for a pooler of the last states only: each text runs alone."""
        return self.device == "cpu" and self.precision != "fp32" and not (
            self.pooler.needs_hidden_states or self.pooler.needs_attentions)

    def _torch_one(self, ids: list[int]) -> np.ndarray:
        """The last hidden states (tokens, dim) of one unpadded text, in this encoder's precision."""
        x = torch.tensor([ids], dtype=torch.long)
        batch = {"input_ids": x, "attention_mask": torch.ones_like(x)}
        if "token_type_ids" in self.tokenizer.model_input_names:
            batch["token_type_ids"] = torch.zeros_like(x)
        with torch.inference_mode(), autocast(self.precision, self.device):  # both are per thread
            return self.model(**batch, return_dict=True).last_hidden_state[0].float().numpy()

    def _torch_map(self, ids: list[list[int]]) -> list:
        """:meth:`_torch_one` over ``ids`` in order, as many at a time as torch has threads, each on one."""
        n = torch.get_num_threads()
        with torch_threads(1):
            return map_alone(self._torch_one, ids, n)

    def _alone_encode_into(self, texts, out, batch_size, bar) -> None:
        """:meth:`_encode_into` one text at a time (no padding, no neighbours), for the ONNX backends
        and for reduced precision on a CPU: int8 scales its activations per run, and bf16 rounds
        sums whose order depends on the batch's shape, so in a shared batch a vector moved with its
        neighbours (int8: 5e-2, bf16: 1.4e-3); alone it is the same whatever the batch and the thread
        count. Up to torch's thread count of texts run at once, longest first; pooled and normalised
        as a batch is."""
        ids = self.tokenize(texts)
        order = np.argsort([-len(x) for x in ids], kind="stable")
        body = self.onnx_body.map if self.backend != "torch" else self._torch_map
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            for i, last in zip(idx, body([ids[i] for i in idx])):
                o = SimpleNamespace(last_hidden_state=torch.from_numpy(last)[None])
                v = self.pooler(o, torch.ones((1, last.shape[0]), dtype=torch.long)).float()
                if self.normalize:
                    v = torch.nn.functional.normalize(v, dim=-1)
                out[i] = v[0].numpy().astype(self.out_dtype, copy=False)
            if bar is not None:
                bar.update(len(idx))

    def encode(self, texts: Sequence[str], batch_size: int = 64, quiet: bool = False, bar=None) -> np.ndarray:
        """Vectors for ``texts`` in input order: (N, dim) array of the configured dtype (float32 default).
        ``bar``: anything with ``update(n)`` (a caller's progress bar) to move batch by batch instead of a
        bar of its own."""
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=self.out_dtype)
        if not texts:
            return out
        if bar is not None:
            self._encode_into(texts, out, batch_size, bar)
            return out
        # leave=False: the bar clears its line when it closes, so the command's next line (its result)
        # starts on a clean line, as after every other bar (retrieval.progress)
        with tqdm(total=len(texts), desc="encoding", unit="text", disable=quiet or len(texts) <= batch_size,
                  file=sys.stderr, leave=False) as bar:
            self._encode_into(texts, out, batch_size, bar)
        return out

    def _encode_into(self, texts, out, batch_size, bar) -> None:
        if self.backend != "torch" or self._alone_in_torch:
            return self._alone_encode_into(texts, out, batch_size, bar)
        batches = self.forward_batches(texts, batch_size, self.pooler.needs_hidden_states,
                                       self.pooler.needs_attentions, bar)
        for idx, o, mask in batches:
            v = self.pooler(o, mask.to(o.last_hidden_state.device)).float()
            if self.normalize:
                v = torch.nn.functional.normalize(v, dim=-1)
            out[idx] = v.cpu().numpy().astype(self.out_dtype, copy=False)

    def encode_to_shards(self, texts: Iterable[str], out_dir: str | os.PathLike, shard_size: int = 10000,
                         batch_size: int = 64, quiet: bool = False, total: Optional[int] = None) -> list[Path]:
        """Encode a (possibly huge) stream of texts into ``out_dir/shard-00000.npy``, ... of ``shard_size`` rows.

        Resumable: a shard file that already exists with the right number of rows is skipped
        (without encoding its texts again); shards are written atomically, so an interrupted run
        leaves no half-written shard. ``out_dir/meta.json`` records the encoder config and shard
        size; resuming with a different one raises :class:`InputError`. Returns the shard paths in
        order; read them back with :func:`load_shards`. ``total``: how many texts there are, when
        known, for the progress bar's total and ETA.
        """
        if shard_size < 1:
            raise InputError(f"shard size must be positive, got {shard_size}")
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        meta = {"encoder": self.config(), "shard_size": int(shard_size)}
        meta_path = out_dir / "meta.json"
        if meta_path.is_file():
            old = json.loads(meta_path.read_text())
            old_cmp = {**old.get("encoder", {}), "model": None}
            if old_cmp != {**meta["encoder"], "model": None} or old.get("shard_size") != meta["shard_size"]:
                raise InputError("was encoded with a different encoder or shard size; use a new folder", path=out_dir)
        else:
            write_text(meta_path, json.dumps(meta, indent=2))
        paths, it, i = [], iter(texts), 0
        from retrieval.progress import progress

        with progress(total=total, desc="encoding", unit="text", quiet=quiet) as bar:
            while True:
                chunk = list(islice(it, shard_size))
                if not chunk:
                    break
                p = out_dir / f"shard-{i:05d}.npy"
                if not _shard_done(p, len(chunk), self.dim):
                    arr = np.zeros((len(chunk), self.dim), dtype=self.out_dtype)
                    self._encode_into(chunk, arr, batch_size, bar)
                    write_shard(p, arr)
                else:
                    bar.update(len(chunk))
                paths.append(p)
                i += 1
        return paths


def write_shard(p: Path, arr: np.ndarray) -> None:
    """Save one shard atomically (an interrupted run leaves no half-written shard)."""
    with atomic_write(p, "wb") as fh:
        np.save(fh, arr)


def _shard_done(p: Path, rows: int, dim: int) -> bool:
    if not p.is_file():
        return False
    try:
        return np.load(p, mmap_mode="r").shape == (rows, dim)
    except (ValueError, OSError):
        return False


def load_shards(out_dir: str | os.PathLike) -> np.ndarray:
    """All shards of :meth:`DenseEncoder.encode_to_shards` as one (N, dim) array, in order."""
    paths = sorted(Path(out_dir).glob("shard-*.npy"))
    if not paths:
        raise InputError("no encoded shards found", path=out_dir)
    return np.concatenate([np.load(p) for p in paths])


class DenseStage:
    """The dense encoder as an executor stage (:mod:`retrieval.executors`): only its
    config travels; each worker rebuilds the same encoder (weights hash-checked) once."""

    name = "dense"
    block_size = 1024
    adaptive_blocks = True  # vectors agree to ~1e-7 whatever the blocks (batch padding differs)
    reports_progress = True

    def __init__(self, config: dict, batch_size: int = 64, device: str = "auto", encoder: "DenseEncoder" = None):
        self.config, self.batch_size, self.want = dict(config), int(batch_size), device
        self._enc = encoder  # in-process: the driver's own encoder, never pickled

    def __getstate__(self):
        return dict(self.__dict__, _enc=None)

    def setup(self, threads: Optional[int] = None, gpu: bool = False) -> None:
        if self._enc is None:
            dev = self.want if self.want != "auto" else ("cuda" if gpu else "cpu")
            if self.config.get("backend", "torch") != "torch":
                dev = "cpu"  # ONNX Runtime runs on the worker's CPU, as at the build
            self._enc = DenseEncoder.from_config(self.config, device=dev, quiet=True)
            if threads:
                torch.set_num_threads(int(threads))

    def run(self, texts: list, bar=None) -> np.ndarray:
        return self._enc.encode(texts, batch_size=self.batch_size, quiet=True, bar=bar)

    def device(self) -> str:
        d = str(self._enc.device) if self._enc is not None else "cpu"
        if d.startswith("cuda") and torch.cuda.is_available():
            d += f" ({torch.cuda.get_device_name(0)})"
        return d
