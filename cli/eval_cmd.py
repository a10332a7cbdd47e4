"""`retr eval`: trec_eval-exact evaluation of runs, plus subcommands (partial, significance, unjudged).

`retr eval --qrels Q RUN...` evaluates; `retr eval SUBCOMMAND ...` runs a subcommand. Others may add
subcommands with ``eval_cmd.add_command(cmd)``. Bad input raises eval.errors.EvalError, which the
`retr` entry point prints as one line (exit code 2). This module only parses options and formats output.
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence

import click

from cli import params

DEFAULT_NAME = "evaluate"
FORMATS = ("table", "csv", "tsv", "json")
# --qrels: a file, or a collection's judgments by name (irds:beir/scifact/test, dmerit:PATH)
_QRELS = params.NamedOrPath(click.Path(exists=True, dir_okay=False))
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _DefaultContext(click.Context):
    @property
    def command_path(self) -> str:  # `retr eval`, without the hidden command's name (usage lines, hints)
        return self.parent.command_path if self.parent else super().command_path


class _DefaultCommand(click.Command):
    """The default form, shown to users as `retr eval [OPTIONS] --qrels FILE RUN...`."""
    context_class = _DefaultContext


class EvalGroup(click.Group):
    """A group whose first argument is a subcommand name, or else the arguments of the default form
    (the hidden command ``evaluate``)."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [DEFAULT_NAME, *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write_usage(ctx.command_path, "[OPTIONS] --qrels FILE RUN...")
        formatter.write_usage(ctx.command_path, "COMMAND [ARGS]...", prefix="   or: ")

    def format_options(self, ctx, formatter):
        default = self.commands[DEFAULT_NAME]
        with click.Context(default, info_name=DEFAULT_NAME, parent=ctx) as sub:
            records = [r for p in default.get_params(sub) if isinstance(p, click.Option) and (r := p.get_help_record(sub))]
        if records:
            with formatter.section("Options"):
                formatter.write_dl(records)
        self.format_commands(ctx, formatter)


def _qrels_name(qrels: str) -> str:
    """How reports name the judgments: a file by its name, a collection by its whole name."""
    return qrels if qrels.startswith(("irds:", "dmerit:", "subtopics:")) else os.path.basename(qrels)


def _names(paths: Sequence[str]) -> list[str]:
    """Run names for output: file names, or the paths as given when two file names collide; a path
    given again is named with ``#2``, ``#3``, ... so that it is shown again rather than merged."""
    base = [os.path.basename(p) for p in paths]
    distinct = {os.path.normpath(str(p)) for p in paths}
    names = base if len(set(base)) == len({os.path.basename(p) for p in distinct}) == len(distinct) \
        else [str(p) for p in paths]
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


def _measures(measures: Sequence[str]) -> list[str]:
    """``-m`` values, each possibly a comma-separated list (``-m nDCG@10,P@5``)."""
    from eval.measures import split_measures

    return split_measures(list(measures))


def _read_runs(paths: Sequence[str], qrels: dict | None = None, missing: str = "are left out") -> dict[str, dict]:
    """The runs by name; with ``qrels``, each is checked to share queries with them (see _check_overlap;
    ``missing`` says what happens to judged queries that a run lacks)."""
    from eval.io import read_run

    runs = {name: read_run(p) for name, p in zip(_names(paths), paths)}
    if qrels is not None:
        for name, run in runs.items():
            _check_overlap(name, run, qrels, missing)
    return runs


def _check_overlap(name: str, run: dict, qrels: dict, missing: str) -> None:
    """A run that shares no query with the qrels (an empty run, the wrong qrels) is an error, not a
    table of zeros; one whose queries differ from the qrels' gets a warning with the counts."""
    from eval.errors import EvalError
    from eval.io import query_overlap

    n_run, n_qrels, both = query_overlap(run, qrels)
    counts = f"{n_run:,} queries in the run, {n_qrels:,} in the qrels, {both:,} in both"
    if not both:
        what = ("the run holds no results" if not n_run else "the qrels hold no judgments" if not n_qrels
                else "no query of the run is judged in the qrels (the wrong qrels?)")
        raise EvalError(f"{name}: {what}: {counts}")
    notes = []
    if n_run > both:
        notes.append(f"{n_run - both:,} unjudged queries are not scored")
    if n_qrels > both:
        notes.append(f"{n_qrels - both:,} judged queries missing from the run {missing}")
    if notes:
        click.echo(f"retr: warning: {name}: {counts}; {'; '.join(notes)}", err=True)


def _empty_options(f):
    """--skip-empty, and -c/--complete (trec_eval's flag for what is the default here)."""
    f = click.option("--complete", "-c", is_flag=True,
                     help="Accepted for trec_eval compatibility: a judged query with no hits scores 0, which is "
                          "already the default (trec_eval -c, ir_measures, PyTerrier).")(f)
    return click.option("--skip-empty", is_flag=True,
                        help="Leave judged queries with no hits out of the means (trec_eval without -c) and, "
                             "in paired tests, the queries any run has no hits for; a warning says how many "
                             "[default: they score 0].")(f)


def _empty(complete: bool, skip_empty: bool) -> str:
    """The evaluator's ``empty`` for the flags."""
    if complete and skip_empty:
        raise click.UsageError("-c/--complete scores queries with no hits 0; --skip-empty leaves them out: give one")
    return "skip" if skip_empty else "zero"


def _missing(empty: str) -> str:
    """What the overlap warning says of judged queries missing from a run."""
    return "are left out (--skip-empty)" if empty == "skip" else "score 0 (--skip-empty leaves them out)"


@contextlib.contextmanager
def _quiet_skips():
    """The evaluator's own SkippedQueries warning silenced: the CLI says the counts in its warning lines."""
    import warnings

    from eval.errors import SkippedQueries

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedQueries)
        yield


def _table(results: dict[str, dict[str, float]]) -> str:
    from eval.tables import means_table

    return means_table(results)


def _format_options(csv_help: str, json_help: str):
    """--format table|csv|tsv|json and --json (the same as --format json), as `retr eval` has them."""
    def add(f):
        f = click.option("--json", "as_json", is_flag=True, help=f"The same as --format json: {json_help}")(f)
        return click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                            help=f"table (aligned) [default]; csv or tsv: {csv_help}; json: {json_help}")(f)
    return add


def _format(fmt: str | None, as_json: bool) -> str:
    if as_json and fmt not in (None, "json"):
        raise click.UsageError(f"--json is --format json; it cannot go with --format {fmt}")
    return "json" if as_json else fmt or "table"


def _cell(v) -> str:
    """A csv/tsv cell: numbers at full precision (repr), booleans true/false, nothing for None."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(float(v)) if isinstance(v, float) else str(v)


def _write_rows(head: Sequence[str], rows: Sequence[Sequence], fmt: str) -> None:
    """Rows as CSV or TSV (the csv module's quoting), one header line."""
    import csv
    import io

    buf = io.StringIO()
    out = csv.writer(buf, delimiter="," if fmt == "csv" else "\t", lineterminator="\n")
    out.writerow(head)
    out.writerows([_cell(v) for v in r] for r in rows)
    click.echo(buf.getvalue(), nl=False)


@click.group("eval", cls=EvalGroup, context_settings=CONTEXT, invoke_without_command=False)
def eval_cmd():
    """Evaluate TREC runs against qrels (TREC or BEIR, .gz ok) with any measure of ir_measures, computed by
    its providers (trec_eval's through pytrec_eval, so trec_eval-exact): nDCG@10, RR@10, AP, AP@100, R@100,
    P@10, Success@k, Judged@10, Bpref, infAP, Rprec, ERR@20, IPrec@0.5, SetP, SetR, SetF(beta=2.0), NumQ,
    NumRet, NumRel, NumRelRet, RBP(p=0.8)... Add rel=N for one measure (AP(rel=2)) and a prime or judged_only=True
    for the condensed list (nDCG'@10). Diversity measures (alpha_nDCG@20, ERR_IA@20, NRBP...) need TREC diversity
    qrels: --qrels subtopics:FILE. Or run a subcommand."""


@eval_cmd.command(DEFAULT_NAME, cls=_DefaultCommand, hidden=True, context_settings=CONTEXT)
@click.option("--qrels", required=True, type=_QRELS,
              help="Relevance judgments: a file, irds:NAME or dmerit:PATH; subtopics:FILE for TREC diversity qrels "
                   "'topic subtopic docid judgment' (what alpha_nDCG, ERR_IA, NRBP... need; the other measures see "
                   "each document's highest grade).")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False), metavar="RUN...")
@click.option("-m", "--measure", "measures", multiple=True,
              help="Measure (repeatable, or comma-separated) [default: nDCG@10 RR@10 AP R@100 P@10 Judged@10].")
@click.option("--per-query", is_flag=True, help="Also print every query's values (then 'all').")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help='table (aligned) [default]; csv or tsv: columns run, query, then the measures in the order given, '
                   'one row per run (query "all": its means) and, with --per-query, one per query before it; json: '
                   '{"measures": [...], "runs": [{"name", "path", "means": {measure: mean}, "queries": N (averaged '
                   'over), "skipped": judged queries left out (--skip-empty), "per_query" (with --per-query)}]}, '
                   'one entry per RUN given.')
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
@click.option("--rel-threshold", "-l", type=int, default=None,
              help="Minimum grade that binary measures count relevant (trec_eval -l; TREC DL: 2) [default: 1].")
@click.option("--judged-only", "-J", is_flag=True, help="Condensed lists: drop unjudged documents (trec_eval -J).")
@_empty_options
@click.option("--max-docs", "-M", type=click.IntRange(min=1), default=None,
              help="Evaluate only each query's top N documents (trec_eval -M).")
def _evaluate_cmd(qrels, runs, measures, per_query, fmt, as_json, rel_threshold, judged_only, skip_empty, complete,
                  max_docs):
    """Evaluate RUN files against --qrels. A judged query with no hits in a run scores 0 (trec_eval -c);
    --skip-empty leaves such queries out."""
    from retrieval.datasets.qrels import read_qrels
    from eval.measures import DEFAULT_MEASURES, Evaluator

    fmt = _format(fmt, as_json)
    empty = _empty(complete, skip_empty)
    judged = read_qrels(qrels)
    evaluator = Evaluator(judged, _measures(measures) or list(DEFAULT_MEASURES), rel_threshold=rel_threshold,
                          judged_only=judged_only, empty=empty, max_docs=max_docs)
    from eval.measures import aggregate

    results, records = {}, []
    for (name, run), path in zip(_read_runs(runs, judged, _missing(empty)).items(), runs):
        with _quiet_skips():
            table = evaluator.evaluate(run, per_query=True)
        means = aggregate(table, evaluator.measures)
        results[name] = {**table, "all": means} if per_query else means
        records.append({"name": name, "path": str(path), "means": means, "queries": len(table),
                        "skipped": len(evaluator.skipped), **({"per_query": table} if per_query else {})})
    if fmt == "json":  # one shape whatever the number of runs
        click.echo(json.dumps({"measures": list(evaluator.measures), "runs": records}, indent=1))
    elif fmt in ("csv", "tsv"):
        _write_delimited(records, list(evaluator.measures), "," if fmt == "csv" else "\t")
    elif per_query:
        from eval.tables import fmt_value, format_table
        head = ["run", "query", *evaluator.measures]
        rows = [[name, q] + [fmt_value(v, 4) for v in row.values()] for name, table in results.items()
                for q, row in table.items()]
        click.echo(format_table(head, rows))
    else:
        click.echo(_table(results))


def _write_delimited(records: list[dict], measures: list[str], delimiter: str) -> None:
    """CSV or TSV (the csv module's quoting): run, query, measures; a run's queries (when kept), then its means
    as query "all"; values at full precision."""
    import csv
    import io

    buf = io.StringIO()
    out = csv.writer(buf, delimiter=delimiter, lineterminator="\n")
    out.writerow(["run", "query", *measures])
    for rec in records:
        rows = [*rec.get("per_query", {}).items(), ("all", rec["means"])]
        out.writerows([rec["name"], q, *(repr(float(values[m])) for m in measures)] for q, values in rows)
    click.echo(buf.getvalue(), nl=False)


@eval_cmd.command("partial", context_settings=CONTEXT)
@click.option("--qrels", required=True, type=_QRELS,
              help="Full (as complete as possible) relevance judgments: a file, irds:NAME or dmerit:PATH.")
@click.option("--run", "runs", multiple=True, required=True, type=click.Path(exists=True, dir_okay=False),
              help="A system's run (repeat; at least 2).")
@click.option("-m", "--measure", "measures", multiple=True, help="Measure (repeatable) [default: nDCG@10 AP@100].")
@click.option("--budget", "budgets", multiple=True,
              help="Relevant documents kept per query: a count (1, 5) or a fraction (0.25, 25%); repeatable "
                   "[default: 1 2 3 5 10 20 and 10% 20% 30% 50% 70% 90%].")
@click.option("--seeds", type=click.IntRange(min=1), default=10, show_default=True, help="Random subsamples per budget.")
@click.option("--rel-threshold", "-l", type=int, default=None,
              help="Grade from which a document counts relevant (and is subsampled) [default: 1].")
@click.option("--drop-nonrel", is_flag=True,
              help="Also forget the judged non-relevant documents (MS MARCO-like: only kept relevant are judged).")
@click.option("--alpha", type=params.LEVEL, default=0.05, show_default=True,
              help="Significance level of the paired t-tests.")
@click.option("--holm", is_flag=True, help="Holm-correct the pairwise tests within each scoring.")
@click.option("--plot", type=click.Path(dir_okay=False), help="Write the curves over the budget to this PNG.")
@_format_options("columns budget, kept_per_query, then per scoring its tau, swapped and flipped (means over the "
                 "seeds), one row per budget after the full judgments' own (budget \"full\")",
                 "the full result (the systems' scores, every budget and seed)")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def partial_cmd(qrels, runs, measures, budgets, seeds, rel_threshold, drop_nonrel, alpha, holm, plot, fmt, as_json,
                quiet):
    """How system rankings and significance conclusions change when only part of the relevant documents
    are judged (Kendall's tau vs the full qrels, swapped pairs, flipped conclusions), for the standard
    measures and their condensed variants."""
    from eval.errors import EvalError
    from retrieval.datasets.qrels import read_qrels
    from eval.partial import DEFAULT_BUDGETS, analyse_partial, parse_budget

    fmt = _format(fmt, as_json)
    if len(runs) < 2:
        raise EvalError("partial needs at least 2 --run files")
    judged = read_qrels(qrels)
    result = analyse_partial(judged, _read_runs(runs, judged, "score 0"), measures=_measures(measures) or ["nDCG@10", "AP@100"],
                             budgets=[parse_budget(b) for b in budgets] or DEFAULT_BUDGETS, seeds=seeds,
                             rel_threshold=rel_threshold, keep_nonrel=not drop_nonrel, alpha=alpha,
                             correction="holm" if holm else None, quiet=quiet)
    if plot:
        from eval.plots import plot_partial
        plot_partial(result, plot, title=_qrels_name(qrels))
    if fmt == "json":
        click.echo(json.dumps(result, indent=1))
    elif fmt in ("csv", "tsv"):
        _write_rows(*_partial_rows(result), fmt)
    else:
        click.echo(format_partial(result))


def _partial_rows(result: dict) -> tuple[list[str], list[list]]:
    """partial's table at full precision: the full judgments' row, then one per budget."""
    variants = list(result["budgets"][0]["results"])
    head = ["budget", "kept_per_query"] + [f"{v} {s}" for v in variants for s in ("tau", "swapped", "flipped")]
    ref = result.get("reference")
    rows = [["full", result["relevant_per_query"]] + [ref[v][s] for v in variants
                                                      for s in ("tau", "swapped", "flipped")]] if ref else []
    rows += [[b["label"], b["kept_per_query"]] + [b["results"][v][f"{s}_mean"] for v in variants
                                                  for s in ("tau", "swapped", "flipped")] for b in result["budgets"]]
    return head, rows


def format_partial(result: dict) -> str:
    """The systems under the full judgments (the reference), then one row per budget after the full
    judgments' own: Kendall's tau / swapped pairs / flipped share per measure."""
    from eval.partial import full_table, partial_table
    from eval.tables import format_table

    head, rows, note = partial_table(result)
    return ("Under the full judgments (the reference):\n" + format_table(*full_table(result)) + "\n\n"
            + format_table(head, rows) + "\n" + note)


@eval_cmd.command("significance", context_settings=CONTEXT)
@click.option("--qrels", required=True, type=_QRELS, help="Relevance judgments: a file, irds:NAME or dmerit:PATH.")
@click.option("--baseline", required=True, type=click.Path(exists=True, dir_okay=False), help="The baseline run.")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False), metavar="RUN...")
@click.option("-m", "--measure", "measures", multiple=True, help="Measure (repeatable) [default: nDCG@10].")
@click.option("--test", type=click.Choice(["t", "perm"]), default="t", show_default=True,
              help="Paired t-test or randomization (permutation) test.")
@click.option("--alpha", type=params.LEVEL, default=0.05, show_default=True, help="Significance level (after Holm).")
@click.option("--margin", type=params.POSITIVE, default=None,
              help="Also run a TOST equivalence test with this absolute margin (e.g. 0.01).")
@click.option("--rel-threshold", "-l", type=int, default=None, help="As for retr eval [default: 1].")
@click.option("--judged-only", "-J", is_flag=True, help="Condensed lists (trec_eval -J).")
@_empty_options
@click.option("--resamples", type=click.IntRange(min=100), default=10_000, show_default=True,
              help="Bootstrap / permutation resamples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@_format_options("columns measure, system, baseline, mean, delta, ci_low, ci_high, p, p_holm, significant, "
                 "tost_p, equivalent (the last two with --margin), one row per measure and run",
                 "{measure: [rows]}")
def significance_cmd(qrels, baseline, runs, measures, test, alpha, margin, rel_threshold, judged_only, skip_empty,
                     complete, resamples, seed, fmt, as_json):
    """Paired tests of each RUN against --baseline (Holm-corrected), bootstrap CIs of the differences and,
    with --margin, TOST equivalence. A judged query with no hits in a run scores 0; --skip-empty leaves out
    the queries any run has no hits for."""
    from retrieval.datasets.qrels import read_qrels
    from eval.measures import Evaluator, judged_queries
    from eval.significance import compare, format_comparison, shared_queries

    fmt = _format(fmt, as_json)
    empty = _empty(complete, skip_empty)
    paths = [baseline] + [r for r in runs if r != baseline]
    judged = read_qrels(qrels)
    all_runs = _read_runs(paths, judged, _missing(empty))
    base_name = next(iter(all_runs))
    evaluator = Evaluator(judged, _measures(measures) or ["nDCG@10"], rel_threshold=rel_threshold,
                          judged_only=judged_only, empty=empty)
    with _quiet_skips():
        tables = shared_queries({name: evaluator.evaluate(run, per_query=True) for name, run in all_runs.items()})
    left_out = len(judged_queries(evaluator.qrels)) - len(tables[base_name])
    if left_out:
        click.echo(f"retr: warning: the tests leave out {left_out:,} judged queries that some run has no hits for "
                   f"(--skip-empty); {len(tables[base_name]):,} remain", err=True)
    out = {}
    for m in evaluator.measures:
        scores = {name: {q: row[m] for q, row in t.items()} for name, t in tables.items()}
        out[m] = compare(scores, base_name, test=test, alpha=alpha, margin=margin, n_resamples=resamples, seed=seed)
    if fmt == "json":
        click.echo(json.dumps(out, indent=1))
    elif fmt in ("csv", "tsv"):
        cols = ["system", "baseline", "mean", "delta", "ci_low", "ci_high", "p", "p_holm", "significant"]
        cols += ["tost_p", "equivalent"] if margin is not None else []
        _write_rows(["measure", *cols], [[m] + [bool(r.get(c)) if c == "baseline" else r.get(c) for c in cols]
                                         for m, rows in out.items() for r in rows], fmt)
    else:
        click.echo("\n\n".join(format_comparison(rows, m, alpha) for m, rows in out.items()))


@eval_cmd.command("report", context_settings=CONTEXT)
@click.option("--qrels", required=True, type=_QRELS, help="Relevance judgments: a file, irds:NAME or dmerit:PATH.")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False), metavar="RUN...")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The HTML file to write.")
@click.option("--baseline", type=click.Path(exists=True, dir_okay=False),
              help="The run the others are tested against [default: the first RUN].")
@click.option("-m", "--measure", "measures", multiple=True,
              help="Measure (repeatable; the first drives the per-query sections) "
                   "[default: nDCG@10 RR@10 AP R@100 P@10 Judged@10].")
@click.option("--queries", type=params.NamedOrPath(click.Path(exists=True)),
              help="Query texts (BEIR JSONL, TSV or TREC topics, irds:NAME, dmerit:PATH) "
              "[default: the queries beside the --index's collection, when there are].")
@click.option("--index", "index_dir", type=click.Path(exists=True, file_okay=False),
              help="A retr index whose document store gives the top hits' titles.")
@click.option("--partial", "partial", type=click.Path(exists=True, dir_okay=False),
              help="The JSON of `retr eval partial --json`: its table and curves.")
@click.option("--title", default="Evaluation report", show_default=True, help="The report's heading.")
@click.option("--rel-threshold", "-l", type=int, default=None, help="As for retr eval [default: 1].")
@click.option("--judged-only", "-J", is_flag=True, help="Condensed lists (trec_eval -J).")
@_empty_options
@click.option("--max-docs", "-M", type=click.IntRange(min=1), default=None, help="Only each query's top N (trec_eval -M).")
@click.option("--test", type=click.Choice(["t", "perm"]), default="t", show_default=True,
              help="Paired t-test or randomization (permutation) test.")
@click.option("--alpha", type=params.LEVEL, default=0.05, show_default=True,
              help="Significance level (after Holm); the CIs are at 1 - alpha.")
@click.option("--resamples", type=click.IntRange(min=100), default=10_000, show_default=True,
              help="Bootstrap / permutation resamples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option("--top", type=click.IntRange(min=0), default=5, show_default=True,
              help="Largest gains and losses shown per run.")
@click.option("--hits", type=click.IntRange(min=0), default=3, show_default=True,
              help="Top documents shown for each of those queries.")
@click.option("-k", "judged_k", type=click.IntRange(min=1), default=10, show_default=True, help="Depth of Judged@k.")
def report_cmd(qrels, runs, output, baseline, measures, queries, index_dir, partial, title, rel_threshold, judged_only,
               skip_empty, complete, max_docs, test, alpha, resamples, seed, top, hits, judged_k):
    """Write one self-contained HTML report of RUN files against --qrels: the measures with significance
    marks and CIs against the baseline, per-query deltas, win/tie/loss counts, the largest gains and losses
    (query text, top hits' titles with --index), Judged@k, and --partial's curves. It fetches nothing."""
    from retrieval.datasets.qrels import read_qrels
    from eval.report import read_partial, write_report

    empty = _empty(complete, skip_empty)
    paths = list(dict.fromkeys(([baseline] if baseline else []) + list(runs)))
    judged = read_qrels(qrels)
    all_runs = _read_runs(paths, judged, _missing(empty))
    study = read_partial(partial) if partial else None
    texts, titles, idx = None, None, None
    try:
        if index_dir:
            import retrieval

            idx = retrieval.open_index(index_dir)
            titles = _titles(idx)
        source = queries or (_collection_queries(idx) if idx is not None else None)
        if source:
            from retrieval.collections import read_queries

            texts = {q.qid: q.text for q in read_queries(source)}
        write_report(output, judged, all_runs, title=title, qrels_name=_qrels_name(qrels),
                     measures=_measures(measures) or None, rel_threshold=rel_threshold, judged_only=judged_only,
                     empty=empty, max_docs=max_docs, test=test, alpha=alpha, n_resamples=resamples, seed=seed,
                     judged_k=judged_k, top=top, hits=hits, queries=texts, titles=titles, partial=study)
    finally:
        if idx is not None:
            idx.close()
    click.echo(f"wrote {output}", err=True)


def _titles(idx):
    """docid -> its title in the index's document store (the passage's opening words when it has none)."""
    def title(docid: str):
        doc = idx.get(docid)
        if doc is None:
            return None
        text = (doc.title or "").strip() or " ".join((doc.text or "").split()[:16])
        return text or None
    return title


def _collection_queries(idx):
    """The queries file beside the collection the index was built from, if it is still there."""
    from pathlib import Path

    source = (idx.manifest.get("corpus") or {}).get("source")
    if not source or source.startswith("<"):
        return None
    folder = Path(source) if Path(source).is_dir() else Path(source).parent
    for name in ("queries.jsonl", "queries.jsonl.gz", "queries.tsv", "topics.txt"):
        if (folder / name).is_file():
            return folder / name
    return None


@eval_cmd.command("unjudged", context_settings=CONTEXT)
@click.option("--qrels", required=True, type=_QRELS, help="Relevance judgments: a file, irds:NAME or dmerit:PATH.")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False), metavar="RUN...")
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True, help="Depth of the top k.")
@_format_options("columns run, queries, Judged@k, unjudged@k, retrieved@k, queries_with_unjudged (k as given)",
                 "{run: report}")
def unjudged_cmd(qrels, runs, k, fmt, as_json):
    """Per run, how many of its top-k documents have no judgment (Judged@k, counts, affected queries)."""
    from retrieval.datasets.qrels import read_qrels
    from eval.measures import unjudged_report
    from eval.tables import format_table, unjudged_table

    fmt = _format(fmt, as_json)
    q = read_qrels(qrels)
    out = {name: unjudged_report(q, run, k) for name, run in _read_runs(runs, q).items()}
    if fmt == "json":
        click.echo(json.dumps(out, indent=1))
    elif fmt in ("csv", "tsv"):
        cols = ["queries", f"Judged@{k}", f"unjudged@{k}", f"retrieved@{k}", "queries_with_unjudged"]
        _write_rows(["run", *cols], [[name, *(r[c] for c in cols)] for name, r in out.items()], fmt)
    else:
        click.echo(format_table(*unjudged_table(out, k)))
