"""What the DeepCT kind adds to the command line: ``--deepct MODEL_DIR`` and its defaults
(`retr index`), the mode and scale of a search (`retr search`), and its commands:
`retr train deepct` (a model) and `retr deepct-tune` (a built sub-index's defaults again)."""
from __future__ import annotations

import warnings
from pathlib import Path

import click

from cli import params
from retrieval.kinds import KindOptions

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


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

    def commands(self):
        return [("train", deepct), (None, deepct_tune_cmd)]


@click.command("deepct", context_settings=CONTEXT)
@params.training_options
@click.option("--epochs", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--lr", type=params.POSITIVE, default=5e-5, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--max-length", type=click.IntRange(min=16, max=4096), default=128, show_default=True,
              help="Window size in word-pieces; longer passages become several windows.")
@click.option("--seed", type=int, default=13, show_default=True)
@click.option("--warmup", type=params.FiniteFloatRange(0, 1), default=0.1, show_default=True,
              help="Warmup share of steps.")
@click.option("--min-rel", type=int, default=1, show_default=True, help="Lowest grade that counts as relevant.")
@click.option("--dev-fraction", type=params.SHARE_CLOSED_OPEN, default=0.1, show_default=True,
              help="Share of training queries held out (recorded in the model card) for tuning k1/b and fusion.")
@click.option("--title", type=click.Choice(["auto", "off", "extra", "only"]), default="auto", show_default=True,
              help="HDCT title weak supervision: 'only' (no queries needed), 'extra' (passages without qrels), "
                   "'off'; 'auto' = 'only' without --qrels (the corpus needs titles), 'off' with them.")
@click.option("--title-limit", type=click.IntRange(min=1), default=None, help="At most this many title-supervised passages.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--threads", type=click.IntRange(min=1, max=256), default=1, show_default=True,
              help="torch threads (1 is fastest on busy shared cores and keeps runs repeatable).")
@click.option("--overwrite", is_flag=True, help="Replace a model already in --output.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def deepct(corpus, queries, qrels, output, base, epochs, lr, batch_size, max_length, seed, warmup, min_rel,
           dev_fraction, title, title_limit, device, threads, overwrite, quiet):
    """Train a DeepCT model on query term recall targets (or titles, HDCT-style).

    Resumable: if interrupted, run the same command again and it continues from
    OUTPUT/.checkpoint. Writes OUTPUT/deepct.json and README.md (the model card)."""
    from retrieval.deepct.targets import QrelsWarning
    from retrieval.deepct.train import TrainConfig, train_deepct

    if (queries is None) != (qrels is None):
        raise click.UsageError("give both --queries and --qrels, or neither (then titles supervise, HDCT-style)")
    cfg = TrainConfig(base=base, epochs=epochs, lr=lr, batch_size=batch_size, max_length=max_length, seed=seed,
                      warmup=warmup, min_rel=min_rel, dev_fraction=dev_fraction, title=title,
                      title_limit=title_limit, device=device, threads=threads)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", QrelsWarning)
        with params.flags({"device": "--device", "queries": "--queries", "qrels": "--qrels", "title": "--title",
                           "overwrite": "--overwrite", "output": "--output"}):
            card = train_deepct(corpus, output, queries, qrels, cfg, overwrite=overwrite, quiet=quiet)
    for w in caught:
        if issubclass(w.category, QrelsWarning):
            click.echo(f"retr: warning: {w.message}", err=True)
    t = card["training"]
    if qrels is None and title == "auto":
        click.echo(f"retr: note: no --qrels, so DeepCT trained on the titles of "
                   f"{card['data'].get('training_passages')} passages (HDCT weak supervision: a body term's target is "
                   "1 if the passage's title has it)", err=True)
    click.echo(f"trained DeepCT on {card['data'].get('training_passages')} passages ({t['windows']} windows, "
               f"{t['steps']} steps) in {t['seconds']:.0f} s; final loss {t['final_loss']}; saved to {output}")


@click.command("deepct-tune")
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Index folder.")
@click.option("--name", default="deepct", show_default=True, help="The DeepCT sub-index.")
@click.option("--mode", type=click.Choice(["auto", "impact", "bm25"]), default="auto", show_default=True,
              help="Pin the mode, or choose it on the dev queries (auto).")
@click.option("--scale", type=click.Choice(["auto", "linear", "sqrt"]), default="auto", show_default=True,
              help="Pin the weight scale, or choose it on the dev queries (auto).")
@click.option("--quiet", "-q", is_flag=True)
def deepct_tune_cmd(index_dir, name, mode, scale, quiet):
    """Choose a DeepCT sub-index's defaults again (mode, weight scale, k1/b, then the
    bm25+NAME fusion) on its model's held-out training queries, without re-encoding.
    A sharded index is tuned once through its search, and every shard records the choice."""
    from retrieval.deepct.tuning import retune_deepct
    from retrieval.sharded.index import ShardedIndex, open_index

    idx = retune_deepct(open_index(index_dir), name, mode=mode, scale=scale, quiet=quiet)
    m = idx.local()[0].manifest if isinstance(idx, ShardedIndex) else idx.manifest  # every shard's is the same
    e = m["subindexes"][name]
    t, c = e["tuning"], e["config"]
    fusion = m.get("pipelines", {}).get(f"bm25+{name}", {}).get("spec", "untuned")
    click.echo(f"{name}: {c['mode']}-{c['scale']} k1={c['k1']} b={c['b']}; fusion {fusion} "
               f"({t['queries']} dev queries: {t['mode_choice']})")


OPTIONS = DeepCTOptions()
