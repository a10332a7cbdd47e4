"""What `retr add`, `update`, `delete`, `compact` and `check` print of a change's
:class:`retrieval.ops.Outcome` (or check's report): the same lines for a folder and a sharded folder,
which name the folder's generation or the shards changed."""
from __future__ import annotations

import click

from cli import params


def _where(out, retrievers: bool = False) -> str:
    if out.sharded:
        return f"{out.shards_changed} shard(s) changed"
    names = f"{', '.join(out.retrievers)}; " if retrievers and out.retrievers else ""
    return f"{names}generation {out.generation}"


def echo_change(index_dir, out) -> None:
    """The line (on stderr) of an add, update or delete."""
    if out.pruned:
        new = "new " if out.op == "add" else ""
        removed = f" ({out.removed:,} old version(s) removed)" if out.op == "update" and out.removed else ""
        click.echo(f"pruned {out.pruned:,} of {out.read:,} {new}documents below the folder's quality threshold"
                   f"{removed}", err=True)
    if out.op == "add":
        did = f"added {out.added:,} documents to {index_dir}"
    elif out.op == "update":
        did = f"replaced {out.replaced:,} and added {out.added:,} documents in {index_dir}"
    else:
        skipped = f" ({out.missing:,} not in the index)" if out.missing else ""
        did = f"deleted {out.deleted:,} documents from {index_dir}{skipped}"
    click.echo(f"{did} ({_where(out, out.op == 'add')}); now {out.total:,}", err=True)


def echo_compact(index_dir, out) -> None:
    click.echo(f"compacted {index_dir}: {', '.join(out.compacted) or 'nothing to compact'} ({_where(out)})",
               err=True)


def echo_check(index_dir, rep, full: bool, sample: int) -> None:
    """`retr check`'s notes and problems (exit 1 on a problem), then its ok line."""
    params.echo_check_problems(index_dir, rep)
    if rep.sharded:
        click.echo(f"ok: {index_dir}, {rep.documents:,} documents; " + "; ".join(rep.checked))
        return
    ids = "every id" if full else f"a sample of {min(sample, rep.documents):,} ids"
    click.echo(f"ok: {index_dir} generation {rep.generation}, {rep.documents:,} documents; "
               f"{', '.join(rep.checked)} agree with the document store ({ids})")
