"""Dense-model commands: `retr ditto-select` and `retr eval sts`.

Registered by cli/main.py: ``retr.add_command(ditto_select)`` and ``eval_cmd.add_command(sts)``.
"""
from __future__ import annotations

import json
from pathlib import Path

import click

from cli import params

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
STS_FLAGS = {"sts_dir": "--sts-dir", "device": "--device"}
_MODEL_HELP = "Local Hugging Face model folder, or a bundled model: minilm, splade-tiny  [default: minilm]"


def _encoder(model, pooling, layer_head, device, max_length, quiet, states=None):
    from retrieval.dense.encoder import DenseEncoder
    return DenseEncoder(model, pooling=pooling, ditto_layer_head=layer_head, ditto_states=states, device=device,
                        max_length=max_length, quiet=quiet)


_STATES = click.Choice(["first-last", "last"])


@click.command("ditto-select", context_settings=CONTEXT)
@click.option("--model", default=None, help=_MODEL_HELP)
@click.option("--max-pairs", type=click.IntRange(min=3), default=None,
              help="Use a fixed random sample of this many STS-B dev pairs (faster) [default: all 1500].")
@click.option("--sts-dir", type=click.Path(path_type=Path), default=None,
              help="STS data folder [default: $RETR_STS, $RETR_DATA/sts or ../shared/datasets/sts].")
@click.option("--text", type=click.Choice(["senteval", "raw"]), default="senteval", show_default=True,
              help="SentEval's tokenised text (as in the paper) or the original text.")
@click.option("--batch-size", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--max-length", type=click.IntRange(min=8), default=None, help="Token limit [default: the model's].")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--states", "states", multiple=True, type=_STATES,
              help="Token states to sweep: the authors' first-last average and/or the last layer "
                   "(repeatable) [default: both].")
@click.option("--no-store", is_flag=True, help="Only report; do not store the choice.")
@click.option("--json", "as_json", is_flag=True, help="Print the full record (all head scores) as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def ditto_select(model, max_pairs, sts_dir, text, batch_size, max_length, device, states, no_store, as_json, quiet):
    """Choose Ditto's (layer, head) and token states for a model on STS-B dev and store them.

    Every head of every layer is scored in one pass (Spearman x100 of cosine vs gold), once over the
    first-last average of token states (the authors' code) and once over the last layer. The best
    choice is stored under $RETR_HOME/ditto/<weights-hash>.json (RETR_HOME defaults to
    ~/.cache/retr), where `--pooling ditto` finds it for this model from then on.
    """
    from retrieval.dense import sts
    from retrieval.dense.pooling import DITTO_STATES

    with params.flags(STS_FLAGS):
        enc = _encoder(model, "mean", None, device, max_length, quiet)
        rec = sts.select_ditto_head(enc, max_pairs=max_pairs, text=text, sts_dir=sts_dir, batch_size=batch_size,
                                    store=not no_store, quiet=quiet, states=states or DITTO_STATES)
    if as_json:
        click.echo(json.dumps(rec, indent=2))
        return
    flat = sorted(((s, st, l, h) for st, grid in rec["scores"].items() for l, row in enumerate(grid)
                   for h, s in enumerate(row)), reverse=True)
    click.echo(f"model {rec['model']} (weights {rec['model_sha256']}), STS-B dev, {rec['n_pairs']} pairs")
    click.echo(f"best: layer {rec['layer']} head {rec['head']} over {rec['states']} states  "
               f"Spearman {rec['spearman_dev']:.2f}")
    click.echo("best per states: " + ", ".join(f"{st} {v:.2f}" for st, v in rec["best_per_states"].items()))
    click.echo("top 5: " + ", ".join(f"{st} ({l},{h}) {s:.2f}" for s, st, l, h in flat[:5]))
    if rec.get("stored_at"):
        click.echo(f"stored in {rec['stored_at']}")


@click.command("sts", context_settings=CONTEXT)
@click.option("--model", default=None, help=_MODEL_HELP)
@click.option("--pooling", "poolings", multiple=True, default=("mean",), show_default=True,
              help="mean, cls, first-last or ditto; repeat to compare several in one pass.")
@click.option("--layer", type=click.IntRange(min=0), default=None, help="Ditto layer [default: the stored choice].")
@click.option("--head", type=click.IntRange(min=0), default=None, help="Ditto head [default: the stored choice].")
@click.option("--states", type=_STATES, default=None, help="Ditto token states [default: the stored choice].")
@click.option("--set", "sets", multiple=True, help="Only these sets (STS12..STS16, STS-B, SICK-R) [default: all seven].")
@click.option("--text", type=click.Choice(["senteval", "raw"]), default="senteval", show_default=True,
              help="SentEval's tokenised text (the standard protocol) or the original text.")
@click.option("--sts-dir", type=click.Path(path_type=Path), default=None,
              help="STS data folder [default: $RETR_STS, $RETR_DATA/sts or ../shared/datasets/sts].")
@click.option("--batch-size", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--max-length", type=click.IntRange(min=8), default=None, help="Token limit [default: the model's].")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the scores as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def sts(model, poolings, layer, head, states, sets, text, sts_dir, batch_size, max_length, device, output, quiet):
    """Spearman x100 on STS12-16 ("all"), STS-B test and SICK-R test, and their average."""
    from indexes.errors import InputError
    from retrieval.dense import sts as sts_mod
    from retrieval.dense.pooling import canonical_name

    poolings = [canonical_name(p) for p in poolings]
    if (layer is None) != (head is None):
        raise InputError("give both --layer and --head, or neither")
    lh = (layer, head) if layer is not None else None
    if (lh is not None or states) and "ditto" not in poolings:
        raise InputError("--layer/--head/--states only apply to --pooling ditto")
    sets = list(sets) or list(sts_mod.SETS)
    for s in sets:
        if s not in sts_mod.SETS:
            raise InputError(f"unknown STS set {s!r} (choose from: {', '.join(sts_mod.SETS)})")
    # Building the encoder with Ditto resolves its (layer, head): given, stored, or selected now.
    with params.flags(STS_FLAGS):
        enc = _encoder(model, "ditto" if "ditto" in poolings else poolings[0], lh, device, max_length, quiet, states)
        res = sts_mod.evaluate(enc, poolings, sets=sets, text=text, sts_dir=sts_dir, batch_size=batch_size,
                               quiet=quiet)
    cols = sets + ["avg"]
    click.echo("| pooling | " + " | ".join(cols) + " |")
    click.echo("|---|" + "---:|" * len(cols))
    for p, row in res.items():
        name = (f"ditto ({enc.ditto_layer_head[0]},{enc.ditto_layer_head[1]}, {enc.ditto_states})"
                if p == "ditto" else p)
        click.echo(f"| {name} | " + " | ".join(f"{row[c]:.2f}" for c in cols) + " |")
    if output is not None:
        rec = {"model": str(enc.model_path), "model_sha256": enc.model_hash, "text": text,
               "ditto_layer_head": list(enc.ditto_layer_head) if enc.ditto_layer_head else None,
               "ditto_states": enc.ditto_states, "spearman": res}
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(rec, indent=2))
