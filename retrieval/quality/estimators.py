"""Query-agnostic passage-quality estimators (METHODS.md §4). Each has
``score(passages, batch_size=..., quiet=...) -> np.ndarray`` of one finite float
per passage, higher = more worth indexing. Model-based ones load lazily."""
from __future__ import annotations

import math
import re
import sys
from typing import Optional, Sequence, Tuple

import numpy as np
from tqdm import tqdm

from indexes.errors import InputError
from retrieval.kinds import kind_part


class QualityError(InputError):
    """A quality estimator or a scores file that cannot be used."""


def _texts(passages: Sequence[str]) -> list:
    passages = list(passages)
    bad = next((i for i, t in enumerate(passages) if not isinstance(t, str)), None)
    if bad is not None:
        raise QualityError(f"passage {bad} is not a string: {type(passages[bad]).__name__}")
    return passages


def _bar(n: int, desc: str, quiet: bool) -> tqdm:
    return tqdm(total=n, desc=desc, unit="passage", disable=quiet, file=sys.stderr, dynamic_ncols=True,
                mininterval=0.5, leave=False)


class Estimator:
    """Base class: subclasses implement :meth:`_score` on a list of strings."""

    name = "base"
    needs_training = False
    #: the scores of a block of passages depend on that block alone, and the model in it runs
    #: per block of ``block_size`` passages: an executor may score the blocks anywhere
    #: (:class:`EstimatorStage`) with the same result as :meth:`score` over all of them
    blockwise = False
    block_size = 4096

    def block_payload(self, texts: list, batch_size: int = 64, bar=None):
        """What a worker computes for one block (see :meth:`from_payload`); ``bar`` (anything with
        ``update(n)``) may be moved as passages are scored, where the estimator can tell."""
        return self.score(texts, batch_size=batch_size, quiet=True)

    def from_payload(self, payload) -> Tuple[np.ndarray, Optional[tuple]]:
        """(scores, ``(encoder config, vectors)`` or None) of a block, in the driver."""
        return np.asarray(payload, dtype=np.float64), None

    def score(self, passages: Sequence[str], batch_size: int = 64, quiet: bool = False, **progress) -> np.ndarray:
        """``progress``: ``bar=`` (an executor's, see :class:`EstimatorStage`) for an estimator that takes it."""
        texts = _texts(passages)
        if not texts:
            return np.zeros(0, dtype=np.float64)
        out = np.asarray(self._score(texts, batch_size, quiet, **progress), dtype=np.float64)
        if out.shape != (len(texts),) or not np.isfinite(out).all():
            raise QualityError(f"estimator {self.name!r} returned {out.shape} scores with non-finite values "
                               f"for {len(texts)} passages")
        return out

    def _score(self, texts: list, batch_size: int, quiet: bool) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def describe(self) -> dict:
        return {"estimator": self.name}


_WORD = re.compile(r"\w+", re.UNICODE)

# Common English function words (our own short list: articles, pronouns, auxiliaries, prepositions,
# conjunctions). Fluent prose has roughly 40-55% of them; lists, tables and keyword dumps far fewer.
STOPWORDS = frozenset("""
a an the this that these those there here it its it's he she they them their his her we us our you your i me my
is are was were be been being am do does did doing have has had having will would shall should can could may might
must of in on at by for with about against between into through during before after above below to from up down
out off over under again further then once and but or nor not no so than too very as if because while until when
where why how what which who whom whose all any both each few more most other some such only own same just also
""".split())


class Length(Estimator):
    """log(1 + number of word tokens): very short passages rarely answer anything."""

    name = "length"

    def _score(self, texts, batch_size, quiet):
        return np.log1p([len(_WORD.findall(t)) for t in texts])


class StopwordShare(Estimator):
    """Closeness of the stopword share to that of fluent prose (``target``); keyword dumps,
    tables and boilerplate score low. Ties (e.g. empty) fall back to length."""

    name = "stopwords"

    def __init__(self, target: float = 0.45):
        self.target = float(target)

    def _score(self, texts, batch_size, quiet):
        out = np.empty(len(texts))
        for i, t in enumerate(texts):
            toks = [w.lower() for w in _WORD.findall(t)]
            share = sum(w in STOPWORDS for w in toks) / len(toks) if toks else 0.0
            out[i] = -abs(share - self.target) + 1e-3 * math.log1p(len(toks))
        return out

    def describe(self):
        return {"estimator": self.name, "target": self.target}


class RandomQuality(Estimator):
    """Seeded uniform scores: the baseline every estimator must beat."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = int(seed)

    def _score(self, texts, batch_size, quiet):
        return np.random.default_rng(self.seed).random(len(texts))

    def describe(self):
        return {"estimator": self.name, "seed": self.seed}


class DenseNorm(Estimator):
    """L2 norm of the dense vector before normalisation (the paper's TAS-B magnitude; here the
    bundled MiniLM with mean pooling, or any local model). Costs one full encoding pass."""

    name = "dense-norm"
    blockwise = True  # encodes in chunks of 4096, one block

    def __init__(self, model: Optional[str] = None, pooling: str = "mean", device: str = "auto"):
        self.model, self.pooling, self.device = model, pooling, device
        self._enc = None

    def _score(self, texts, batch_size, quiet):
        if self._enc is None:
            encoder = kind_part("dense", "encoder").DenseEncoder
            self._enc = encoder(self.model, pooling=self.pooling, device=self.device, normalize=False, quiet=quiet)
        out = np.zeros(len(texts))
        with _bar(len(texts), "quality (dense-norm)", quiet) as bar:
            for s in range(0, len(texts), 4096):
                v = self._enc.encode(texts[s:s + 4096], batch_size=batch_size, quiet=True)
                out[s:s + len(v)] = np.linalg.norm(v.astype(np.float64), axis=1)
                bar.update(len(v))
        return out

    def describe(self):
        from retrieval.models import model_hash, resolve_model_path

        enc = self._enc
        path = enc.model_path if enc else resolve_model_path(self.model)  # scored elsewhere: same weights
        return {"estimator": self.name, "model": str(path),
                "model_sha256": enc.model_hash if enc else model_hash(path), "pooling": self.pooling}


def arr_gold(chunk) -> np.ndarray:
    """The original token ids at the masked positions of a batch of (passage, ids, positions)."""
    return np.concatenate([np.asarray(x)[pos] for _, x, pos in chunk]).astype(np.int64)


class PseudoPerplexity(Estimator):
    """Negative masked-LM pseudo-perplexity (mean NLL of masked tokens) under SPLADE-tiny's MLM
    head. Affordable variant: ``positions`` token positions per passage (seeded sample) are
    masked, ``groups`` of them at a time, so each passage costs ``positions / per_copy`` forward
    passes instead of one per token."""

    name = "pseudo-ppl"

    def __init__(self, model: Optional[str] = None, positions: int = 16, per_copy: int = 4, max_length: int = 128,
                 seed: int = 0, device: str = "auto"):
        if positions < 1 or per_copy < 1:
            raise QualityError("pseudo-ppl: positions and per_copy must be positive")
        self.model, self.positions, self.per_copy = model, int(positions), int(per_copy)
        self.max_length, self.seed, self.device = int(max_length), int(seed), device
        self.precision = "auto"  # compute precision (retrieval.models.resolve_precision)
        self._m = None

    def _load(self):
        from retrieval.models import _quiet_transformers, pick_device
        from retrieval.models import resolve_model_path

        _quiet_transformers()
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        self.path = resolve_model_path(self.model or "splade-tiny")
        self.tok = AutoTokenizer.from_pretrained(self.path)
        self.dev = pick_device(self.device)
        self._m = AutoModelForMaskedLM.from_pretrained(self.path).eval().to(self.dev)

    def _masked_logp(self, ids, att, rows, cols):
        """Log-probabilities over the vocabulary at the masked positions only: the body runs on
        the whole batch, the MLM head (a 30k-wide matmul per token) only where it is needed."""
        import torch

        from retrieval.models import autocast, resolve_precision

        head = getattr(self._m, "cls", None)
        with autocast(resolve_precision(self.precision, self.dev), self.dev):  # auto: fp32 on a CPU
            if head is None:  # not a BERT-style MLM: full logits
                logits = self._m(input_ids=ids, attention_mask=att).logits[rows, cols]
            else:
                hidden = self._m.bert(input_ids=ids, attention_mask=att).last_hidden_state
                logits = head(hidden[rows, cols])
        return torch.log_softmax(logits.float(), dim=-1)

    def _score(self, texts, batch_size, quiet):
        import torch

        if self._m is None:
            self._load()
        ids = self.tok(texts, truncation=True, max_length=self.max_length, padding=False,
                       return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        mask_id, pad_id = self.tok.mask_token_id, self.tok.pad_token_id or 0
        rng = np.random.default_rng(self.seed)
        copies = []  # (passage index, token ids, masked positions)
        for i, x in enumerate(ids):
            inner = np.arange(1, len(x) - 1)  # skip [CLS] / [SEP]
            if len(inner) == 0:
                continue
            pos = rng.permutation(inner)[: self.positions]
            for s in range(0, len(pos), self.per_copy):
                copies.append((i, x, np.sort(pos[s:s + self.per_copy])))
        nll = np.zeros(len(texts))
        cnt = np.zeros(len(texts))
        order = sorted(range(len(copies)), key=lambda c: -len(copies[c][1]))
        with _bar(len(texts), "quality (pseudo-ppl)", quiet) as bar, torch.inference_mode():
            done = set()
            for s in range(0, len(order), batch_size):
                chunk = [copies[c] for c in order[s:s + batch_size]]
                t = max(len(x) for _, x, _ in chunk)
                arr = np.full((len(chunk), t), pad_id, dtype=np.int64)
                att = np.zeros((len(chunk), t), dtype=np.int64)
                for r, (_, x, pos) in enumerate(chunk):
                    arr[r, :len(x)] = x
                    att[r, :len(x)] = 1
                    arr[r, pos] = mask_id
                rows = np.concatenate([np.full(len(pos), r) for r, (_, _, pos) in enumerate(chunk)])
                cols = np.concatenate([pos for _, _, pos in chunk])
                gold = torch.from_numpy(arr_gold(chunk)).to(self.dev)
                logp = self._masked_logp(torch.from_numpy(arr).to(self.dev), torch.from_numpy(att).to(self.dev),
                                         torch.from_numpy(rows).to(self.dev), torch.from_numpy(cols).to(self.dev))
                tok_nll = -logp.gather(1, gold[:, None])[:, 0].cpu().numpy()
                at = 0
                for i, x, pos in chunk:
                    nll[i] += tok_nll[at:at + len(pos)].sum()
                    cnt[i] += len(pos)
                    at += len(pos)
                    if i not in done:
                        done.add(i)
                        bar.update(1)
        # Passages without any maskable token get the worst observed score.
        out = np.where(cnt > 0, -nll / np.maximum(cnt, 1), np.nan)
        worst = np.nanmin(out) if np.isfinite(out).any() else 0.0
        return np.where(np.isfinite(out), out, worst - 1.0)

    def describe(self):
        return {"estimator": self.name, "model": str(getattr(self, "path", self.model or "splade-tiny")),
                "positions": self.positions, "per_copy": self.per_copy, "max_length": self.max_length,
                "seed": self.seed}


class DeepCTWeight(Estimator):
    """Mass (sum) or maximum of a DeepCT model's term weights over the passage: passages
    whose terms the model finds central to no query score low. Needs a model folder from
    ``retr train deepct`` (``--quality deepct-mass:MODEL_DIR``)."""

    def __init__(self, model: Optional[str] = None, stat: str = "mass", device: str = "auto"):
        if stat not in ("mass", "max"):
            raise QualityError(f"deepct statistic must be mass or max, got {stat!r}")
        if not model:
            raise QualityError(f"the deepct-{stat} estimator needs a DeepCT model folder "
                               f"(deepct-{stat}:MODEL_DIR; train one with `retr train deepct`)")
        self.model, self.stat, self.device = str(model), stat, device
        self.name = f"deepct-{stat}"
        self._enc = None

    blockwise = True  # DeepCT encodes in chunks of 2048: two per block

    def _encoder(self, batch_size):
        if self._enc is None:
            encoder = kind_part("deepct", "model").DeepCTEncoder
            self._enc = encoder(self.model, device=self.device, batch_size=batch_size,
                                precision=getattr(self, "precision", "auto"))
        return self._enc

    def _stat(self, weights) -> np.ndarray:
        pos = [[max(v, 0.0) for v in w.values()] for w in weights]
        return np.array([(sum(p) if self.stat == "mass" else max(p)) if p else 0.0 for p in pos])

    def _score(self, texts, batch_size, quiet):
        return self._stat(self._encoder(batch_size).encode(texts, quiet=quiet, desc=f"quality ({self.name})"))

    def block_payload(self, texts, batch_size=64, bar=None):
        # word weights only: stemming needs the JVM, which stays in the driver (from_payload)
        return self._encoder(batch_size).encode_words(texts, quiet=True)

    def from_payload(self, payload):
        analyzer = kind_part("deepct", "targets").analyzer
        scores = self._stat(kind_part("deepct", "model").terms_of_words(payload, analyzer()))
        if not np.isfinite(scores).all():
            raise QualityError(f"estimator {self.name!r} returned non-finite scores")
        return scores.astype(np.float64), None

    def describe(self):
        return {"estimator": self.name, "model": self.model,
                "model_sha256": self._enc.model_hash if self._enc else
                kind_part("deepct", "model").deepct_hash(self.model)}


#: attributes that hold a loaded model or its outputs: rebuilt lazily wherever a stage runs
_LOADED = ("_enc", "_feat", "_lex", "_m", "vectors")


class EstimatorStage:
    """A blockwise estimator as an executor stage (:mod:`retrieval.executors`): the
    estimator travels without its loaded model; each worker loads it once."""

    name = "quality"
    reports_progress = True  # the learned estimator moves the bar batch by batch; the runner does the rest

    def __init__(self, est: Estimator, batch_size: int = 64):
        self.est, self.batch_size, self.block_size = est, int(batch_size), int(est.block_size)

    def __getstate__(self):
        import copy

        est = copy.copy(self.est)
        for k in _LOADED:
            if k in vars(est):
                setattr(est, k, None)
        return dict(self.__dict__, est=est)

    def setup(self, threads: Optional[int] = None, gpu: bool = False) -> None:
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        if threads is not None and getattr(self.est, "device", None) == "auto":  # a worker: as reserved
            self.est.device = "cuda" if gpu else "cpu"

    def run(self, texts: list, bar=None):
        return self.est.block_payload(texts, self.batch_size, bar=bar)

    def device(self) -> str:
        from retrieval.models import pick_device

        return pick_device(getattr(self.est, "device", "cpu") or "cpu")
