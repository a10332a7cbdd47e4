"""`retr update`, `retr delete`, `retr compact`, `retr check`: the live index (retr add is in index_cmds.py).
Each change is one new generation of the folder; readers keep searching the one they hold."""
from __future__ import annotations

from pathlib import Path

import click

from cli import params

_index = click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path),
                      help="Existing index folder.")
_quiet = click.option("--quiet", "-q", is_flag=True, help="No progress output.")


def write_options(threads: int, empty: str, quiet: bool, executor, missing_ok: bool = False):
    """The command's options of a change (:class:`retrieval.ops.WriteOptions`)."""
    from retrieval.ops import WriteOptions

    return WriteOptions(threads=threads, empty=empty, quiet=quiet, executor=executor, missing_ok=missing_ok)


def lower_priority(n: int) -> None:
    """This process (and the Java indexer it starts) yields the CPU to searches."""
    import os

    if n > 0 and hasattr(os, "nice"):
        try:
            os.nice(n)
        except OSError:  # pragma: no cover - not permitted here: run as is
            pass


@click.command("update")
@_index
@click.option("--corpus", "corpus", required=True, type=click.Path(path_type=Path),
              help="Documents: BEIR folder, JSONL or TSV (optionally .gz).")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True, help="Indexing threads.")
@click.option("--empty", type=click.Choice(["error", "skip", "keep"]), default="error", show_default=True,
              help="What a document without text does.")
@params.executor_options
@_quiet
@params.nice_option
def update_cmd(index_dir, corpus, threads, empty, quiet, nice, executor):
    """Replace the documents whose ids are in CORPUS and add the others, in every sub-index
    (all or nothing). Only the given text is encoded."""
    from cli.index_cmds import document_warnings
    from cli.outcomes import echo_change
    from retrieval import ops

    lower_priority(nice)
    with params.flags({"empty=skip": "--empty skip"}), document_warnings():
        out = ops.update(index_dir, corpus, write_options(threads, empty, quiet, executor))
    if not quiet:
        echo_change(index_dir, out)


@click.command("delete")
@_index
@click.argument("ids", nargs=-1)
@click.option("--ids", "ids_file", type=click.Path(path_type=Path), default=None,
              help="A file of document ids, one per line.")
@click.option("--missing-ok", is_flag=True, help="Ids the index does not hold are skipped, not an error.")
@_quiet
@params.nice_option
def delete_cmd(index_dir, ids, ids_file, missing_ok, quiet, nice):
    """Remove documents by id (IDS, or --ids FILE) from every sub-index (all or nothing).
    Lucene and faiss skip them at once and drop them at `retr compact`."""
    from cli.outcomes import echo_change
    from retrieval import ops
    from retrieval.writer import read_ids

    if bool(ids) == bool(ids_file):
        raise click.UsageError("give document ids, or --ids FILE (not both)")
    docids = read_ids(ids_file) if ids_file else list(ids)
    lower_priority(nice)
    out = ops.delete(index_dir, docids, write_options(2, "error", quiet, None, missing_ok=missing_ok))
    if not quiet:
        echo_change(index_dir, out)


@click.command("compact")
@_index
@_quiet
@params.nice_option
def compact_cmd(index_dir, quiet, nice):
    """Merge Lucene segments with deleted documents expunged, rebuild faiss without masked
    rows, and remove old generations that no reader holds and leftovers of dead processes."""
    from cli.outcomes import echo_compact
    from retrieval import ops

    lower_priority(nice)
    out = ops.compact(index_dir, quiet=quiet)
    if not quiet:
        echo_compact(index_dir, out)


@click.command("sync")
@_index
@click.option("--corpus", "corpus", required=True, type=click.Path(path_type=Path),
              help="The folder of documents the index was built from (read with its chunking and globs).")
@click.option("--dry-run", is_flag=True, help="List what would be added, updated and removed; change nothing.")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True, help="Indexing threads.")
@params.executor_options
@_quiet
@params.nice_option
def sync_cmd(index_dir, corpus, dry_run, threads, quiet, nice, executor):
    """Bring an index built from a folder of documents in step with that folder, as one
    generation: new files are added, changed ones (by content hash) replaced, removed ones
    deleted with all their passages. Unchanged documents are not encoded again."""
    from cli.index_cmds import document_warnings
    from retrieval import ops

    lower_priority(nice)
    with document_warnings():
        rep = ops.sync(index_dir, corpus, dry_run=dry_run, options=write_options(threads, "error", quiet, executor))
    counts = (f"{len(rep['added']):,} added, {len(rep['updated']):,} updated, {len(rep['removed']):,} removed, "
              f"{rep['unchanged']:,} unchanged documents")
    passages = f"{rep['passages_added']:,} passages to encode, {rep['passages_removed']:,} to remove"
    if dry_run:
        for what, sign in (("added", "+"), ("updated", "~"), ("removed", "-")):
            for docid in rep[what]:
                click.echo(f"{sign} {docid}")
        click.echo(f"would be {counts} ({passages}); nothing changed (generation {rep['generation']})")
        return
    if not quiet:
        if rep.get("pruned"):
            click.echo(f"pruned {rep['pruned']:,} new passages below the folder's quality threshold", err=True)
        if rep["added"] or rep["updated"] or rep["removed"]:
            click.echo(f"synced {index_dir}: {counts} (generation {rep['generation']}); now {rep['passages']:,} "
                       f"passages", err=True)
        else:
            click.echo(f"{index_dir} is in step: {counts}; nothing changed (generation {rep['generation']})",
                       err=True)


@click.command("check")
@_index
@click.option("--full", is_flag=True, help="Compare every id of every sub-index with the document store "
                                           "[default: a random sample of the store's ids].")
@click.option("--sample", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Ids sampled without --full.")
@click.option("--strict", is_flag=True, help="Leftovers of dead processes are problems too [default: notes].")
def check_cmd(index_dir, full, sample, strict):
    """Verify a folder: the files the manifest names exist, every sub-index holds as many
    documents as the document store and the same ids, and no dead process left work behind.
    Exit 0, or one line per problem and exit 1."""
    from cli.outcomes import echo_check
    from retrieval import ops

    echo_check(index_dir, ops.check(index_dir, full=full, sample=sample, strict=strict), full, sample)
