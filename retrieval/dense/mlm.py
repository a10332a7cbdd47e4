"""Continued masked-language-model pre-training of the dense encoder's body on a corpus (issue #26).

- :func:`load_mlm` loads a base folder as a masked LM. A folder that ships an MLM head (the bundled
  SPLADE-tiny) keeps it; one that does not (the bundled MiniLM is a sentence-transformers body) gets
  Hugging Face's fresh head: a dense + LayerNorm transform initialised at random, and an output
  layer tied to the input word embeddings with a zero bias. ``head`` in the result says which. A
  fresh head predicts nothing at first, so its gradients would push the body around while the head
  learns; :class:`Pretrainer` therefore trains the head alone (the body frozen) for the first
  ``head_warmup`` share of the steps when the head is fresh.
- Importance for ROM (:func:`importance_of`): ``bm25`` is Lucene's BM25 idf of each whole word over
  the corpus being pre-trained on (:func:`retrieval.dense.masking.idf_importance`; words keyed as the
  masking keys them, so the statistics are the BERT words', not Lucene's stemmed terms); ``deepct:MODEL``
  is a trained DeepCT model's weight of each word in the passage.
- Each epoch masks every passage afresh from a generator seeded by (seed, epoch), so an epoch's
  masks do not depend on whether the run was resumed. The loss is taken at the masked positions
  only (the output layer runs on those rows alone: a 30k-word softmax over every position would
  cost more than the body).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np
import torch

from indexes.errors import InputError, ParameterError
from retrieval.dense import masking


@dataclass
class MLM:
    model: torch.nn.Module      # a *ForMaskedLM
    tokenizer: object
    head: str                   # "trained" | "fresh (tied to the input embeddings)"


def load_mlm(path) -> MLM:
    """The folder ``path`` (already resolved) as a masked LM, with its head's provenance."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
        model, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot load {path} as a masked language model: {str(e).splitlines()[0]}") from None
    missing = [k for k in info.get("missing_keys", []) if not k.startswith(_body_prefix(model))]
    head = "fresh (tied to the input embeddings)" if missing else "trained"
    return MLM(model, tok, head)


def _body_prefix(model) -> str:
    return getattr(model, "base_model_prefix", "bert") + "."


def body_of(model):
    """The encoder body (``BertModel`` inside ``BertForMaskedLM``)."""
    return getattr(model, model.base_model_prefix)


def head_of(model):
    """The masked-LM head (transform + output layer), applied to selected hidden states."""
    for name in ("cls", "lm_head", "vocab_projector", "predictions"):
        if hasattr(model, name):
            return getattr(model, name)
    raise InputError(f"{type(model).__name__}: no masked-LM head found (expected a BERT-like model)")


def words_of(passages: Sequence, tokenizer, max_length: int) -> List[masking.Words]:
    """``passages`` as :class:`masking.Words`: texts are tokenized in one batch; a list that is
    already Words (what :func:`importance_of` and :class:`Pretrainer` share) is kept as it is."""
    passages = list(passages)
    if passages and all(isinstance(p, masking.Words) for p in passages):
        return passages
    return masking.words_of(tokenizer, passages, max_length)


def importance_of(spec: str, texts: Sequence, tokenizer, max_length: int, quiet: bool = True,
                  device: str = "cpu", precision: str = "fp32") -> List[np.ndarray]:
    """One weight per whole word of each passage (as :func:`masking.words` splits it); ``texts``
    may be the passages' :func:`words_of` already. A DeepCT model runs on ``device`` (the
    training's) in ``precision``."""
    ws = words_of(texts, tokenizer, max_length)
    texts = [w.text for w in ws]
    if spec == "bm25":
        df = Counter()
        for w in ws:
            df.update({masking._plain(t) for t in w.texts})
        idf = masking.idf_importance(dict(df), len(ws))
        return [masking.word_weights(w, idf) for w in ws]
    if spec.startswith("deepct:") and len(spec) > len("deepct:"):
        from retrieval.kinds import kind_part  # a kind's model, asked for by name: --importance deepct:

        enc = kind_part("deepct", "model").DeepCTEncoder(spec[len("deepct:"):], device=device, precision=precision)
        weights = enc.encode_words(list(texts), quiet=quiet, desc="DeepCT importance")
        out = []
        for w, pairs in zip(ws, weights):
            table = {masking._plain(word): max(v, 0.0) for word, v in pairs}
            out.append(masking.word_weights(w, table))
        return out
    raise ParameterError("{importance} must be bm25 or deepct:MODEL, got {got!r}", got=spec)


def check_importance(spec: str) -> None:
    if spec != "bm25" and not (spec.startswith("deepct:") and len(spec) > len("deepct:")):
        raise ParameterError("{importance} must be bm25 or deepct:MODEL, got {got!r}", got=spec)


class Pretrainer:
    """MLM epochs over tokenized passages with ``random`` or ``rom`` masking at one budget."""

    #: the optional keywords of :class:`Pretrainer` and their defaults: ``importance`` (one weight array
    #: per passage, for ``rom``), ``seed``, ``device``, and ROM's ``temperature`` and ``uniform_mix``
    #: (:func:`retrieval.dense.masking.rom_mask`)
    DEFAULTS = {"importance": None, "seed": 0, "device": "cpu", "temperature": 1.0, "uniform_mix": 0.0}

    def __init__(self, mlm: MLM, texts: Sequence, *, strategy: str, rate: float, max_length: int,
                 batch_size: int, **settings):
        bad = sorted(set(settings) - set(self.DEFAULTS))
        if bad:
            raise TypeError(f"Pretrainer() got an unexpected keyword argument {bad[0]!r}")
        o = {**self.DEFAULTS, **settings}
        importance: Optional[List[np.ndarray]] = o["importance"]
        seed, device, temperature, uniform_mix = o["seed"], o["device"], o["temperature"], o["uniform_mix"]
        if strategy not in ("random", "rom"):
            raise ParameterError("{pretrain} must be none, random or rom, got {got!r}", got=strategy)
        if strategy == "rom" and importance is None:
            raise ParameterError("rom masking needs {importance}")
        self.mlm, self.strategy, self.rate = mlm, strategy, rate
        self.batch_size, self.seed, self.device = batch_size, seed, device
        self.temperature, self.uniform_mix = temperature, uniform_mix
        self.words = words_of(texts, mlm.tokenizer, max_length)
        self.importance = importance
        self.pad = mlm.tokenizer.pad_token_id or 0

    @property
    def steps_per_epoch(self) -> int:
        return (len(self.words) + self.batch_size - 1) // self.batch_size

    def masks(self, epoch: int) -> List[masking.Masked]:
        gen = np.random.default_rng([self.seed, 1, epoch])
        if self.strategy == "random":
            return [masking.random_mask(self.mlm.tokenizer, w, rate=self.rate, rng=gen) for w in self.words]
        return [masking.rom_mask(self.mlm.tokenizer, w, imp, rate=self.rate, rng=gen,
                                 temperature=self.temperature, uniform_mix=self.uniform_mix)
                for w, imp in zip(self.words, self.importance)]

    def batches(self, epoch: int):
        """(input_ids, attention_mask, labels) batches of one epoch, in a seeded order."""
        masked = self.masks(epoch)
        order = np.random.default_rng([self.seed, 2, epoch]).permutation(len(masked))
        for b in range(0, len(order), self.batch_size):
            rows = [masked[i] for i in order[b:b + self.batch_size]]
            width = max(len(r.input_ids) for r in rows)
            ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
            labels = torch.full((len(rows), width), masking.IGNORE_INDEX, dtype=torch.long)
            att = torch.zeros((len(rows), width), dtype=torch.long)
            for r, m in enumerate(rows):
                n = len(m.input_ids)
                ids[r, :n] = torch.from_numpy(m.input_ids)
                labels[r, :n] = torch.from_numpy(m.labels)
                att[r, :n] = 1
            yield ids, att, labels

    def loss(self, ids, att, labels) -> torch.Tensor:
        """Cross-entropy of the head's predictions at the masked positions."""
        model = self.mlm.model
        hidden = body_of(model)(input_ids=ids.to(self.device), attention_mask=att.to(self.device)).last_hidden_state
        labels = labels.to(self.device)
        at = labels != masking.IGNORE_INDEX
        logits = head_of(model)(hidden[at])
        return torch.nn.functional.cross_entropy(logits.float(), labels[at])

    def freeze_body(self, frozen: bool) -> None:
        for p in body_of(self.mlm.model).parameters():
            p.requires_grad_(not frozen)
        # the output layer is tied to the input embeddings: it stays trainable with the head
        head_of(self.mlm.model).requires_grad_(True)

    def evaluate(self, epoch: int = 0, limit: int = 256) -> dict:
        """MLM loss and top-1 accuracy at the masked positions of (up to) ``limit`` passages,
        masked as epoch ``epoch`` would mask them: how much the head predicts."""
        model = self.mlm.model
        was = model.training
        model.eval()
        total = correct = 0
        loss_sum = 0.0
        with torch.inference_mode():
            words, self.words = self.words, self.words[:limit]
            try:
                for ids, att, labels in self.batches(epoch):
                    hidden = body_of(model)(input_ids=ids.to(self.device),
                                            attention_mask=att.to(self.device)).last_hidden_state
                    lab = labels.to(self.device)
                    at = lab != masking.IGNORE_INDEX
                    logits = head_of(model)(hidden[at]).float()
                    loss_sum += float(torch.nn.functional.cross_entropy(logits, lab[at], reduction="sum"))
                    correct += int((logits.argmax(-1) == lab[at]).sum())
                    total += int(at.sum())
            finally:
                self.words = words
        model.train(was)
        return {"loss": round(loss_sum / max(total, 1), 4), "accuracy": round(correct / max(total, 1), 4),
                "tokens": total}

