"""Semantic textual similarity (STS) evaluation and Ditto head selection.

Protocol (SentEval as used by SimCSE and Ditto): cosine similarity of the two sentence vectors,
Spearman correlation with the gold scores, x100. STS12-16 use SentEval's "all" aggregation: one
Spearman over the concatenation of all subsets (= the set's ``test.tsv``); STS-B and SICK-R use
their test split. The average is over the seven sets. By default the text is SentEval's tokenised
copy (``*.senteval.tsv``) as in the published numbers; ``text="raw"`` uses the original text.

Every sentence is encoded once: all poolers are computed from the same forward pass
(hidden states + attentions), and repeated sentences are encoded once.
"""
from __future__ import annotations

import datetime as _dt
import os
import sys
from pathlib import Path
from typing import Optional, Sequence, TypedDict

import numpy as np
from scipy.stats import spearmanr
from tqdm import tqdm
from typing_extensions import Unpack

from indexes.errors import InputError, ParameterError
from retrieval.dense import ditto_store
from retrieval.dense.pooling import DITTO_STATES, check_ditto_states, ditto_all_heads, get_pooler
from retrieval.options import check_keywords

SETS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R")
_FILES = {"STS12": "sts12/test", "STS13": "sts13/test", "STS14": "sts14/test", "STS15": "sts15/test",
          "STS16": "sts16/test", "STS-B": "stsb/test", "SICK-R": "sickr/test", "STS-B-dev": "stsb/dev"}
TEXTS = ("senteval", "raw")


class STSDataError(InputError):
    """STS data folder or file missing or malformed."""


class STSDataNotFound(STSDataError, ParameterError):
    """No STS data folder where ``sts_dir`` or the defaults point."""


def find_sts_dir(sts_dir: str | os.PathLike | None = None) -> Path:
    """The STS data folder: ``sts_dir``, ``$RETR_STS``, ``$RETR_DATA/sts``, or ``../shared/datasets/sts``
    relative to the working directory or to the repository."""
    cands = [sts_dir] if sts_dir else []
    if not sts_dir:
        cands += [os.environ.get("RETR_STS"),
                  os.environ.get("RETR_DATA") and Path(os.environ["RETR_DATA"]) / "sts",
                  Path("../shared/datasets/sts"),
                  Path(__file__).resolve().parents[3] / "shared" / "datasets" / "sts"]  # beside the checkout
    for c in cands:
        if c and (Path(c) / "stsb" / "dev.tsv").is_file():
            return Path(c)
    where = sts_dir or "$RETR_STS, $RETR_DATA/sts, ../shared/datasets/sts"
    raise STSDataNotFound("STS data not found (looked in {_where}); pass {sts_dir}", _where=str(where))


def read_pairs(path: str | os.PathLike) -> tuple[list[str], list[str], np.ndarray]:
    """A ``score<TAB>sentence1<TAB>sentence2`` file (with header) -> (s1, s2, scores)."""
    path = Path(path)
    if not path.is_file():
        raise STSDataError("file not found", path=path)
    s1, s2, y = [], [], []
    with open(path, encoding="utf-8", newline="\n") as fh:
        header = fh.readline()
        if not header.startswith("score\t"):
            raise STSDataError("expected header 'score<TAB>sentence1<TAB>sentence2'", path=path, line=1)
        for n, line in enumerate(fh, start=2):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                raise STSDataError(f"expected 3 tab-separated columns, got {len(parts)}", path=path, line=n)
            try:
                y.append(float(parts[0]))
            except ValueError:
                raise STSDataError(f"score is not a number: {parts[0]!r}", path=path, line=n)
            s1.append(parts[1])
            s2.append(parts[2])
    return s1, s2, np.asarray(y, dtype=np.float64)


def load_set(name: str, text: str = "senteval", sts_dir=None) -> tuple[list[str], list[str], np.ndarray]:
    """Pairs of one set (``STS12`` ... ``SICK-R``, or ``STS-B-dev``)."""
    if name not in _FILES:
        raise STSDataError(f"unknown STS set {name!r} (choose from: {', '.join(list(SETS) + ['STS-B-dev'])})")
    if text not in TEXTS:
        raise STSDataError(f"unknown text variant {text!r} (choose from: {', '.join(TEXTS)})")
    suffix = ".senteval.tsv" if text == "senteval" else ".tsv"
    return read_pairs(find_sts_dir(sts_dir) / (_FILES[name] + suffix))


def _unique(sents: Sequence[str]) -> tuple[list[str], dict]:
    pos: dict = {}
    for s in sents:
        pos.setdefault(s, len(pos))
    return list(pos), pos


def _cos_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    na = np.linalg.norm(a, axis=-1)
    nb = np.linalg.norm(b, axis=-1)
    return (a * b).sum(-1) / np.maximum(na * nb, 1e-12)


def spearman(pred: np.ndarray, gold: np.ndarray) -> float:
    """Spearman correlation x100 (scipy)."""
    return float(spearmanr(pred, gold).statistic * 100.0)


class StsOptions(TypedDict, total=False):
    """The keywords of :func:`evaluate` after ``quiet`` (``**options: Unpack[StsOptions]``; another keyword
    is a TypeError naming it), each None unless given: ``ditto_layer_head``, ``ditto_states``, ``extra``."""

    ditto_layer_head: Optional[Sequence[int]]
    ditto_states: Optional[str]
    extra: Optional[dict]


def evaluate(encoder, poolings: Sequence[str] = ("mean",), sets: Sequence[str] = SETS, text: str = "senteval", *,
             sts_dir=None, batch_size: int = 128, quiet: bool = False, **options: Unpack[StsOptions]) -> dict:
    """Spearman x100 per set and their average, for each pooling, from one pass of ``encoder``'s model.

    ``extra`` maps more labels to :class:`~retrieval.dense.pooling.Pooler` objects (say, a second
    Ditto variant) scored in the same pass.

    ``encoder`` is a :class:`~retrieval.dense.encoder.DenseEncoder` (only its model/tokenizer are
    used). Ditto uses ``ditto_layer_head`` (and ``ditto_states``), else the encoder's own choice,
    else the stored one. Returns
    ``{pooling: {set: score, ..., "avg": score}}``.
    """
    check_keywords("evaluate", options, StsOptions)
    ditto_layer_head, ditto_states, extra = options.get("ditto_layer_head"), options.get("ditto_states"), \
        options.get("extra")
    data = {s: load_set(s, text, sts_dir) for s in sets}
    poolers = []  # (label, pooler)
    for p in poolings:
        lh, st = None, None
        if p == "ditto":
            lh = ditto_layer_head or getattr(encoder, "ditto_layer_head", None)
            st = ditto_states or getattr(encoder, "ditto_states", None)
            if lh is None:
                rec = ditto_store.load_choice(encoder.model_hash)
                lh = (rec["layer"], rec["head"]) if rec else None
                st = st or (rec or {}).get("states")
        poolers.append((p, get_pooler(p, *(lh or (None, None)), **({"states": st} if st else {}))))
    poolers += list((extra or {}).items())
    sents, pos = _unique([s for s1, s2, _ in data.values() for s in s1 + s2])
    need_h = any(p.needs_hidden_states for _, p in poolers)
    need_a = any(p.needs_attentions for _, p in poolers)
    embs = {label: np.zeros((len(sents), encoder.dim), dtype=np.float32) for label, _ in poolers}
    with tqdm(total=len(sents), desc="STS", unit="sent", disable=quiet, file=sys.stderr) as bar:
        for idx, out, mask in encoder.forward_batches(sents, batch_size, need_h, need_a, bar):
            for label, p in poolers:
                embs[label][idx] = p(out, mask).float().cpu().numpy()
    res: dict = {}
    for label, p in poolers:
        e = embs[label]
        row = {}
        for s, (s1, s2, y) in data.items():
            i1 = np.fromiter((pos[x] for x in s1), dtype=np.int64, count=len(s1))
            i2 = np.fromiter((pos[x] for x in s2), dtype=np.int64, count=len(s2))
            row[s] = spearman(_cos_rows(e[i1], e[i2]), y)
        row["avg"] = float(np.mean([row[s] for s in sets]))
        res[label] = row
    return res


def load_dev_pairs(max_pairs: Optional[int] = None, text: str = "senteval", sts_dir=None,
                   split: str = "STS-B-dev") -> tuple[list[str], list[str], np.ndarray]:
    """STS-B dev pairs, or a fixed random sample (seed 0, original order kept) of ``max_pairs`` of them."""
    s1, s2, y = load_set(split, text, sts_dir)
    if max_pairs is not None and max_pairs < len(y):
        if max_pairs < 3:
            raise InputError(f"max_pairs must be at least 3, got {max_pairs}")
        keep = np.sort(np.random.default_rng(0).choice(len(y), size=max_pairs, replace=False))
        s1, s2, y = [s1[i] for i in keep], [s2[i] for i in keep], y[keep]
    return s1, s2, y


def sweep_ditto_heads(encoder, max_pairs: Optional[int] = None, text: str = "senteval", sts_dir=None,
                      batch_size: int = 128, quiet: bool = False, split: str = "STS-B-dev",
                      states: Sequence[str] = ("first-last",)) -> np.ndarray:
    """Spearman x100 on STS-B dev for every (states, layer, head): a (len(states), layers, heads) array.

    One forward pass per batch with attentions; each head's Ditto embedding is formed from the
    stored attention diagonals of that batch, for each choice of token states
    (:data:`retrieval.dense.pooling.DITTO_STATES`). ``max_pairs`` takes a fixed random sample (seed 0).
    """
    s1, s2, y = load_dev_pairs(max_pairs, text, sts_dir, split)
    sents, pos = _unique(s1 + s2)
    L, H, d = encoder.n_layers, encoder.n_heads, encoder.dim
    embs = np.zeros((len(states), len(sents), L, H, d), dtype=np.float32)
    with tqdm(total=len(sents), desc="ditto sweep", unit="sent", disable=quiet, file=sys.stderr) as bar:
        for idx, out, mask in encoder.forward_batches(sents, batch_size, True, True, bar):
            for k, st in enumerate(states):
                embs[k, idx] = ditto_all_heads(out, mask, st).float().cpu().numpy()
    i1 = np.array([pos[x] for x in s1])
    i2 = np.array([pos[x] for x in s2])
    scores = np.zeros((len(states), L, H))
    for k in range(len(states)):
        for layer in range(L):
            for head in range(H):
                scores[k, layer, head] = spearman(_cos_rows(embs[k, i1, layer, head], embs[k, i2, layer, head]), y)
    return scores


def select_ditto_head(encoder, max_pairs: Optional[int] = None, text: str = "senteval", sts_dir=None,
                      batch_size: int = 128, store: bool = True, quiet: bool = False,
                      states: Sequence[str] = DITTO_STATES) -> dict:
    """Pick the (states, layer, head) with the best STS-B dev Spearman; store it for the model (see
    :mod:`retrieval.dense.ditto_store`) when ``store``. Returns the stored record.

    ``states`` are the token-state choices swept (all of them by default): the authors' first-last
    average and the last layer; both come from the same forward pass."""
    states = tuple(check_ditto_states(x) for x in states)
    if not states:
        raise InputError(f"no Ditto states to sweep (choose from: {', '.join(DITTO_STATES)})")
    scores = sweep_ditto_heads(encoder, max_pairs, text, sts_dir, batch_size, quiet, states=states)
    k, layer, head = (int(x) for x in np.unravel_index(int(np.argmax(scores)), scores.shape))
    rec = {"model": str(encoder.model_path), "model_sha256": encoder.model_hash, "layer": layer, "head": head,
           "states": states[k], "spearman_dev": round(float(scores[k, layer, head]), 4), "dev_set": "STS-B dev",
           "text": text, "n_pairs": len(load_dev_pairs(max_pairs, text, sts_dir)[2]),
           "max_length": encoder.max_length,
           "best_per_states": {st: round(float(scores[i].max()), 4) for i, st in enumerate(states)},
           "scores": {st: np.round(scores[i], 4).tolist() for i, st in enumerate(states)},
           "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if store:
        rec["stored_at"] = str(ditto_store.save_choice(encoder.model_hash, rec))
    return rec
