"""What the SPLADE kind adds to the command line, as data: ``--splade [MODEL]`` and its query weighting
(`retr index`), the query weighting of a search (`retr search --splade-query`) and `retr train splade`."""
from __future__ import annotations

import json

from retrieval.kinds import KindOptions
from retrieval.options import (DEVICES, POSITIVE, SHARE_CLOSED_OPEN, Command, Option, Range, UsageError, Values,
                               training_options)
from retrieval.splade.train import SpladeTrainConfig

_D = SpladeTrainConfig()  # the training defaults, read by `retr train splade`'s options

QUERY_HELP = "splade: the model weights the query's word-pieces; tokens: each word-piece counts once per occurrence"
QUERY = ("splade", "tokens")  # the query weightings
# the sub-index code (numpy) is not imported to start a command: SpladeSpec's defaults are repeated (default_from)
_SPEC = "retrieval.splade.subindex:SpladeSpec."

_TRAIN_FLAGS = {"queries": "--queries", "qrels": "--qrels", "epochs": "--epochs", "lr": "--lr",
                "batch_size": "--batch-size", "hard_negatives": "--hard-negatives", "negative_pool": "--hard-negatives",
                "positives_per_query": "--positives-per-query", "max_length": "--max-length",
                "lambda_q": "--lambda-q", "lambda_d": "--lambda-d", "dev_share": "--dev-share", "device": "--device",
                "base": "--base", "threads": "--threads", "overwrite": "--overwrite", "resume": "--resume",
                "output": "--output"}


def train_splade(v: Values):
    """Fine-tune a SPLADE model on training qrels: in-batch and BM25 hard negatives, with the FLOPS
    sparsity penalty on queries and passages.

    Ctrl-C keeps the last finished epoch in OUTPUT/.checkpoint; --resume continues from it. Writes a
    masked-LM folder with retr_train.json and README.md (the model card)."""
    from retrieval.splade.train import train

    if v.queries is None or v.qrels is None:
        raise UsageError("SPLADE trains on training queries: give --queries and --qrels")
    cfg = v.config(SpladeTrainConfig, base=v.base or _D.base)
    out = train(v.corpus, v.output, v.queries, v.qrels, cfg, index=v.index_dir, resume=v.resume,
                overwrite=v.overwrite, quiet=v.quiet)
    card = json.loads((out / "retr_train.json").read_text())
    best = card["history"][card["best_epoch"] - 1]
    print(f"fine-tuned SPLADE {len(card['history'])} epoch(s), kept epoch {best['epoch']} (held-out nDCG@10 "
          f"{best['dev_ndcg10']}, base {card['data'].get('dev_ndcg10_base')}) in "
          f"{sum(card['seconds'].values()):.0f} s; saved to {out} (index it with: retr index --splade {out})")


TRAIN = Command("splade", train_splade, group="train", flags=_TRAIN_FLAGS, options=training_options(_D.base) + (
    Option("--epochs", type="int", range=Range(min=1), default=_D.epochs),
    Option("--lr", type="float", range=POSITIVE, default=_D.lr),
    Option("--batch-size", type="int", range=Range(min=1), default=_D.batch_size,
           help="Queries per step (each with its positive and hard negatives; the rest of the batch are negatives)."),
    Option("--hard-negatives", type="int", range=Range(min=0), default=_D.hard_negatives,
           help="BM25 hard negatives per query and step."),
    Option("--positives-per-query", type="int", range=Range(min=1), default=_D.positives_per_query,
           help="At most this many relevant passages of a query per epoch, drawn anew each epoch [all]."),
    Option("--max-length", type="int", range=Range(8, 512), default=_D.max_length,
           help="Passage word-pieces in training."),
    Option("--lambda-q", type="float", range=Range(min=0), default=_D.lambda_q,
           help="FLOPS sparsity weight on the queries."),
    Option("--lambda-d", type="float", range=Range(min=0), default=_D.lambda_d,
           help="FLOPS sparsity weight on the passages."),
    Option("--dev-share", type="float", range=SHARE_CLOSED_OPEN, default=_D.dev_share,
           help="Share of the training queries held out to pick the best epoch."),
    Option("--index", name="index_dir", type="path",
           help="An index folder of the corpus to mine hard negatives from [a BM25 folder built for the run]."),
    Option("--seed", type="int", default=_D.seed),
    Option("--device", type="choice", choices=DEVICES, default=_D.device),
    Option("--threads", type="int", range=Range(1, 256), default=_D.threads,
           help="torch threads; the same count makes runs repeatable."),
    Option("--resume", type="bool", help="Continue an interrupted run from OUTPUT/.checkpoint."),
    Option("--overwrite", type="bool", help="Replace what is in --output."),
    Option(("--quiet", "-q"), type="bool", help="No progress output."),
))


class SpladeOptions(KindOptions):
    title = "SPLADE"
    flag = "--splade"
    options = (
        Option("--splade", name="splade_model", bare_value="splade-tiny", metavar="[MODEL]", applies_to="index",
               help="Add a SPLADE sub-index (learned sparse, with expansion): bundled SPLADE-tiny by default, "
                    "or a local masked-LM folder."),
        Option("--splade-query", type="choice", choices=QUERY, default="splade", default_from=_SPEC + "query",
               applies_to="index",
               help="Default SPLADE query weighting. " + QUERY_HELP + "."),
        Option("--splade-batch", type="int", range=Range(min=1), default=1, default_from=_SPEC + "batch",
               applies_to="index",
               help="Texts per SPLADE forward (padded positions masked). 1 keeps impacts byte-identical to earlier "
                    "builds; N > 1 is faster on a GPU and agrees with 1 to ~1e-5 in the float weights (an impact can "
                    "move one step). Recorded: added documents, queries and Ray workers use the same batch."),
        Option("--splade-query", type="choice", choices=QUERY, applies_to="search",
               help="Override the SPLADE sub-index's query weighting for this search (" + QUERY_HELP + ")."),
    )
    flags = {"splade": "--splade", "query": "--splade-query", "model": "--splade", "batch": "--splade-batch",
             "precision": "--precision", "query_backend": "--backend"}
    commands = (TRAIN,)

    def specs(self, values):
        if values.get("splade_model") is None:
            return {}
        from retrieval.splade.subindex import SpladeSpec

        return {"splade": SpladeSpec(model=str(values["splade_model"]), query=values["splade_query"],
                                     device=values["device"], batch=values["splade_batch"],
                                     precision=values.get("precision") or "auto",
                                     # --backend torch keeps SPLADE's queries on PyTorch too; any other value
                                     # leaves them to auto (ONNX Runtime where it can run: SPLADE has no int8 graph)
                                     query_backend="torch" if values.get("backend") == "torch" else "auto")}

    def configure(self, values):
        return {"query": values.get("splade_query")}


OPTIONS = SpladeOptions()
