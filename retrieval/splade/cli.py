"""What the SPLADE kind adds to the command line: ``--splade [MODEL]`` and its query weighting
(`retr index`), the query weighting of a search (`retr search --splade-query`) and `retr train splade`."""
from __future__ import annotations

from pathlib import Path

import click

from cli import params
from retrieval.kinds import KindOptions
from retrieval.splade.train import SpladeTrainConfig

_D = SpladeTrainConfig()  # the training defaults, read by `retr train splade`'s options

QUERY_HELP = "splade: the model weights the query's word-pieces; tokens: each word-piece counts once per occurrence"


class SpladeOptions(KindOptions):
    title = "SPLADE"
    flag = "--splade"
    index = (
        click.option("--splade", "splade_model", is_flag=False, flag_value="splade-tiny", default=None,
                     metavar="[MODEL]",
                     help="Add a SPLADE sub-index (learned sparse, with expansion): bundled SPLADE-tiny by default, "
                          "or a local masked-LM folder."),
        click.option("--splade-query", "splade_query", type=click.Choice(["splade", "tokens"]), default="splade",
                     show_default=True, help="Default SPLADE query weighting. " + QUERY_HELP + "."),
    )
    search = (
        click.option("--splade-query", "splade_query", type=click.Choice(["splade", "tokens"]), default=None,
                     help="Override the SPLADE sub-index's query weighting for this search (" + QUERY_HELP + ")."),
    )
    flags = {"splade": "--splade", "query": "--splade-query", "model": "--splade"}

    def specs(self, values):
        if values.get("splade_model") is None:
            return {}
        from retrieval.splade.subindex import SpladeSpec

        return {"splade": SpladeSpec(model=str(values["splade_model"]), query=values["splade_query"],
                                     device=values["device"])}

    def configure(self, values):
        return {"query": values.get("splade_query")}

    def commands(self):
        return [("train", splade_train)]


_TRAIN_FLAGS = {"queries": "--queries", "qrels": "--qrels", "epochs": "--epochs", "lr": "--lr",
                "batch_size": "--batch-size", "hard_negatives": "--hard-negatives", "negative_pool": "--hard-negatives",
                "positives_per_query": "--positives-per-query", "max_length": "--max-length",
                "lambda_q": "--lambda-q", "lambda_d": "--lambda-d", "dev_share": "--dev-share", "device": "--device",
                "base": "--base", "threads": "--threads", "overwrite": "--overwrite", "resume": "--resume",
                "output": "--output"}


@click.command("splade", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@params.training_options(base="splade-tiny")
@click.option("--epochs", type=click.IntRange(min=1), default=_D.epochs, show_default=True)
@click.option("--lr", type=params.POSITIVE, default=_D.lr, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=_D.batch_size, show_default=True,
              help="Queries per step (each with its positive and hard negatives; the rest of the batch are negatives).")
@click.option("--hard-negatives", type=click.IntRange(min=0), default=_D.hard_negatives, show_default=True,
              help="BM25 hard negatives per query and step.")
@click.option("--positives-per-query", type=click.IntRange(min=1), default=None,
              help="At most this many relevant passages of a query per epoch, drawn anew each epoch [all].")
@click.option("--max-length", type=click.IntRange(8, 512), default=_D.max_length, show_default=True,
              help="Passage word-pieces in training.")
@click.option("--lambda-q", type=click.FloatRange(min=0), default=_D.lambda_q, show_default=True,
              help="FLOPS sparsity weight on the queries.")
@click.option("--lambda-d", type=click.FloatRange(min=0), default=_D.lambda_d, show_default=True,
              help="FLOPS sparsity weight on the passages.")
@click.option("--dev-share", type=params.SHARE_CLOSED_OPEN, default=_D.dev_share, show_default=True,
              help="Share of the training queries held out to pick the best epoch.")
@click.option("--index", "index_dir", type=click.Path(path_type=Path), default=None,
              help="An index folder of the corpus to mine hard negatives from [a BM25 folder built for the run].")
@click.option("--seed", type=int, default=_D.seed, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--threads", type=click.IntRange(min=1, max=256), default=_D.threads, show_default=True,
              help="torch threads; the same count makes runs repeatable.")
@click.option("--resume", is_flag=True, help="Continue an interrupted run from OUTPUT/.checkpoint.")
@click.option("--overwrite", is_flag=True, help="Replace what is in --output.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def splade_train(corpus, queries, qrels, output, base, epochs, lr, batch_size, hard_negatives, positives_per_query,
                 max_length, lambda_q, lambda_d, dev_share, index_dir, seed, device, threads, resume, overwrite, quiet):
    """Fine-tune a SPLADE model on training qrels: in-batch and BM25 hard negatives, with the FLOPS
    sparsity penalty on queries and passages.

    Ctrl-C keeps the last finished epoch in OUTPUT/.checkpoint; --resume continues from it. Writes a
    masked-LM folder with retr_train.json and README.md (the model card)."""
    import json

    from retrieval.splade.train import train

    if queries is None or qrels is None:
        raise click.UsageError("SPLADE trains on training queries: give --queries and --qrels")
    cfg = SpladeTrainConfig(base=base or "splade-tiny", epochs=epochs, lr=lr, batch_size=batch_size,
                            hard_negatives=hard_negatives, positives_per_query=positives_per_query,
                            max_length=max_length, lambda_q=lambda_q, lambda_d=lambda_d, dev_share=dev_share,
                            seed=seed, device=device, threads=threads)
    with params.flags(_TRAIN_FLAGS):
        out = train(corpus, output, queries, qrels, cfg, index=index_dir, resume=resume, overwrite=overwrite,
                    quiet=quiet)
    card = json.loads((out / "retr_train.json").read_text())
    best = card["history"][card["best_epoch"] - 1]
    click.echo(f"fine-tuned SPLADE {len(card['history'])} epoch(s), kept epoch {best['epoch']} (held-out nDCG@10 "
               f"{best['dev_ndcg10']}, base {card['data'].get('dev_ndcg10_base')}) in "
               f"{sum(card['seconds'].values()):.0f} s; saved to {out} (index it with: retr index --splade {out})")


OPTIONS = SpladeOptions()
