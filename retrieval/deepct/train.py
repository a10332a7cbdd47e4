"""Train a DeepCT term-weight model (Dai & Callan 2019) on query term recall
targets, or on HDCT-style title weak supervision.

Loss: MSE between the head's output and the target, taken only over each word's
first word-piece (mask 0 on special tokens, padding and continuation pieces).
AdamW with linear warmup/decay. Passages longer than the window are split into
consecutive windows, each a training example (nothing is dropped).

Determinism: with the same seed, data, settings, torch version and thread count
the run is repeatable bit for bit on CPU (seeded torch/python RNGs, seeded
shuffles, deterministic algorithms requested). A different ``threads`` value can
change floating-point summation order in matrix kernels, hence tiny differences;
use ``threads=1`` for runs that must match across machines with different core
counts. Resuming from a checkpoint restores the RNG state, so a resumed run
equals an uninterrupted one.
"""
from __future__ import annotations

import json
import random
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from indexes import manifest as mf
from indexes.atomic import atomic_path
from indexes.errors import InputError, ParameterError
from retrieval.deepct import model as dc
from retrieval.deepct.train_config import TrainConfig
from retrieval.models import model_hash, restores_torch_settings
from retrieval.progress import progress
from retrieval.trainrun import CHECKPOINT, RunOptions, Trainer, TrainOutput

#: what its output folders are known by (the head and deepct.json; .checkpoint)
TRAINER = Trainer("retr train deepct", dc.HEAD_FILE)


@dataclass
class TrainData:
    texts: Dict[str, str] = field(default_factory=dict)
    targets: Dict[str, Dict[str, float]] = field(default_factory=dict)
    info: Dict[str, object] = field(default_factory=dict)


def build_training_data(corpus, queries=None, qrels=None, cfg: TrainConfig = TrainConfig()) -> TrainData:
    """Read the corpus (and queries/qrels) and compute the targets."""
    from retrieval.collections import read_corpus, read_queries
    from retrieval.deepct.targets import query_term_recall, read_qrels_pairs, split_queries, title_targets

    if (queries is None) != (qrels is None):
        raise ParameterError("give both {queries} and {qrels}, or neither (title weak supervision)")
    cfg = resolve_title(cfg, queries)
    if queries is None and cfg.title == "off":
        raise ParameterError("no training data: give {queries} and {qrels}, or use title weak supervision "
                             "({title} only)")
    docs = {d.docid: d for d in read_corpus(corpus, empty="skip")}
    data = TrainData(info={"corpus": str(Path(corpus).resolve()), "documents": len(docs)})
    if queries is not None and cfg.title != "only":
        qs = {q.qid: q.text for q in read_queries(queries)}
        qr = read_qrels_pairs(qrels)
        judged = [q for q, j in qr.items() if any(g >= cfg.min_rel for g in j.values()) and q in qs]
        train_q, dev_q = split_queries(judged, cfg.dev_fraction, cfg.seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tg = query_term_recall({d: doc.contents for d, doc in docs.items()}, qs, qr, cfg.min_rel,
                                   exclude_queries=dev_q)
        for w in caught:
            warnings.warn(w.message, w.category, stacklevel=2)
        for d, t in tg.by_doc.items():
            data.texts[d], data.targets[d] = docs[d].contents, t
        # absolute: `retr index --deepct` reads the held-out queries back from any working directory
        data.info.update({"queries": str(Path(queries).resolve()), "qrels": str(Path(qrels).resolve()),
                          "train_queries": len(train_q),
                          "dev_queries": dev_q, "query_targets": tg.stats})
    if cfg.title != "off":
        pool = [d for d in docs.values() if d.docid not in data.targets]
        tt, bodies = title_targets(pool, limit=cfg.title_limit, seed=cfg.seed)
        for d, t in tt.by_doc.items():
            data.texts[d], data.targets[d] = bodies[d], t
        data.info["title_targets"] = tt.stats
        if queries is None and not data.targets:
            raise ParameterError("{_path}: no qrels given and no passage has both a title and a text, so there is "
                                 "nothing to train DeepCT on: give training queries and qrels ({queries}, {qrels})",
                                 _path=corpus)
    if not data.targets:
        raise InputError("no training passages: no relevant qrels matched the corpus and no titles were usable")
    data.info["training_passages"] = len(data.targets)
    return data


def _loss(pred: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (((pred - labels) ** 2) * mask).sum() / mask.sum().clamp(min=1)


def _batch(windows, pad_id):
    ids, att = dc.pad_batch(windows, pad_id)
    labels = torch.zeros(ids.shape, dtype=torch.float32)
    mask = torch.zeros(ids.shape, dtype=torch.float32)
    for r, w in enumerate(windows):
        labels[r, w.positions] = torch.tensor(w.labels, dtype=torch.float32)
        mask[r, w.positions] = 1.0
    return ids, att, labels, mask


def _save_checkpoint(path: Path, state: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    with atomic_path(path / "state.pt") as tmp:
        torch.save(state, tmp)


def resolve_title(cfg: TrainConfig, queries) -> TrainConfig:
    """``title="auto"``: HDCT title supervision alone when there are no training queries, none with them."""
    from dataclasses import replace

    if cfg.title != "auto":
        return cfg
    return replace(cfg, title="off" if queries is not None else "only")


@restores_torch_settings
def train_deepct(corpus, output, queries=None, qrels=None, cfg: Optional[TrainConfig] = None, *,
                 how: Optional[RunOptions] = None, stop_after_steps: Optional[int] = None, **options) -> dict:
    """Train and save a DeepCT model into ``output``; returns its model card.

    An interrupted run leaves ``output/.checkpoint``; running again with the same
    settings resumes from it. ``stop_after_steps`` stops early (after writing a
    checkpoint) — for tests of resuming. Qrels whose file is named like a test split are
    refused (as `retr tune` and dense training refuse them) unless ``allow_test``.
    ``overwrite``, ``quiet``, ``allow_test``: the run's options (:class:`retrieval.trainrun.RunOptions`;
    its ``index`` and ``resume`` do not apply), as keywords (``**options``; another is a TypeError
    naming it) or as ``how``.
    """
    how, rest = RunOptions.split(how, options)
    bad = sorted(set(rest) | ({"index", "resume"} & set(options)))
    if bad:
        raise TypeError(f"train_deepct() got an unexpected keyword argument {bad[0]!r}")
    overwrite, quiet, allow_test = how.overwrite, how.quiet, how.allow_test
    from retrieval.models import pick_device
    from retrieval.datasets.qrels import looks_like_test

    cfg = (cfg or TrainConfig()).validate()
    if (queries is None) != (qrels is None):
        raise ParameterError("give both {queries} and {qrels}, or neither (title weak supervision)")
    if qrels is not None and looks_like_test(qrels) and not allow_test:
        raise InputError("refusing to train on what looks like test qrels; train on a train/dev split", qrels)
    cfg = resolve_title(cfg, queries)   # the card and the checkpoint key record what was resolved
    # a checkpoint there is resumed whenever its settings are these (no --resume needed)
    dest = TrainOutput(output, TRAINER, cfg.key(), resume=True, overwrite=overwrite)
    out, ck_dir, state = dest.path, dest.checkpoint, dest.state
    _seed(cfg)

    t_start = time.perf_counter()
    data = build_training_data(corpus, queries, qrels, cfg)
    model, tok, base_path = dc.init_model(cfg.base, cfg.dropout)
    device = pick_device(cfg.device)
    model.to(device)
    windows = _training_windows(tok, data, cfg)
    dest.begin()  # the inputs are read and checked: now the folder may change
    try:
        run = _start(model, len(windows), cfg, state)
        pad = tok.pad_token_id or 0
        run.t_train = time.perf_counter()
        model.train()
        run.running = list(state["running"]) if state is not None else []
        stopped = _train_epochs(run, windows, pad, device, cfg, ck_dir, stop_after_steps, quiet)
    except Exception:
        dest.failed()  # nothing saved: leave no half-made folder
        raise
    train_s = run.elapsed_before + time.perf_counter() - run.t_train
    if stopped:
        return {"stopped_at_step": run.step, "total_steps": run.total, "checkpoint": str(ck_dir)}
    model.eval()
    card = _card(cfg, data, queries, base_path, run, len(windows), (train_s, run.t_train - t_start), device)
    with dest.finishing() as stage:
        dc.save_model(model, tok, stage, card)
    return json.loads((out / dc.CARD_FILE).read_text())


def _seed(cfg: TrainConfig) -> None:
    """Threads, deterministic algorithms and the seeds of torch's and Python's generators."""
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    torch.use_deterministic_algorithms(True, warn_only=True)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)


def _training_windows(tok, data: TrainData, cfg: TrainConfig) -> list:
    """Consecutive model windows of every training passage (at most ``cfg.max_windows`` each)
    that hold at least one word, with their labels."""
    prep = dc.Preparer(tok, cfg.max_length, stride=None)
    prep.stride = prep.width  # training: consecutive windows, no overlap
    docids = sorted(data.texts)
    prepared = prep.prepare([data.texts[d] for d in docids], [data.targets[d] for d in docids])
    windows = []
    for p in prepared:
        ws = [w for w in p.windows if w.positions]
        windows.extend(ws[:cfg.max_windows] if cfg.max_windows else ws)
    if not windows:
        raise InputError("no training windows (all passages empty after tokenisation)")
    return windows


@dataclass
class _Run:
    """A training run as it goes: the model, its optimiser and schedule, and what a checkpoint keeps."""

    model: torch.nn.Module
    opt: torch.optim.Optimizer
    sched: object
    steps_per_epoch: int
    total: int
    step: int = 0
    epoch_losses: List[float] = field(default_factory=list)
    running: List[float] = field(default_factory=list)  # losses of the current epoch's steps
    elapsed_before: float = 0.0  # training seconds of the runs this one resumes
    t_train: float = 0.0         # when this run's training started (perf_counter)


def _start(model, n_windows: int, cfg: TrainConfig, state: Optional[dict]) -> _Run:
    """AdamW (no weight decay on biases and norms) with linear warmup and decay over every
    step, restored from ``state`` when resuming (with the generators' states)."""
    from retrieval.optim import adamw_with_warmup

    steps_per_epoch = (n_windows + cfg.batch_size - 1) // cfg.batch_size
    total = steps_per_epoch * cfg.epochs
    opt, sched = adamw_with_warmup(model, cfg.lr, cfg.weight_decay, cfg.warmup, total)
    run = _Run(model, opt, sched, steps_per_epoch, total)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        run.step, run.epoch_losses, run.elapsed_before = state["step"], state["epoch_losses"], state["elapsed"]
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["py_rng"])
    return run


def _train_epochs(run: _Run, windows: list, pad: int, device, cfg: TrainConfig, ck_dir: Path,
                  stop_after_steps: Optional[int], quiet: bool) -> bool:
    """Train from ``run.step`` to the last epoch's end, writing checkpoints on the way; True if
    ``stop_after_steps`` stopped it first."""
    with progress(total=run.total, desc="training DeepCT", unit="step", quiet=quiet) as bar:
        bar.update(run.step)
        for epoch in range(run.step // run.steps_per_epoch, cfg.epochs):
            g = torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
            order = torch.randperm(len(windows), generator=g).tolist()
            for b in range(run.step - epoch * run.steps_per_epoch, run.steps_per_epoch):
                batch = [windows[i] for i in order[b * cfg.batch_size:(b + 1) * cfg.batch_size]]
                run.running.append(_step(run, batch, pad, device))
                bar.update(1)
                recent = run.running[-20:]
                bar.set_postfix(epoch=epoch + 1, loss=f"{sum(recent) / len(recent):.4f}")
                end_of_epoch = b == run.steps_per_epoch - 1
                if end_of_epoch:
                    run.epoch_losses.append(sum(run.running) / len(run.running))
                    run.running = []
                stop_now = stop_after_steps is not None and run.step >= stop_after_steps
                if end_of_epoch or run.step % cfg.checkpoint_every == 0 or stop_now:
                    _checkpoint(run, cfg, ck_dir)
                if stop_now and run.step < run.total:
                    return True
    return False


def _step(run: _Run, batch, pad: int, device) -> float:
    """One optimiser step on ``batch`` (gradients clipped to norm 1); returns its loss."""
    ids, att, labels, mask = _batch(batch, pad)
    pred = run.model(ids.to(device), att.to(device))
    loss = _loss(pred, labels.to(device), mask.to(device))
    run.opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), 1.0)
    run.opt.step()
    run.sched.step()
    run.step += 1
    return float(loss.detach())


def _checkpoint(run: _Run, cfg: TrainConfig, ck_dir: Path) -> None:
    _save_checkpoint(ck_dir, {
        "config_key": cfg.key(), "model": run.model.state_dict(), "optimizer": run.opt.state_dict(),
        "scheduler": run.sched.state_dict(), "step": run.step, "epoch_losses": run.epoch_losses,
        "running": run.running, "torch_rng": torch.get_rng_state(), "py_rng": random.getstate(),
        "elapsed": run.elapsed_before + time.perf_counter() - run.t_train})


def _card(cfg: TrainConfig, data: TrainData, queries, base_path, run: _Run, n_windows: int,
          seconds: Tuple[float, float], device) -> dict:
    """The model card of a finished run (``seconds``: training's, and those before training started)."""
    model, epoch_losses = run.model, run.epoch_losses
    train_s, prep_s = seconds
    return {
        "created_at": mf.now(), "base_model": str(base_path), "base_sha256": model_hash(base_path),
        "architecture": getattr(model.body.config, "model_type", None), "max_length": cfg.max_length,
        "data": {k: v for k, v in data.info.items() if k not in ("query_targets", "title_targets")},
        "targets": {"kind": ("query term recall" if cfg.title != "only" and queries is not None else "")
                    + (" + " if cfg.title != "off" and queries is not None else "")
                    + ("title weak supervision (HDCT)" if cfg.title != "off" else ""),
                    "terms": "BERT words -> Anserini DefaultEnglishAnalyzer (Porter, stopwords)",
                    "stats": {k: data.info[k] for k in ("query_targets", "title_targets") if k in data.info}},
        "training": {"settings": asdict(cfg), "windows": n_windows, "steps": run.step, "epochs": cfg.epochs,
                     "epoch_losses": [round(x, 6) for x in epoch_losses],
                     "final_loss": round(epoch_losses[-1], 6) if epoch_losses else None,
                     "seconds": round(train_s, 1),
                     "seconds_with_data_prep": round(train_s + prep_s, 1),
                     "device": device, "threads": torch.get_num_threads(),
                     "torch": torch.__version__},
    }
