"""The optimiser every trained part of retr uses (DeepCT, the dense encoder): AdamW without weight
decay on biases and norms, with a linear warmup over the first ``warmup`` share of the steps and a
linear decay to zero after it (BERT's fine-tuning recipe, through transformers' schedule)."""
from __future__ import annotations

from typing import Tuple

import torch

NO_DECAY = ("bias", "LayerNorm.weight", "norm.weight")


def adamw_with_warmup(model: torch.nn.Module, lr: float, weight_decay: float, warmup: float, total: int
                      ) -> Tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """``(optimizer, scheduler)`` over ``model``'s parameters for ``total`` steps."""
    from transformers import get_linear_schedule_with_warmup

    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if not any(x in n for x in NO_DECAY)], "weight_decay": weight_decay},
              {"params": [p for n, p in named if any(x in n for x in NO_DECAY)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr)
    total = max(int(total), 1)
    return opt, get_linear_schedule_with_warmup(opt, int(warmup * total), total)
