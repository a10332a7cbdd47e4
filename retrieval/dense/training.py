"""Train the dense encoder: MLM pre-training on the corpus (random or ROM masking), then contrastive
fine-tuning on training qrels (issue #26). :func:`train` is the API; `retr train dense` wraps it.

Stages, each optional but not both absent:

1. ``pretrain="random"|"rom"`` (the corpus alone): continued masked-LM training
   (:mod:`retrieval.dense.mlm`, masks from :mod:`retrieval.dense.masking`).
2. ``qrels`` given: contrastive fine-tuning with in-batch and BM25-mined hard negatives
   (:mod:`retrieval.dense.contrastive`, examples from :mod:`retrieval.pairs`), the best epoch on
   the held-out training queries kept.

The output is a Hugging Face model folder (config, weights, tokenizer, ``sentence_bert_config.json``
and sentence-transformers' module files) that `retr index --dense MODEL` reads as it reads MiniLM,
with ``retr_train.json`` (the card: base, hashes of the corpus, queries and qrels, every setting, the
time of each stage, the held-out metric per epoch) and a ``README.md`` made from it. The card is
written last: a folder without it is unfinished.

Every epoch's randomness (masks, order, negatives, dropout) comes from generators seeded by (seed,
stage, epoch), and a checkpoint is written after every finished epoch (``OUTPUT/.checkpoint``), so
an interrupted run resumed with ``resume=True`` gives the model an uninterrupted run gives. On a CPU
the same command twice gives the same weights (deterministic kernels requested, one thread count).
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional

import torch

from indexes.atomic import atomic_path, write_text
from indexes.errors import InputError, ParameterError
from retrieval.dense.train_config import DenseTrainConfig  # noqa: F401 (also importable from here)
from retrieval.models import autocast, restores_torch_settings
from retrieval.optim import adamw_with_warmup
from retrieval.progress import progress
from retrieval.trainrun import CARD, CHECKPOINT, RunOptions, Trainer, TrainingStopped, prepare_output
from retrieval.trainrun import file_hash as _file_hash


#: what its output folders are known by (the card, whose kind is "dense"; .checkpoint)
TRAINER = Trainer("retr train dense", CARD)


@restores_torch_settings
def train(corpus, output, queries=None, qrels=None, cfg: Optional[DenseTrainConfig] = None, *,
          how: Optional[RunOptions] = None, **settings) -> Path:
    """Train a dense encoder and save it as a model folder at ``output``; returns its path.

    ``corpus``: a BEIR folder/JSONL, TSV or TREC file (the passages to pre-train on, and whose
    BM25 ranking gives hard negatives). ``queries`` + ``qrels``: training queries and qrels (never a
    test split: refused unless ``allow_test``). ``index``: an index folder of the corpus to mine
    negatives from (default: a BM25 folder built under ``OUTPUT/.checkpoint``). ``index``,
    ``resume``, ``overwrite``, ``quiet``, ``allow_test``: the run's options
    (:class:`retrieval.trainrun.RunOptions`), as keywords or as ``how``. The other ``settings``
    override fields of :class:`DenseTrainConfig` (``train(c, o, pretrain="rom", epochs=2)``)."""
    how, settings = RunOptions.split(how, settings)
    index, resume, overwrite, quiet, allow_test = how.index, how.resume, how.overwrite, how.quiet, how.allow_test
    cfg = replace(cfg or DenseTrainConfig(), **_known(settings)).validate()
    if (queries is None) != (qrels is None):
        raise ParameterError("give both {queries} and {qrels} (fine-tuning), or neither (pre-training alone)")
    if qrels is None and cfg.pretrain == "none":
        raise ParameterError("nothing to train: give {queries} and {qrels} to fine-tune, or {pretrain} random|rom "
                             "to pre-train on the corpus")
    if qrels is not None:
        from retrieval.datasets.qrels import looks_like_test
        if looks_like_test(qrels) and not allow_test:
            raise InputError("refusing to train on what looks like test qrels; train on a train/dev split", qrels)
    dest = prepare_output(Path(output), TRAINER, cfg.key(), resume, overwrite, quiet)
    state = dest.state
    run = _Run(cfg, dest.path, quiet, state)
    try:
        run.setup(corpus, queries, qrels, index)
        dest.begin()  # the inputs are read and checked: now the folder may change
        if cfg.pretrain != "none":
            run.pretrain()
        if qrels is not None:
            run.finetune()
    except KeyboardInterrupt:
        run.stopped()
        raise TrainingStopped() from None
    except Exception:
        dest.failed()  # nothing finished: leave no half-made folder
        raise
    return run.finish(dest)


def _known(settings: dict) -> dict:
    names = set(DenseTrainConfig.__dataclass_fields__)
    bad = sorted(set(settings) - names)
    if bad:
        raise ParameterError("unknown training setting(s): {_bad} (see retrieval.dense.training.DenseTrainConfig)",
                             _bad=", ".join(bad))
    return settings


def _seed_epoch(cfg: DenseTrainConfig, stage: int, epoch: int) -> None:
    """Seed torch (dropout) for one epoch: epochs do not depend on what ran before them."""
    torch.manual_seed((cfg.seed * 1_000_003 + stage * 1_009 + epoch) & 0x7FFFFFFF)


@dataclass
class _Run:
    cfg: DenseTrainConfig
    out: Path
    quiet: bool
    state: Optional[dict]
    history: Dict[str, list] = field(default_factory=lambda: {"pretrain": [], "finetune": []})
    seconds: Dict[str, float] = field(default_factory=dict)
    info: Dict[str, object] = field(default_factory=dict)
    last_saved: Optional[str] = None

    # -- setup -------------------------------------------------------------------------------
    def setup(self, corpus, queries, qrels, index) -> None:
        """Read and check every input (nothing is written yet)."""
        from retrieval.collections import read_corpus, read_queries
        from retrieval.datasets.qrels import read_qrels
        from retrieval.index import open_index
        from retrieval.models import _quiet_transformers, pick_device, resolve_model_path, resolve_precision
        from retrieval.pairs import judged_queries

        _quiet_transformers()
        self.device = pick_device(self.cfg.device)
        self.precision = resolve_precision(self.cfg.precision, self.device)
        # fp16 needs its gradients scaled (bf16 has fp32's range and does not)
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        if self.cfg.threads:
            torch.set_num_threads(int(self.cfg.threads))
        torch.use_deterministic_algorithms(True, warn_only=True)
        self.base = resolve_model_path(self.cfg.base)
        t0 = time.perf_counter()
        self.docs = [d for d in read_corpus(corpus, empty="skip")]
        if not self.docs:
            raise InputError("no passages to train on (the corpus is empty, or every passage is)", corpus)
        self.corpus, self.queries, self.qrels, self.index = corpus, queries, qrels, index
        self.info.update({"corpus": str(Path(corpus).resolve()), "corpus_sha256": _file_hash(corpus),
                          "passages": len(self.docs)})
        if qrels is not None:
            self.qrel_map = read_qrels(qrels)
            self.query_list = list(read_queries(queries))
            judged_queries(self.query_list, self.qrel_map)
            self.info.update({"queries": str(Path(queries).resolve()), "queries_sha256": _file_hash(queries),
                              "qrels": str(Path(qrels).resolve()), "qrels_sha256": _file_hash(qrels)})
        self.opened_index = open_index(index) if index is not None else None
        self.seconds["read"] = time.perf_counter() - t0
        if self.state is not None:
            self.history = self.state["history"]
            self.seconds.update(self.state["seconds"])
            self.info.update(self.state["info"])

    def _done(self, stage: str) -> int:
        """Epochs of ``stage`` finished (by the checkpoint)."""
        return len(self.history[stage])

    # -- checkpoints -------------------------------------------------------------------------
    def _checkpoint(self, stage: str, model, opt, sched) -> None:
        state = {"config_key": self.cfg.key(), "stage": stage, "model": model.state_dict(),
                 "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "history": self.history,
                 "seconds": self.seconds, "info": self.info}
        with atomic_path(self.out / CHECKPOINT / "state.pt") as tmp:
            torch.save(state, tmp)
        self.last_saved = f"{stage} epoch {self._done(stage)}"

    def stopped(self) -> None:
        if self.quiet:
            return
        if self.last_saved is None and self.state is None:
            print("retr: stopped before the first epoch ended: nothing was saved", file=sys.stderr)
            return
        what = self.last_saved or f"{self.state['stage']} epoch {len(self.state['history'][self.state['stage']])}"
        print(f"retr: stopped; the last finished epoch ({what}) is saved in {self.out / CHECKPOINT}: "
              "run the same command with --resume to continue from it", file=sys.stderr)

    def _resume_into(self, stage: str, model, opt, sched) -> None:
        if self.state is not None and self.state["stage"] == stage:
            model.load_state_dict(self.state["model"])
            opt.load_state_dict(self.state["optimizer"])
            sched.load_state_dict(self.state["scheduler"])

    # -- stage 1: MLM --------------------------------------------------------------------------
    def pretrain(self) -> None:
        from retrieval.dense import mlm as M

        cfg, pre = self.cfg, self.out / CHECKPOINT / "pretrained"
        if self._done("pretrain") >= cfg.pretrain_epochs and (pre / "config.json").is_file():
            return
        t0 = time.perf_counter()
        torch.manual_seed(cfg.seed)  # a fresh MLM head starts the same in every run
        model = M.load_mlm(self.base)
        model.model.to(self.device)
        texts = M.words_of(self._pretrain_texts(), model.tokenizer, cfg.pretrain_max_length)  # tokenized once
        imp = (M.importance_of(cfg.importance, texts, model.tokenizer, cfg.pretrain_max_length, self.quiet,
                               device=self.device, precision=self.precision)
               if cfg.pretrain == "rom" else None)
        pt = M.Pretrainer(model, texts, strategy=cfg.pretrain, rate=cfg.mask_rate, max_length=cfg.pretrain_max_length,
                          batch_size=cfg.pretrain_batch_size, importance=imp, seed=cfg.seed, device=self.device,
                          temperature=cfg.temperature, uniform_mix=cfg.uniform_mix)
        total = pt.steps_per_epoch * cfg.pretrain_epochs
        opt, sched = adamw_with_warmup(model.model, cfg.pretrain_lr, cfg.weight_decay, cfg.warmup, total)
        self._resume_into("pretrain", model.model, opt, sched)
        self.info.setdefault("mlm_head", model.head)
        self.info.setdefault("pretrain_passages", len(texts))
        self.info.setdefault("masked_tokens_per_epoch", sum(m.n_masked for m in pt.masks(0)))
        self.info.setdefault("mlm_before", pt.evaluate())
        self.seconds["pretrain_prep"] = self.seconds.get("pretrain_prep", 0.0) + time.perf_counter() - t0
        warm = int(cfg.head_warmup * total) if model.head != "trained" else 0
        model.model.train()
        with progress(total=total, desc=f"pre-training ({cfg.pretrain} masking)", unit="step",
                      quiet=self.quiet) as bar:
            bar.update(self._done("pretrain") * pt.steps_per_epoch)
            for epoch in range(self._done("pretrain"), cfg.pretrain_epochs):
                t1 = time.perf_counter()
                _seed_epoch(cfg, 1, epoch)
                losses = []
                for b, batch in enumerate(pt.batches(epoch)):
                    pt.freeze_body(epoch * pt.steps_per_epoch + b < warm)
                    with autocast(self.precision, self.device):
                        loss = pt.loss(*batch)
                    losses.append(_step(loss, model.model, opt, sched, self.scaler))
                    bar.update(1)
                    bar.set_postfix(epoch=epoch + 1, loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
                self.seconds["pretrain"] = self.seconds.get("pretrain", 0.0) + time.perf_counter() - t1
                self.history["pretrain"].append({"epoch": epoch + 1, "loss": round(sum(losses) / len(losses), 5)})
                self._checkpoint("pretrain", model.model, opt, sched)
        pt.freeze_body(False)
        self.info["mlm_after"] = pt.evaluate()
        M.body_of(model.model).save_pretrained(pre)
        model.tokenizer.save_pretrained(pre)

    def _pretrain_texts(self) -> List[str]:
        import numpy as np

        texts = [d.contents for d in self.docs]
        n = self.cfg.pretrain_passages
        if n is not None and n < len(texts):
            keep = np.sort(np.random.default_rng([self.cfg.seed, 4]).choice(len(texts), size=n, replace=False))
            texts = [texts[i] for i in keep]
        return texts

    # -- stage 2: contrastive ------------------------------------------------------------------
    def _examples(self):
        from retrieval.pairs import split_dev, training_examples

        qrels, queries = self.qrel_map, self.query_list
        idx = self.opened_index if self.opened_index is not None else self._bm25_folder()
        examples, report = training_examples(idx, queries, qrels, negatives=self.cfg.negative_pool,
                                             depth=self.cfg.negative_depth, min_rel=self.cfg.min_rel,
                                             seed=self.cfg.seed, qrels_path=str(self.qrels), allow_test=True)
        train, dev = split_dev(examples, self.cfg.dev_share, self.cfg.seed)
        self.info["examples"] = dict(report, train_examples=len(train), dev_examples=len(dev),
                                     dev_queries=len({e.qid for e in dev}))
        return train, dev, qrels

    def _bm25_folder(self):
        from retrieval.pairs import mining_index

        return mining_index(self.corpus, self.out / CHECKPOINT / "bm25", quiet=self.quiet)

    def finetune(self) -> None:
        from retrieval.dense import contrastive as C
        from retrieval.pairs import batches

        cfg = self.cfg
        t0 = time.perf_counter()
        train, dev, qrels = self._examples()
        start = self.out / CHECKPOINT / "pretrained" if cfg.pretrain != "none" else self.base
        torch.manual_seed(cfg.seed)  # weights the folder lacks (a BERT pooler) start the same in every run
        body, tok = C.load_body(start)
        body.to(self.device)
        embed = C.Embedder(body, tok, cfg.pooling, cfg.query_length, cfg.max_length, self.device)
        loss_fn = C.make_loss(body, cfg.scale)
        steps = len(batches(train, cfg.batch_size, cfg.hard_negatives, cfg.seed, 0, cfg.positives_per_query))
        total = steps * cfg.epochs
        opt, sched = adamw_with_warmup(body, cfg.lr, cfg.weight_decay, cfg.warmup, total)
        self._resume_into("finetune", body, opt, sched)
        self.tokenizer = tok
        if "dev_ndcg10_base" not in self.info and dev:
            self.info["dev_ndcg10_base"] = round(C.dev_ndcg(embed, dev, qrels), 5)
        self.seconds["finetune_prep"] = self.seconds.get("finetune_prep", 0.0) + time.perf_counter() - t0
        body.train()
        with progress(total=total, desc="fine-tuning (contrastive)", unit="step", quiet=self.quiet) as bar:
            bar.update(self._done("finetune") * steps)
            for epoch in range(self._done("finetune"), cfg.epochs):
                t1 = time.perf_counter()
                _seed_epoch(cfg, 2, epoch)
                losses = []
                for rows in batches(train, cfg.batch_size, cfg.hard_negatives, cfg.seed, epoch,
                                      cfg.positives_per_query):
                    with autocast(self.precision, self.device):
                        loss = C.step_loss(loss_fn, embed, rows)
                    losses.append(_step(loss, body, opt, sched, self.scaler))
                    bar.update(1)
                    bar.set_postfix(epoch=epoch + 1, loss=f"{sum(losses[-20:]) / len(losses[-20:]):.4f}")
                self.seconds["finetune"] = self.seconds.get("finetune", 0.0) + time.perf_counter() - t1
                score = round(C.dev_ndcg(embed, dev, qrels), 5) if dev else None
                self.history["finetune"].append({"epoch": epoch + 1, "loss": round(sum(losses) / len(losses), 5),
                                                 "dev_ndcg10": score})
                if self._best_epoch() == epoch + 1:
                    with atomic_path(self.out / CHECKPOINT / "best.pt") as tmp:
                        torch.save(body.state_dict(), tmp)
                self._checkpoint("finetune", body, opt, sched)
        self.body = body

    def _best_epoch(self) -> int:
        """The fine-tuning epoch kept: the best held-out nDCG@10 (the earliest of ties), or the last
        without held-out queries."""
        h = self.history["finetune"]
        if not h or h[0]["dev_ndcg10"] is None:
            return len(h)
        best = max(e["dev_ndcg10"] for e in h)
        return next(e["epoch"] for e in h if e["dev_ndcg10"] == best)

    # -- output ------------------------------------------------------------------------------
    def finish(self, dest) -> Path:
        """Write the model beside the output folder and swap it in (``dest``: its TrainOutput)."""
        ck = self.out / CHECKPOINT
        if self.qrels is not None:
            self.body.load_state_dict(torch.load(ck / "best.pt", weights_only=True))
            body, tok = self.body, self.tokenizer
        else:
            from retrieval.dense.contrastive import load_body
            body, tok = load_body(ck / "pretrained")
        with dest.finishing() as stage:
            _save_model(body.cpu(), tok, stage, self.cfg, self.base, ck / "final")
            write_text(stage / "README.md", card_markdown(self._card()))
            write_text(stage / CARD, json.dumps(self._card(), indent=2) + "\n")
        return self.out

    def _card(self) -> dict:
        from retrieval.models import model_hash

        import sentence_transformers
        import transformers

        return {"kind": "dense", "base_model": str(self.base), "base_sha256": model_hash(self.base), "data": self.info,
                "settings": asdict(self.cfg), "pooling": self.cfg.pooling,
                "best_epoch": self._best_epoch() if self.qrels is not None else None,
                "history": self.history, "seconds": {k: round(v, 1) for k, v in self.seconds.items()},
                "device": self.device, "precision": self.precision, "threads": torch.get_num_threads(),
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                             "sentence_transformers": sentence_transformers.__version__}}


def _step(loss: torch.Tensor, model, opt, sched, scaler=None) -> float:
    """One optimiser step (``scaler``: fp16's gradient scaler, else None)."""
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
    else:
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    if scaler is None:
        opt.step()
    else:
        scaler.step(opt)
        scaler.update()
    sched.step()
    return float(loss.detach())


def _save_model(body, tok, out: Path, cfg: DenseTrainConfig, base: Path, staged: Path) -> None:
    """The body as a Hugging Face folder plus sentence-transformers' module files (Transformer,
    Pooling, Normalize), so that both retr and sentence-transformers load it (``staged``: a scratch
    folder for the body on its way there)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models

    shutil.rmtree(staged, ignore_errors=True)
    body.save_pretrained(staged)
    tok.save_pretrained(staged)
    dim = int(body.config.hidden_size)
    st = SentenceTransformer(modules=[models.Transformer(str(staged), max_seq_length=_seq_length(base, cfg)),
                                      models.Pooling(dim, pooling_mode=cfg.pooling), models.Normalize()],
                             device="cpu")
    st.save(str(out))
    # sentence-transformers 6 keeps the length out of sentence_bert_config.json; retr's encoder (and
    # older sentence-transformers) read it there, so it goes back in: index time encodes as the base did
    sb = out / "sentence_bert_config.json"
    conf = json.loads(sb.read_text()) if sb.is_file() else {}
    conf["max_seq_length"] = _seq_length(base, cfg)
    write_text(sb, json.dumps(conf, indent=2) + "\n")


def _seq_length(base: Path, cfg: DenseTrainConfig) -> int:
    """The base's own ``max_seq_length`` (what `retr index` encodes with), else the training length."""
    sb = Path(base) / "sentence_bert_config.json"
    try:
        return int(json.loads(sb.read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError):
        return int(cfg.max_length)


def card_markdown(card: dict) -> str:
    s, d = card["settings"], card["data"]
    lines = ["# Dense encoder trained by retr", "",
             f"- Base: `{card['base_model']}` (sha256 {card['base_sha256']})",
             f"- Corpus: `{d['corpus']}` ({d['passages']} passages, sha256 {d['corpus_sha256']})"]
    if "qrels" in d:
        lines.append(f"- Training qrels: `{d['qrels']}` (sha256 {d['qrels_sha256']}); queries sha256 "
                     f"{d['queries_sha256']}")
    lines.append(f"- Pre-training: {s['pretrain']}" + (f" ({s['importance']} importance)" if s["pretrain"] == "rom"
                                                        else "") + (f", MLM head {d['mlm_head']}" if "mlm_head" in d
                                                                    else ""))
    lines.append(f"- Pooling: {card['pooling']} (index with `retr index --dense MODEL --pooling {card['pooling']}`)")
    for e in card["history"]["pretrain"]:
        lines.append(f"- Pre-training epoch {e['epoch']}: MLM loss {e['loss']}")
    for e in card["history"]["finetune"]:
        lines.append(f"- Fine-tuning epoch {e['epoch']}: loss {e['loss']}, held-out nDCG@10 {e['dev_ndcg10']}")
    if card.get("best_epoch"):
        lines.append(f"- Kept: fine-tuning epoch {card['best_epoch']}")
    lines.append(f"- Seconds: {json.dumps(card['seconds'])} on {card['device']} ({card['threads']} threads)")
    lines += ["", "Every setting:", "", "```json", json.dumps(s, indent=2), "```", ""]
    return "\n".join(lines)
