"""The sharded index's side of `retr index --shards` (:mod:`retrieval.sharded.write`) and of `retr info`'s
summary. The live changes and `retr check` go through :mod:`retrieval.ops` for both layouts."""
from __future__ import annotations

import click


def is_sharded(index_dir) -> bool:
    from retrieval.ops import is_sharded as sharded

    return sharded(index_dir)


def index(corpus, index_dir, shards: int, specs, options, overwrite: bool) -> None:
    """`retr index --shards N`: ``options`` (:class:`retrieval.ops.WriteOptions`) as the build's."""
    from retrieval.sharded.write import build_sharded

    o = options
    idx = build_sharded(corpus, index_dir, shards, subindexes=specs, threads=o.threads, overwrite=overwrite,
                        empty=o.empty, quiet=o.quiet, executor=o.executor)
    n = len(idx)
    idx.close()
    if not o.quiet:
        click.echo(f"indexed {n:,} documents into {index_dir} ({shards} shards; {', '.join(idx.retrievers)})",
                   err=True)


def info(out: dict) -> None:
    """`retr info`'s summary of a sharded folder (``retrieval.ops.info``)."""
    click.echo(f"index      {out['path']}  (sharded: {out['shards']} shards, id {out['id']})")
    click.echo(f"documents  {out['documents']:,}")
    click.echo(f"shards     generations {', '.join(map(str, out['generations']))}")
    click.echo(f"retrievers {', '.join(out['retrievers'])}")
    dp = out["default_pipeline"]
    click.echo(f"default    {dp['spec']}   ({dp['source']}: what a search that names no retriever runs)")
    fields = out.get("fields") or {}
    click.echo("fields     " + (", ".join(f"{f} ({n:,} docs)" for f, n in fields.items()) if fields else "none"))
