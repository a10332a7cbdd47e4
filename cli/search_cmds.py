"""`retr search` and `retr tune`: search a folder (free text or a query file), tune its fusion."""
from __future__ import annotations

import json
from pathlib import Path

import click

from cli import params
from indexes import folder
from indexes.errors import InputError
from retrieval.runs import run_tag


# -------------------------------------------------------------------- search
@click.command("search", cls=params.SectionedCommand)
@click.argument("text", required=False)
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Index folder.")
@click.option("--queries", type=click.Path(path_type=Path),
              help="Queries: BEIR JSONL, TSV or TREC topics, irds:NAME (e.g. irds:beir/scifact/test) or dmerit:PATH.")
@click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False),
              help="Where to write the run (of --queries, or of free TEXT as query 0).")
@click.option("--format", "fmt", type=click.Choice(["trec", "jsonl", "msmarco"]), default=None,
              help="Output format: TREC run (default for --output), JSONL hits with text, or MS MARCO "
                   "(qid<TAB>docid<TAB>rank, as Pyserini writes it).")
@click.option("--qrels", type=click.Path(path_type=Path), help="Search only the queries that appear in these qrels.")
@click.option("--split", help="Search only the queries of this BEIR split (qrels/SPLIT.tsv beside the queries).")
@click.option("--retriever", default=None,
              help="A sub-index (bm25, dense, ...) or a fused pipeline: bm25+dense, bm25+dense:rrf(k=60), "
                   "bm25+dense:weighted(bm25=0.3,dense=0.7,norm=zscore) [default: the index's default pipeline: "
                   "its tuned one (retr tune), else every sub-index it holds fused, e.g. bm25+dense; retr info "
                   "names it].")
@click.option("--fusion", default=None,
              help="Fusion for a+b retrievers: rrf[(k=60)], combsum|combmnz[(norm=minmax|zscore"
                   "[,confidence=SLOPE,centre=C])], weighted(a=w,b=w[,norm=...]) [default: the index's tuned "
                   "fusion, else combmnz(confidence=4,centre=-0.3,norm=minmax), chosen without training "
                   "queries].")
@click.option("--depth", type=click.IntRange(min=1), default=None,
              help="Candidates per fused retriever [default: max(k, 100)].")
@click.option("--k", "k", type=click.IntRange(min=1), default=None,
              help="Hits per query [default: 1000 with --queries, 10 for free text].")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True, help="Search threads.")
@click.option("--tag", default=None, callback=lambda ctx, param, v: _no_whitespace(v, param),
              help="Run tag (last TREC column) [default: the pipeline spec].")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--topics", type=click.Path(path_type=Path),
              help="Pyserini's name for --queries (a topics file: TSV qid<TAB>text, JSONL or TREC).")
@click.option("--hits", type=click.IntRange(min=1), default=None, help="Pyserini's name for --k.")
@click.option("--output-format", type=click.Choice(["trec", "msmarco", "jsonl"]), default=None,
              help="Pyserini's name for --format.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Queries handed to the retrievers at a time (Pyserini's flag) [default: all at once with "
                   "--quiet, else about 20 batches].")
@click.option("--per-document", is_flag=True,
              help="One hit per document: the best passage of each (passages of a chunked document share its "
                   "id in their metadata), k documents.")
@params.kind_options("search")
def search_cmd(text, index_dir, queries, output, fmt, qrels, split, retriever, fusion, depth, k, threads, tag, quiet,
               topics, hits, output_format, batch_size, per_document, **kind_values):
    """Search an index: free TEXT prints the top hits; --queries FILE writes a run."""
    from retrieval.sharded.index import open_index  # a folder or a sharded index

    queries = _alias(queries, topics, "--queries", "--topics")
    k = _alias(k, hits, "--k", "--hits")
    fmt = _alias(fmt, output_format, "--format", "--output-format")
    if (text is None) == (queries is None):
        raise click.UsageError("give either free TEXT or --queries FILE")
    if qrels and split:
        raise click.UsageError("--qrels and --split are alternatives; give one")
    idx = open_index(index_dir)
    if per_document:
        from retrieval.index import Index

        if not isinstance(idx, Index):
            raise click.UsageError("--per-document does not apply to a sharded index yet")
    spec, extra = params.configured_pipeline(idx, retriever, fusion, kind_values)
    if per_document:
        extra = dict(extra, per_document=True)
    tag = tag or run_tag(spec, [o.tag(kind_values) for o in params.each_kind()])
    with params.flags(dict(params.kind_flags(), retriever="--retriever", fusion="--fusion")):
        _search(idx, text, queries, output, fmt, qrels, split, spec, depth, k, threads, tag, quiet,
                dict(extra, batch_size=batch_size))
    _say_default(idx, params.asked_retriever(retriever, kind_values), quiet)


def _say_default(idx, asked, quiet) -> None:
    """After a search that named no retriever, one stderr line naming the default that ran, where it is
    more than the folder's only sub-index (``retr: pipeline bm25+dense (untuned fusion)``)."""
    from retrieval.request import ONLY

    dp = idx.default_pipeline()
    if asked is None and not quiet and dp.source != ONLY:
        click.echo(f"retr: pipeline {dp}", err=True)


def _alias(ours, theirs, flag, alias):
    """One value of an option that has a second name (Pyserini's): the same value twice is fine."""
    if theirs is None:
        return ours
    if ours is not None and ours != theirs:
        raise click.UsageError(f"{flag} and {alias} name the same option; give one")
    return theirs


def _search(idx, text, queries, output, fmt, qrels, split, spec, depth, k, threads, tag, quiet, extra):
    batch_size = extra.pop("batch_size", None)
    if text is not None and output is not None:  # one query into a run file: query id "0"
        results = idx.batch_search([text], k=k or 10, retriever=spec, depth=depth, text=(fmt == "jsonl"),
                                   **extra)
        _write(results, output, fmt or "trec", tag, quiet)
        return
    if text is not None:
        hits = idx.search(text, k=k or 10, retriever=spec, depth=depth, **extra)
        if fmt in ("jsonl", "msmarco"):
            _echo({"0": hits}, fmt, None)
            return
        if not hits:
            click.echo("no hits")
        for h in hits:
            head = h.title or h.text
            click.echo(f"{h.rank:>3}. {h.docid}  {h.score:.4f}  {_clip(head, 90)}")
            if h.title and h.text:
                click.echo(f"     {_clip(h.text, 100)}")
        return

    from retrieval.datasets.qrels import read_qrels
    from retrieval.collections import read_queries, split_qrels

    qs = read_queries(queries)
    if split:
        qrels = split_qrels(queries, split)
    if qrels:
        keep = read_qrels(qrels).keys()
        qs = [q for q in qs if q.qid in keep]
        if not qs:
            raise InputError("no query of the queries file appears in the qrels", qrels)
    fmt = fmt or "trec"
    results = idx.batch_search(qs, k=k or 1000, retriever=spec, threads=threads, depth=depth,
                               text=(fmt == "jsonl"), quiet=quiet, batch_size=batch_size, **extra)
    if output is None:
        _echo(results, fmt, tag)
        return
    _write(results, output, fmt, tag, quiet)


def _echo(results, fmt, tag):
    """A run on stdout: TREC lines, MS MARCO lines (qid, docid, rank) or a JSON object per hit."""
    for qid, hits in results.items():
        for h in hits:
            if fmt == "trec":
                click.echo(f"{qid} Q0 {h.docid} {h.rank} {h.score:.6f} {tag}")
            elif fmt == "msmarco":
                click.echo(f"{qid}\t{h.docid}\t{h.rank}")
            else:
                click.echo(json.dumps(h.to_dict(), ensure_ascii=False))


def _write(results, output, fmt, tag, quiet):
    from retrieval.runs import write_run

    n = write_run(results, output, fmt=fmt, tag=tag)
    if not quiet:
        click.echo(f"wrote {n:,} hits for {len(results):,} queries to {output}", err=True)


def _no_whitespace(value, param):
    if value is not None and (not value or any(c.isspace() for c in value)):
        raise click.BadParameter(f"{value!r} must be one word (a TREC run's last column)", param=param)
    return value


def _clip(s: str, n: int) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


# ---------------------------------------------------------------------- tune
def _cross_validate(idx, queries, qrels, folds, seed, retriever, metric, depth, threads, quiet):
    from indexes.errors import ParameterError
    from retrieval.tune import cross_validate

    try:
        rep = cross_validate(idx, queries, qrels, folds, retriever=retriever, metric=metric, depth=depth,
                             threads=threads, seed=seed, quiet=quiet)
    except ParameterError as e:
        raise e.renamed({"folds": "--folds"}) from None
    for f in rep["folds"]:
        click.echo(f"fold {f['fold']}/{folds}: {f['spec']} chosen on {f['train_queries']} queries "
                   f"({metric} {f['train_value']:.4f}); held out {f['queries']} queries: {metric} {f['value']:.4f}")
    singles = ", ".join(f"{n} {v:.4f}" for n, v in rep["single"].items())
    click.echo(f"cross-validated {metric} {rep['value']:.4f} on {rep['queries']} queries, each scored by the fusion "
               f"chosen without it (single: {singles})")
    click.echo("nothing stored: every fold's choice was made on these judgments", err=True)


@click.command("tune")
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Index folder.")
@click.option("--queries", required=True, type=click.Path(path_type=Path), help="Training queries.")
@click.option("--qrels", required=True, type=click.Path(path_type=Path), help="Training (or dev) qrels, never test.")
@click.option("--retriever", default="bm25+dense", show_default=True, help="Retrievers to fuse, joined by '+'.")
@click.option("--metric", default="nDCG@10", show_default=True, help="Measure to maximise.")
@click.option("--depth", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Candidates per retriever while tuning (use the depth you will search with).")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True)
@click.option("--dry-run", is_flag=True, help="Report the best fusion without storing it in the index.")
@click.option("--folds", type=click.IntRange(min=2), default=None,
              help="Cross-validate instead, for qrels that are test judgments only (Cranfield, Vaswani): choose "
                   "the fusion on all folds but one and score it on that one, for each fold; reports each fold "
                   "and stores nothing.")
@click.option("--seed", type=int, default=0, show_default=True, help="Shuffle of the queries into --folds folds.")
@click.option("--allow-test-qrels", is_flag=True, hidden=True)
@click.option("--quiet", "-q", is_flag=True)
def tune_cmd(index_dir, queries, qrels, retriever, metric, depth, threads, dry_run, folds, seed, allow_test_qrels,
             quiet):
    """Choose the fusion of RETRIEVERS on training queries and store it as the
    index's default for that combination (or, with --folds, cross-validate it)."""
    from retrieval.datasets.qrels import read_qrels
    from retrieval.collections import read_queries
    from retrieval.sharded.index import open_index  # a folder or a sharded index (every shard stores it)
    from retrieval.tune import tune

    idx = open_index(index_dir)
    if folds is not None:
        return _cross_validate(idx, read_queries(queries), read_qrels(qrels), folds, seed, retriever, metric, depth,
                               threads, quiet)
    rep = tune(idx, read_queries(queries), read_qrels(qrels), retriever=retriever, metric=metric, depth=depth,
               threads=threads, qrels_path=str(qrels), allow_test=allow_test_qrels, save=not dry_run, quiet=quiet)
    singles = ", ".join(f"{n} {v:.4f}" for n, v in rep["single"].items())
    click.echo(f"best {rep['spec']}  {metric} {rep['value']:.4f} on {rep['queries']} training queries "
               f"(single: {singles})")
    if not dry_run:
        from cli.sharded_cmds import is_sharded

        where = f"every shard of {index_dir}" if is_sharded(index_dir) else folder.manifest_path(index_dir)
        click.echo(f"stored as the default for {rep['spec'].split(':')[0]} in {where} "
                   f"(a new generation: open readers take it when they move on)", err=True)
