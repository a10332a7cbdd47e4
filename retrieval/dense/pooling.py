"""Poolers: turn a transformer's token states into one sentence vector.

Each pooler is a small callable ``pooler(outputs, mask) -> (B, d) tensor`` where ``outputs`` is the
Hugging Face model output (``last_hidden_state``, and ``hidden_states`` / ``attentions`` when the
pooler says it needs them) and ``mask`` the (B, T) attention mask. Choose one by name with
:func:`get_pooler`:

* ``mean``       masked mean of the last layer (what all-MiniLM-L6-v2 was trained with).
* ``cls``        the last layer's first ([CLS]) token, before any pooler head.
* ``first-last`` masked mean of ``(hidden_states[0] + hidden_states[-1]) / 2``. As in SimCSE's
                 released ``avg_first_last`` and in Ditto's code, "first" is ``hidden_states[0]``,
                 the *embedding layer output*, not the first transformer layer.
* ``ditto``      Ditto (Chen et al., EMNLP 2023): token i weighted by ``attentions[layer][:, head, i, i]``,
                 embedding ``sum_i w_i * mask_i * (hidden_states[0]_i + hidden_states[-1]_i) / 2``.
                 Like the authors' code, the weights are *not* normalised (no division by
                 ``sum_i w_i``); that only rescales each vector, so cosine scores are unchanged.
                 ``states="last"`` weights the last layer's states instead of the first-last
                 average: the same diagonal weights over the space a mean-pooling-trained model
                 (all-MiniLM-L6-v2) was trained in. ``retr ditto-select`` picks the states with the
                 (layer, head) on STS-B dev; see :data:`DITTO_STATES`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from indexes.errors import InputError

POOLERS = ("mean", "cls", "first-last", "ditto")
#: Which hidden states Ditto averages: the authors' first-last average (the default), or the last layer.
DITTO_STATES = ("first-last", "last")
_ALIASES = {"first_last": "first-last", "firstlast": "first-last", "avg": "mean", "avg_first_last": "first-last"}


class UnknownPoolingError(InputError):
    """A pooling name that is not one of :data:`POOLERS`, or Ditto without a valid (layer, head)."""


def mean_pool(last: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked mean over tokens: ``sum_i mask_i h_i / sum_i mask_i``."""
    m = mask.unsqueeze(-1).to(last.dtype)
    return (last * m).sum(1) / m.sum(1).clamp(min=1e-9)


def cls_pool(last: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The first token's state."""
    return last[:, 0]


def first_last_pool(first: torch.Tensor, last: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked mean of the average of the first and last hidden states."""
    return mean_pool((first + last) / 2.0, mask)


def ditto_weights(attentions: Any, layer: int, head: int) -> torch.Tensor:
    """Token weights (B, T): the diagonal of attention head ``head`` in layer ``layer``."""
    if not attentions:
        raise RuntimeError("the model returned no attentions; load it with attn_implementation='eager'")
    return torch.diagonal(attentions[layer][:, head], dim1=-2, dim2=-1)


def ditto_pool(first: torch.Tensor, last: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor,
               states: str = "first-last") -> torch.Tensor:
    """``sum_i w_i * mask_i * (first_i + last_i) / 2`` (unnormalised, as in the authors' code);
    with ``states="last"``, ``sum_i w_i * mask_i * last_i``."""
    w = (weights * mask.to(weights.dtype)).unsqueeze(-1)
    return (w * ditto_states(first, last, states)).sum(1)


def check_ditto_states(states: str) -> str:
    """``states`` if it is one of :data:`DITTO_STATES`, else a clear error."""
    if states not in DITTO_STATES:
        raise UnknownPoolingError(f"unknown Ditto states {states!r} (choose from: {', '.join(DITTO_STATES)})")
    return states


def ditto_states(first: torch.Tensor, last: torch.Tensor, states: str = "first-last") -> torch.Tensor:
    """The token states Ditto weights: ``(first + last) / 2`` or ``last``."""
    return last if check_ditto_states(states) == "last" else (first + last) / 2.0


def ditto_all_heads(outputs: Any, mask: torch.Tensor, states: str = "first-last") -> torch.Tensor:
    """Ditto vectors of one batch for every (layer, head) at once: (B, layers, heads, d), each the
    same sum as :func:`ditto_pool` with that head's attention diagonal (unnormalised)."""
    diag = torch.stack([torch.diagonal(a, dim1=-2, dim2=-1) for a in outputs.attentions], 1)  # B,L,H,T
    w = diag * mask[:, None, None, :].to(diag.dtype)
    hs = outputs.hidden_states
    return torch.einsum("blht,btd->blhd", w, ditto_states(hs[0], hs[-1], states))


@dataclass(frozen=True)
class Pooler:
    """A named pooler; ``needs_*`` tell the encoder which extra model outputs to request."""

    name: str
    layer: Optional[int] = None
    head: Optional[int] = None
    states: str = "first-last"

    @property
    def needs_hidden_states(self) -> bool:
        return self.name in ("first-last", "ditto")

    @property
    def needs_attentions(self) -> bool:
        return self.name == "ditto"

    def __call__(self, outputs: Any, mask: torch.Tensor) -> torch.Tensor:
        if self.name == "mean":
            return mean_pool(outputs.last_hidden_state, mask)
        if self.name == "cls":
            return cls_pool(outputs.last_hidden_state)
        hs = outputs.hidden_states
        if self.name == "first-last":
            return first_last_pool(hs[0], hs[-1], mask)
        return ditto_pool(hs[0], hs[-1], mask, ditto_weights(outputs.attentions, self.layer, self.head), self.states)


def canonical_name(name: str) -> str:
    """Normalise a pooling name (``first_last`` -> ``first-last``); unknown names raise."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in POOLERS:
        raise UnknownPoolingError(f"unknown pooling {name!r} (choose from: {', '.join(POOLERS)})")
    return key


def get_pooler(name: str, layer: Optional[int] = None, head: Optional[int] = None,
               states: str = "first-last") -> Pooler:
    """The pooler called ``name``; Ditto needs ``layer`` and ``head`` (and takes ``states``)."""
    key = canonical_name(name)
    if key == "ditto":
        if layer is None or head is None:
            raise UnknownPoolingError("ditto pooling needs a (layer, head) pair; run `retr ditto-select` "
                                      "or pass ditto_layer_head=(layer, head)")
        return Pooler(key, int(layer), int(head), check_ditto_states(states))
    return Pooler(key)
