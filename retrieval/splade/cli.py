"""What the SPLADE kind adds to the command line: ``--splade [MODEL]`` and its query weighting
(`retr index`), and the query weighting of a search (`retr search --splade-query`)."""
from __future__ import annotations

import click

from retrieval.kinds import KindOptions

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


OPTIONS = SpladeOptions()
