"""Fine-tune a SPLADE model on training qrels (`retr train splade`; :func:`train` is the API).

The model is the masked LM itself: SPLADE-max representations (:mod:`retrieval.splade.model`, here with
gradients) of a query and its passages, scored by dot product. The loss is sentence-transformers'
``SparseMultipleNegativesRankingLoss`` (InfoNCE over dot products: the positive against the batch's other
passages and the query's hard negatives) plus its ``FlopsLoss`` on the queries and on the passages, the
sparsity penalty that keeps the index an inverted index: lambda times the sum over the vocabulary of the
squared mean weight. As in SPLADE's training, lambda grows quadratically from 0 over the first share of
the steps (``flops_warmup``). retr hands the representations to the losses (their
``compute_loss_from_embeddings``); the library's Trainer is not used, so progress, checkpoints, resuming
and seeding are retr's, as for the dense encoder and DeepCT.

Examples, hard negatives (BM25's top 30 minus every judged-relevant passage), the held-out queries and
the batches are :mod:`retrieval.pairs`'s. After every epoch the held-out queries re-rank their pool
(nDCG@10), and the best epoch is the one saved. The output is a masked-LM folder `retr index --splade
MODEL` reads, with ``retr_train.json`` (the card) and ``README.md``; the card is written last.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from indexes.atomic import atomic_path, write_text
from indexes.errors import InputError, ParameterError
from retrieval.models import restores_torch_settings
from retrieval.trainrun import CARD, CHECKPOINT, RunOptions, Trainer, TrainingStopped, file_hash, prepare_output


@dataclass
class SpladeTrainConfig:
    """Every setting of a SPLADE fine-tuning run (the card records them all)."""

    base: str = "splade-tiny"           # the bundled SPLADE-tiny, or a local masked-LM folder
    epochs: int = 2
    lr: float = 2e-5
    batch_size: int = 16
    hard_negatives: int = 1             # per query and step, drawn from a pool of negative_pool
    negative_pool: int = 7
    negative_depth: int = 30            # BM25's top this many, minus the judged-relevant, make the pool
    positives_per_query: Optional[int] = None
    query_length: int = 64
    max_length: int = 128               # passage word-pieces in training (index time reads 256)
    lambda_q: float = 5e-5              # FLOPS weights for queries and passages: sentence-transformers'
    lambda_d: float = 3e-5              # SpladeLoss example values
    flops_warmup: float = 0.3           # share of the steps over which lambda grows quadratically from 0
    warmup: float = 0.1
    weight_decay: float = 0.01
    dev_share: float = 0.1
    min_rel: int = 1
    seed: int = 0
    device: str = "auto"
    threads: Optional[int] = 1

    def validate(self) -> "SpladeTrainConfig":
        for name in ("epochs", "batch_size", "negative_pool", "negative_depth", "min_rel"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ParameterError("{%s} must be a positive integer, got {_got!r}" % name, _got=v)
        if not isinstance(self.hard_negatives, int) or not 0 <= self.hard_negatives <= self.negative_pool:
            raise ParameterError("{hard_negatives} must be from 0 to the pool size, got {_got!r}",
                                 _got=self.hard_negatives)
        if self.positives_per_query is not None and (not isinstance(self.positives_per_query, int)
                                                     or self.positives_per_query < 1):
            raise ParameterError("{positives_per_query} must be at least 1, got {_got!r}", _got=self.positives_per_query)
        for name in ("query_length", "max_length"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 8 <= v <= 512:
                raise ParameterError("{%s} must be from 8 to 512, got {_got!r}" % name, _got=v)
        for name in ("lr", "lambda_q", "lambda_d", "weight_decay"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not v >= 0 or v != v or v == float("inf"):
                raise ParameterError("{%s} must be a finite number >= 0, got {_got!r}" % name, _got=v)
        for name in ("flops_warmup", "warmup", "dev_share"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ParameterError("{%s} must be in [0, 1), got {_got!r}" % name, _got=v)
        return self

    def key(self) -> str:
        """What a checkpoint must have been made with to be resumed (device and threads aside)."""
        d = {k: v for k, v in asdict(self).items() if k not in ("device", "threads")}
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


#: what its output folders are known by (the card, whose kind is "splade"; .checkpoint)
TRAINER = Trainer("retr train splade", CARD)


@restores_torch_settings
def train(corpus, output, queries, qrels, cfg: Optional[SpladeTrainConfig] = None, *,
          how: Optional[RunOptions] = None, **settings) -> Path:
    """Fine-tune a SPLADE model on ``queries`` + ``qrels`` (training qrels: a test split is refused unless
    ``allow_test``) with hard negatives from the BM25 ranking of ``corpus`` (or of the folder ``index``);
    save it at ``output`` and return its path. ``index``, ``resume``, ``overwrite``, ``quiet``,
    ``allow_test``: the run's options (:class:`retrieval.trainrun.RunOptions`), as keywords or as ``how``;
    the other ``settings`` override :class:`SpladeTrainConfig` fields."""
    how, settings = RunOptions.split(how, settings)
    index, resume, overwrite, quiet, allow_test = how.index, how.resume, how.overwrite, how.quiet, how.allow_test
    bad = sorted(set(settings) - set(SpladeTrainConfig.__dataclass_fields__))
    if bad:
        raise ParameterError("unknown training setting(s): {_bad}", _bad=", ".join(bad))
    cfg = replace(cfg or SpladeTrainConfig(), **settings).validate()
    from retrieval.datasets.qrels import looks_like_test

    if looks_like_test(qrels) and not allow_test:
        raise InputError("refusing to train on what looks like test qrels; train on a train/dev split", qrels)
    dest = prepare_output(Path(output), TRAINER, cfg.key(), resume, overwrite, quiet)
    run = _Run(cfg, dest.path, quiet, dest.state)
    try:
        run.setup(corpus, queries, qrels, index, dest)
        run.fit()
    except KeyboardInterrupt:
        run.stopped()
        raise TrainingStopped() from None
    except Exception:
        dest.failed()  # nothing finished: leave no half-made folder
        raise
    return run.finish(dest)


def represent(model, tokenizer, texts: Sequence[str], length: int, device: str):
    """SPLADE-max representations (batch x vocabulary) of ``texts``, with gradients: the largest logit of
    each word-piece over the real tokens, through log(1 + ReLU), as the encoder computes it."""
    import torch

    enc = tokenizer(list(texts), padding=True, truncation=True, max_length=length, return_tensors="pt").to(device)
    logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
    top = logits.masked_fill(~enc["attention_mask"].bool().unsqueeze(-1), float("-inf")).amax(dim=1)
    return torch.log(1 + torch.relu(top))


class _Run:
    def __init__(self, cfg: SpladeTrainConfig, out: Path, quiet: bool, state: Optional[dict]):
        self.cfg, self.out, self.quiet, self.state = cfg, out, quiet, state
        self.history: List[dict] = state["history"] if state else []
        self.seconds: Dict[str, float] = dict(state["seconds"]) if state else {}
        self.info: Dict[str, object] = dict(state["info"]) if state else {}
        self.last_saved: Optional[str] = None

    def setup(self, corpus, queries, qrels, index, dest) -> None:
        """Read and check the inputs and the base, then start writing (``dest.begin()``): the mined
        examples come from a BM25 folder built in the checkpoint when no ``index`` is given."""
        import torch
        from transformers import AutoTokenizer

        from retrieval.collections import read_queries
        from retrieval.datasets.qrels import read_qrels
        from retrieval.models import _quiet_transformers, pick_device, resolve_model_path
        from retrieval.index import open_index
        from retrieval.pairs import judged_queries, split_dev, training_examples
        from retrieval.splade.model import load_mlm

        _quiet_transformers()
        cfg = self.cfg
        self.device = pick_device(cfg.device)
        if cfg.threads:
            torch.set_num_threads(int(cfg.threads))
        torch.use_deterministic_algorithms(True, warn_only=True)
        self.base = resolve_model_path(cfg.base)
        t0 = time.perf_counter()
        self.qrels = read_qrels(qrels)
        query_list = list(read_queries(queries))
        judged_queries(query_list, self.qrels)
        opened = open_index(index) if index is not None else None
        torch.manual_seed(cfg.seed)
        self.model = load_mlm(self.base).to(self.device)
        self.tok = AutoTokenizer.from_pretrained(self.base)
        dest.begin()  # the inputs are read and checked: now the folder may change
        idx = opened if opened is not None else self._bm25(corpus)
        examples, report = training_examples(idx, query_list, self.qrels,
                                             negatives=cfg.negative_pool, depth=cfg.negative_depth,
                                             min_rel=cfg.min_rel, seed=cfg.seed, qrels_path=str(qrels),
                                             allow_test=True)
        self.train, self.dev = split_dev(examples, cfg.dev_share, cfg.seed)
        self.info.update({"corpus": str(Path(corpus).resolve()), "corpus_sha256": file_hash(corpus),
                          "passages": len(idx), "queries": str(Path(queries).resolve()),
                          "queries_sha256": file_hash(queries), "qrels": str(Path(qrels).resolve()),
                          "qrels_sha256": file_hash(qrels),
                          "examples": dict(report, train_examples=len(self.train), dev_examples=len(self.dev),
                                           dev_queries=len({e.qid for e in self.dev}))})
        self.seconds["prepare"] = self.seconds.get("prepare", 0.0) + time.perf_counter() - t0

    def _bm25(self, corpus):
        from retrieval.pairs import mining_index

        return mining_index(corpus, self.out / CHECKPOINT / "bm25", quiet=self.quiet, empty="skip")

    def fit(self) -> None:
        import torch
        from sentence_transformers.sparse_encoder.losses import FlopsLoss, SparseMultipleNegativesRankingLoss

        from retrieval.optim import adamw_with_warmup
        from retrieval.pairs import batches
        from retrieval.progress import progress

        cfg, model = self.cfg, self.model
        rank_loss, flops = SparseMultipleNegativesRankingLoss(model), FlopsLoss(model)
        steps = len(batches(self.train, cfg.batch_size, cfg.hard_negatives, cfg.seed, 0, cfg.positives_per_query))
        total = steps * cfg.epochs
        opt, sched = adamw_with_warmup(model, cfg.lr, cfg.weight_decay, cfg.warmup, total)
        if self.state is not None:
            model.load_state_dict(self.state["model"])
            opt.load_state_dict(self.state["optimizer"])
            sched.load_state_dict(self.state["scheduler"])
        if "dev_ndcg10_base" not in self.info and self.dev:
            self.info["dev_ndcg10_base"] = round(self.dev_ndcg(), 5)
        ramp = max(1, int(cfg.flops_warmup * total))
        model.train()
        with progress(total=total, desc="fine-tuning SPLADE", unit="step", quiet=self.quiet) as bar:
            bar.update(len(self.history) * steps)
            for epoch in range(len(self.history), cfg.epochs):
                t1 = time.perf_counter()
                torch.manual_seed((cfg.seed * 1_000_003 + epoch) & 0x7FFFFFFF)  # dropout: per epoch
                losses = []
                for b, rows in enumerate(batches(self.train, cfg.batch_size, cfg.hard_negatives, cfg.seed, epoch,
                                                 cfg.positives_per_query)):
                    scale = min(1.0, ((epoch * steps + b + 1) / ramp)) ** 2
                    width = min(len(r) for r in rows)
                    cols = list(zip(*[r[:width] for r in rows]))
                    q = represent(model, self.tok, cols[0], cfg.query_length, self.device)
                    docs = [represent(model, self.tok, c, cfg.max_length, self.device) for c in cols[1:]]
                    loss = rank_loss.compute_loss_from_embeddings([q, *docs], torch.arange(len(rows)))
                    loss = loss + scale * (cfg.lambda_q * flops.compute_loss_from_embeddings(q)
                                           + cfg.lambda_d * flops.compute_loss_from_embeddings(torch.cat(docs)))
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    sched.step()
                    losses.append(float(loss.detach()))
                    bar.update(1)
                    bar.set_postfix(epoch=epoch + 1, loss=f"{sum(losses[-20:]) / len(losses[-20:]):.4f}")
                self.seconds["train"] = self.seconds.get("train", 0.0) + time.perf_counter() - t1
                score = round(self.dev_ndcg(), 5) if self.dev else None
                self.history.append({"epoch": epoch + 1, "loss": round(sum(losses) / len(losses), 5),
                                     "dev_ndcg10": score})
                if self.best_epoch() == epoch + 1:
                    with atomic_path(self.out / CHECKPOINT / "best.pt") as tmp:
                        torch.save(model.state_dict(), tmp)
                state = {"config_key": cfg.key(), "model": model.state_dict(), "optimizer": opt.state_dict(),
                         "scheduler": sched.state_dict(), "history": self.history, "seconds": self.seconds,
                         "info": self.info}
                with atomic_path(self.out / CHECKPOINT / "state.pt") as tmp:
                    torch.save(state, tmp)
                self.last_saved = f"epoch {epoch + 1}"

    def dev_ndcg(self) -> float:
        """Mean nDCG@10 of the held-out queries re-ranking the pool of their positives and mined negatives
        by SPLADE dot product (float weights)."""
        import torch

        from eval import evaluate

        pool: Dict[str, str] = {}
        queries: Dict[str, str] = {}
        for e in self.dev:
            pool[e.positive_id] = e.positive
            pool.update(zip(e.negative_ids, e.negatives))
            queries[e.qid] = e.query
        ids, qids = sorted(pool), sorted(queries)
        was = self.model.training
        self.model.eval()
        with torch.inference_mode():
            enc = lambda texts, n: torch.cat([represent(self.model, self.tok, texts[i:i + 16], n, self.device)
                                              for i in range(0, len(texts), 16)])
            S = (enc([queries[q] for q in qids], self.cfg.query_length)
                 @ enc([pool[d] for d in ids], self.cfg.max_length).T).cpu().numpy()
        self.model.train(was)
        run = {q: {ids[t]: float(S[r, t]) for t in range(len(ids))} for r, q in enumerate(qids)}
        return float(evaluate({q: self.qrels[q] for q in qids}, run, ["nDCG@10"])["nDCG@10"])

    def best_epoch(self) -> int:
        """The epoch kept: the best held-out nDCG@10 (the earliest of ties), or the last without held-out queries."""
        if not self.history or self.history[0]["dev_ndcg10"] is None:
            return len(self.history)
        best = max(e["dev_ndcg10"] for e in self.history)
        return next(e["epoch"] for e in self.history if e["dev_ndcg10"] == best)

    def stopped(self) -> None:
        if self.quiet:
            return
        if self.last_saved is None and self.state is None:
            print("retr: stopped before the first epoch ended: nothing was saved", file=sys.stderr)
            return
        what = self.last_saved or f"epoch {len(self.state['history'])}"
        print(f"retr: stopped; the last finished epoch ({what}) is saved in {self.out / CHECKPOINT}: "
              "run the same command with --resume to continue from it", file=sys.stderr)

    def finish(self, dest) -> Path:
        """Write the model beside the output folder and swap it in (``dest``: its TrainOutput)."""
        import torch

        from retrieval.models import model_hash

        ck = self.out / CHECKPOINT
        self.model.load_state_dict(torch.load(ck / "best.pt", weights_only=True))
        import sentence_transformers
        import transformers

        card = {"kind": "splade", "base_model": str(self.base), "base_sha256": model_hash(self.base),
                "data": self.info, "settings": asdict(self.cfg), "best_epoch": self.best_epoch(),
                "history": self.history, "seconds": {k: round(v, 1) for k, v in self.seconds.items()},
                "device": self.device, "threads": torch.get_num_threads(),
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                             "sentence_transformers": sentence_transformers.__version__}}
        with dest.finishing() as stage:
            self.model.cpu().save_pretrained(stage)
            self.tok.save_pretrained(stage)
            write_text(stage / "README.md", card_markdown(card))
            write_text(stage / CARD, json.dumps(card, indent=2) + "\n")
        return self.out


def card_markdown(card: dict) -> str:
    d = card["data"]
    lines = ["# SPLADE model fine-tuned by retr", "",
             f"- Base: `{card['base_model']}` (sha256 {card['base_sha256']})",
             f"- Corpus: `{d['corpus']}` ({d['passages']} passages, sha256 {d['corpus_sha256']})",
             f"- Training qrels: `{d['qrels']}` (sha256 {d['qrels_sha256']}); queries sha256 {d['queries_sha256']}",
             f"- Examples: {json.dumps(d['examples'])}",
             f"- Held-out nDCG@10 before training: {d.get('dev_ndcg10_base')}"]
    for e in card["history"]:
        lines.append(f"- Epoch {e['epoch']}: loss {e['loss']}, held-out nDCG@10 {e['dev_ndcg10']}")
    lines += [f"- Kept: epoch {card['best_epoch']}", f"- Seconds: {json.dumps(card['seconds'])} on {card['device']}",
              "", "Index it with `retr index --splade MODEL`. Every setting:", "", "```json",
              json.dumps(card["settings"], indent=2), "```", ""]
    return "\n".join(lines)
