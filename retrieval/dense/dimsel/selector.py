"""The learned selector as search uses it: its configuration, its network (torch, imported
when a selector is built or loaded), and :class:`Selector`, which applies a trained one in
numpy. Training it is ``training.py``'s."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple, Union

import numpy as np

from indexes.atomic import atomic_path, write_text
from retrieval.dense.dimsel.masks import DimSelError, adaptive_mask, check_alpha, top_mask

SELECTOR_DIR = "dimsel"           # beside the faiss files: INDEX/<dense>/dimsel/
SELECTOR_FILES = ("selector.pt", "selector.json")


@dataclass
class SelectorConfig:
    """Everything that defines a learned selector and its training run."""

    hidden: int = 256
    arch: str = "qv"            # qv: importance = q ⊙ (q + MLP(q)) (residual around q ⊙ q); free: MLP(q)
    loss: str = "kl+rank"       # kl | rank | kl+rank
    rank_weight: float = 1.0
    tau: float = 0.5            # temperature of the oracle target softmax (on standardised importance)
    rank_temp: float = 0.05     # temperature of the contrastive ranking loss
    rank_alpha: float = 0.5     # share kept by the soft top-alpha mask inside the ranking loss
    beta: float = 1.0           # oracle: weight of the non-relevant mean
    neg_k: int = 10             # oracle: unjudged top-ranked docs counted as non-relevant
    cand_k: int = 100           # ranking loss: first-stage candidates per query
    epochs: int = 100
    lr: float = 1e-3
    weight_decay: float = 1e-4
    dropout: float = 0.1
    batch_size: int = 64
    seed: int = 0
    dev_share: float = 0.2      # training queries held out to pick the epoch, alpha and threshold
    alphas: Tuple[float, ...] = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    thresholds: Tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
    alpha: Optional[float] = None       # fixed alpha policy; None = chosen on the dev queries
    threshold: Optional[float] = None   # adaptive policy; None = chosen on the dev queries

    def validate(self) -> "SelectorConfig":
        if self.arch not in ("qv", "free"):
            raise DimSelError(f"unknown selector architecture {self.arch!r} (choose from: qv, free)")
        if self.loss not in ("kl", "rank", "kl+rank"):
            raise DimSelError(f"unknown selector loss {self.loss!r} (choose from: kl, rank, kl+rank)")
        if self.hidden < 1 or self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise DimSelError("hidden, epochs, batch size and learning rate must be positive")
        if not (0.0 <= self.dev_share < 1.0):
            raise DimSelError(f"dev share must be in [0, 1), got {self.dev_share}")
        if self.alpha is not None:
            check_alpha(self.alpha)
        check_alpha(self.rank_alpha)
        for a in self.alphas:
            check_alpha(a)
        return self


def _torch():
    import torch
    return torch


def _make_net(dim: int, cfg: SelectorConfig):
    torch = _torch()
    nn = torch.nn

    class SelectorNet(nn.Module):
        """Query embedding -> per-dimension importance logits."""

        def __init__(self):
            super().__init__()
            self.arch = cfg.arch
            self.mlp = nn.Sequential(nn.Linear(dim, cfg.hidden), nn.GELU(), nn.Dropout(cfg.dropout),
                                     nn.Linear(cfg.hidden, dim))
            if cfg.arch == "qv":  # start exactly at the prior q ⊙ q
                nn.init.zeros_(self.mlp[-1].weight)
                nn.init.zeros_(self.mlp[-1].bias)
            self.log_scale = nn.Parameter(torch.tensor(math.log(float(dim))))

        def forward(self, q):
            if self.arch == "qv":
                return q * (q + self.mlp(q))
            return self.mlp(q)

    return SelectorNet()


class Selector:
    """A trained selector: ``importance(Q)`` and ``mask(Q)`` for query embeddings of its dimension."""

    def __init__(self, net, config: dict):
        self.net = net.eval()
        self.config = config
        self.dim = int(config["dim"])
        # Search runs the MLP in numpy: for one query torch's per-call overhead (and its thread
        # pool on a busy machine) cost tens of milliseconds; two small matmuls cost microseconds.
        sd = {k: v.detach().numpy().astype(np.float32) for k, v in net.state_dict().items()}
        self._w1, self._b1 = sd["mlp.0.weight"].T.copy(), sd["mlp.0.bias"]
        self._w2, self._b2 = sd["mlp.3.weight"].T.copy(), sd["mlp.3.bias"]
        self._arch = net.arch

    def importance(self, Q: np.ndarray) -> np.ndarray:
        """Per-dimension importance (n, dim) for query vectors (n, dim)."""
        from scipy.special import erf

        Q = np.atleast_2d(np.asarray(Q, dtype=np.float32))
        if Q.shape[1] != self.dim:
            raise DimSelError(f"selector was trained for dimension {self.dim}, but the query vectors have "
                              f"dimension {Q.shape[1]}")
        h = Q @ self._w1 + self._b1
        h = (0.5 * h * (1.0 + erf(h / np.float32(math.sqrt(2.0))))).astype(np.float32)  # exact GELU
        out = h @ self._w2 + self._b2
        return Q * (Q + out) if self._arch == "qv" else out

    def importance_torch(self, Q: np.ndarray) -> np.ndarray:
        """The same through the torch module (used to check the numpy path)."""
        torch = _torch()
        with torch.inference_mode():
            return self.net(torch.from_numpy(np.atleast_2d(np.asarray(Q, dtype=np.float32)))).numpy()

    def mask(self, Q: np.ndarray, alpha: Optional[float] = None, threshold: Optional[float] = None) -> np.ndarray:
        imp = self.importance(Q)
        if threshold is not None:
            return adaptive_mask(imp, threshold)
        return top_mask(imp, alpha if alpha is not None else self.config["alpha"])

    def save(self, folder: Union[str, Path]) -> Path:
        torch = _torch()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(folder / "selector.pt") as tmp:
            torch.save(self.net.state_dict(), tmp)
        write_text(folder / "selector.json", json.dumps(self.config, indent=2) + "\n")
        return folder

    @classmethod
    def load(cls, folder: Union[str, Path]) -> "Selector":
        torch = _torch()
        folder = Path(folder)
        if not (folder / "selector.json").is_file() or not (folder / "selector.pt").is_file():
            raise DimSelError(f"{folder}: no trained dimension selector here (run `retr train dimsel` first)")
        config = json.loads((folder / "selector.json").read_text())
        cfg = SelectorConfig(**{k: (tuple(v) if isinstance(v, list) else v)
                                for k, v in config["model"].items() if k in SelectorConfig.__dataclass_fields__})
        net = _make_net(int(config["dim"]), cfg)
        try:
            net.load_state_dict(torch.load(folder / "selector.pt", map_location="cpu", weights_only=True))
        except (RuntimeError, ValueError, OSError) as e:
            raise DimSelError(f"{folder}: cannot load the selector weights ({str(e).splitlines()[0]})") from None
        return cls(net, config)


def selector_folder(dense) -> Path:
    return Path(dense.path) / SELECTOR_DIR
