"""What the DeepCT kind adds to the command line: ``--deepct MODEL_DIR`` and its defaults
(`retr index`), and the mode and scale of a search (`retr search`)."""
from __future__ import annotations

from pathlib import Path

import click

from retrieval.kinds import KindOptions


class DeepCTOptions(KindOptions):
    title = "DeepCT"
    flag = "--deepct"
    index = (
        click.option("--deepct", "deepct_model", type=click.Path(path_type=Path), default=None, metavar="MODEL_DIR",
                     help="Add a DeepCT sub-index (and deepct-query) with a model from `retr train deepct`."),
        click.option("--deepct-mode", type=click.Choice(["auto", "impact", "bm25"]), default="auto", show_default=True,
                     help="DeepCT default: impact scores, or BM25 over the weights as term frequencies (auto: the "
                          "better on the model's held-out training queries, else bm25)."),
        click.option("--deepct-scale", type=click.Choice(["auto", "linear", "sqrt"]), default="auto",
                     show_default=True,
                     help="DeepCT weight to integer: round(100 w) or round(100 sqrt w) (auto: chosen like the mode, "
                          "else linear). Every variant is built; this sets the default."),
    )
    search = (
        click.option("--deepct-mode", type=click.Choice(["impact", "bm25"]), default=None,
                     help="Override the DeepCT sub-index's default mode for this search."),
        click.option("--deepct-scale", type=click.Choice(["linear", "sqrt"]), default=None,
                     help="Override the DeepCT sub-index's default weight scale for this search."),
    )
    flags = {"deepct": "--deepct", "mode": "--deepct-mode", "scale": "--deepct-scale"}

    def specs(self, values):
        if values["deepct_model"] is None:
            return {}
        from retrieval.deepct.subindex import DeepCTSpec

        return {"deepct": DeepCTSpec(model=str(values["deepct_model"]), mode=values["deepct_mode"],
                                     scale=values["deepct_scale"], device=values["device"],
                                     batch_size=values["batch_size"])}

    def configure(self, values):
        return {"mode": values["deepct_mode"], "scale": values["deepct_scale"]}


OPTIONS = DeepCTOptions()
