"""The sharded index's side of `retr index --shards`, `add`, `update`, `delete`, `compact`, `check` and
`info` (issue #30): each command hands a sharded folder here, and this calls
:mod:`retrieval.sharded.write` and prints what the command prints for one folder."""
from __future__ import annotations

import json

import click

from cli import params


def is_sharded(index_dir) -> bool:
    from indexes.sharded import is_sharded as sharded

    return sharded(index_dir)


def index(corpus, index_dir, shards, specs, threads, overwrite, empty, quiet, executor) -> None:
    from retrieval.sharded.write import build_sharded

    idx = build_sharded(corpus, index_dir, shards, subindexes=specs, threads=threads, overwrite=overwrite,
                        empty=empty, quiet=quiet, executor=executor)
    n = len(idx)
    idx.close()
    if not quiet:
        click.echo(f"indexed {n:,} documents into {index_dir} ({shards} shards; {', '.join(idx.retrievers)})",
                   err=True)


def write(index_dir, corpus, op, threads, empty, quiet, executor) -> None:
    from retrieval.sharded.write import write_documents

    rep: dict = {}
    write_documents(index_dir, corpus, op, threads=threads, empty=empty, quiet=quiet, report=rep, executor=executor)
    if not quiet:
        did = (f"added {rep.get('added', 0):,}" if op == "add" else
               f"replaced {rep.get('replaced', 0):,} and added {rep.get('added', 0):,}")
        click.echo(f"{did} documents in {index_dir} ({rep.get('shards_changed', 0)} shard(s) changed)", err=True)


def delete(index_dir, docids, missing_ok, quiet) -> None:
    from retrieval.sharded.write import delete_documents

    rep: dict = {}
    delete_documents(index_dir, docids, quiet=quiet, missing_ok=missing_ok, report=rep)
    if not quiet:
        skipped = f" ({rep['missing']:,} not in the index)" if rep.get("missing") else ""
        click.echo(f"deleted {rep['deleted']:,} documents from {index_dir}{skipped} ({rep.get('shards_changed', 0)} "
                   f"shard(s) changed)", err=True)


def compact(index_dir, quiet) -> None:
    from retrieval.sharded.write import compact as run

    rep: dict = {}
    run(index_dir, quiet=quiet, report=rep)
    if not quiet:
        click.echo(f"compacted {index_dir}: {', '.join(rep['compacted']) or 'nothing to compact'}", err=True)


def check(index_dir, full, sample, strict) -> None:
    from retrieval.sharded.write import check_sharded

    rep = check_sharded(index_dir, full=full, sample=sample, strict=strict)
    params.echo_check_problems(index_dir, rep)
    click.echo(f"ok: {index_dir}, {rep.documents:,} documents; " + "; ".join(rep.checked))


def info(index_dir, as_json) -> None:
    from retrieval.sharded.index import ShardedIndex

    with ShardedIndex.open(index_dir) as idx:
        out = idx.info()
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"index      {out['path']}  (sharded: {out['shards']} shards, id {out['id']})")
    click.echo(f"documents  {out['documents']:,}")
    click.echo(f"shards     generations {', '.join(map(str, out['generations']))}")
    click.echo(f"retrievers {', '.join(out['retrievers'])}")
    dp = out["default_pipeline"]
    click.echo(f"default    {dp['spec']}   ({dp['source']}: what a search that names no retriever runs)")
    fields = out.get("fields") or {}
    click.echo("fields     " + (", ".join(f"{f} ({n:,} docs)" for f, n in fields.items()) if fields else "none"))
