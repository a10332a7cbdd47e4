"""Training the learned selector (torch): the material (:func:`training_data`: query vectors,
first-stage candidates, the label oracle), :func:`fit` and its losses, and :func:`train_selector`,
which saves a selector beside the dense sub-index and records it in a new generation through the
folder's owner (``indexes.folder.commit_manifest``). Search never imports this module.

Oracle importance (the training target and the upper bound), for query q with judged
relevant documents R (grade > 0) and non-relevant documents N::

    oracle(q) = q ⊙ (mean_{d in R} d  -  beta * mean_{d in N} d)

where N = the documents judged non-relevant (grade <= 0) plus the top-``neg_k``
first-stage documents not judged relevant; beta = 1 by default. A query without any
relevant document gets no oracle (it is skipped in training and left unmasked in search).
"""
from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from retrieval.dense.dimsel.masks import (DimSelError, adaptive_mask, apply_mask, doc_matrix, keep_count,
                                          oracle_importance, top_mask)
from retrieval.dense.dimsel.search import dense_of
from retrieval.dense.dimsel.selector import SELECTOR_DIR, Selector, SelectorConfig, _make_net, _torch, selector_folder
from retrieval.trainrun import Trainer, TrainOutput
from retrieval.types import Query


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
    cfg.validate()
    n, dim = data.Q.shape
    tr, dev = _split(n, cfg.dev_share, cfg.seed)
    nthreads = torch.get_num_threads()
    torch.set_num_threads(1)  # same float reductions on every run
    try:
        torch.manual_seed(cfg.seed)
        net = _make_net(dim, cfg)
        T = _tensors(data, cfg)
        history, best_epoch = _train(net, T, data, cfg, tr, dev, quiet, log)
        # policy choice on the dev queries (or the training queries when there is no dev split)
        policy = _choose_policy(net, T, data, cfg, dev if len(dev) else tr)
    finally:
        torch.set_num_threads(nthreads)
    config = {
        "dim": dim, "alpha": float(policy["alpha"]), "threshold": float(policy["threshold"]), "model": asdict(cfg),
        "params": int(sum(p.numel() for p in net.parameters())),
        "training": {"queries": len(tr), "dev_queries": len(dev), "best_epoch": best_epoch,
                     "final_train_loss": history[-1]["train_loss"], "first_train_loss": history[0]["train_loss"],
                     "dev_full_ndcg10": policy["full"],
                     "dev_ndcg10_by_alpha": {str(a): v for a, v in policy["by_alpha"].items()},
                     "dev_ndcg10_by_threshold": {str(t): v for t, v in policy["by_threshold"].items()},
                     "history": history, **data.source},
    }
    return Selector(net, config)


@dataclass
class _Tensors:
    """What the losses read, as torch tensors (``Q`` and ``X`` share the arrays' memory)."""

    Q: object                   # (n, dim) query vectors
    X: object                   # (N, dim) document vectors
    target: object              # (n, dim) softmax of the standardised oracle at temperature tau
    cand: object                # (n, cand_k) candidate rows of X (relevant ones swapped in)
    lab: object                 # (n, cand_k) 1.0 where the candidate is relevant
    m_keep: int                 # dims the soft top-alpha mask of the ranking loss keeps


def _tensors(data: TrainData, cfg: SelectorConfig) -> _Tensors:
    torch = _torch()
    O = torch.from_numpy(data.oracle)
    Ot = (O - O.mean(1, keepdim=True)) / (O.std(1, keepdim=True) + 1e-12)
    cand, lab = _cand_labels(data)
    return _Tensors(Q=torch.from_numpy(data.Q), X=torch.from_numpy(data.X), target=torch.softmax(Ot / cfg.tau, dim=1),
                    cand=torch.from_numpy(cand), lab=torch.from_numpy(lab),
                    m_keep=keep_count(data.Q.shape[1], cfg.rank_alpha))


def _train(net, T: _Tensors, data: TrainData, cfg: SelectorConfig, tr: np.ndarray, dev: np.ndarray, quiet: bool,
           log: Optional[list]) -> Tuple[List[dict], int]:
    """The epochs over the training queries ``tr``; with dev queries, ``net`` ends with the weights
    of the epoch with the best dev nDCG@10. Returns the history (one record per epoch) and that
    epoch (-1 without dev queries)."""
    torch = _torch()
    from retrieval.progress import progress

    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    g = torch.Generator().manual_seed(cfg.seed)
    best = (-1.0, None, -1)
    history = []
    for epoch in progress(range(cfg.epochs), desc="training dimsel", unit="epoch", quiet=quiet):
        perm = torch.from_numpy(tr)[torch.randperm(len(tr), generator=g)]
        rec = {"epoch": epoch + 1, "train_loss": _epoch(net, opt, T, perm, cfg)}
        if len(dev):
            imp = _importance(net, T, dev)
            rec["dev_ndcg10"] = _ndcg_dev(apply_mask(data.Q[dev], top_mask(imp, cfg.rank_alpha)), data, dev)
            if rec["dev_ndcg10"] > best[0]:
                best = (rec["dev_ndcg10"], {k: v.clone() for k, v in net.state_dict().items()}, epoch + 1)
        history.append(rec)
        if log is not None:
            log.append(rec)
    if best[1] is not None:
        net.load_state_dict(best[1])
    net.eval()
    return history, best[2]


def _epoch(net, opt, T: _Tensors, perm, cfg: SelectorConfig) -> float:
    """One pass over the training queries in the order ``perm``; the mean batch loss."""
    net.train()
    tot, nb = 0.0, 0
    for s in range(0, len(perm), cfg.batch_size):
        loss = _batch_loss(net, T, perm[s:s + cfg.batch_size], cfg)
        opt.zero_grad()
        loss.backward()
        opt.step()
        tot += float(loss.detach())
        nb += 1
    net.eval()
    return tot / max(nb, 1)


def _batch_loss(net, T: _Tensors, b, cfg: SelectorConfig):
    """The loss of the batch ``b`` (query numbers): KL to the oracle's softmax, the ranking loss, or both."""
    torch = _torch()
    dim = T.Q.shape[1]
    z = net(T.Q[b])
    loss = torch.zeros(())
    if "kl" in cfg.loss:
        zs = (z - z.mean(1, keepdim=True)) / (z.std(1, keepdim=True) + 1e-6) * net.log_scale.exp() / dim
        loss = loss + torch.nn.functional.kl_div(torch.log_softmax(zs, 1), T.target[b], reduction="batchmean")
    if "rank" in cfg.loss:
        loss = loss + cfg.rank_weight * _rank_loss(z, T.Q[b], T.X[T.cand[b]], T.lab[b], T.m_keep, cfg.rank_temp)
    return loss


def _importance(net, T: _Tensors, idx: np.ndarray) -> np.ndarray:
    """The network's importance for the queries ``idx``."""
    torch = _torch()
    with torch.inference_mode():
        return net(T.Q[torch.from_numpy(idx)]).numpy()


def _choose_policy(net, T: _Tensors, data: TrainData, cfg: SelectorConfig, ev: np.ndarray) -> dict:
    """nDCG@10 on the queries ``ev`` with full dimensions, at each of ``cfg.alphas`` and each of
    ``cfg.thresholds``; the fixed alpha and the adaptive threshold (``cfg``'s where set, else the
    best, the larger one on a tie)."""
    imp = _importance(net, T, ev)
    full = _ndcg_dev(data.Q[ev], data, ev)
    by_alpha = {a: _ndcg_dev(apply_mask(data.Q[ev], top_mask(imp, a)), data, ev) for a in cfg.alphas}
    by_thr = {t: _ndcg_dev(apply_mask(data.Q[ev], adaptive_mask(imp, t)), data, ev) for t in cfg.thresholds}
    alpha = cfg.alpha if cfg.alpha is not None else max(by_alpha, key=lambda a: (by_alpha[a], a))
    thr = cfg.threshold if cfg.threshold is not None else max(by_thr, key=lambda t: (by_thr[t], t))
    return {"full": full, "by_alpha": by_alpha, "by_threshold": by_thr, "alpha": alpha, "threshold": thr}


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


#: what a selector folder of its own (``--output``) is known by; it keeps no checkpoint
TRAINER = Trainer("retr train dimsel", "selector.json", checkpoints=False)


def train_selector(index, queries, qrels, output: Optional[Union[str, Path]] = None, retriever: str = "dense",
                   cfg: Optional[SelectorConfig] = None, quiet: bool = True, record: bool = True) -> Selector:
    """Train a selector for ``index``'s dense sub-index from training ``queries`` (path or list of
    Query) and ``qrels`` (path or dict), save it (default: INDEX/<retriever>/dimsel/) and record it in
    the manifest entry of the sub-index under ``"dimsel"``."""
    from retrieval.datasets.qrels import read_qrels
    from indexes import folder as owner
    from indexes import manifest as mf
    from retrieval.collections import read_queries

    cfg = (cfg or SelectorConfig()).validate()
    with index.snapshot() as s:
        dense = dense_of(s, retriever)
    # a folder of its own replaces the selector there as before, and nothing else (an index, another
    # trainer's model, a folder of the user's) is written into
    dest = TrainOutput(output, TRAINER, overwrite=True) if output is not None else None
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
    if dest is not None:
        dest.begin()
        with dest.finishing() as stage:
            sel.save(stage)
        return sel
    if not (record and hasattr(index, "path")):
        sel.save(selector_folder(dense))
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
