"""The settings of a DeepCT training run (:func:`retrieval.deepct.train.train_deepct`), apart from the
training code so that the command line reads its defaults without importing torch."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Optional

from indexes.errors import ParameterError


@dataclass
class TrainConfig:
    """Training settings (defaults sized for ~10 min on 2 CPU cores for SciFact's train split)."""

    base: Optional[str] = None        # None: bundled all-MiniLM-L6-v2; "splade-tiny"; or a local HF folder
    epochs: int = 2
    lr: float = 5e-5
    batch_size: int = 16
    max_length: int = 128
    seed: int = 13
    warmup: float = 0.1
    weight_decay: float = 0.01
    dropout: float = 0.1
    min_rel: int = 1                  # a qrel is relevant when grade >= min_rel
    dev_fraction: float = 0.1         # training queries held out (recorded) for tuning BM25/fusion
    title: str = "auto"               # auto (only without qrels, off with them) | off | extra (titles for docs
                                      # without qrels) | only
    title_limit: Optional[int] = None  # at most this many title-supervised passages
    max_windows: Optional[int] = None  # at most this many training windows per passage (None: all)
    checkpoint_every: int = 50        # steps
    device: str = "auto"
    threads: Optional[int] = 1        # torch threads; 1 is fastest on shared cores (OpenMP spin-waits)

    def validate(self) -> "TrainConfig":
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ParameterError("{epochs}, {batch_size} and {lr} must be positive (got {_e}, {_b}, {_lr})",
                                 _e=self.epochs, _b=self.batch_size, _lr=self.lr)
        if not 0 <= self.dev_fraction < 1:
            raise ParameterError("{dev_fraction} must be in [0, 1), got {_got}", _got=self.dev_fraction)
        if self.title not in ("auto", "off", "extra", "only"):
            raise ParameterError("{title} (title supervision) must be auto, off, extra or only, got {_got!r}",
                                 _got=self.title)
        if self.max_length < 16:
            raise ParameterError("{max_length} must be at least 16, got {_got}", _got=self.max_length)
        return self

    def key(self) -> str:
        d = asdict(self)
        for k in ("checkpoint_every", "device", "threads"):
            d.pop(k)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]
