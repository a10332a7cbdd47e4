"""Where a model's chosen Ditto (layer, head) is kept.

Bundled model folders live inside site-packages, so the choice made by ``retr ditto-select`` is not
written into the model folder but into a small JSON file keyed by the hash of the model's weights:
``$RETR_HOME/ditto/<model-hash>.json`` (``RETR_HOME`` defaults to ``~/.cache/retr``). The same
choice is also written into every index manifest through ``DenseEncoder.config()``, so an index
stays reproducible even if the cache is cleared.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from indexes import retr_home
from indexes.atomic import atomic_write

# Pairs the Ditto paper reports for checkpoints it tuned (METHODS.md §2). Matched by the model
# folder's name only, because these exact checkpoints cannot be identified otherwise here; a stored
# choice from `retr ditto-select` always wins.
PAPER_DEFAULTS = {
    "bert-base-uncased": (0, 9),
    "roberta-base": (0, 4),
    "bert-base-nli-stsb-mean-tokens": (2, 6),
}


def choice_path(model_hash: str) -> Path:
    return retr_home() / "ditto" / f"{model_hash}.json"


def load_choice(model_hash: str) -> Optional[dict]:
    """The stored record (with ``layer`` and ``head``) for a model, or None."""
    p = choice_path(model_hash)
    if not p.is_file():
        return None
    try:
        rec = json.loads(p.read_text())
        int(rec["layer"]), int(rec["head"])
        return rec
    except (ValueError, KeyError, TypeError):
        return None


def save_choice(model_hash: str, record: dict) -> Path:
    """Write the record atomically; returns its path."""
    p = choice_path(model_hash)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(p, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=2)
    return p


def paper_default(model_path: Path) -> Optional[tuple[int, int]]:
    return PAPER_DEFAULTS.get(Path(model_path).name.lower())
