"""What the dense kind adds to the command line: ``--dense`` and its encoder and faiss
options (`retr index`), and query-aware dimension selection (`retr search --dimsel`)."""
from __future__ import annotations

from pathlib import Path

import click

from cli import params
from retrieval.kinds import KindOptions


class DenseOptions(KindOptions):
    title = "Dense"
    flag = "--dense"
    index = (
        click.option("--dense", "dense_model", is_flag=False, flag_value="minilm", default=None, metavar="[MODEL]",
                     help="Add a dense sub-index: bundled all-MiniLM-L6-v2 by default, or 'splade-tiny', "
                          "or a local Hugging Face folder."),
        click.option("--pooling", default="mean", show_default=True,
                     help="Dense pooling: mean, cls, first-last or ditto."),
        click.option("--faiss", "factory", default="Flat", show_default=True,
                     help="faiss factory string for the dense index (Flat, HNSW32, IVF1024,PQ32, ...)."),
        click.option("--dtype", type=click.Choice(["float32", "float16"]), default="float32", show_default=True,
                     help="Precision of the stored dense vectors."),
    )
    search = (
        click.option("--dimsel", type=click.Choice(["none", "prf", "learned", "oracle"]), default=None,
                     help="Query-aware dimension selection on the dense retriever (learned: `retr train dimsel`)."),
        click.option("--alpha", type=params.SHARE_OPEN_CLOSED, default=None,
                     help="Share of dimensions kept [default: 0.5; learned: the selector's]."),
        click.option("--prf-k", type=click.IntRange(min=1), default=None, help="Feedback documents for --dimsel prf [5]."),
        click.option("--adaptive", is_flag=True, help="--dimsel learned: per-query count (cumulative importance)."),
        click.option("--dimsel-qrels", type=click.Path(path_type=Path), default=None,
                     help="Labels for --dimsel oracle (an upper-bound analysis, not a search method)."),
    )
    flags = {"dense": "--dense", "pooling": "--pooling", "factory": "--faiss", "dtype": "--dtype",
             "alpha": "--alpha", "prf_k": "--prf-k", "dimsel": "--dimsel"}

    def specs(self, values):
        if values["dense_model"] is None:
            return {}
        from retrieval.dense.subindex import DenseSpec

        model = values["dense_model"]
        return {"dense": DenseSpec(model=None if model == "minilm" else model, pooling=values["pooling"],
                                   factory=values["factory"], dtype=values["dtype"], device=values["device"],
                                   batch_size=values["batch_size"])}

    def search_args(self, values):
        from cli.dimsel_cmds import dimsel_options

        return {"dimsel": dimsel_options(values["dimsel"], values["alpha"], values["prf_k"], values["dimsel_qrels"],
                                         values["adaptive"])}


OPTIONS = DenseOptions()
