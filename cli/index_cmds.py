"""`retr index`, `retr add` and `retr info`: build a folder, grow it, describe it."""
from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path

import click

from cli import params
from retrieval.chunking import DEFAULT_OVERLAP, DEFAULT_TOKENS, MIN_TOKENS


@contextlib.contextmanager
def document_warnings():
    """A file of a document folder that cannot be read: one ``retr: warning:`` line each (once)."""
    from retrieval.documents import DocumentWarning

    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("always", DocumentWarning)
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if not issubclass(category, DocumentWarning):
                return shown(message, category, filename, lineno, file, line)
            if str(message) not in seen:
                seen.add(str(message))
                click.echo(f"retr: warning: {message}", err=True)

        warnings.showwarning = show
        yield


def chunk_arg(tokens, overlap, no_chunk):
    """``read_corpus``'s ``chunk`` from the options: None (the corpus form's default) unless one
    of them is given."""
    if no_chunk:
        if tokens is not None or overlap is not None:
            raise click.UsageError("--no-chunk and --chunk-tokens/--chunk-overlap are alternatives; give one")
        return False
    if tokens is None and overlap is None:
        return None
    return {"tokens": DEFAULT_TOKENS if tokens is None else tokens,
            "overlap": DEFAULT_OVERLAP if overlap is None else overlap}


# --------------------------------------------------------------------- index
@click.command("index", cls=params.SectionedCommand)
@click.option("--corpus", "corpus", required=True, type=click.Path(path_type=Path),
              help="A folder of .txt/.md/.html/.pdf documents (or one such file), a BEIR folder, a JSONL/TSV "
                   "file (optionally .gz), or a collection by name: irds:NAME (ir_datasets, e.g. "
                   "irds:beir/scifact, from its local cache) or dmerit:PATH (D-MERIT).")
@click.option("--include", multiple=True, metavar="GLOB",
              help="Folder of documents: read only files whose path (relative, '*' crossing folders) matches "
                   "a GLOB (repeatable) [default: every .txt .md .markdown .html .htm .pdf; hidden files and "
                   "folders are always skipped].")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Folder of documents: skip files matching a GLOB.")
@click.option("--chunk-tokens", type=click.IntRange(min=MIN_TOKENS), default=None, metavar="N",
              help=f"Split documents into passages of at most N word-pieces of the dense model's tokenizer "
                   f"(bundled MiniLM), special tokens and the repeated title included, cut between words "
                   f"(paragraph, else sentence ends) [default: {DEFAULT_TOKENS}, MiniLM's window, for a folder of "
                   f"documents; JSONL/TSV/BEIR passages stay as they are unless this is given]. Passage ids "
                   f"are DOCID#0, DOCID#1, ...")
@click.option("--chunk-overlap", type=click.IntRange(min=0), default=None, metavar="N",
              help=f"Word-pieces shared by neighbouring passages, at most half of --chunk-tokens "
                   f"[default: {DEFAULT_OVERLAP}].")
@click.option("--no-chunk", is_flag=True, help="Index each document whole, as one passage (the dense encoder "
                                               "truncates what exceeds its window; retr info counts those).")
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path),
              help="Index folder to create, or an existing one to add sub-indexes to.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where the models (dense encoder, DeepCT) run.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Encoding batch size (texts per forward pass, in every worker).")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True, help="Indexing threads.")
@click.option("--overwrite", is_flag=True, help="Rebuild: replace the folder (or the named sub-index) on success.")
@click.option("--empty", type=click.Choice(["error", "skip", "keep"]), default="error", show_default=True,
              help="What a document without text does: fail the build, be skipped, or be indexed.")
@click.option("--prune", type=params.SHARE_CLOSED_OPEN, default=None, metavar="P",
              help="Static pruning: drop the lowest-quality share P before anything is encoded or indexed.")
@click.option("--quality", default=None, metavar="E|FILE",
              help="With --prune: a quality estimator (see retr quality score) or a docid<TAB>score file "
                   "[default: length, chosen without training queries; see benchmarks/results/defaults.md].")
@click.option("--shards", type=click.IntRange(1, 1024), default=None, metavar="N",
              help="Build a sharded index: N folders, each document in the one its id hashes to, searched as one.")
@params.executor_options
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@params.kind_options("index")
def index_cmd(corpus, include, exclude, chunk_tokens, chunk_overlap, no_chunk, index_dir, device, batch_size,
              threads, overwrite, empty, prune, quality, shards, quiet, executor, **kind_values):
    """Build an index folder (document store + Lucene BM25, and the sub-indexes
    asked for, optionally pruned by passage quality) from a corpus. On an
    existing folder built from the same corpus, add the requested sub-indexes
    to it."""
    from retrieval.writer import index_corpus

    if quality is not None and prune is None:
        raise click.UsageError("--quality needs --prune P")
    chunk = chunk_arg(chunk_tokens, chunk_overlap, no_chunk)
    names = dict(params.kind_flags(), prune="--prune", quality="--quality", overwrite="--overwrite",
                 index_dir="--index", device="--device", batch_size="--batch-size", chunk_tokens="--chunk-tokens",
                 chunk_overlap="--chunk-overlap", chunk="--chunk-tokens", include="--include", exclude="--exclude",
                 **{"empty=skip": "--empty skip"})
    shared = dict(kind_values, device=device, batch_size=batch_size, threads=threads)
    with params.flags(names), document_warnings():
        specs = {n: s for o in params.each_kind() for n, s in o.specs(shared).items()}
        if shards is not None:
            if prune is not None:
                raise click.UsageError("--prune does not apply to a sharded index (--shards)")
            if chunk is not None or include or exclude:
                raise click.UsageError("--chunk-tokens, --chunk-overlap, --no-chunk, --include and --exclude do "
                                       "not apply to a sharded index (--shards) yet")
            from cli import sharded_cmds
            from cli.live_cmds import write_options

            return sharded_cmds.index(corpus, index_dir, shards, specs, write_options(threads, empty, quiet, executor),
                                      overwrite)
        idx = index_corpus(corpus, index_dir, subindexes=specs, prune=prune, quality=quality, threads=threads,
                           overwrite=overwrite, empty=empty, quiet=quiet, executor=executor, chunk=chunk,
                           include=include or None, exclude=exclude or None)
    if not quiet:
        pr = idx.manifest.get("pruning")
        if pr:
            click.echo(f"pruned {pr['dropped']:,} of {pr['considered']:,} documents (share {pr['share']}, "
                       f"estimator {pr['estimator']})", err=True)
        reader = idx.manifest.get("corpus", {}).get("reader") or {}
        what = "passages" if reader.get("chunking") else "documents"
        click.echo(f"indexed {len(idx):,} {what} into {index_dir} ({', '.join(idx.retrievers)})", err=True)
    if prune is not None:
        from retrieval.quality.registry import out_of_domain_note
        note = out_of_domain_note(quality)
        if note:
            click.echo(f"retr: note: {note}", err=True)


@click.command("add")
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Existing index folder.")
@click.option("--corpus", "corpus", required=True, type=click.Path(path_type=Path),
              help="New documents: BEIR folder, JSONL or TSV (optionally .gz), or a folder of documents "
                   "(chunked as the index was built).")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True, help="Indexing threads.")
@click.option("--empty", type=click.Choice(["error", "skip", "keep"]), default="error", show_default=True,
              help="What a document without text does.")
@params.executor_options
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@params.nice_option
def add_cmd(index_dir, corpus, threads, empty, quiet, nice, executor):
    """Add documents to every sub-index of an existing folder (all or nothing).
    A folder pruned by passage quality scores them first and adds those that
    reach its threshold."""
    from cli.live_cmds import lower_priority, write_options
    from cli.outcomes import echo_change
    from retrieval import ops

    lower_priority(nice)
    with params.flags({"empty=skip": "--empty skip"}), document_warnings():
        out = ops.add(index_dir, corpus, write_options(threads, empty, quiet, executor))
    if not quiet:
        echo_change(index_dir, out)


# ---------------------------------------------------------------------- info
@click.command("info")
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Index folder.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a summary.")
def info_cmd(index_dir, as_json):
    """Summarise an index folder: documents, sub-indexes, sizes, versions."""
    from cli import sharded_cmds
    from retrieval import ops

    info = ops.info(index_dir)
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    if info.get("sharded"):
        return sharded_cmds.info(info)
    click.echo(f"index      {info['path']}")
    click.echo(f"documents  {info['documents']:,}   (source: {info['corpus'].get('source')})")
    click.echo(f"created    {info['created_at']}   (generation {info['generation']}, updated {info['updated_at']})")
    pr = info.get("pruning") or {}
    if pr:
        click.echo(f"pruned     {pr['dropped']:,} of {pr['considered']:,} ({pr['share']:.0%}) by {pr.get('estimator')}"
                   + (f" ({pr['head']})" if pr.get("head") else ""))
    reader = info["corpus"].get("reader") or {}
    ch = reader.get("chunking")
    if reader.get("form") == "documents" or ch:
        globs = "".join(f" {o} {g}" for o in ("include", "exclude") for g in reader.get(o) or [])
        click.echo("read as    " + ("a folder of documents" if reader.get("form") == "documents" else reader.get("form", ""))
                   + (f" ({globs.strip()})" if globs else "")
                   + (f"; chunked into passages of at most {ch['tokens']} word-pieces, {ch['overlap']} overlapping "
                      f"(ids DOCID#N)" if ch else "; not chunked"))
    click.echo(f"docstore   {_mb(info['docstore_bytes'])}")
    for name, s in info["subindexes"].items():
        cfg = ", ".join(f"{k}={v}" for k, v in s["config"].items())
        pending = f" (+{s['deleted_pending']:,} deleted, kept until retr compact)" if s.get("deleted_pending") else ""
        click.echo(f"  {name:<10} {s['kind']:<8} {s['doc_count']:>10,} docs  {_mb(s['size_bytes']):>9}  {cfg}{pending}")
        if s.get("stats"):
            click.echo(" " * 13 + "; ".join(f"{k.replace('_', ' ')} {_figure(v)}" for k, v in s["stats"].items()))
        model = s.get("model") or {}
        if model.get("path"):
            about = ", ".join(x for x in (model.get("architecture"), model.get("sha256") and
                                          f"sha256 {model['sha256']}") if x)
            click.echo(" " * 13 + f"model {model['path']}" + (f" ({about})" if about else ""))
        sel = s.get("dimsel") or {}
        if sel:
            click.echo(" " * 13 + f"dimension selector {sel.get('path')}: alpha {sel.get('alpha')}, "
                       f"{sel.get('dim')} dims, trained {sel.get('trained_at')}")
    for base, rec in (info.get("pipelines") or {}).items():
        click.echo(f"tuned      {base} -> {rec.get('spec')}   ({rec.get('metric')} {rec.get('value', 0):.4f} on "
                   f"{rec.get('queries')} queries of {rec.get('tuned_on')}, {rec.get('tuned_at')})")
    dp = info["default_pipeline"]
    click.echo(f"default    {dp['spec']}   ({dp['source']}: what a search that names no retriever runs)")
    fields = info.get("fields") or {}
    click.echo("fields     " + (", ".join(f"{f} ({n:,} docs)" for f, n in fields.items()) if fields
                                else "none (no document carries metadata; filters can use docid)"))
    v = info["versions"]
    click.echo("versions   " + ", ".join(f"{k} {v[k]}" for k in v))


def _figure(v) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:,.1f}" if isinstance(v, float) else str(v)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
