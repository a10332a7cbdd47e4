"""Searching with query-aware dimension selection: :class:`DimSel` wraps a dense retriever and
masks each query vector (the other dimensions set to 0) before searching the *same* faiss
index, so documents are never touched; :func:`wrap` is what ``Index.search(..., dimsel=...)``
calls, :func:`attach` makes an index answer through a wrapper. Modes:

    none     plain dense search (identical results)
    prf      DIME: importance = mean over the top-``prf_k`` first-stage documents of q ⊙ d
             (a second search pass)
    learned  a small MLP maps the query embedding alone to per-dimension importance
             (no first-stage search); trained by ``training.train_selector``
    oracle   importance from relevance labels (upper-bound analysis; needs qrels at search time)

This module and those it imports (``masks``, ``selector``) never import the training code.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from retrieval.dense.dimsel.masks import (MODES, DimSelError, DimSelParameterError, apply_mask, check_alpha,
                                          dime_importance, doc_positions, doc_vectors, oracle_importance, top_mask)
from retrieval.dense.dimsel.selector import Selector, selector_folder
from retrieval.kinds import Explained, RetrieverBase
from retrieval.types import Query, Scored


def dense_of(index, retriever: str = "dense"):
    """The dense retriever ``retriever`` of an opened Index's snapshot (or of the generation a search
    reads), or a clear error."""
    entries = index.manifest.get("subindexes", {})
    if retriever not in entries or entries[retriever].get("kind") != "dense":
        dense = [n for n, e in entries.items() if e.get("kind") == "dense"]
        hint = f"it has: {', '.join(dense)}" if dense else "it has none: build or add one of kind 'dense'"
        raise DimSelError(f"dimension selection needs a dense sub-index named {retriever!r} ({hint})", index.path)
    return index.retriever(retriever)


# ----------------------------------------------------------------------------- search wrapper
class DimSel(RetrieverBase):
    """A dense retriever that masks each query vector before searching the same faiss index.

    mode: none | prf | learned | oracle. ``alpha`` = share of dimensions kept (learned: default
    the selector's dev-chosen alpha); ``adaptive`` = use the learned selector's cumulative-share
    threshold instead of a fixed alpha (``threshold`` overrides it). ``prf_k`` = feedback docs.
    ``qrels`` (path or dict) is required by the oracle mode. ``**options``: ``adaptive`` (default
    False), ``threshold`` (None), and the oracle's ``oracle_beta`` (1.0) and ``oracle_neg_k`` (10);
    another keyword is a TypeError naming it.
    """

    kind = "dense"
    _OPTIONS = {"adaptive": False, "threshold": None, "oracle_beta": 1.0, "oracle_neg_k": 10}

    def __init__(self, dense, mode: str = "none", alpha: Optional[float] = None, prf_k: int = 5,
                 selector: Union[None, str, Path, Selector] = None, qrels=None, **options):
        bad = [k for k in options if k not in self._OPTIONS]
        if bad:
            raise TypeError(f"DimSel.__init__() got an unexpected keyword argument {bad[0]!r}")
        o = {**self._OPTIONS, **options}
        adaptive, threshold = o["adaptive"], o["threshold"]
        oracle_beta, oracle_neg_k = o["oracle_beta"], o["oracle_neg_k"]
        if mode not in MODES:
            raise DimSelError(f"unknown dimension selection mode {mode!r} (choose from: {', '.join(MODES)})")
        if not hasattr(dense, "search_vectors") or not hasattr(dense, "encode_queries"):
            raise DimSelError("dimension selection needs a dense retriever")
        self.dense, self.mode = dense, mode
        self.alpha = None if alpha is None else check_alpha(alpha)
        if int(prf_k) < 1:
            raise DimSelParameterError("{prf_k} must be a positive integer, got {got!r}", got=prf_k)
        self.prf_k = int(prf_k)
        self.adaptive, self.threshold = bool(adaptive or threshold is not None), threshold
        self.selector: Optional[Selector] = None
        self.qrels = None
        self.oracle_beta, self.oracle_neg_k = float(oracle_beta), int(oracle_neg_k)
        dim = dense._index.dim
        if mode == "learned":
            sel = selector if isinstance(selector, Selector) else Selector.load(selector or selector_folder(dense))
            if sel.dim != dim:
                raise DimSelError(f"the selector was trained for dimension {sel.dim}, but the dense index has "
                                  f"dimension {dim}")
            self.selector = sel
        if mode == "oracle":
            if qrels is None:
                raise DimSelParameterError("oracle mode needs relevance labels ({qrels}); it is an upper-bound "
                                           "analysis, not a search method")
            if isinstance(qrels, (str, Path)):
                from retrieval.datasets.qrels import read_qrels
                qrels = read_qrels(qrels)
            self.qrels = qrels
        if mode in ("prf", "oracle") and self.alpha is None:
            self.alpha = 0.5
        self.last_kept: Optional[np.ndarray] = None  # dims kept per query in the last call

    def __str__(self) -> str:
        return f"dense+dimsel:{self.mode}"

    # -- selection --------------------------------------------------------------------------
    def masks(self, Q: np.ndarray, qids: Optional[Sequence[str]] = None) -> Optional[np.ndarray]:
        """Boolean masks (n, dim) for query vectors ``Q``; None in mode ``none``."""
        if self.mode == "none":
            return None
        if self.mode == "learned":
            if self.adaptive:
                thr = self.threshold if self.threshold is not None else self.selector.config["threshold"]
                return self.selector.mask(Q, threshold=thr)
            return self.selector.mask(Q, alpha=self.alpha)
        if self.mode == "prf":
            res = self.dense.search_vectors(Q, self.prf_k)
            pos = doc_positions(self.dense)
            imp = np.empty_like(Q)
            for i, r in enumerate(res):
                rows = [pos[d] for d, _ in r]
                imp[i] = dime_importance(Q[i], doc_vectors(self.dense, np.array(rows)))  if rows else Q[i] * 0
            return top_mask(imp, self.alpha)
        # oracle
        if qids is None:
            raise DimSelError("oracle mode needs query ids that appear in the qrels")
        pos = doc_positions(self.dense)
        first = self.dense.search_vectors(Q, self.oracle_neg_k) if self.oracle_neg_k else [[] for _ in Q]
        out = np.ones(Q.shape, dtype=bool)
        for i, qid in enumerate(qids):
            grades = {d: g for d, g in self.qrels.get(qid, {}).items() if d in pos}
            R = [pos[d] for d, g in grades.items() if g > 0]
            if not R:
                continue  # no label: the query stays unmasked
            N = [pos[d] for d, g in grades.items() if g <= 0] + [pos[d] for d, _ in first[i] if d not in grades]
            imp = oracle_importance(Q[i], doc_vectors(self.dense, np.array(R)),
                                    doc_vectors(self.dense, np.array(N)) if N else None, self.oracle_beta)
            out[i] = top_mask(imp, self.alpha)
        return out

    def rebind(self, dense) -> "DimSel":
        """The same selection over another generation's dense retriever (Index.refresh)."""
        import copy

        new = copy.copy(self)
        new.dense = dense
        return new

    def search_vectors(self, Q: np.ndarray, k: int, qids: Optional[Sequence[str]] = None,
                       allowed=None) -> List[Scored]:
        """``allowed`` (a filter's documents) restricts the final search only: the masks are
        chosen as without it, so a filtered search is this ranking, filtered."""
        Q = np.atleast_2d(np.asarray(Q, dtype=np.float32))
        mask = self.masks(Q, qids)
        if mask is None:
            self.last_kept = np.full(len(Q), Q.shape[1])
            return self.dense.search_vectors(Q, k, allowed)
        self.last_kept = mask.sum(axis=1)
        return self.dense.search_vectors(apply_mask(Q, mask), k, allowed)

    def search(self, text: str, k: int, qid: Optional[str] = None) -> Scored:
        return self.search_vectors(self.dense.encode_queries([text]), k, [qid] if qid is not None else None)[0]

    def search_filtered(self, text: str, k: int, allowed, qid: Optional[str] = None) -> Scored:
        return self.search_vectors(self.dense.encode_queries([text]), k, [qid] if qid is not None else None,
                                   allowed)[0]

    def batch_search(self, queries: Sequence[Query], k: int, threads: int = 1) -> Dict[str, Scored]:
        res = self.search_vectors(self.dense.encode_queries([q.text for q in queries]), k, [q.qid for q in queries])
        return {q.qid: r for q, r in zip(queries, res)}

    def explain(self, text: str, docid: str, ranked: Scored, qid: Optional[str] = None) -> Explained:
        """The dense retriever's explanation over the dimensions this selection keeps for ``text``
        (the same masks as its search: the score is q.d with the other dimensions of q set to 0)."""
        Q = np.atleast_2d(self.dense.encode_queries([text]))
        mask = self.masks(Q, [qid] if qid is not None else None)
        selection = {"mode": self.mode, "alpha": self.alpha, "adaptive": self.adaptive}
        if self.mode == "prf":
            selection["prf_k"] = self.prf_k
        if mask is None:
            e = self.dense.explain_vector(Q[0], docid)
            e.details["selection"] = selection
            return e
        return self.dense.explain_vector(Q[0], docid, mask[0], selection)


def wrap(index, retriever: str = "dense", dimsel=None) -> "DimSel":
    """What ``Index.search(..., dimsel=...)`` calls: ``dimsel`` is a :class:`DimSel`, a mode name
    (``"none"``, ``"prf"``, ``"learned"``; oracle needs qrels, so a dict) or a dict of DimSel
    keywords (``{"mode": "prf", "alpha": 0.5, "prf_k": 5}``). Wrappers built from a name or a dict
    are cached on the dense retriever, so a selector is loaded once."""
    dense = dense_of(index, retriever)
    if isinstance(dimsel, DimSel):
        if dimsel.dense is not dense:
            raise DimSelError(f"this DimSel wraps another retriever than the index's {retriever!r}; pass a mode "
                              "name or a dict of options instead")
        return dimsel
    if isinstance(dimsel, str):
        kw = {"mode": dimsel}
    elif isinstance(dimsel, Mapping):
        kw = dict(dimsel)
    else:
        raise DimSelParameterError("{dimsel} must be a mode name, a dict of options or a DimSel, got {_t}",
                                   _t=type(dimsel).__name__)
    cache = dense.__dict__.setdefault("_dimsel_wrappers", {})
    try:
        key = json.dumps(kw, sort_keys=True, default=str)
    except TypeError:
        return DimSel(dense, **kw)
    if key not in cache:
        cache[key] = DimSel(dense, **kw)
    return cache[key]


def attach(index, dimsel: DimSel, retriever: str = "dense") -> DimSel:
    """Make ``index`` answer sub-index ``retriever`` through ``dimsel`` from now on (so
    ``Index.search(..., retriever="dense")``, fused pipelines and the CLI use the masked queries).
    Through ``Index.snapshot().use_retriever``; a sharded index has no single dense retriever to
    replace (its searches take ``dimsel=`` per call)."""
    with index.snapshot() as s:
        if not hasattr(s, "use_retriever"):
            raise DimSelError("attach needs one index folder: a sharded index takes dimsel= per search", index.path)
        dense_of(s, retriever)
        s.use_retriever(retriever, dimsel)
    return dimsel
