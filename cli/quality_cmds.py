"""`retr quality`: score passages with a quality estimator, or train the learned one.
Pruned indexing itself is `retr index --prune P [--quality E|scores.tsv]`."""
from __future__ import annotations

from pathlib import Path

import click

from cli import params


@click.group("quality")
def quality():
    """Query-agnostic passage quality (static pruning before indexing)."""


@quality.command("score")
@click.option("--corpus", required=True, type=click.Path(path_type=Path), help="BEIR folder, JSONL or TSV corpus.")
@click.option("--estimator", "-e", default=None,
              help="learned, dense-norm, pseudo-ppl, length, stopwords, random [default: the pruning default].")
@click.option("--head", type=click.Path(path_type=Path), default=None,
              help="For --estimator learned: a head JSON from `retr quality train` [default: the shipped head].")
@click.option("--output", "-o", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="docid<TAB>score file to write.")
@click.option("--empty", type=click.Choice(["error", "skip", "keep"]), default="error", show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--quiet", "-q", is_flag=True)
def score_cmd(corpus, estimator, head, output, empty, batch_size, quiet):
    """Score every passage of CORPUS (higher = more worth indexing)."""
    from retrieval.quality import DEFAULT_ESTIMATOR, get_estimator, score_corpus, write_scores

    name = estimator or DEFAULT_ESTIMATOR
    if head is not None and name != "learned":
        raise click.UsageError("--head applies to --estimator learned only")
    est = get_estimator(name, **({"head": head} if head is not None else {}))
    with params.flags({"empty=skip": "--empty skip"}):
        docids, scores = score_corpus(corpus, est, empty=empty, batch_size=batch_size, quiet=quiet)
    write_scores(output, docids, scores)
    if not quiet:
        click.echo(f"wrote {len(docids):,} {name} scores to {output}", err=True)


@quality.command("train")
@click.option("--corpus", "corpora", multiple=True, required=True, type=click.Path(path_type=Path),
              help="Corpus (repeatable; pairs with --qrels in order).")
@click.option("--qrels", "qrels", multiple=True, required=True, type=click.Path(path_type=Path),
              help="TRAINING qrels of the corpus at the same position (never test qrels).")
@click.option("--body", default="minilm", show_default=True, help="Frozen body: minilm, splade-tiny or a local folder.")
@click.option("--features", "feature_set", type=click.Choice(["tfidf+emb", "emb"]), default="tfidf+emb",
              show_default=True, help="tf-idf beside the body vector, or the body vector alone.")
@click.option("--neg-ratio", type=params.POSITIVE, default=None,
              help="Sample this many negatives per positive [default: every other passage is a negative].")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--output", "-o", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Head JSON (with model card).")
@click.option("--quiet", "-q", is_flag=True)
def train_cmd(corpora, qrels, body, feature_set, neg_ratio, seed, output, quiet):
    """Train the learned estimator's head from training qrels (query-agnostic labels)."""
    from retrieval.datasets.qrels import read_qrels
    from retrieval.collections import read_corpus
    from retrieval.quality.learned import train_head
    from retrieval.trainrun import check_output_file

    if len(corpora) != len(qrels):
        raise click.UsageError("give one --qrels per --corpus")
    with params.flags({"output": "--output"}):
        check_output_file(output)  # before the inputs are read: a file it did not write is never replaced
    sources = [(list(read_corpus(c, empty="skip")), read_qrels(q)) for c, q in zip(corpora, qrels)]
    head = train_head(sources, body=body, neg_ratio=neg_ratio, seed=seed, output=output, quiet=quiet,
                      feature_set=feature_set,
                      name=output.stem, describe_data=[f"{c} + {q}" for c, q in zip(corpora, qrels)])
    if not quiet:
        click.echo(f"wrote {output} (train accuracy {head['card']['train_accuracy_at_0']:.3f}); score with: "
                   f"retr quality score --estimator learned --head {output}", err=True)
