"""What the BM25 kind adds to the command line: its build options (`retr index`) and
its search options (`retr search`)."""
from __future__ import annotations

import click

from cli import params
from retrieval.kinds import KindOptions


class BM25Options(KindOptions):
    title = "BM25"
    index = (
        click.option("--k1", type=params.K1, default=0.9, show_default=True, help="Default BM25 k1 stored in the index."),
        click.option("--b", type=params.B, default=0.4, show_default=True, help="Default BM25 b stored in the index."),
        click.option("--docvectors", is_flag=True, help="Also store Lucene document vectors (for feedback models)."),
    )
    search = (
        click.option("--k1", type=params.K1, default=None, help="Override BM25 k1 for this search."),
        click.option("--b", type=params.B, default=None, help="Override BM25 b for this search."),
    )
    flags = {"k1": "--k1", "b": "--b"}

    def specs(self, values):
        from retrieval.bm25.subindex import BM25Spec

        return {"bm25": BM25Spec(values["k1"], values["b"], values["docvectors"])}

    def configure(self, values):
        return {"k1": values["k1"], "b": values["b"]}


OPTIONS = BM25Options()
