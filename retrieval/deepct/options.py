"""What the DeepCT kind adds to the command line, as data: ``--deepct MODEL_DIR`` and its defaults
(`retr index`), the mode and scale of a search (`retr search`), and its commands:
`retr train deepct` (a model) and `retr deepct-tune` (a built sub-index's defaults again)."""
from __future__ import annotations

import sys
import warnings

from retrieval.deepct.train_config import TrainConfig
from retrieval.kinds import KindOptions
from retrieval.options import (DEVICES, POSITIVE, SHARE_CLOSED_OPEN, Command, Option, Range, UsageError, Values,
                               training_options)

_T = TrainConfig()  # the training defaults, read by `retr train deepct`'s options
# the sub-index code is not imported to start a command: DeepCTSpec's defaults are repeated (default_from),
# and so are retrieval.deepct.weights' MODES and SCALES
_SPEC = "retrieval.deepct.subindex:DeepCTSpec."
MODES = ("impact", "bm25")
SCALES = ("linear", "sqrt")


def train_deepct(v: Values):
    """Train a DeepCT model on query term recall targets (or titles, HDCT-style).

    Resumable: if interrupted, run the same command again and it continues from
    OUTPUT/.checkpoint. Writes OUTPUT/deepct.json and README.md (the model card)."""
    from retrieval.deepct.targets import QrelsWarning
    from retrieval.deepct.train import train_deepct

    if (v.queries is None) != (v.qrels is None):
        raise UsageError("give both --queries and --qrels, or neither (then titles supervise, HDCT-style)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", QrelsWarning)
        card = train_deepct(v.corpus, v.output, v.queries, v.qrels, v.config(TrainConfig), overwrite=v.overwrite,
                            quiet=v.quiet)
    for w in caught:
        if issubclass(w.category, QrelsWarning):
            print(f"retr: warning: {w.message}", file=sys.stderr)
    t = card["training"]
    if v.qrels is None and v.title == "auto":
        print(f"retr: note: no --qrels, so DeepCT trained on the titles of "
              f"{card['data'].get('training_passages')} passages (HDCT weak supervision: a body term's target is "
              "1 if the passage's title has it)", file=sys.stderr)
    print(f"trained DeepCT on {card['data'].get('training_passages')} passages ({t['windows']} windows, "
          f"{t['steps']} steps) in {t['seconds']:.0f} s; final loss {t['final_loss']}; saved to {v.output}")


TRAIN = Command("deepct", train_deepct, group="train", options=training_options() + (
    Option("--epochs", type="int", range=Range(min=1), default=_T.epochs),
    Option("--lr", type="float", range=POSITIVE, default=_T.lr),
    Option("--batch-size", type="int", range=Range(min=1), default=_T.batch_size),
    Option("--max-length", type="int", range=Range(16, 4096), default=_T.max_length,
           help="Window size in word-pieces; longer passages become several windows."),
    Option("--seed", type="int", default=_T.seed),
    Option("--warmup", type="float", range=Range(0, 1), default=_T.warmup, help="Warmup share of steps."),
    Option("--min-rel", type="int", default=_T.min_rel, help="Lowest grade that counts as relevant."),
    Option("--dev-fraction", type="float", range=SHARE_CLOSED_OPEN, default=_T.dev_fraction,
           help="Share of training queries held out (recorded in the model card) for tuning k1/b and fusion."),
    Option("--title", type="choice", choices=("auto", "off", "extra", "only"), default=_T.title,
           help="HDCT title weak supervision: 'only' (no queries needed), 'extra' (passages without qrels), "
                "'off'; 'auto' = 'only' without --qrels (the corpus needs titles), 'off' with them."),
    Option("--title-limit", type="int", range=Range(min=1), help="At most this many title-supervised passages."),
    Option("--device", type="choice", choices=DEVICES, default=_T.device),
    Option("--threads", type="int", range=Range(1, 256), default=_T.threads,
           help="torch threads (1 is fastest on busy shared cores and keeps runs repeatable)."),
    Option("--overwrite", type="bool", help="Replace a model already in --output."),
    Option(("--quiet", "-q"), type="bool", help="No progress output."),
), flags={"device": "--device", "queries": "--queries", "qrels": "--qrels", "title": "--title",
          "overwrite": "--overwrite", "output": "--output"})


def deepct_tune(v: Values):
    """Choose a DeepCT sub-index's defaults again (mode, weight scale, k1/b, then the
    bm25+NAME fusion) on its model's held-out training queries, without re-encoding.
    A sharded index is tuned once through its search, and every shard records the choice."""
    from retrieval.deepct.tuning import retune_deepct

    name = v.name
    m = retune_deepct(v.index, name, mode=v.mode, scale=v.scale, quiet=v.quiet).manifest
    e = m["subindexes"][name]
    t, c = e["tuning"], e["config"]
    fusion = m.get("pipelines", {}).get(f"bm25+{name}", {}).get("spec", "untuned")
    print(f"{name}: {c['mode']}-{c['scale']} k1={c['k1']} b={c['b']}; fusion {fusion} "
          f"({t['queries']} dev queries: {t['mode_choice']})")


TUNE = Command("deepct-tune", deepct_tune, options=(
    Option("--index", type="index", required=True, help="Index folder (a folder or a sharded folder)."),
    Option("--name", default="deepct", help="The DeepCT sub-index."),
    Option("--mode", type="choice", choices=("auto", *MODES), default="auto",
           help="Pin the mode, or choose it on the dev queries (auto)."),
    Option("--scale", type="choice", choices=("auto", *SCALES), default="auto",
           help="Pin the weight scale, or choose it on the dev queries (auto)."),
    Option(("--quiet", "-q"), type="bool"),
))


class DeepCTOptions(KindOptions):
    title = "DeepCT"
    flag = "--deepct"
    options = (
        Option("--deepct", name="deepct_model", type="path", metavar="MODEL_DIR", applies_to="index",
               help="Add a DeepCT sub-index (and deepct-query) with a model from `retr train deepct`."),
        Option("--deepct-mode", type="choice", choices=("auto", *MODES), default="auto",
               default_from=_SPEC + "mode", applies_to="index",
               help="DeepCT default: impact scores, or BM25 over the weights as term frequencies (auto: the "
                    "better on the model's held-out training queries, else bm25)."),
        Option("--deepct-scale", type="choice", choices=("auto", *SCALES), default="auto",
               default_from=_SPEC + "scale", applies_to="index",
               help="DeepCT weight to integer: round(100 w) or round(100 sqrt w) (auto: chosen like the mode, "
                    "else linear). Every variant is built; this sets the default."),
        Option("--deepct-mode", type="choice", choices=MODES, applies_to="search",
               help="Override the DeepCT sub-index's default mode for this search."),
        Option("--deepct-scale", type="choice", choices=SCALES, applies_to="search",
               help="Override the DeepCT sub-index's default weight scale for this search."),
    )
    flags = {"deepct": "--deepct", "mode": "--deepct-mode", "scale": "--deepct-scale", "precision": "--precision"}
    commands = (TRAIN, TUNE)

    def specs(self, values):
        if values["deepct_model"] is None:
            return {}
        from retrieval.deepct.subindex import DeepCTSpec

        return {"deepct": DeepCTSpec(model=str(values["deepct_model"]), mode=values["deepct_mode"],
                                     scale=values["deepct_scale"], device=values["device"],
                                     batch_size=values["batch_size"], precision=values.get("precision") or "auto")}

    def configure(self, values):
        return {"mode": values["deepct_mode"], "scale": values["deepct_scale"]}


OPTIONS = DeepCTOptions()
