"""Learned passage quality: a logistic-regression head on a frozen BERT-family body
(the bundled MiniLM by default, SPLADE-tiny optional), trained query-agnostically from training
qrels. Passages with a relevant training query are positives, the other passages (or a seeded
sample of them) are negatives (as QualT5 was trained, METHODS.md §4).

Two feature sets:

* ``tfidf+emb`` (the default since head format 2): a sublinear tf-idf vector over a vocabulary
  fitted on the training passages, beside the L2-normalised mean-pooled body vector, both used as
  they are (unstandardised) in one class-balanced logistic regression (scikit-learn, L-BFGS).
  Two-fold cross-validation over SciFact's training queries chose it over the body vector alone:
  at 30% pruned, held-out BM25 nDCG@10 fell by 0.047 instead of 0.063
  (``benchmarks/bench_quality.py --select-features``).
* ``emb``: the standardised body vector plus log token count (head format 1).

A head is JSON (with its model card); the shipped one is ``default_head.json.gz`` beside this
module (:mod:`retrieval.quality.heads`).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypedDict

import numpy as np
from typing_extensions import Unpack

from indexes.atomic import write_text
from retrieval.kinds import kind_part
from retrieval.options import check_keywords
from retrieval.quality.estimators import Estimator, QualityError, _bar


class _Features:
    """Mean-pooled body vector (L2-normalised when ``normalize``) and log token count. ``backend``:
    the dense encoder's; ``auto`` (scoring) encodes as a default dense sub-index does, so a pruned
    build's dense sub-index takes these vectors instead of encoding the kept passages again;
    ``torch`` (training a head) is fp32 PyTorch, as the benchmark index stores them."""

    def __init__(self, body: str = "minilm", device: str = "auto", max_length: Optional[int] = None,
                 normalize: bool = True, backend: str = "auto"):
        encoder = kind_part("dense", "encoder").DenseEncoder
        self.enc = encoder(body, pooling="mean", normalize=normalize, device=device, max_length=max_length,
                           quiet=True, backend=backend)

    def __call__(self, texts: List[str], batch_size: int, quiet: bool, bar=None) -> np.ndarray:
        """``bar``: a caller's (anything with ``update(n)``) to move instead of a bar of its own; either
        moves with each batch the body encodes, from the first one."""
        out = np.zeros((len(texts), self.enc.dim + 1), dtype=np.float32)
        with _bar(len(texts), "quality (features)", quiet or bar is not None) as own:
            for s in range(0, len(texts), 4096):
                chunk = texts[s:s + 4096]
                out[s:s + len(chunk), :-1] = self.enc.encode(chunk, batch_size=batch_size, quiet=True,
                                                             bar=own if bar is None else bar)
                out[s:s + len(chunk), -1] = np.log1p([len(x) for x in self.enc.tokenize(chunk)])
        return out


class _Lexical:
    """Sublinear tf-idf rows (L2-normalised) over a fixed vocabulary and idf: scikit-learn's
    TfidfVectorizer with English stop words, rebuilt from what the head stores."""

    def __init__(self, vocabulary: Sequence[str], idf: Sequence[float]):
        from sklearn.feature_extraction.text import TfidfVectorizer

        if len(vocabulary) != len(idf):
            raise QualityError("quality head: lexical vocabulary and idf differ in length")
        self.vec = TfidfVectorizer(vocabulary={t: i for i, t in enumerate(vocabulary)}, sublinear_tf=True,
                                   stop_words="english", dtype=np.float64)
        self.vec.idf_ = np.asarray(idf, dtype=np.float64)

    @staticmethod
    def fit(texts: Sequence[str], min_df: int = 2):
        """Fit the vocabulary and idf on ``texts``: ``(vocabulary, idf, rows of texts)`` (the rows
        come from the same pass; they equal what ``_Lexical(vocabulary, idf)(texts)`` returns)."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        v = TfidfVectorizer(sublinear_tf=True, stop_words="english", min_df=min_df, dtype=np.float64)
        try:
            T = v.fit_transform(texts)
        except ValueError:  # no term left after min_df / stop words
            return [], [], None
        return v.get_feature_names_out().tolist(), v.idf_.tolist(), T

    def __call__(self, texts: Sequence[str]):
        return self.vec.transform(texts)


class LearnedQuality(Estimator):
    """Score = logit of the trained head on frozen body features. ``head`` is a head dict,
    a JSON file written by :func:`train_head`, or None for the shipped default head."""

    name = "learned"
    blockwise = True  # features in chunks of 4096 (one block), the rest per passage

    def __init__(self, head=None, device: str = "auto"):
        if head is None:
            from retrieval.quality.heads import DEFAULT_HEAD
            head = DEFAULT_HEAD
        elif isinstance(head, (str, Path)):
            p = Path(head)
            if not p.is_file():
                raise QualityError(f"quality head file not found: {p}")
            try:
                head = json.loads(p.read_text())
            except json.JSONDecodeError as e:
                raise QualityError(f"{p}: not a quality head (bad JSON: {e.msg})")
        for k in ("body", "mean", "scale", "weights", "bias"):
            if k not in head:
                raise QualityError(f"quality head lacks {k!r}")
        lex = head.get("lexical")
        if lex is not None and not all(k in lex for k in ("vocabulary", "idf", "weights")):
            raise QualityError("quality head: 'lexical' needs vocabulary, idf and weights")
        self.head = head
        self.device = device
        self._feat = None
        self._lex = None

    def _score(self, texts, batch_size, quiet, bar=None):
        if self._feat is None:
            self._feat = _Features(self.head["body"], self.device, self.head.get("max_length"),
                                   self.head.get("normalize", True))
        X = self._feat(texts, batch_size, quiet, bar)
        # the body vectors of the passages just scored, with the encoder that made them: a dense
        # sub-index with the same encoder can take them instead of encoding the kept passages again
        self.vectors = (self._feat.enc.config(), X[:, :-1])
        T = None
        if "lexical" in self.head:
            if self._lex is None:
                self._lex = _Lexical(self.head["lexical"]["vocabulary"], self.head["lexical"]["idf"])
            T = self._lex(texts)
        return _apply(self.head, X, T)

    def block_payload(self, texts, batch_size=64, bar=None):
        s = self.score(texts, batch_size=batch_size, quiet=True, bar=bar)
        return s, self.vectors[0], self.vectors[1]

    def from_payload(self, payload):
        s, cfg, X = payload
        return np.asarray(s, dtype=np.float64), (cfg, X)

    def describe(self):
        h = self.head
        return {"estimator": self.name, "head": h.get("name"), "body": h["body"],
                "trained_on": h.get("card", {}).get("training_data")}


def _apply(head: dict, X: np.ndarray, T=None) -> np.ndarray:
    """Logit of the head: body features ``X`` (standardised by the head's mean/scale) and, for a
    head with a lexical part, its tf-idf rows ``T``."""
    Z = (X.astype(np.float64) - np.asarray(head["mean"])) / np.asarray(head["scale"])
    s = Z @ np.asarray(head["weights"]) + float(head["bias"])
    if "lexical" in head:
        if T is None:
            raise QualityError("this quality head has a lexical part: pass its tf-idf rows")
        s = s + np.asarray(T @ np.asarray(head["lexical"]["weights"], dtype=np.float64)).ravel()
    return s


def training_pairs(sources: Sequence[Tuple[Iterable, Dict[str, Dict[str, int]]]],
                   neg_ratio: Optional[float] = None, seed: int = 0) -> Tuple[List[str], np.ndarray, dict]:
    """Texts and 0/1 labels from ``[(documents, training qrels), ...]``: positives are the
    documents with a relevant (grade > 0) training query, negatives all the others
    (``neg_ratio=None``) or a seeded sample of ``neg_ratio`` x as many (all of them if fewer)."""
    rng = np.random.default_rng(seed)
    texts: List[str] = []
    labels: List[int] = []
    stats = []
    for docs, qrels in sources:
        rel = {d for q in qrels.values() for d, g in q.items() if g > 0}
        pos, neg = [], []
        for doc in docs:
            (pos if doc.docid in rel else neg).append(doc.contents)
        if not pos:
            raise QualityError("training qrels name no document of the corpus as relevant")
        n_neg = len(neg) if neg_ratio is None else min(len(neg), int(round(neg_ratio * len(pos))))
        pick = rng.choice(len(neg), size=n_neg, replace=False) if n_neg else []
        texts += pos + [neg[i] for i in sorted(pick)]
        labels += [1] * len(pos) + [0] * n_neg
        stats.append({"positives": len(pos), "negatives": n_neg, "unlabelled_pool": len(neg)})
    return texts, np.asarray(labels, dtype=np.float64), {"sources": stats}


def fit_logistic(X: np.ndarray, y: np.ndarray, l2: float = 1.0, seed: int = 0) -> dict:
    """L2-regularised, class-balanced logistic regression on standardised features
    (full-batch L-BFGS in torch: deterministic, and torch is already a dependency)."""
    import torch

    torch.manual_seed(seed)
    mean = X.mean(0)
    scale = X.std(0) + 1e-6
    Z = torch.from_numpy((X - mean) / scale)
    t = torch.from_numpy(y)
    w_pos = 0.5 / max(y.mean(), 1e-9)
    w_neg = 0.5 / max(1 - y.mean(), 1e-9)
    sw = torch.where(t > 0, torch.tensor(w_pos, dtype=Z.dtype), torch.tensor(w_neg, dtype=Z.dtype))
    w = torch.zeros(Z.shape[1], dtype=Z.dtype, requires_grad=True)
    b = torch.zeros(1, dtype=Z.dtype, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=500, tolerance_grad=1e-9, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        logit = Z @ w + b
        loss = (sw * torch.nn.functional.binary_cross_entropy_with_logits(logit, t, reduction="none")).mean()
        loss = loss + l2 * (w @ w) / (2 * len(y))
        loss.backward()
        return loss

    opt.step(closure)
    return {"mean": mean.tolist(), "scale": scale.tolist(), "weights": w.detach().numpy().tolist(),
            "bias": float(b.detach()[0])}


def fit_lexical_head(X: np.ndarray, T, y: np.ndarray, l2: float = 1.0) -> dict:
    """Class-balanced logistic regression on ``[tf-idf rows T | body features X]``, unstandardised
    (both parts are L2-normalised rows, so one penalty suits both). scikit-learn's L-BFGS solver
    (deterministic); ``l2`` is the inverse of its ``C``, matching :func:`fit_logistic`'s penalty."""
    from scipy.sparse import csr_matrix, hstack
    from sklearn.linear_model import LogisticRegression

    Z = hstack([T, csr_matrix(X)]).tocsr()
    m = LogisticRegression(C=1.0 / l2, class_weight="balanced", max_iter=5000).fit(Z, y.astype(int))
    w = m.coef_[0]
    nv = T.shape[1]
    return {"mean": [0.0] * X.shape[1], "scale": [1.0] * X.shape[1], "weights": w[nv:].tolist(),
            "bias": float(m.intercept_[0]), "lexical_weights": w[:nv].tolist()}


FEATURES = ("tfidf+emb", "emb")


def _fit_lexical(X: np.ndarray, texts: List[str], y: np.ndarray, l2: float, min_df: int):
    """The ``tfidf+emb`` head over body features ``X`` and the tf-idf of ``texts`` (terms in at least
    ``min_df`` of them), and its scores of the training passages."""
    vocab, idf, T = _Lexical.fit(texts, min_df=min_df)
    if not vocab:
        raise QualityError(f"no term occurs in {min_df} or more training passages; lower min_df")
    # The log token count column stays in the features (same extractor) with weight 0.
    fit = fit_lexical_head(X[:, :-1], T, y, l2=l2)
    head = {"mean": fit["mean"] + [0.0], "scale": fit["scale"] + [1.0], "weights": fit["weights"] + [0.0],
            "bias": fit["bias"],
            "lexical": {"vocabulary": vocab, "idf": [round(v, 6) for v in idf],
                        "weights": fit["lexical_weights"], "min_df": min_df}}
    return head, _apply(head, X, T)


class HeadOptions(TypedDict, total=False):
    """The keywords of :func:`train_head` after ``quiet`` (``**options: Unpack[HeadOptions]``; another
    keyword is a TypeError naming it), with their defaults: ``neg_ratio`` (None: every other passage a
    negative), ``l2`` (1.0), ``name`` ("learned"), ``describe_data`` (None), ``max_length`` (None: the
    body's), ``normalize`` (True), ``device`` ("auto"), ``batch_size`` (64), ``features`` (None),
    ``min_df`` (2)."""

    neg_ratio: Optional[float]
    l2: float
    name: str
    describe_data: Optional[List[str]]
    max_length: Optional[int]
    normalize: bool
    device: str
    batch_size: int
    features: Optional[Callable[[List[str]], np.ndarray]]
    min_df: int


#: :class:`HeadOptions`' defaults
_HEAD = {"neg_ratio": None, "l2": 1.0, "name": "learned", "describe_data": None, "max_length": None,
         "normalize": True, "device": "auto", "batch_size": 64, "features": None, "min_df": 2}


def train_head(sources: Sequence[Tuple[Iterable, Dict[str, Dict[str, int]]]], body: str = "minilm", *,
               seed: int = 0, feature_set: str = "tfidf+emb", output: Optional[Path] = None, quiet: bool = False,
               **options: Unpack[HeadOptions]) -> dict:
    """Train a quality head; returns it (with a model card) and writes it to ``output`` as JSON.

    ``feature_set`` is ``tfidf+emb`` (default) or ``emb`` (see the module docstring); the tf-idf
    vocabulary is fitted on the training passages (terms in at least ``min_df`` of them).
    ``features`` may supply precomputed body features (texts -> matrix) identical to the body's.
    The other keywords: :class:`HeadOptions`."""
    check_keywords("train_head", options, HeadOptions)
    o = dict(_HEAD, **options)
    neg_ratio, l2, name, describe_data = o["neg_ratio"], o["l2"], o["name"], o["describe_data"]
    max_length, normalize, device, batch_size = o["max_length"], o["normalize"], o["device"], o["batch_size"]
    features, min_df = o["features"], o["min_df"]
    if feature_set not in FEATURES:
        raise QualityError(f"unknown quality feature set {feature_set!r} (choose from: {', '.join(FEATURES)})")
    if output is not None:
        from retrieval.trainrun import check_output_file

        check_output_file(output)  # only a head of its own is replaced
    t0 = time.perf_counter()
    texts, y, stats = training_pairs(sources, neg_ratio=neg_ratio, seed=seed)
    feat = _Features(body, device, max_length, normalize, backend="torch")
    X = (features(texts) if features is not None else feat(texts, batch_size, quiet)).astype(np.float64)
    pooled = f"mean-pooled last layer{', L2-normalised' if normalize else ''}"
    if feature_set == "emb":
        head = fit_logistic(X, y, l2=l2, seed=seed)
        s = _apply(head, X)
        model = f"logistic regression on frozen {body} features ({pooled}, plus log token count), standardised"
    else:
        head, s = _fit_lexical(X, texts, y, l2, min_df)
        model = (f"logistic regression on sublinear tf-idf ({len(head['lexical']['vocabulary'])} terms, English "
                 f"stop words removed) beside frozen {body} features ({pooled}), unstandardised")
    acc = float(((s > 0) == (y > 0)).mean())
    head.update({
        "name": name, "body": body, "max_length": feat.enc.max_length, "normalize": normalize,
        "format": "retr-quality-head/2" if feature_set == "tfidf+emb" else "retr-quality-head/1",
        "features": feature_set,
        "card": {
            "model": model,
            "body_sha256": feat.enc.model_hash, "training_data": describe_data or [],
            "labels": "positive: passage has >= 1 relevant training query; negative: "
                      + ("every other passage" if neg_ratio is None else f"seeded sample of the rest ({neg_ratio} per positive)"),
            "examples": stats, "neg_ratio": neg_ratio, "l2": l2, "seed": seed,
            "class_weighting": "balanced", "train_accuracy_at_0": round(acc, 4),
            "train_seconds": round(time.perf_counter() - t0, 1),
            "intended_use": "query-agnostic static pruning (drop the lowest-scoring share before indexing)",
            "limits": "trained on few, small collections; test-set relevant passages of the same corpus can "
                      "also be training positives (as with QualT5 on MS MARCO), which flatters in-domain results",
        },
    })
    if output is not None:
        write_text(output, json.dumps(head, indent=1) + "\n")  # a kill leaves the old head or the new one
    return head
