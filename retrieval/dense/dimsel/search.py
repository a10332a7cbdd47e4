"""Query-aware dimension selection for the dense retriever (METHODS.md §3).

For each query, score only a subset of embedding dimensions: the query vector is
masked (the other dimensions set to 0) and searched in the *same* faiss index,
so documents are never touched. Modes:

    none     plain dense search (identical results)
    prf      DIME: importance = mean over the top-``prf_k`` first-stage documents of q ⊙ d
             (a second search pass)
    learned  a small MLP maps the query embedding alone to per-dimension importance
             (no first-stage search); trained by :func:`train_selector`
    oracle   importance from relevance labels (upper-bound analysis; needs qrels at search time)

Oracle importance (the training target and the upper bound), for query q with judged
relevant documents R (grade > 0) and non-relevant documents N::

    oracle(q) = q ⊙ (mean_{d in R} d  -  beta * mean_{d in N} d)

where N = the documents judged non-relevant (grade <= 0) plus the top-``neg_k``
first-stage documents not judged relevant; beta = 1 by default. A query without any
relevant document gets no oracle (it is skipped in training and left unmasked in search).

Selection keeps exactly ``keep_count(dim, alpha) = max(1, floor(alpha*dim + 0.5))`` dimensions
with the highest importance (ties: lower dimension index first), or, with the adaptive
policy, the fewest dimensions whose share of the softmax of the standardised importance
reaches ``threshold``.

Usage::

    from retrieval.dense.dimsel import DimSel, train_selector
    idx = retrieval.open_index("IDX")
    train_selector(idx, "queries.jsonl", "qrels/train.tsv")          # -> IDX/dense/dimsel/
    r = DimSel(idx.retriever("dense"), mode="learned")             # or mode="prf", alpha=0.5, prf_k=5
    r.search("what causes fever", k=10)
    idx.search("what causes fever", retriever="dense", dimsel="learned")
"""
from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from indexes.atomic import atomic_path, write_text
from indexes.errors import InputError
from retrieval.kinds import RetrieverBase
from retrieval.types import Query, Scored

MODES = ("none", "prf", "learned", "oracle")
SELECTOR_DIR = "dimsel"           # beside the faiss files: INDEX/<dense>/dimsel/
SELECTOR_FILES = ("selector.pt", "selector.json")


class DimSelError(InputError):
    """Bad input for dimension selection (mode, alpha, selector, qrels)."""


# ----------------------------------------------------------------------------- core maths
def check_alpha(alpha: float) -> float:
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise DimSelError(f"alpha must be a number in (0, 1], got {alpha!r}") from None
    if not (0.0 < a <= 1.0) or math.isnan(a):
        raise DimSelError(f"alpha must be in (0, 1], got {alpha!r}")
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
        raise DimSelError(f"adaptive threshold must be in (0, 1], got {threshold!r}")
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


def _reconstruct(dense, positions: np.ndarray) -> np.ndarray:
    fi = dense._index
    flat = np.asarray(positions, dtype=np.int64).ravel()
    try:
        v = fi.index.reconstruct_batch(flat)
    except (RuntimeError, AttributeError):
        v = np.stack([fi.index.reconstruct(int(i)) for i in flat])
    return np.asarray(v, dtype=np.float32).reshape(*np.shape(positions), fi.dim)


def _positions(dense) -> Dict[str, int]:
    pos = getattr(dense, "_dimsel_positions", None)
    if pos is None:
        pos = {d: i for i, d in enumerate(dense._index.docids)}
        dense._dimsel_positions = pos
    return pos


# ----------------------------------------------------------------------------- learned selector
@dataclass
class SelectorConfig:
    """Everything that defines a learned selector and its training run."""

    hidden: int = 256
    arch: str = "qv"            # qv: importance = q ⊙ (q + MLP(q)) (residual around q ⊙ q); free: MLP(q)
    loss: str = "kl+rank"       # kl | rank | kl+rank
    rank_weight: float = 1.0
    tau: float = 0.5            # temperature of the oracle target softmax (on standardised importance)
    rank_temp: float = 0.05     # temperature of the contrastive ranking loss
    rank_alpha: float = 0.5     # share kept by the soft top-alpha mask inside the ranking loss
    beta: float = 1.0           # oracle: weight of the non-relevant mean
    neg_k: int = 10             # oracle: unjudged top-ranked docs counted as non-relevant
    cand_k: int = 100           # ranking loss: first-stage candidates per query
    epochs: int = 100
    lr: float = 1e-3
    weight_decay: float = 1e-4
    dropout: float = 0.1
    batch_size: int = 64
    seed: int = 0
    dev_share: float = 0.2      # training queries held out to pick the epoch, alpha and threshold
    alphas: Tuple[float, ...] = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    thresholds: Tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
    alpha: Optional[float] = None       # fixed alpha policy; None = chosen on the dev queries
    threshold: Optional[float] = None   # adaptive policy; None = chosen on the dev queries

    def validate(self) -> "SelectorConfig":
        if self.arch not in ("qv", "free"):
            raise DimSelError(f"unknown selector architecture {self.arch!r} (choose from: qv, free)")
        if self.loss not in ("kl", "rank", "kl+rank"):
            raise DimSelError(f"unknown selector loss {self.loss!r} (choose from: kl, rank, kl+rank)")
        if self.hidden < 1 or self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise DimSelError("hidden, epochs, batch size and learning rate must be positive")
        if not (0.0 <= self.dev_share < 1.0):
            raise DimSelError(f"dev share must be in [0, 1), got {self.dev_share}")
        if self.alpha is not None:
            check_alpha(self.alpha)
        check_alpha(self.rank_alpha)
        for a in self.alphas:
            check_alpha(a)
        return self


def _torch():
    import torch
    return torch


def _make_net(dim: int, cfg: SelectorConfig):
    torch = _torch()
    nn = torch.nn

    class SelectorNet(nn.Module):
        """Query embedding -> per-dimension importance logits."""

        def __init__(self):
            super().__init__()
            self.arch = cfg.arch
            self.mlp = nn.Sequential(nn.Linear(dim, cfg.hidden), nn.GELU(), nn.Dropout(cfg.dropout),
                                     nn.Linear(cfg.hidden, dim))
            if cfg.arch == "qv":  # start exactly at the prior q ⊙ q
                nn.init.zeros_(self.mlp[-1].weight)
                nn.init.zeros_(self.mlp[-1].bias)
            self.log_scale = nn.Parameter(torch.tensor(math.log(float(dim))))

        def forward(self, q):
            if self.arch == "qv":
                return q * (q + self.mlp(q))
            return self.mlp(q)

    return SelectorNet()


class Selector:
    """A trained selector: ``importance(Q)`` and ``mask(Q)`` for query embeddings of its dimension."""

    def __init__(self, net, config: dict):
        self.net = net.eval()
        self.config = config
        self.dim = int(config["dim"])
        # Search runs the MLP in numpy: for one query torch's per-call overhead (and its thread
        # pool on a busy machine) cost tens of milliseconds; two small matmuls cost microseconds.
        sd = {k: v.detach().numpy().astype(np.float32) for k, v in net.state_dict().items()}
        self._w1, self._b1 = sd["mlp.0.weight"].T.copy(), sd["mlp.0.bias"]
        self._w2, self._b2 = sd["mlp.3.weight"].T.copy(), sd["mlp.3.bias"]
        self._arch = net.arch

    def importance(self, Q: np.ndarray) -> np.ndarray:
        """Per-dimension importance (n, dim) for query vectors (n, dim)."""
        from scipy.special import erf

        Q = np.atleast_2d(np.asarray(Q, dtype=np.float32))
        if Q.shape[1] != self.dim:
            raise DimSelError(f"selector was trained for dimension {self.dim}, but the query vectors have "
                              f"dimension {Q.shape[1]}")
        h = Q @ self._w1 + self._b1
        h = (0.5 * h * (1.0 + erf(h / np.float32(math.sqrt(2.0))))).astype(np.float32)  # exact GELU
        out = h @ self._w2 + self._b2
        return Q * (Q + out) if self._arch == "qv" else out

    def importance_torch(self, Q: np.ndarray) -> np.ndarray:
        """The same through the torch module (used to check the numpy path)."""
        torch = _torch()
        with torch.inference_mode():
            return self.net(torch.from_numpy(np.atleast_2d(np.asarray(Q, dtype=np.float32)))).numpy()

    def mask(self, Q: np.ndarray, alpha: Optional[float] = None, threshold: Optional[float] = None) -> np.ndarray:
        imp = self.importance(Q)
        if threshold is not None:
            return adaptive_mask(imp, threshold)
        return top_mask(imp, alpha if alpha is not None else self.config["alpha"])

    def save(self, folder: Union[str, Path]) -> Path:
        torch = _torch()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(folder / "selector.pt") as tmp:
            torch.save(self.net.state_dict(), tmp)
        write_text(folder / "selector.json", json.dumps(self.config, indent=2) + "\n")
        return folder

    @classmethod
    def load(cls, folder: Union[str, Path]) -> "Selector":
        torch = _torch()
        folder = Path(folder)
        if not (folder / "selector.json").is_file() or not (folder / "selector.pt").is_file():
            raise DimSelError(f"{folder}: no trained dimension selector here (run `retr train dimsel` first)")
        config = json.loads((folder / "selector.json").read_text())
        cfg = SelectorConfig(**{k: (tuple(v) if isinstance(v, list) else v)
                                for k, v in config["model"].items() if k in SelectorConfig.__dataclass_fields__})
        net = _make_net(int(config["dim"]), cfg)
        try:
            net.load_state_dict(torch.load(folder / "selector.pt", map_location="cpu", weights_only=True))
        except (RuntimeError, ValueError, OSError) as e:
            raise DimSelError(f"{folder}: cannot load the selector weights ({str(e).splitlines()[0]})") from None
        return cls(net, config)


@dataclass
class TrainData:
    """Training material for one collection: query vectors, their first-stage candidates (as rows
    of ``X``), relevance grades by row, and the oracle importance."""

    qids: List[str]
    Q: np.ndarray                    # (n, dim)
    X: np.ndarray                    # (N, dim) document vectors
    cand: np.ndarray                 # (n, cand_k) rows of X, first-stage order
    rel: List[Dict[int, int]]        # per query: row of X -> grade (judged docs in the index)
    oracle: np.ndarray               # (n, dim)
    docids: List[str] = field(default_factory=list)
    source: dict = field(default_factory=dict)


def training_data(dense, queries: Sequence[Query], qrels: Mapping[str, Mapping[str, int]],
                  cfg: SelectorConfig = SelectorConfig(), Q: Optional[np.ndarray] = None) -> TrainData:
    """Encode ``queries`` (or use ``Q``), run the first stage, and compute the oracle for every
    query that has at least one relevant document in the index."""
    docids, X = doc_matrix(dense)
    pos = {d: i for i, d in enumerate(docids)}
    qs = [q for q in queries if any(g > 0 and d in pos for d, g in qrels.get(q.qid, {}).items())]
    if not qs:
        raise DimSelError("no query has a relevant document in this index (wrong qrels or queries?)")
    if Q is None:
        Q = dense.encode_queries([q.text for q in qs])
    else:
        keep = {q.qid for q in qs}
        Q = np.asarray(Q, dtype=np.float32)[[i for i, q in enumerate(queries) if q.qid in keep]]
    if Q.shape[1] != X.shape[1]:
        raise DimSelError(f"query vectors have dimension {Q.shape[1]} but the index has {X.shape[1]}")
    k = min(max(cfg.cand_k, cfg.neg_k), len(docids))
    cand = _topk_rows(Q, X, k)
    rel, oracle = [], np.zeros_like(Q)
    for i, q in enumerate(qs):
        grades = {pos[d]: int(g) for d, g in qrels[q.qid].items() if d in pos}
        rel.append(grades)
        R = [r for r, g in grades.items() if g > 0]
        N = [r for r, g in grades.items() if g <= 0] + [r for r in cand[i, :cfg.neg_k] if grades.get(r, 0) <= 0
                                                        and r not in grades]
        oracle[i] = oracle_importance(Q[i], X[R], X[N] if N else None, cfg.beta)
    return TrainData([q.qid for q in qs], Q, X, cand[:, :cfg.cand_k], rel, oracle, docids)


def _topk_rows(Q: np.ndarray, X: np.ndarray, k: int, chunk: int = 256) -> np.ndarray:
    """Exact top-k rows of X by inner product for each query (brute force, stable order)."""
    out = np.empty((len(Q), k), dtype=np.int64)
    for s in range(0, len(Q), chunk):
        S = Q[s:s + chunk] @ X.T
        part = np.argpartition(-S, k - 1, axis=1)[:, :k] if k < S.shape[1] else np.tile(np.arange(S.shape[1]), (len(S), 1))
        sp = np.take_along_axis(S, part, axis=1)
        order = np.lexsort((part, -sp), axis=1)
        out[s:s + chunk] = np.take_along_axis(part, order, axis=1)
    return out


def _ndcg_dev(Qm: np.ndarray, data: TrainData, idx: np.ndarray, k: int = 10) -> float:
    """Mean nDCG@10 of brute-force search with masked queries over the queries ``idx`` (trec_eval's
    nDCG via eval.Evaluator)."""
    from eval import Evaluator

    top = _topk_rows(Qm, data.X, min(k, len(data.X)))
    run = {data.qids[i]: {data.docids[r]: float(k - j) for j, r in enumerate(top[n])} for n, i in enumerate(idx)}
    qrels = {data.qids[i]: {data.docids[r]: g for r, g in data.rel[i].items()} for i in idx}
    return float(Evaluator(qrels, [f"nDCG@{k}"]).evaluate(run)[f"nDCG@{k}"])


def _split(n: int, share: float, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    n_dev = int(round(share * n)) if share > 0 else 0
    if n_dev and n - n_dev < 2:
        n_dev = 0
    return np.sort(perm[n_dev:]), np.sort(perm[:n_dev])


def fit(data: TrainData, cfg: SelectorConfig = SelectorConfig(), quiet: bool = True,
        log: Optional[list] = None) -> Selector:
    """Train a selector on ``data`` (deterministic under ``cfg.seed``). A share ``dev_share`` of
    the queries is held out: the epoch with the best dev nDCG@10 (at ``rank_alpha``) is kept,
    and the fixed alpha / adaptive threshold are picked on the same dev queries."""
    torch = _torch()
    from retrieval.progress import progress

    cfg.validate()
    n, dim = data.Q.shape
    tr, dev = _split(n, cfg.dev_share, cfg.seed)
    nthreads = torch.get_num_threads()
    torch.set_num_threads(1)  # same float reductions on every run
    try:
        torch.manual_seed(cfg.seed)
        net = _make_net(dim, cfg)
        opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        Q = torch.from_numpy(data.Q)
        O = torch.from_numpy(data.oracle)
        Ot = (O - O.mean(1, keepdim=True)) / (O.std(1, keepdim=True) + 1e-12)
        target = torch.softmax(Ot / cfg.tau, dim=1)
        X = torch.from_numpy(data.X)
        cand, lab = _cand_labels(data)
        cand_t, lab_t = torch.from_numpy(cand), torch.from_numpy(lab)
        m_keep = keep_count(dim, cfg.rank_alpha)
        g = torch.Generator().manual_seed(cfg.seed)
        best = (-1.0, None, -1)
        history = []
        for epoch in progress(range(cfg.epochs), desc="training dimsel", unit="epoch", quiet=quiet):
            net.train()
            perm = torch.from_numpy(tr)[torch.randperm(len(tr), generator=g)]
            tot, nb = 0.0, 0
            for s in range(0, len(perm), cfg.batch_size):
                b = perm[s:s + cfg.batch_size]
                z = net(Q[b])
                loss = torch.zeros(())
                if "kl" in cfg.loss:
                    zs = (z - z.mean(1, keepdim=True)) / (z.std(1, keepdim=True) + 1e-6) * net.log_scale.exp() / dim
                    loss = loss + torch.nn.functional.kl_div(torch.log_softmax(zs, 1), target[b],
                                                             reduction="batchmean")
                if "rank" in cfg.loss:
                    loss = loss + cfg.rank_weight * _rank_loss(z, Q[b], X[cand_t[b]], lab_t[b], m_keep, cfg.rank_temp)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tot += float(loss.detach())
                nb += 1
            net.eval()
            rec = {"epoch": epoch + 1, "train_loss": tot / max(nb, 1)}
            if len(dev):
                with torch.inference_mode():
                    imp = net(Q[torch.from_numpy(dev)]).numpy()
                rec["dev_ndcg10"] = _ndcg_dev(apply_mask(data.Q[dev], top_mask(imp, cfg.rank_alpha)), data, dev)
                if rec["dev_ndcg10"] > best[0]:
                    best = (rec["dev_ndcg10"], {k: v.clone() for k, v in net.state_dict().items()}, epoch + 1)
            history.append(rec)
            if log is not None:
                log.append(rec)
        if best[1] is not None:
            net.load_state_dict(best[1])
        net.eval()
        # policy choice on the dev queries (or the training queries when there is no dev split)
        ev = dev if len(dev) else tr
        with torch.inference_mode():
            imp = net(Q[torch.from_numpy(ev)]).numpy()
        full = _ndcg_dev(data.Q[ev], data, ev)
        by_alpha = {a: _ndcg_dev(apply_mask(data.Q[ev], top_mask(imp, a)), data, ev) for a in cfg.alphas}
        by_thr = {t: _ndcg_dev(apply_mask(data.Q[ev], adaptive_mask(imp, t)), data, ev) for t in cfg.thresholds}
        alpha = cfg.alpha if cfg.alpha is not None else max(by_alpha, key=lambda a: (by_alpha[a], a))
        thr = cfg.threshold if cfg.threshold is not None else max(by_thr, key=lambda t: (by_thr[t], t))
    finally:
        torch.set_num_threads(nthreads)
    config = {
        "dim": dim, "alpha": float(alpha), "threshold": float(thr), "model": asdict(cfg),
        "params": int(sum(p.numel() for p in net.parameters())),
        "training": {"queries": len(tr), "dev_queries": len(dev), "best_epoch": best[2],
                     "final_train_loss": history[-1]["train_loss"], "first_train_loss": history[0]["train_loss"],
                     "dev_full_ndcg10": full, "dev_ndcg10_by_alpha": {str(a): v for a, v in by_alpha.items()},
                     "dev_ndcg10_by_threshold": {str(t): v for t, v in by_thr.items()},
                     "history": history, **data.source},
    }
    return Selector(net, config)


def _cand_labels(data: TrainData) -> Tuple[np.ndarray, np.ndarray]:
    """Candidates per query = first-stage top ``cand_k`` with every relevant doc swapped in at the
    end when missing; labels = grade > 0."""
    cand = data.cand.copy()
    lab = np.zeros(cand.shape, dtype=np.float32)
    width = cand.shape[1]
    for i, grades in enumerate(data.rel):
        R = [r for r, g in grades.items() if g > 0][:width // 2]  # keep room for negatives
        if not set(R) <= set(cand[i].tolist()):
            rs = set(R)
            cand[i, :] = [r for r in cand[i].tolist() if r not in rs][:width - len(R)] + R
        lab[i] = [1.0 if grades.get(r, 0) > 0 else 0.0 for r in cand[i]]
    return cand, lab


def _rank_loss(z, q, C, lab, m_keep: int, temp: float):
    """Contrastive loss of the masked query over its candidates: the mask is a soft top-m
    (sigmoid around the m-th largest importance), so it follows what search will keep."""
    torch = _torch()
    zs = (z - z.mean(1, keepdim=True)) / (z.std(1, keepdim=True) + 1e-6)
    kth = torch.topk(zs, m_keep, dim=1).values[:, -1:].detach()
    w = torch.sigmoid((zs - kth) / 0.25) if m_keep < z.shape[1] else torch.ones_like(zs)
    s = torch.einsum("bd,bmd->bm", w * q, C) / temp
    logp = torch.log_softmax(s, dim=1)
    return -(torch.logsumexp(logp.masked_fill(lab <= 0, -1e9), dim=1)).mean()


def selector_folder(dense) -> Path:
    return Path(dense.path) / SELECTOR_DIR


def train_selector(index, queries, qrels, output: Optional[Union[str, Path]] = None, retriever: str = "dense",
                   cfg: Optional[SelectorConfig] = None, quiet: bool = True, record: bool = True) -> Selector:
    """Train a selector for ``index``'s dense sub-index from training ``queries`` (path or list of
    Query) and ``qrels`` (path or dict), save it (default: INDEX/<retriever>/dimsel/) and record it in
    the manifest entry of the sub-index under ``"dimsel"``."""
    from eval import read_qrels
    from indexes import folder as owner
    from indexes import manifest as mf
    from retrieval.collections import read_queries

    cfg = (cfg or SelectorConfig()).validate()
    dense = dense_of(index, retriever)
    qsrc = str(queries) if isinstance(queries, (str, Path)) else "<python list>"
    rsrc = str(qrels) if isinstance(qrels, (str, Path)) else "<python dict>"
    if isinstance(queries, (str, Path)):
        queries = read_queries(queries)
    if isinstance(qrels, (str, Path)):
        qrels = read_qrels(qrels)
    t0 = time.perf_counter()
    data = training_data(dense, [q for q in queries if q.qid in qrels], qrels, cfg)
    data.source = {"queries_file": qsrc, "qrels_file": rsrc, "n_queries_with_relevant": len(data.qids),
                   "qids_sha256": hashlib.sha256("\n".join(data.qids).encode()).hexdigest()[:16]}
    sel = fit(data, cfg, quiet=quiet)
    sel.config["training"]["seconds"] = round(time.perf_counter() - t0, 2)
    sel.config["retriever"] = retriever
    sel.config["index_model_sha256"] = (dense.entry.get("model") or {}).get("sha256")
    if not (record and hasattr(index, "path") and output is None):
        sel.save(Path(output) if output else selector_folder(dense))
        return sel

    def record_it(ch):
        # generation N+1 gets its own copy of the dense folder (hard links) with the selector in it,
        # so readers of N keep N's folder (and its old selector, if any) as it was
        dst = ch.stage(retriever)
        shutil.rmtree(dst / SELECTOR_DIR, ignore_errors=True)  # links only: N's files stay
        sel.save(dst / SELECTOR_DIR)
        entry = ch.new["subindexes"][retriever]
        entry["dimsel"] = {"path": f"{entry['path']}/{SELECTOR_DIR}", "trained_at": mf.now(),
                           "dim": sel.dim, "alpha": sel.config["alpha"], "threshold": sel.config["threshold"],
                           "model": sel.config["model"], "training": {k: v for k, v in sel.config["training"].items()
                                                                      if k != "history"}}
    owner.commit_manifest(index.path, record_it, based_on=index.manifest)
    index.refresh()
    return sel


def dense_of(index, retriever: str = "dense"):
    """The dense retriever ``retriever`` of an opened Index, or a clear error."""
    entries = index.manifest.get("subindexes", {})
    if retriever not in entries or entries[retriever].get("kind") != "dense":
        dense = [n for n, e in entries.items() if e.get("kind") == "dense"]
        hint = f"it has: {', '.join(dense)}" if dense else "build one with `retr index --dense`"
        raise DimSelError(f"dimension selection needs a dense sub-index named {retriever!r} ({hint})", index.path)
    return index.retriever(retriever)


# ----------------------------------------------------------------------------- search wrapper
class DimSel(RetrieverBase):
    """A dense retriever that masks each query vector before searching the same faiss index.

    mode: none | prf | learned | oracle. ``alpha`` = share of dimensions kept (learned: default
    the selector's dev-chosen alpha); ``adaptive`` = use the learned selector's cumulative-share
    threshold instead of a fixed alpha (``threshold`` overrides it). ``prf_k`` = feedback docs.
    ``qrels`` (path or dict) is required by the oracle mode.
    """

    kind = "dense"

    def __init__(self, dense, mode: str = "none", alpha: Optional[float] = None, prf_k: int = 5,
                 selector: Union[None, str, Path, Selector] = None, qrels=None, adaptive: bool = False,
                 threshold: Optional[float] = None, oracle_beta: float = 1.0, oracle_neg_k: int = 10):
        if mode not in MODES:
            raise DimSelError(f"unknown dimension selection mode {mode!r} (choose from: {', '.join(MODES)})")
        if not hasattr(dense, "search_vectors") or not hasattr(dense, "encode_queries"):
            raise DimSelError("dimension selection needs a dense retriever")
        self.dense, self.mode = dense, mode
        self.alpha = None if alpha is None else check_alpha(alpha)
        if int(prf_k) < 1:
            raise DimSelError(f"prf_k must be a positive integer, got {prf_k!r}")
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
                raise DimSelError("oracle mode needs relevance labels (--dimsel-qrels FILE); it is an upper-bound "
                                  "analysis, not a search method")
            if isinstance(qrels, (str, Path)):
                from eval import read_qrels
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
            pos = _positions(self.dense)
            imp = np.empty_like(Q)
            for i, r in enumerate(res):
                rows = [pos[d] for d, _ in r]
                imp[i] = dime_importance(Q[i], _reconstruct(self.dense, np.array(rows)))  if rows else Q[i] * 0
            return top_mask(imp, self.alpha)
        # oracle
        if qids is None:
            raise DimSelError("oracle mode needs query ids that appear in the qrels")
        pos = _positions(self.dense)
        first = self.dense.search_vectors(Q, self.oracle_neg_k) if self.oracle_neg_k else [[] for _ in Q]
        out = np.ones(Q.shape, dtype=bool)
        for i, qid in enumerate(qids):
            grades = {d: g for d, g in self.qrels.get(qid, {}).items() if d in pos}
            R = [pos[d] for d, g in grades.items() if g > 0]
            if not R:
                continue  # no label: the query stays unmasked
            N = [pos[d] for d, g in grades.items() if g <= 0] + [pos[d] for d, _ in first[i] if d not in grades]
            imp = oracle_importance(Q[i], _reconstruct(self.dense, np.array(R)),
                                    _reconstruct(self.dense, np.array(N)) if N else None, self.oracle_beta)
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
        raise DimSelError(f"dimsel must be a mode name, a dict of options or a DimSel, got {type(dimsel).__name__}")
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
    Uses ``Index.use_retriever`` where the Index has it, else its retriever cache."""
    dense_of(index, retriever)
    if hasattr(index, "use_retriever"):
        index.use_retriever(retriever, dimsel)
    else:
        with index._lock:
            index._retrievers[retriever] = dimsel
    return dimsel
