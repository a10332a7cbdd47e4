"""What every trained encoder's run shares: the output folder's rules (a finished model has its card;
an unfinished run leaves ``.checkpoint``, resumed only on request and with the same settings), the
file hashes a card records, and the Ctrl-C that says where the last finished epoch is. Used by the
dense encoder's training and SPLADE's."""
from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path
from typing import Optional

from indexes.errors import InputError, ParameterError

CARD = "retr_train.json"
CHECKPOINT = ".checkpoint"


class TrainingStopped(KeyboardInterrupt):
    """Ctrl-C during training, after the message saying where the last finished epoch is."""


def is_trained(path) -> bool:
    return (Path(path) / CARD).is_file()


def prepare_output(out: Path, key: str, resume: bool, overwrite: bool, quiet: bool) -> Optional[dict]:
    """Check the output folder; the checkpoint to resume from (``OUTPUT/.checkpoint/state.pt``, made with
    the settings whose key is ``key``), or None."""
    import torch

    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder", out)
    ck = out / CHECKPOINT / "state.pt"
    if is_trained(out) and not overwrite:
        raise ParameterError("{_path}: already holds a trained model ({overwrite} replaces it)", _path=out)
    if out.exists() and any(out.iterdir()) and not (out / CHECKPOINT).exists() and not overwrite:
        raise ParameterError("{_path}: is not empty ({overwrite} replaces what is there)", _path=out)
    if overwrite and out.exists():
        shutil.rmtree(out)
    if not ck.is_file():
        if (out / CHECKPOINT).exists():
            shutil.rmtree(out / CHECKPOINT)  # a run killed before its first epoch ended: nothing to keep
        if resume and not quiet:
            print(f"retr: no checkpoint in {out}; training from the start", file=sys.stderr)
        return None
    if not resume:
        raise ParameterError("{_path}: holds an unfinished run (.checkpoint); {resume} continues it, "
                             "{overwrite} starts over", _path=out)
    state = torch.load(ck, weights_only=False)
    if state.get("config_key") != key:
        raise ParameterError("{_path}: its checkpoint was made with other settings; run with the same settings "
                             "to resume, or {overwrite} to start over", _path=out)
    return state


def file_hash(path) -> Optional[str]:
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file())
    else:
        files = [p]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()[:16]


