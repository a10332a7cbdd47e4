"""The settings of a dense-training run (:func:`retrieval.dense.training.train`), apart from the
training code so that the command line reads its defaults without importing torch."""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from typing import Optional

from indexes.errors import ParameterError

PRETRAIN = ("none", "random", "rom")


@dataclass
class DenseTrainConfig:
    """Settings of a run (defaults sized for SciFact's training split on 2 CPU cores)."""

    base: Optional[str] = None          # None: bundled all-MiniLM-L6-v2; "splade-tiny"; or a local HF folder
    pretrain: str = "none"              # none | random | rom
    importance: str = "bm25"            # rom's term importance: bm25 | deepct:MODEL
    mask_rate: float = 0.15
    pretrain_epochs: int = 1
    pretrain_lr: float = 5e-5
    pretrain_batch_size: int = 16
    pretrain_max_length: int = 128
    pretrain_passages: Optional[int] = None  # at most this many passages (a seeded sample); None: all
    head_warmup: float = 0.1            # share of pre-training steps that train a fresh MLM head alone
    temperature: float = 1.0            # rom: draw in proportion to w ** (1 / temperature)
    uniform_mix: float = 0.0            # rom: share of uniform probability mixed in
    epochs: int = 4                     # fine-tuning epochs (the held-out slice picks the best)
    lr: float = 5e-5                    # 4 x 5e-5 over SciFact's ~26 steps an epoch: benchmarks/results/dense_train.md
    batch_size: int = 32
    hard_negatives: int = 1             # per example and step, sampled from the mined pool
    positives_per_query: Optional[int] = None  # examples a query brings to an epoch (None: one per relevant doc)
    negative_pool: int = 7              # mined BM25 negatives kept per example
    negative_depth: int = 30            # BM25 ranks the pool is drawn from
    max_length: int = 128               # passage tokens in fine-tuning (index time keeps the base's length)
    query_length: int = 64
    pooling: str = "mean"               # mean | cls (what `retr index --pooling` should then use)
    scale: float = 20.0                 # the loss's similarity scale (1 / temperature)
    dev_share: float = 0.1              # training queries held out to pick the epoch
    warmup: float = 0.1
    weight_decay: float = 0.01
    min_rel: int = 1
    seed: int = 0
    device: str = "auto"
    threads: Optional[int] = None       # torch threads (None: torch's default); part of determinism
    precision: str = "auto"             # autocast: auto = bf16 (fp16) on a GPU, fp32 on a CPU

    def validate(self) -> "DenseTrainConfig":
        from retrieval.models import resolve_precision

        resolve_precision(self.precision, "cpu")  # an unknown name is one line
        if self.pretrain not in PRETRAIN:
            raise ParameterError("{pretrain} must be none, random or rom, got {got!r}", got=self.pretrain)
        if self.pretrain == "rom":
            from retrieval.dense.mlm import check_importance
            check_importance(self.importance)
        if not (isinstance(self.mask_rate, (int, float)) and 0 < self.mask_rate < 1):
            raise ParameterError("{mask_rate} must lie strictly between 0 and 1, got {got}", got=self.mask_rate)
        for name in ("epochs", "pretrain_epochs", "batch_size", "pretrain_batch_size"):
            if int(getattr(self, name)) < 1:
                raise ParameterError("{%s} must be at least 1, got {got}" % name, got=getattr(self, name))
        for name in ("lr", "pretrain_lr", "scale"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ParameterError("{%s} must be a positive number, got {got}" % name, got=v)
        if not 0 <= self.dev_share < 1:
            raise ParameterError("{dev_share} must be in [0, 1), got {got}", got=self.dev_share)
        if not 0 <= self.head_warmup < 1:
            raise ParameterError("{head_warmup} must be in [0, 1), got {got}", got=self.head_warmup)
        if self.pooling not in ("mean", "cls"):
            raise ParameterError("{pooling} must be mean or cls for training, got {got!r}", got=self.pooling)
        if self.hard_negatives < 0 or self.hard_negatives > self.negative_pool:
            raise ParameterError("{hard_negatives} must be in [0, {negative_pool}], got {got}", got=self.hard_negatives)
        if min(self.max_length, self.query_length, self.pretrain_max_length) < 8:
            raise ParameterError("{max_length}, {query_length} and {pretrain_max_length} must be at least 8")
        if self.positives_per_query is not None and self.positives_per_query < 1:
            raise ParameterError("{positives_per_query} must be at least 1, got {got}", got=self.positives_per_query)
        if self.pretrain_passages is not None and self.pretrain_passages < 1:
            raise ParameterError("{pretrain_passages} must be at least 1, got {got}", got=self.pretrain_passages)
        return self

    def key(self) -> str:
        d = asdict(self)
        d.pop("device")
        d.pop("precision")  # like the device: how the run computes, not what it trains (a checkpoint resumes)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]
