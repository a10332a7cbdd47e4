"""Per-dimension importance and the masks chosen from it (numpy only: no torch here).

Selection keeps exactly ``keep_count(dim, alpha) = max(1, floor(alpha*dim + 0.5))`` dimensions
with the highest importance (ties: lower dimension index first), or, with the adaptive
policy, the fewest dimensions whose share of the softmax of the standardised importance
reaches ``threshold``. The importance is DIME-PRF's (:func:`dime_importance`), the label
oracle's (:func:`oracle_importance`) or a learned selector's (``selector.Selector``).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import numpy as np

from indexes.errors import InputError, ParameterError

MODES = ("none", "prf", "learned", "oracle")


class DimSelError(InputError):
    """Bad input for dimension selection (mode, alpha, selector, qrels)."""


class DimSelParameterError(DimSelError, ParameterError):
    """A :class:`DimSelError` whose message names parameters (``{alpha}``): the CLI calls them by
    its flags (``cli.params.flags``)."""

    def __reduce__(self):
        return _parameter_error, (self.template, self.values)


def _parameter_error(template: str, values: dict) -> DimSelParameterError:
    return DimSelParameterError(template, **values)


# ----------------------------------------------------------------------------- core maths
def check_alpha(alpha: float) -> float:
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise DimSelParameterError("{alpha} must be a number in (0, 1], got {got!r}", got=alpha) from None
    if not (0.0 < a <= 1.0) or math.isnan(a):
        raise DimSelParameterError("{alpha} must be in (0, 1], got {got!r}", got=alpha)
    return a


def keep_count(dim: int, alpha: float) -> int:
    """How many dimensions a share ``alpha`` keeps: round half up, at least one."""
    return max(1, int(math.floor(check_alpha(alpha) * dim + 0.5)))


def dime_importance(q: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """DIME-PRF importance: mean over feedback documents of q ⊙ d.
    ``q`` (n, dim) and ``docs`` (n, k, dim) -> (n, dim); also accepts (dim,) and (k, dim)."""
    q = np.asarray(q, dtype=np.float32)
    docs = np.asarray(docs, dtype=np.float32)
    if q.ndim == 1:
        return dime_importance(q[None], docs[None])[0]
    if docs.ndim != 3 or docs.shape[0] != q.shape[0] or docs.shape[2] != q.shape[1]:
        raise DimSelError(f"feedback documents of shape {docs.shape} do not fit queries of shape {q.shape}")
    return q * docs.mean(axis=1)


def oracle_importance(q: np.ndarray, relevant: np.ndarray, nonrelevant: Optional[np.ndarray] = None,
                      beta: float = 1.0) -> np.ndarray:
    """Label oracle for one query: q ⊙ (mean of relevant docs - beta * mean of non-relevant docs)."""
    q = np.asarray(q, dtype=np.float32)
    relevant = np.asarray(relevant, dtype=np.float32).reshape(-1, q.shape[-1])
    if len(relevant) == 0:
        raise DimSelError("the oracle needs at least one relevant document")
    v = relevant.mean(axis=0)
    if nonrelevant is not None and len(nonrelevant) and beta:
        v = v - beta * np.asarray(nonrelevant, dtype=np.float32).reshape(-1, q.shape[-1]).mean(axis=0)
    return q * v


def top_mask(importance: np.ndarray, alpha: float) -> np.ndarray:
    """Boolean mask keeping exactly ``keep_count(dim, alpha)`` most important dims per row."""
    imp = np.atleast_2d(np.asarray(importance, dtype=np.float64))
    n, dim = imp.shape
    m = keep_count(dim, alpha)
    mask = np.zeros((n, dim), dtype=bool)
    if m >= dim:
        mask[:] = True
        return mask if np.ndim(importance) == 2 else mask[0]
    order = np.argsort(-imp, axis=1, kind="stable")[:, :m]
    np.put_along_axis(mask, order, True, axis=1)
    return mask if np.ndim(importance) == 2 else mask[0]


def softmax_share(importance: np.ndarray) -> np.ndarray:
    """Per-row softmax of the standardised importance: a distribution over dimensions."""
    imp = np.atleast_2d(np.asarray(importance, dtype=np.float64))
    z = (imp - imp.mean(axis=1, keepdims=True)) / (imp.std(axis=1, keepdims=True) + 1e-12)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def adaptive_mask(importance: np.ndarray, threshold: float, min_alpha: float = 0.05) -> np.ndarray:
    """Keep, per row, the fewest top dimensions whose softmax share reaches ``threshold``
    (at least ``keep_count(dim, min_alpha)``)."""
    if not (0.0 < float(threshold) <= 1.0):
        raise DimSelParameterError("adaptive {threshold} must be in (0, 1], got {got!r}", got=threshold)
    p = softmax_share(importance)
    n, dim = p.shape
    order = np.argsort(-p, axis=1, kind="stable")
    cum = np.cumsum(np.take_along_axis(p, order, axis=1), axis=1)
    counts = np.minimum((cum < threshold - 1e-12).sum(axis=1) + 1, dim)
    counts = np.maximum(counts, keep_count(dim, min_alpha))
    mask = np.zeros((n, dim), dtype=bool)
    ranks = np.arange(dim)[None, :] < counts[:, None]
    np.put_along_axis(mask, order, ranks, axis=1)
    return mask


def apply_mask(q: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.where(mask, q, 0.0), dtype=np.float32)


# ----------------------------------------------------------------------------- vectors of the index
def doc_matrix(dense) -> Tuple[List[str], np.ndarray]:
    """All document vectors of a dense retriever's faiss index, read back from the index
    (``reconstruct_n``; exact for Flat/HNSW-Flat, approximate for PQ indexes)."""
    fi = dense._index
    try:
        X = fi.index.reconstruct_n(0, fi.ntotal)
    except RuntimeError as e:
        raise DimSelError(f"cannot read the vectors back from this faiss index ({fi.factory}): "
                          f"{str(e).splitlines()[0]}") from None
    return fi.docids, np.asarray(X, dtype=np.float32)


def doc_vectors(dense, positions: np.ndarray) -> np.ndarray:
    """The vectors of the documents at ``positions`` (rows of the faiss index), shaped as
    ``positions`` plus the dimension."""
    fi = dense._index
    flat = np.asarray(positions, dtype=np.int64).ravel()
    try:
        v = fi.index.reconstruct_batch(flat)
    except (RuntimeError, AttributeError):
        v = np.stack([fi.index.reconstruct(int(i)) for i in flat])
    return np.asarray(v, dtype=np.float32).reshape(*np.shape(positions), fi.dim)


def doc_positions(dense) -> Dict[str, int]:
    """docid -> row of the faiss index, computed once per dense retriever."""
    pos = getattr(dense, "_dimsel_positions", None)
    if pos is None:
        pos = {d: i for i, d in enumerate(dense._index.docids)}
        dense._dimsel_positions = pos
    return pos
