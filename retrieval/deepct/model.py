"""DeepCT term-weight model (Dai & Callan 2019): a BERT-family body, dropout and a
linear regression head giving one weight per token.

A saved model is a folder that any Hugging Face loader reads as the body::

    MODEL/config.json, model.safetensors   the body (AutoModel)
    MODEL/tokenizer.json, ...              its tokenizer (a fast tokenizer is required: offsets)
    MODEL/deepct_head.safetensors          the regression head (weight [1, hidden], bias [1])
    MODEL/deepct.json, README.md           the model card

Passages are split into words and terms by :mod:`retrieval.deepct.targets` (BERT
words, Lucene English stems); a word takes its first word-piece's weight and a
repeated term keeps its max. Passages longer than the model window are scored
over overlapping windows (max per term), never truncated.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from indexes.atomic import atomic_path, follow_umask
from retrieval.models import (ModelDirError, _quiet_transformers, autocast, check_safetensors, pick_device,
                              resolve_model_path, resolve_precision, torch_threads, weight_files)
from retrieval.progress import progress

HEAD_FILE = "deepct_head.safetensors"
CARD_FILE = "deepct.json"
CARD_MD = "README.md"
FORMAT = "retr-deepct"
SCALES = ("linear", "sqrt")


class DeepCTModel(nn.Module):
    """body -> dropout -> Linear(hidden, 1): one real-valued weight per token."""

    def __init__(self, body: nn.Module, dropout: float = 0.1):
        super().__init__()
        self.body = body
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(int(body.config.hidden_size), 1)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(self.dropout(h)).squeeze(-1)


def _load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ModelDirError(f"cannot load the tokenizer of {path}: {str(e).splitlines()[0]}") from None
    if not getattr(tok, "is_fast", False):
        raise ModelDirError(f"{path}: DeepCT needs a fast tokenizer (tokenizer.json) for word offsets")
    return tok


def init_model(base: str | os.PathLike | None = None, dropout: float = 0.1):
    """A fresh DeepCT model on a base encoder (None: bundled all-MiniLM-L6-v2).
    Returns ``(model, tokenizer, base_path)``."""
    from transformers import AutoModel

    _quiet_transformers()
    path = resolve_model_path(base)
    tok = _load_tokenizer(path)
    try:
        body = AutoModel.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ModelDirError(f"cannot load model from {path}: {str(e).splitlines()[0]}") from None
    return DeepCTModel(body, dropout), tok, path


def is_deepct_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / HEAD_FILE).is_file()


def load_model(path: str | os.PathLike):
    """Load a saved DeepCT folder; returns ``(model, tokenizer, card)``.
    Raises :class:`ModelDirError` for a missing folder, weights, tokenizer or head."""
    from safetensors.torch import load_file
    from transformers import AutoModel

    _quiet_transformers()
    p = Path(path).expanduser()
    if p.is_dir() and (p / "config.json").is_file() and not is_deepct_dir(p):
        raise ModelDirError(f"{p}: not a DeepCT model (no {HEAD_FILE}); train one with `retr train deepct`")
    p = resolve_model_path(p)
    if not is_deepct_dir(p):
        raise ModelDirError(f"{p}: not a DeepCT model (no {HEAD_FILE}); train one with `retr train deepct`")
    check_safetensors(p, [p / HEAD_FILE])
    card = {}
    if (p / CARD_FILE).is_file():
        try:
            card = json.loads((p / CARD_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise ModelDirError(f"{p}: cannot read its card {CARD_FILE} ({str(e).splitlines()[0]})") from None
        if not isinstance(card, dict):
            raise ModelDirError(f"{p}: its card {CARD_FILE} is not a JSON object")
    tok = _load_tokenizer(p)
    try:
        body = AutoModel.from_pretrained(p)
    except (OSError, ValueError) as e:
        raise ModelDirError(f"cannot load model from {p}: {str(e).splitlines()[0]}") from None
    model = DeepCTModel(body, float(card.get("dropout", 0.1)))
    state = load_file(str(p / HEAD_FILE))
    try:
        model.head.load_state_dict(state)
    except RuntimeError as e:
        raise ModelDirError(f"{p}: head weights do not fit the body ({str(e).splitlines()[0]})") from None
    model.eval()
    return model, tok, card


def save_model(model: DeepCTModel, tokenizer, path: str | os.PathLike, card: dict) -> Path:
    """Write body, tokenizer, head and model card (JSON + Markdown) into ``path``."""
    from safetensors.torch import save_file

    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    model.body.save_pretrained(p)
    tokenizer.save_pretrained(p)
    with atomic_path(p / HEAD_FILE) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in model.head.state_dict().items()}, str(tmp))
    for f in p.glob("*.safetensors"):  # the body's, which safetensors wrote 0600 whatever the umask
        follow_umask(f)
    card = dict(card, format=FORMAT, format_version=1, dropout=model.dropout.p)
    (p / CARD_FILE).write_text(json.dumps(card, indent=2, default=str) + "\n")
    (p / CARD_MD).write_text(card_markdown(card))
    return p


def card_markdown(card: dict) -> str:
    t = card.get("training", {})
    lines = ["# DeepCT term-weight model (retr)", "",
             "Body + dropout + linear head; trained to predict query term recall per word "
             "(MSE on each word's first word-piece). Load with `retrieval.deepct.model.load_model`.", "",
             "| field | value |", "|---|---|"]
    rows = [("base model", card.get("base_model")), ("base sha256", card.get("base_sha256")),
            ("targets", card.get("targets", {}).get("kind")), ("data", json.dumps(card.get("data", {}))),
            ("target stats", json.dumps(card.get("targets", {}).get("stats", {}))),
            ("settings", json.dumps(t.get("settings", {}))), ("training seconds", t.get("seconds")),
            ("steps", t.get("steps")), ("final loss (last epoch mean)", t.get("final_loss")),
            ("first-epoch loss", t.get("epoch_losses", [None])[0] if t.get("epoch_losses") else None),
            ("created", card.get("created_at"))]
    lines += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines) + "\n"


def deepct_hash(path: str | os.PathLike) -> str:
    """sha256 (16 hex digits) over the body weights and the head."""
    p = Path(path)
    h = hashlib.sha256()
    for f in [*weight_files(p), p / HEAD_FILE]:
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------- passage prep
@dataclass
class Window:
    text: int                  # index of the text in the batch given to prepare()
    ids: List[int]             # input ids with special tokens
    positions: List[int]       # positions (in ids) of word first pieces
    words: List[int]           # word index of each position
    labels: Optional[List[float]] = None


@dataclass
class Prepared:
    words: List[Tuple[str, ...]]  # stems of each word (() for stopwords / punctuation)
    windows: List[Window]


class Preparer:
    """Splits texts into words/terms and model windows (aligned to word starts)."""

    def __init__(self, tokenizer, max_length: int, stride: Optional[int] = None, term_analyzer=None):
        from retrieval.deepct.targets import analyzer

        self.tok = tokenizer
        self.an = term_analyzer or analyzer()
        # special tokens around one sequence: prefix + pieces + suffix (e.g. [CLS] ... [SEP])
        plain = tokenizer("hello world", add_special_tokens=False)["input_ids"]
        full = tokenizer("hello world", add_special_tokens=True)["input_ids"]
        at = next((i for i in range(len(full) - len(plain) + 1) if full[i:i + len(plain)] == plain), None)
        if at is None:  # pragma: no cover - exotic template
            raise ModelDirError("cannot locate the text inside the tokenizer's special-token template")
        self.head_ids, self.tail_ids = full[:at], full[at + len(plain):]
        self.prefix = len(self.head_ids)
        self.width = int(max_length) - len(self.head_ids) - len(self.tail_ids)
        if self.width < 8:
            raise ModelDirError(f"max_length {max_length} leaves no room for text")
        self.stride = int(stride) if stride else max(1, self.width - self.width // 4)

    def windows_of(self, n: int, word_starts: Sequence[int]) -> List[Tuple[int, int]]:
        out, s = [], 0
        while True:
            e = min(s + self.width, n)
            out.append((s, e))
            if e >= n:
                return out
            nxt = s + self.stride
            j = bisect.bisect_right(word_starts, nxt) - 1
            cand = word_starts[j] if j >= 0 else nxt
            s = cand if cand > s else nxt

    def prepare(self, texts: Sequence[str], targets: Optional[Sequence[Optional[Dict[str, float]]]] = None,
                stems: bool = True) -> List[Prepared]:
        """Words and windows per text. Without ``stems`` (no JVM: an executor's worker),
        ``Prepared.words`` holds each word itself, as a 1-tuple, for the driver to stem."""
        enc = self.tok(list(texts), add_special_tokens=False, return_offsets_mapping=True, truncation=False,
                       padding=False, return_attention_mask=False, verbose=False)
        out = []
        for i, text in enumerate(texts):
            ids, offs = enc["input_ids"][i], enc["offset_mapping"][i]
            words = self.an.words(text)
            stems_ = [self.an.stems(w) if stems else (w,) for w, _s, _e in words]
            first: List[Tuple[int, int]] = []  # (piece index, word index)
            p = 0
            for k, (_w, ws, we) in enumerate(words):
                while p < len(ids) and (offs[p][1] <= ws or offs[p][0] == offs[p][1]):
                    p += 1
                if p < len(ids) and offs[p][0] < we:
                    first.append((p, k))
            starts = [q for q, _k in first]
            tg = targets[i] if targets is not None else None
            wins = []
            for s, e in self.windows_of(len(ids), starts) if ids else []:
                lo, hi = bisect.bisect_left(starts, s), bisect.bisect_left(starts, e)
                sel = first[lo:hi]
                w = Window(i, self.head_ids + ids[s:e] + self.tail_ids,
                           [q - s + self.prefix for q, _k in sel], [k for _q, k in sel])
                if tg is not None:
                    w.labels = [max((tg.get(t, 0.0) for t in stems_[k]), default=0.0) for k in w.words]
                wins.append(w)
            out.append(Prepared(stems_, wins))
        return out


def pad_batch(windows: Sequence[Window], pad_id: int):
    n = max(len(w.ids) for w in windows)
    ids = torch.full((len(windows), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(windows), n), dtype=torch.long)
    for r, w in enumerate(windows):
        ids[r, :len(w.ids)] = torch.tensor(w.ids)
        mask[r, :len(w.ids)] = 1
    return ids, mask


# ------------------------------------------------------------------------------- impacts
def to_impacts(weights: Dict[str, float], scale: str = "linear", factor: float = 100.0) -> Dict[str, int]:
    """DeepCT-Index: tf = round(w * 100) ("sqrt": round(sqrt(w) * 100)); terms under 1 are dropped
    (:func:`indexes.impact.quantize`)."""
    from indexes.impact import quantize

    if scale not in SCALES:
        raise ValueError(f"unknown impact scale {scale!r} (choose from: {', '.join(SCALES)})")
    return quantize(weights, factor, math.sqrt if scale == "sqrt" else None)


# ------------------------------------------------------------------------------- encoder
class DeepCTEncoder:
    """Runs a saved DeepCT model over passages or queries: ``{term: weight}``."""

    def __init__(self, model_dir: str | os.PathLike, device: str = "auto", max_length: Optional[int] = None,
                 batch_size: int = 32, stride: Optional[int] = None, threads: Optional[int] = None,
                 precision: str = "fp32"):

        self.model, self.tokenizer, self.card = load_model(model_dir)
        self.model_dir = Path(model_dir).expanduser().resolve()
        self.device = pick_device(device)
        self.model.to(self.device)
        self.precision = resolve_precision(precision, self.device)  # autocast of each forward (models.autocast)
        limit = int(getattr(self.model.body.config, "max_position_embeddings", 512) or 512)
        self.max_length = int(max_length or self.card.get("max_length") or min(512, limit))
        self.max_length = min(self.max_length, limit)
        self.batch_size = int(batch_size)
        self.prep = Preparer(self.tokenizer, self.max_length, stride)
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.threads = int(threads) if threads else None  # set around each encoding (models.torch_threads)

    @property
    def model_hash(self) -> str:
        return deepct_hash(self.model_dir)

    def config(self) -> dict:
        return {"model": str(self.model_dir), "model_sha256": self.model_hash, "max_length": self.max_length,
                "stride": self.prep.stride, "base_model": self.card.get("base_model"),
                "architecture": getattr(self.model.body.config, "model_type", None), "precision": self.precision}

    def _run(self, windows: List[Window]) -> List[torch.Tensor]:
        ids, mask = pad_batch(windows, self.pad_id)
        with autocast(self.precision, self.device):
            out = self.model(ids.to(self.device), mask.to(self.device)).float().cpu()
        return [out[r, w.positions] for r, w in enumerate(windows)]

    def encode(self, texts: Sequence[str], quiet: bool = True, chunk: int = 2048, desc: str = "DeepCT encoding"
               ) -> List[Dict[str, float]]:
        """Raw term weights per text (max over repeated words and windows)."""
        return terms_of_words(self.encode_words(texts, quiet=quiet, chunk=chunk, desc=desc), self.prep.an)

    def encode_words(self, texts: Sequence[str], quiet: bool = True, chunk: int = 2048,
                     desc: str = "DeepCT encoding") -> List[List[Tuple[str, float]]]:
        """Per text, each distinct word with its weight (its first piece's, max over repeats
        and windows), in the order the words were first scored. Needs no JVM: the stems
        (:func:`terms_of_words`) are taken where the analyzer runs."""
        out: List[List[Tuple[str, float]]] = []
        self.model.eval()
        with torch.inference_mode(), torch_threads(self.threads), \
                progress(total=len(texts), desc=desc, unit="doc", quiet=quiet) as bar:
            for c0 in range(0, len(texts), chunk):
                part = texts[c0:c0 + chunk]
                prepared = self.prep.prepare(part, stems=False)
                wins = sorted((w for p in prepared for w in p.windows), key=lambda w: len(w.ids))
                best: List[Dict[int, float]] = [dict() for _ in part]
                shown = 0  # windows run in length order, so progress is the share of this chunk's windows
                for b0 in range(0, len(wins), self.batch_size):
                    batch = wins[b0:b0 + self.batch_size]
                    for w, vals in zip(batch, self._run(batch)):
                        bw = best[w.text]
                        for k, v in zip(w.words, vals.tolist()):
                            if k not in bw or v > bw[k]:
                                bw[k] = v
                    now = (b0 + len(batch)) * len(part) // len(wins)
                    bar.update(now - shown)
                    shown = now
                for p, bw in zip(prepared, best):
                    words: Dict[str, float] = {}
                    for k, v in bw.items():
                        word = p.words[k][0]
                        if word not in words or v > words[word]:
                            words[word] = v
                    out.append(list(words.items()))
                bar.update(len(part) - shown)
        return out

    def stage(self, block_size: int = 2048) -> "DeepCTStage":
        """This encoder as an executor stage (:mod:`retrieval.executors`)."""
        return DeepCTStage(str(self.model_dir), self.max_length, self.prep.stride, self.batch_size,
                           self.model_hash, block_size, encoder=self, precision=self.precision)

    def query_weights(self, texts: Sequence[str]) -> List[Dict[str, float]]:
        """DeepCT-Query: the model's weight for each query term."""
        return self.encode(texts, quiet=True)


def terms_of_words(words: Sequence[Sequence[Tuple[str, float]]], analyzer) -> List[Dict[str, float]]:
    """Term weights from :meth:`DeepCTEncoder.encode_words`: each word's stems take its weight,
    a term the max over the words it comes from (the same dict, in the same order, as a
    term-level max taken while scoring)."""
    out = []
    for ws in words:
        terms: Dict[str, float] = {}
        for word, v in ws:
            for t in analyzer.stems(word):
                if t not in terms or v > terms[t]:
                    terms[t] = v
        out.append(terms)
    return out


class DeepCTStage:
    """A DeepCT model as an executor stage: workers return word weights (no JVM there);
    the driver stems them with :func:`terms_of_words`. Blocks of 2048 documents are the
    in-process encoder's chunks, so the weights are identical wherever they are computed."""

    name = "deepct"

    def __init__(self, model_dir: str, max_length: int, stride: int, batch_size: int, sha256: str,
                 block_size: int = 2048, encoder: Optional[DeepCTEncoder] = None, precision: str = "fp32"):
        self.precision = precision  # the build's, on every worker
        self.model_dir, self.max_length, self.stride = model_dir, int(max_length), int(stride)
        self.batch_size, self.sha256, self.block_size = int(batch_size), sha256, int(block_size)
        self._enc = encoder

    def __getstate__(self):
        return dict(self.__dict__, _enc=None)

    def setup(self, threads: Optional[int] = None, gpu: bool = False) -> None:
        if self._enc is None:
            self._enc = DeepCTEncoder(self.model_dir, device="cuda" if gpu else "cpu", max_length=self.max_length,
                                      batch_size=self.batch_size, stride=self.stride, threads=threads,
                                      precision=self.precision)
            if self._enc.model_hash != self.sha256:
                raise ModelDirError(f"DeepCT model at {self.model_dir} on this worker (sha256 {self._enc.model_hash}) "
                                    f"differs from the driver's ({self.sha256})")

    def run(self, texts: List[str]) -> List[List[Tuple[str, float]]]:
        return self._enc.encode_words(texts, quiet=True, chunk=max(1, len(texts)))

    def device(self) -> str:
        return str(self._enc.device) if self._enc is not None else "cpu"
