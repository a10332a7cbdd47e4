"""What the dense kind adds to the command line, as data: ``--dense`` and its encoder and faiss
options (`retr index`), query-aware dimension selection (`retr search --dimsel`),
`retr train dimsel` (the learned selector) and `retr train dense` (the encoder itself)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from retrieval.dense.train_config import PRETRAIN, DenseTrainConfig
from retrieval.kinds import KindOptions
from retrieval.models import BACKENDS, PRECISIONS
from retrieval.options import (DEVICES, POSITIVE, SHARE_CLOSED_OPEN, SHARE_OPEN, SHARE_OPEN_CLOSED, Command, Option,
                               Range, UsageError, Values, training_options)

_D = DenseTrainConfig()  # the training defaults, read by `retr train dense`'s options
# DenseSpec's and SelectorConfig's modules import numpy: their defaults are repeated (default_from), not imported
_SPEC = "retrieval.dense.subindex:DenseSpec."
_SEL = "retrieval.dense.dimsel.selector:SelectorConfig."


def train_dimsel(v: Values):
    """Train a query-aware dimension selector: an MLP from the query embedding to per-dimension
    importance, distilled from label-oracle importance (see retrieval/dense/dimsel/)."""
    from retrieval.dense.dimsel.masks import check_alpha
    from retrieval.dense.dimsel.selector import SelectorConfig
    from retrieval.dense.dimsel.training import train_selector
    from retrieval.index import open_index

    if v.alpha is not None:
        check_alpha(v.alpha)
    sel = train_selector(open_index(v.index_dir), v.queries, v.qrels, output=v.output, retriever=v.retriever,
                         cfg=v.config(SelectorConfig), quiet=v.quiet)
    t = sel.config["training"]
    where = v.output or Path(v.index_dir) / v.retriever / "dimsel"
    if not v.quiet:
        print(f"trained dimension selector on {t['queries']} queries ({t['dev_queries']} held out) in "
              f"{t['seconds']:.1f} s: loss {t['first_train_loss']:.4f} -> {t['final_train_loss']:.4f}", file=sys.stderr)
        if t["dev_queries"]:
            print(f"held-out nDCG@10: full dims {t['dev_full_ndcg10']:.4f}, selector at alpha "
                  f"{sel.config['alpha']:g} {t['dev_ndcg10_by_alpha'][str(sel.config['alpha'])]:.4f}",
                  file=sys.stderr)
        print(f"saved to {where}", file=sys.stderr)


DIMSEL = Command("dimsel", train_dimsel, group="train", flags={"output": "--output"}, options=(
    Option("--index", name="index_dir", type="path", required=True, help="Index folder."),
    Option("--queries", type="path", required=True, help="Training queries: BEIR JSONL, TSV or TREC topics."),
    Option("--qrels", type="path", required=True, help="Training qrels (only training queries: never the test split)."),
    Option("--retriever", default="dense", help="Dense sub-index to train for."),
    Option(("--output", "-o"), type="path", path_kind="dir",
           help="Selector folder (new, empty, or one this command wrote) [default: INDEX/<retriever>/dimsel, "
                "recorded in the manifest]."),
    Option("--epochs", type="int", range=Range(min=1), default=100, default_from=_SEL + "epochs"),
    Option("--lr", type="float", range=POSITIVE, default=1e-3, default_from=_SEL + "lr"),
    Option("--hidden", type="int", range=Range(min=1), default=256, default_from=_SEL + "hidden",
           help="MLP hidden size."),
    Option("--loss", type="choice", choices=("kl", "rank", "kl+rank"), default="kl+rank", default_from=_SEL + "loss",
           help="KL to the softmaxed oracle, contrastive ranking through a soft top-alpha mask, or both."),
    Option("--arch", type="choice", choices=("qv", "free"), default="qv", default_from=_SEL + "arch",
           help="qv: importance = q * (q + MLP(q)) (residual around q*q); free: MLP(q)."),
    Option("--alpha", type="float", range=SHARE_OPEN_CLOSED,
           help="Fixed share of dimensions to keep [default: chosen on the held-out training queries]."),
    Option("--dev-share", type="float", range=SHARE_CLOSED_OPEN, default=0.2, default_from=_SEL + "dev_share",
           help="Share of the training queries held out to pick the epoch and alpha."),
    Option("--seed", type="int", default=0, default_from=_SEL + "seed"),
    Option(("--quiet", "-q"), type="bool", help="No progress output."),
))


_TRAIN_FLAGS = {"queries": "--queries", "qrels": "--qrels", "pretrain": "--pretrain", "importance": "--importance",
                "mask_rate": "--mask-rate", "epochs": "--epochs", "pretrain_epochs": "--pretrain-epochs",
                "lr": "--lr", "batch_size": "--batch-size", "max_length": "--max-length", "overwrite": "--overwrite",
                "output": "--output",
                "resume": "--resume", "pretrain_passages": "--pretrain-passages", "hard_negatives": "--hard-negatives",
                "negative_pool": "--hard-negatives", "positives_per_query": "--positives-per-query", "dev_share": "--dev-share", "pooling": "--pooling",
                "device": "--device", "base": "--base", "threads": "--threads", "precision": "--precision"}


def train_dense(v: Values):
    """Train the dense encoder: masked-LM pre-training on the corpus (--pretrain random|rom) and/or
    contrastive fine-tuning on training qrels (in-batch + BM25 hard negatives).

    Ctrl-C keeps the last finished epoch in OUTPUT/.checkpoint; --resume continues from it. Writes a
    model folder with retr_train.json and README.md (the model card)."""
    from retrieval.dense.training import train

    out = train(v.corpus, v.output, v.queries, v.qrels, v.config(DenseTrainConfig), index=v.index_dir,
                resume=v.resume, overwrite=v.overwrite, quiet=v.quiet)
    card = json.loads((out / "retr_train.json").read_text())
    ft = card["history"]["finetune"]
    what = [f"pre-trained ({v.pretrain})"] if v.pretrain != "none" else []
    if ft:
        best = ft[card["best_epoch"] - 1]
        what.append(f"fine-tuned {len(ft)} epoch(s), kept epoch {best['epoch']} (held-out nDCG@10 "
                    f"{best['dev_ndcg10']}, base {card['data'].get('dev_ndcg10_base')})")
    print(f"{' and '.join(what)} in {sum(v for k, v in card['seconds'].items()):.0f} s; saved to {out} "
          f"(index it with: retr index --dense {out} --pooling {v.pooling})")


DENSE_TRAIN = Command("dense", train_dense, group="train", flags=_TRAIN_FLAGS, options=training_options() + (
    Option("--pretrain", type="choice", choices=PRETRAIN, default=_D.pretrain,
           help="Masked-LM pre-training on the corpus first: BERT's random masking or ROM."),
    Option("--importance", default=_D.importance, metavar="bm25|deepct:MODEL",
           help="ROM's term importance: BM25 idf over the corpus, or a DeepCT model's weights."),
    Option("--mask-rate", type="float", range=SHARE_OPEN, default=_D.mask_rate,
           help="Share of each passage's tokens masked (both strategies)."),
    Option("--pretrain-epochs", type="int", range=Range(min=1), default=_D.pretrain_epochs),
    Option("--pretrain-passages", type="int", range=Range(min=1),
           help="Pre-train on at most this many passages (a seeded sample) [all]."),
    Option("--epochs", type="int", range=Range(min=1), default=_D.epochs, help="Fine-tuning epochs."),
    Option("--lr", type="float", range=POSITIVE, default=_D.lr, help="Fine-tuning learning rate."),
    Option("--batch-size", type="int", range=Range(min=1), default=_D.batch_size,
           help="Fine-tuning batch (queries; each brings its positive and hard negatives)."),
    Option("--hard-negatives", type="int", range=Range(0, _D.negative_pool), default=_D.hard_negatives,
           help="BM25-mined hard negatives per query and step (0: in-batch negatives only)."),
    Option("--positives-per-query", type="int", range=Range(min=1), default=_D.positives_per_query,
           help="At most this many relevant passages of a query per epoch, drawn anew each epoch (for qrels with "
                "many relevant passages a query) [all]."),
    Option("--max-length", type="int", range=Range(8, 4096), default=_D.max_length,
           help="Passage tokens in fine-tuning."),
    Option("--pooling", type="choice", choices=("mean", "cls"), default=_D.pooling,
           help="Pooling trained for (index with the same --pooling)."),
    Option("--dev-share", type="float", range=SHARE_CLOSED_OPEN, default=_D.dev_share,
           help="Share of training queries held out to pick the best epoch."),
    Option("--index", name="index_dir", type="path",
           help="An index folder of the corpus to mine hard negatives from [a BM25 folder built for the run]."),
    Option("--seed", type="int", default=_D.seed),
    Option("--device", type="choice", choices=DEVICES, default=_D.device),
    Option("--threads", type="int", range=Range(1, 256), default=_D.threads,
           help="torch threads [torch's default]; the same count makes runs repeatable."),
    Option("--resume", type="bool", help="Continue an interrupted run from OUTPUT/.checkpoint."),
    Option("--overwrite", type="bool", help="Replace what is in --output."),
    Option(("--quiet", "-q"), type="bool", help="No progress output."),
    Option("--precision", type="choice", choices=PRECISIONS, default=_D.precision,
           help="Autocast precision of the forward passes (auto: bf16 on a GPU that has it, fp16 on one without, "
                "with gradient scaling; fp32 on a CPU). Weights stay fp32."),
))


def dimsel_options(mode, alpha, prf_k, qrels, adaptive: bool = False):
    """The ``dimsel=`` argument of Index.search for `retr search --dimsel MODE ...` (None without
    --dimsel; the selection options alone are a usage error)."""
    if mode is None:
        if alpha is not None or prf_k is not None or qrels is not None or adaptive:
            raise UsageError("--alpha, --prf-k, --dimsel-qrels and --adaptive need --dimsel")
        return None
    from retrieval.dense.dimsel.masks import check_alpha

    if alpha is not None:
        check_alpha(alpha)
    if adaptive and mode != "learned":
        raise UsageError("--adaptive applies to --dimsel learned")
    opts = {"mode": mode, "alpha": alpha, "prf_k": prf_k or 5, "adaptive": adaptive}
    if qrels is not None:
        if mode != "oracle":
            raise UsageError("--dimsel-qrels applies to --dimsel oracle")
        opts["qrels"] = str(qrels)
    return opts


class DenseOptions(KindOptions):
    title = "Dense"
    flag = "--dense"
    options = (
        Option("--dense", name="dense_model", bare_value="minilm", metavar="[MODEL]", applies_to="index",
               help="Add a dense sub-index: bundled all-MiniLM-L6-v2 by default, or 'splade-tiny', "
                    "or a local Hugging Face folder."),
        Option("--pooling", default="mean", default_from=_SPEC + "pooling", applies_to="index",
               help="Dense pooling: mean, cls, first-last or ditto."),
        Option("--faiss", name="factory", default="Flat", default_from=_SPEC + "factory", applies_to="index",
               help="faiss factory string for the dense index (Flat, HNSW32, IVF1024,PQ32, ...)."),
        Option("--dtype", type="choice", choices=("float32", "float16"), default="float32",
               default_from=_SPEC + "dtype", applies_to="index",
               help="Precision of the stored dense vectors."),
        Option("--backend", type="choice", choices=BACKENDS, default="auto", default_from=_SPEC + "backend",
               applies_to="index",
               help="Where the dense transformer runs: PyTorch, or ONNX Runtime on a CPU (onnx: the same weights "
                    "exported; onnx-int8: quantised to int8); auto = on a CPU, passages in torch bf16 where the CPU "
                    "computes bf16 in hardware (else onnx, else torch fp32) and queries in onnx-int8, for mean "
                    "or cls pooling; torch on a GPU or otherwise (torch also keeps SPLADE queries on PyTorch, which "
                    "otherwise run on ONNX Runtime on a CPU). Recorded, so added documents and queries encode the "
                    "same way (RETR_QUERY_BACKEND overrides it for queries)."),
        Option("--precision", type="choice", choices=PRECISIONS, default="auto", applies_to="index",
               help="Compute precision of the dense, DeepCT and SPLADE encoders: auto = bf16 on a GPU "
                    "that has it, fp16 on one without, fp32 on a CPU (except dense passages under --backend auto: "
                    "bf16 where the CPU computes it in hardware). Recorded in each sub-index's config."),
        Option("--sts-dir", type="path", path_kind="dir", applies_to="index",
               help="STS data folder, for --pooling ditto when no (layer, head) is stored for the model "
                    "(`retr ditto-select`) [default: $RETR_STS, $RETR_DATA/sts or ../shared/datasets/sts]."),
        Option("--dimsel", type="choice", choices=("none", "prf", "learned", "oracle"), applies_to="search",
               help="Query-aware dimension selection on the dense retriever (learned: `retr train dimsel`)."),
        Option("--alpha", type="float", range=SHARE_OPEN_CLOSED, applies_to="search",
               help="Share of dimensions kept [default: 0.5; learned: the selector's]."),
        Option("--prf-k", type="int", range=Range(min=1), applies_to="search",
               help="Feedback documents for --dimsel prf [5]."),
        Option("--adaptive", type="bool", applies_to="search",
               help="--dimsel learned: per-query count (cumulative importance)."),
        Option("--dimsel-qrels", type="path", applies_to="search",
               help="Labels for --dimsel oracle (an upper-bound analysis, not a search method)."),
    )
    flags = {"dense": "--dense", "pooling": "--pooling", "factory": "--faiss", "dtype": "--dtype",
             "alpha": "--alpha", "prf_k": "--prf-k", "dimsel": "--dimsel", "qrels": "--dimsel-qrels",
             "sts_dir": "--sts-dir", "backend": "--backend", "precision": "--precision"}

    def specs(self, values):
        if values["dense_model"] is None:
            return {}
        from retrieval.dense.subindex import DenseSpec

        model = values["dense_model"]
        return {"dense": DenseSpec(model=None if model == "minilm" else model, pooling=values["pooling"],
                                   factory=values["factory"], dtype=values["dtype"], device=values["device"],
                                   batch_size=values["batch_size"], backend=values["backend"],
                                   precision=values.get("precision") or "auto",
                                   sts_dir=str(values["sts_dir"]) if values["sts_dir"] else None)}

    def search_args(self, values):
        return {"dimsel": dimsel_options(values["dimsel"], values["alpha"], values["prf_k"], values["dimsel_qrels"],
                                         values["adaptive"])}

    def tag(self, values):
        # a run with dimension selection is not the plain dense run: its tag says which selection ran
        mode = values.get("dimsel")
        if mode is None:
            return None
        word = f"dimsel-{mode}" + ("-adaptive" if values.get("adaptive") else "")
        if values.get("alpha") is not None:
            word += f"(alpha={values['alpha']:g})"
        if mode == "prf" and values.get("prf_k") is not None:
            word += f"(prf_k={values['prf_k']})"
        return word

    commands = (DIMSEL, DENSE_TRAIN)


OPTIONS = DenseOptions()
