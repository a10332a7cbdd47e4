"""`retr`: the command-line face of the retrieval package. Thin by design:
options are parsed here and every piece of work is a call into `retrieval`."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from cli import params
from indexes.errors import InputError, RetrError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _known_errors():
    errs = [RetrError]
    try:
        from eval.errors import EvalError
        errs.append(EvalError)
    except ImportError:  # pragma: no cover - eval not installed
        pass
    return tuple(errs)


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="retr", prog_name="retr")
def retr():
    """retr: sparse (BM25, DeepCT) and dense retrieval with one index folder,
    one search command and an evaluator that handles partial judgments."""


# --------------------------------------------------------------------- index
@retr.command("index")
@click.option("--corpus", "corpus", required=True, type=click.Path(path_type=Path),
              help="BEIR folder, or a JSONL/TSV file (optionally .gz).")
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path),
              help="Index folder to create, or an existing one to add sub-indexes to.")
@click.option("--k1", type=params.K1, default=0.9, show_default=True, help="Default BM25 k1 stored in the index.")
@click.option("--b", type=params.B, default=0.4, show_default=True, help="Default BM25 b stored in the index.")
@click.option("--dense", "dense_model", is_flag=False, flag_value="minilm", default=None, metavar="[MODEL]",
              help="Add a dense sub-index: bundled all-MiniLM-L6-v2 by default, or 'splade-tiny', "
                   "or a local Hugging Face folder.")
@click.option("--deepct", "deepct_model", type=click.Path(path_type=Path), default=None, metavar="MODEL_DIR",
              help="Add a DeepCT sub-index (and deepct-query) with a model from `retr train deepct`.")
@click.option("--deepct-mode", type=click.Choice(["auto", "impact", "bm25"]), default="auto", show_default=True,
              help="DeepCT default: impact scores, or BM25 over the weights as term frequencies (auto: the "
                   "better on the model's held-out training queries, else bm25).")
@click.option("--deepct-scale", type=click.Choice(["auto", "linear", "sqrt"]), default="auto", show_default=True,
              help="DeepCT weight to integer: round(100 w) or round(100 sqrt w) (auto: chosen like the mode, "
                   "else linear). Every variant is built; this sets the default.")
@click.option("--pooling", default="mean", show_default=True, help="Dense pooling: mean, cls, first-last or ditto.")
@click.option("--faiss", "factory", default="Flat", show_default=True,
              help="faiss factory string for the dense index (Flat, HNSW32, IVF1024,PQ32, ...).")
@click.option("--dtype", type=click.Choice(["float32", "float16"]), default="float32", show_default=True,
              help="Precision of the stored dense vectors.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where the dense encoder runs.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True, help="Encoding batch size.")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True, help="Indexing threads.")
@click.option("--overwrite", is_flag=True, help="Rebuild: replace the folder (or the named sub-index) on success.")
@click.option("--empty", type=click.Choice(["error", "skip", "keep"]), default="error", show_default=True,
              help="What a document without text does: fail the build, be skipped, or be indexed.")
@click.option("--docvectors", is_flag=True, help="Also store Lucene document vectors (for feedback models).")
@click.option("--prune", type=params.SHARE_CLOSED_OPEN, default=None, metavar="P",
              help="Static pruning: drop the lowest-quality share P before anything is encoded or indexed.")
@click.option("--quality", default=None, metavar="E|FILE",
              help="With --prune: a quality estimator (see retr quality score) or a docid<TAB>score file "
                   "[default: the best measured estimator].")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def index_cmd(corpus, index_dir, k1, b, dense_model, deepct_model, deepct_mode, deepct_scale, pooling, factory, dtype, device, batch_size, threads,
              overwrite, empty, docvectors, prune, quality, quiet):
    """Build an index folder (document store + Lucene BM25, and optional dense
    and DeepCT sub-indexes, optionally pruned by passage quality) from a
    corpus. On an existing folder built from the same corpus, add the
    requested sub-indexes to it."""
    from retrieval.writer import index_corpus
    from retrieval.dense.subindex import DenseSpec

    spec = dspec = None
    if dense_model is not None:
        spec = DenseSpec(model=None if dense_model == "minilm" else dense_model, pooling=pooling, factory=factory,
                         dtype=dtype, device=device, batch_size=batch_size)
    if deepct_model is not None:
        from retrieval.deepct.subindex import DeepCTSpec
        dspec = DeepCTSpec(model=str(deepct_model), mode=deepct_mode, scale=deepct_scale, device=device,
                           batch_size=batch_size)
    if quality is not None and prune is None:
        raise click.UsageError("--quality needs --prune P")
    idx = index_corpus(corpus, index_dir, dense=spec, deepct=dspec, prune=prune, quality=quality, k1=k1, b=b,
                       threads=threads, overwrite=overwrite, empty=empty, store_docvectors=docvectors, quiet=quiet)
    if not quiet:
        pr = idx.manifest.get("pruning")
        if pr:
            click.echo(f"pruned {pr['dropped']:,} of {pr['considered']:,} documents (share {pr['share']}, "
                       f"estimator {pr['estimator']})", err=True)
        click.echo(f"indexed {len(idx):,} documents into {index_dir} ({', '.join(idx.retrievers)})", err=True)


@retr.command("add")
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Existing index folder.")
@click.option("--corpus", "corpus", required=True, type=click.Path(path_type=Path),
              help="New documents: BEIR folder, JSONL or TSV (optionally .gz).")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True, help="Indexing threads.")
@click.option("--empty", type=click.Choice(["error", "skip", "keep"]), default="error", show_default=True,
              help="What a document without text does.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def add_cmd(index_dir, corpus, threads, empty, quiet):
    """Add documents to every sub-index of an existing folder (all or nothing).
    A folder pruned by passage quality scores them first and adds those that
    reach its threshold."""
    from retrieval.writer import add_documents
    from retrieval.index import open_index

    idx = open_index(index_dir)
    rep: dict = {}
    idx = add_documents(idx, corpus, threads=threads, empty=empty, quiet=quiet, report=rep)
    if not quiet:
        if rep["pruned"]:
            click.echo(f"pruned {rep['pruned']:,} of {rep['read']:,} new documents below the folder's quality "
                       f"threshold", err=True)
        click.echo(f"added {rep['added']:,} documents to {index_dir} ({', '.join(idx.retrievers)}); "
                   f"now {len(idx):,}", err=True)


# -------------------------------------------------------------------- search
@retr.command("search")
@click.argument("text", required=False)
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Index folder.")
@click.option("--queries", type=click.Path(path_type=Path), help="Queries: BEIR JSONL, TSV or TREC topics.")
@click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False),
              help="Where to write the run (batch mode).")
@click.option("--format", "fmt", type=click.Choice(["trec", "jsonl"]), default=None,
              help="Output format: TREC run (default for --output) or JSONL hits with text.")
@click.option("--qrels", type=click.Path(path_type=Path), help="Search only the queries that appear in these qrels.")
@click.option("--split", help="Search only the queries of this BEIR split (qrels/SPLIT.tsv beside the queries).")
@click.option("--retriever", default="bm25", show_default=True,
              help="A sub-index (bm25, dense, ...) or a fused pipeline: bm25+dense, bm25+dense:rrf(k=60), "
                   "bm25+dense:weighted(bm25=0.3,dense=0.7,norm=zscore).")
@click.option("--fusion", default=None,
              help="Fusion for a+b retrievers: rrf[(k=60)], combsum|combmnz[(norm=minmax|zscore)], "
                   "weighted(a=w,b=w[,norm=...]) [default: the index's tuned fusion, else rrf(k=60)].")
@click.option("--depth", type=click.IntRange(min=1), default=None,
              help="Candidates per fused retriever [default: max(k, 100)].")
@click.option("--k", "k", type=click.IntRange(min=1), default=None,
              help="Hits per query [default: 1000 with --queries, 10 for free text].")
@click.option("--k1", type=params.K1, default=None, help="Override BM25 k1 for this search.")
@click.option("--b", type=params.B, default=None, help="Override BM25 b for this search.")
@click.option("--deepct-mode", type=click.Choice(["impact", "bm25"]), default=None,
              help="Override the DeepCT sub-index's default mode for this search.")
@click.option("--deepct-scale", type=click.Choice(["linear", "sqrt"]), default=None,
              help="Override the DeepCT sub-index's default weight scale for this search.")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True, help="Search threads.")
@click.option("--tag", default=None, callback=lambda ctx, param, v: _no_whitespace(v, param),
              help="Run tag (last TREC column) [default: the pipeline spec].")
@click.option("--dimsel", type=click.Choice(["none", "prf", "learned", "oracle"]), default=None,
              help="Query-aware dimension selection on the dense retriever (learned: `retr train dimsel`).")
@click.option("--alpha", type=params.SHARE_OPEN_CLOSED, default=None,
              help="Share of dimensions kept [default: 0.5; learned: the selector's].")
@click.option("--prf-k", type=click.IntRange(min=1), default=None, help="Feedback documents for --dimsel prf [5].")
@click.option("--adaptive", is_flag=True, help="--dimsel learned: per-query count (cumulative importance).")
@click.option("--dimsel-qrels", type=click.Path(path_type=Path), default=None,
              help="Labels for --dimsel oracle (an upper-bound analysis, not a search method).")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def search_cmd(text, index_dir, queries, output, fmt, qrels, split, retriever, fusion, depth, k, k1, b, deepct_mode,
               deepct_scale, threads, tag, dimsel, alpha, prf_k, adaptive, dimsel_qrels, quiet):
    """Search an index: free TEXT prints the top hits; --queries FILE writes a run."""
    from retrieval.index import open_index

    if (text is None) == (queries is None):
        raise click.UsageError("give either free TEXT or --queries FILE")
    if qrels and split:
        raise click.UsageError("--qrels and --split are alternatives; give one")
    idx = open_index(index_dir)
    pipeline = idx.pipeline(retriever, fusion)
    if deepct_mode or deepct_scale:
        idx.configure(str(pipeline), mode=deepct_mode, scale=deepct_scale)
    if k1 is not None or b is not None:
        idx.configure(str(pipeline), k1=k1, b=b)
    spec = str(pipeline)
    from cli.dimsel_cmds import dimsel_options

    dimsel = dimsel_options(dimsel, alpha, prf_k, dimsel_qrels, adaptive)

    if text is not None:
        hits = idx.search(text, k=k or 10, retriever=spec, depth=depth, dimsel=dimsel)
        if fmt == "jsonl":
            for h in hits:
                click.echo(json.dumps(h.to_dict(), ensure_ascii=False))
            return
        if not hits:
            click.echo("no hits")
        for h in hits:
            head = h.title or h.text
            click.echo(f"{h.rank:>3}. {h.docid}  {h.score:.4f}  {_clip(head, 90)}")
            if h.title and h.text:
                click.echo(f"     {_clip(h.text, 100)}")
        return

    from eval.io import read_qrels
    from retrieval.collections import read_queries, split_qrels
    from retrieval.runs import write_run

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
                               text=(fmt == "jsonl"), quiet=quiet, dimsel=dimsel)
    if output is None:
        if fmt == "trec":
            for qid, hits in results.items():
                for h in hits:
                    click.echo(f"{qid} Q0 {h.docid} {h.rank} {h.score:.6f} {tag or spec}")
        else:
            for qid, hits in results.items():
                for h in hits:
                    click.echo(json.dumps(h.to_dict(), ensure_ascii=False))
        return
    n = write_run(results, output, fmt=fmt, tag=tag or spec)
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
@retr.command("tune")
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Index folder.")
@click.option("--queries", required=True, type=click.Path(path_type=Path), help="Training queries.")
@click.option("--qrels", required=True, type=click.Path(path_type=Path), help="Training (or dev) qrels, never test.")
@click.option("--retriever", default="bm25+dense", show_default=True, help="Retrievers to fuse, joined by '+'.")
@click.option("--metric", default="nDCG@10", show_default=True, help="Measure to maximise.")
@click.option("--depth", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Candidates per retriever while tuning (use the depth you will search with).")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True)
@click.option("--dry-run", is_flag=True, help="Report the best fusion without storing it in the index.")
@click.option("--allow-test-qrels", is_flag=True, hidden=True)
@click.option("--quiet", "-q", is_flag=True)
def tune_cmd(index_dir, queries, qrels, retriever, metric, depth, threads, dry_run, allow_test_qrels, quiet):
    """Choose the fusion of RETRIEVERS on training queries and store it as the
    index's default for that combination."""
    from eval.io import read_qrels
    from retrieval.collections import read_queries
    from retrieval.index import open_index
    from retrieval.tune import tune

    idx = open_index(index_dir)
    rep = tune(idx, read_queries(queries), read_qrels(qrels), retriever=retriever, metric=metric, depth=depth,
               threads=threads, qrels_path=str(qrels), allow_test=allow_test_qrels, save=not dry_run, quiet=quiet)
    singles = ", ".join(f"{n} {v:.4f}" for n, v in rep["single"].items())
    click.echo(f"best {rep['spec']}  {metric} {rep['value']:.4f} on {rep['queries']} training queries "
               f"(single: {singles})")
    if not dry_run:
        click.echo(f"stored as the default for {rep['spec'].split(':')[0]} in {index_dir}/manifest.json", err=True)


@retr.command("deepct-tune")
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Index folder.")
@click.option("--name", default="deepct", show_default=True, help="The DeepCT sub-index.")
@click.option("--mode", type=click.Choice(["auto", "impact", "bm25"]), default="auto", show_default=True,
              help="Pin the mode, or choose it on the dev queries (auto).")
@click.option("--scale", type=click.Choice(["auto", "linear", "sqrt"]), default="auto", show_default=True,
              help="Pin the weight scale, or choose it on the dev queries (auto).")
@click.option("--quiet", "-q", is_flag=True)
def deepct_tune_cmd(index_dir, name, mode, scale, quiet):
    """Choose a DeepCT sub-index's defaults again (mode, weight scale, k1/b, then the
    bm25+NAME fusion) on its model's held-out training queries, without re-encoding."""
    from retrieval.deepct.subindex import retune_deepct
    from retrieval.index import open_index

    idx = retune_deepct(open_index(index_dir), name, mode=mode, scale=scale, quiet=quiet)
    e = idx.manifest["subindexes"][name]
    t, c = e["tuning"], e["config"]
    fusion = idx.manifest.get("pipelines", {}).get(f"bm25+{name}", {}).get("spec", "untuned")
    click.echo(f"{name}: {c['mode']}-{c['scale']} k1={c['k1']} b={c['b']}; fusion {fusion} "
               f"({t['queries']} dev queries: {t['mode_choice']})")


# ---------------------------------------------------------------------- info
@retr.command("info")
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Index folder.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a summary.")
def info_cmd(index_dir, as_json):
    """Summarise an index folder: documents, sub-indexes, sizes, versions."""
    from retrieval.index import open_index

    info = open_index(index_dir).info()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"index      {info['path']}")
    click.echo(f"documents  {info['documents']:,}   (source: {info['corpus'].get('source')})")
    click.echo(f"created    {info['created_at']}")
    pr = info.get("pruning") or {}
    if pr:
        click.echo(f"pruned     {pr['dropped']:,} of {pr['considered']:,} ({pr['share']:.0%}) by {pr.get('estimator')}"
                   + (f" ({pr['head']})" if pr.get("head") else ""))
    click.echo(f"docstore   {_mb(info['docstore_bytes'])}")
    for name, s in info["subindexes"].items():
        cfg = ", ".join(f"{k}={v}" for k, v in s["config"].items())
        click.echo(f"  {name:<10} {s['kind']:<8} {s['doc_count']:>10,} docs  {_mb(s['size_bytes']):>9}  {cfg}")
    v = info["versions"]
    click.echo("versions   " + ", ".join(f"{k} {v[k]}" for k in v))


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


# ------------------------------------------------------------------ plug-ins
def _register_optional():
    """Commands implemented in sibling modules of cli/ (each module stays thin too)."""
    import importlib

    for module, attr, parent, name in [
        ("cli.eval_cmd", "eval_cmd", None, "eval"),
        ("cli.dense_cmds", "ditto_select", None, "ditto-select"),
        ("cli.dense_cmds", "sts", "eval", "sts"),
        ("cli.train_cmd", "train", None, "train"),
        ("cli.quality_cmds", "quality", None, "quality"),
        ("cli.serve_cmds", "serve_cmd", None, "serve"),
        ("cli.serve_cmds", "mcp_cmd", None, "mcp"),
    ]:
        try:
            cmd = getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError as e:  # a module that a later change adds
            if e.name != module:
                raise
            continue
        group = retr if parent is None else retr.commands.get(parent)
        if group is not None and name not in getattr(group, "commands", {}):
            group.add_command(cmd, name=name)


_register_optional()


def main(argv=None) -> int:
    """Entry point: every known error becomes one line on stderr and exit code 2."""
    errors = _known_errors()
    try:
        retr.main(args=argv, prog_name="retr", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as e:  # pragma: no cover - click >= 8.2
        click.echo(e.ctx.get_help() if e.ctx else str(e))
        return 0
    except click.UsageError as e:
        cmd = e.ctx.command_path if e.ctx else "retr"
        click.echo(f"retr: error: {e.format_message()} (see '{cmd} --help')", err=True)
        return 2
    except click.ClickException as e:
        click.echo(f"retr: error: {e.format_message()}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("retr: aborted", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("retr: interrupted", err=True)
        return 130
    except errors as e:
        click.echo(f"retr: error: {e}", err=True)
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
