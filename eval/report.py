"""One self-contained HTML report of an evaluation (`retr eval report`): the measures table with
significance marks and confidence intervals, per-query deltas against a baseline, win/tie/loss counts,
the queries with the largest gains and losses (their text and top hits), Judged@k, and the curves of a
partial-annotation study. Every number comes from the functions `retr eval` and its subcommands call
(``Evaluator``, ``significance.compare``, ``unjudged_report``) and is printed with their formats; the
HTML only lays them out. The file fetches nothing: styles inline, plots as inline SVG, tables as plain
HTML (a few lines of JavaScript only add sorting on a header click). The same input gives the same bytes.

``compute_report`` returns the numbers, ``render_report`` turns them into HTML, ``write_report`` does
both and writes the file. Query texts and document titles come from the caller (``queries``: {qid:
text}; ``titles``: docid -> title or None), since the evaluator reads no index.
"""
from __future__ import annotations

import html
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence

from .errors import EvalError, SkippedQueries
from .io import query_overlap, ranked
from .measures import DEFAULT_MEASURES, Evaluator, aggregate, judged_queries, with_hits
from .partial import partial_table
from .significance import ci_text, compare, comparison_table, shared_queries
from .tables import fmt_value, unjudged_table

TIE = 1e-9  # |delta| at or below this is a tie (equal rankings give equal floats; this absorbs rounding)
Run = Mapping[str, Mapping[str, float]]


def compute_report(qrels: Mapping[str, Mapping[str, int]], runs: Mapping[str, Run], baseline: str | None = None,
                   measures: Sequence[str] | None = None, rel_threshold: int | None = None, judged_only: bool = False,
                   empty: str = "zero", max_docs: int | None = None, test: str = "t", alpha: float = 0.05,
                   n_resamples: int = 10_000, seed: int = 0, judged_k: int = 10, top: int = 5, hits: int = 3,
                   queries: Mapping[str, str] | None = None, titles: Callable[[str], str | None] | None = None,
                   partial: Mapping | None = None) -> dict:
    """The report's numbers, JSON-ready.

    runs: {name: run}, in the order to show; ``baseline`` names one of them (default: the first).
    measures and rel_threshold / judged_only / empty / max_docs: as for ``evaluate`` (the means equal
    `retr eval`'s with the same options). The paired tests run on every judged query, a query with no hits
    in a run scoring 0, or with ``empty="skip"`` on the queries every run has hits for (as `retr eval
    significance` with the same option); ``skipped`` in the result counts, per run, the judged queries left
    out of its mean (0 with the default ``empty="zero"``). ``compare`` with ``test``, ``alpha`` (also 1 -
    the CI's level), ``n_resamples`` and ``seed``, Holm-corrected over the runs. The first measure drives
    the per-query sections: deltas against the baseline, and the ``top`` largest gains and losses with
    each side's first ``hits`` documents. ``judged_k``: depth of the Judged@k table (`retr eval unjudged`).
    partial: an ``analyse_partial`` result (`retr eval partial --json`), shown as its table and curves.
    """
    if not runs:
        raise EvalError("the report needs at least one run")
    names = list(runs)
    baseline = names[0] if baseline is None else baseline
    if baseline not in runs:
        raise EvalError(f"baseline {baseline!r} is not among the runs: {', '.join(names)}")
    for name, run in runs.items():
        n_run, n_qrels, both = query_overlap(run, qrels)
        if not both:
            raise EvalError(f"{name}: no query of the run is judged in the qrels ({n_run:,} queries in the run, "
                            f"{n_qrels:,} in the qrels)")
    for label, value in (("top", top), ("hits", hits), ("judged_k", judged_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if label == "judged_k" else 0):
            raise EvalError(f"{label} must be a whole number >= {1 if label == 'judged_k' else 0}, got {value!r}")
    names = [baseline] + [n for n in names if n != baseline]
    measures = list(measures or DEFAULT_MEASURES)
    options = dict(rel_threshold=rel_threshold, judged_only=judged_only, max_docs=max_docs)
    evaluator = Evaluator(qrels, measures, empty=empty, **options)
    with warnings.catch_warnings():  # the counts go into the result ("skipped")
        warnings.simplefilter("ignore", SkippedQueries)
        own = {n: evaluator.evaluate(runs[n], per_query=True) for n in names}
    skipped = {n: len(judged_queries(evaluator.qrels) - set(own[n])) for n in names}
    means = {n: aggregate(own[n], evaluator.measures) for n in names}  # `retr eval`
    tables = shared_queries(own)  # `retr eval significance`
    keys = list(evaluator.measures)
    comparisons = {}
    for m in keys:
        scores = {n: {q: row[m] for q, row in t.items()} for n, t in tables.items()}
        comparisons[m] = compare(scores, baseline, test=test, alpha=alpha, n_resamples=n_resamples, seed=seed)
    qids = list(tables[baseline])
    wtl = {n: {m: _wtl([tables[n][q][m] - tables[baseline][q][m] for q in qids]) for m in keys} for n in names[1:]}
    primary = keys[0]
    queries = queries or {}
    per_query, extremes = {}, {}
    for n in names[1:]:
        rows = [{"qid": q, "baseline": tables[baseline][q][primary], "run": tables[n][q][primary],
                 "delta": tables[n][q][primary] - tables[baseline][q][primary]} for q in qids]
        rows.sort(key=lambda r: (-r["delta"], r["qid"]))
        per_query[n] = rows
        gains = [r for r in rows if r["delta"] > TIE][:top]
        losses = [r for r in reversed(rows) if r["delta"] < -TIE][:top]
        extremes[n] = {"gains": [_detail(r, qrels, runs[n], runs[baseline], hits, queries, titles) for r in gains],
                       "losses": [_detail(r, qrels, runs[n], runs[baseline], hits, queries, titles) for r in losses]}
    judged = {n: _unjudged(qrels, runs[n], judged_k) for n in names}
    missing = {n: sorted(judged_queries(evaluator.qrels) - with_hits(runs[n])) for n in names}
    out = {"baseline": baseline, "runs": names, "measures": keys, "primary": primary, "queries": len(qids),
           "settings": {"rel_threshold": rel_threshold, "judged_only": judged_only, "empty": empty,
                        "max_docs": max_docs, "test": test, "alpha": alpha, "n_resamples": n_resamples,
                        "seed": seed, "judged_k": judged_k, "top": top, "hits": hits},
           "means": means, "comparisons": comparisons, "wtl": wtl, "per_query": per_query, "extremes": extremes,
           "judged": judged, "missing": {n: len(v) for n, v in missing.items()}, "skipped": skipped,
           "query_texts": bool(queries), "titles": titles is not None}
    if partial is not None:
        out["partial"] = check_partial(partial)
    return out


def _wtl(deltas: Sequence[float]) -> dict[str, int]:
    return {"wins": sum(d > TIE for d in deltas), "ties": sum(abs(d) <= TIE for d in deltas),
            "losses": sum(d < -TIE for d in deltas)}


def _unjudged(qrels, run, k):
    from .measures import unjudged_report

    return unjudged_report(qrels, run, k)


def _detail(row: dict, qrels, run: Run, base: Run, hits: int, queries: Mapping[str, str], titles) -> dict:
    q = row["qid"]

    def top(r: Run) -> list[dict]:
        return [{"docid": d, "grade": qrels.get(q, {}).get(d), "title": titles(d) if titles else None}
                for d, _ in ranked(r.get(q, {}))[:hits]]

    return {**row, "text": queries.get(q), "run_hits": top(run), "baseline_hits": top(base)}


def check_partial(result: Mapping) -> dict:
    """``result`` if it has the shape `retr eval partial --json` writes (what the report reads of it),
    else an EvalError."""
    try:
        if not isinstance(result, Mapping) or not result["budgets"]:
            raise TypeError
        partial_table(result)
        for b in result["budgets"]:
            for v in b["results"].values():
                [float(v[k]) for k in ("tau_mean", "tau_std", "swapped_mean", "flipped_mean")]
            if b["mode"] not in ("count", "fraction"):
                raise ValueError
            float(b["value"])
        [str(s) for s in result["systems"]]
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        raise EvalError("the partial-annotation data is not what `retr eval partial --json` writes") from None
    return dict(result)


def read_partial(path: str | os.PathLike) -> dict:
    """The JSON that `retr eval partial --json` printed, saved to a file, checked (``check_partial``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EvalError(f"{path}: not JSON ({e})") from None
    try:
        return check_partial(data)
    except EvalError as e:
        raise EvalError(f"{path}: {e}") from None


def write_report(path: str | os.PathLike, qrels: Mapping[str, Mapping[str, int]], runs: Mapping[str, Run],
                 title: str = "Evaluation report", qrels_name: str | None = None, **kwargs) -> dict:
    """``compute_report(qrels, runs, **kwargs)`` rendered (``render_report``) into the HTML file ``path``;
    returns the numbers. The file is written only once everything is computed."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):  # refused before the work, not after it
        raise EvalError(f"{path}: no such folder: {folder}")
    if not os.access(folder, os.W_OK):
        raise EvalError(f"{path}: the folder is not writable")
    data = compute_report(qrels, runs, **kwargs)
    text = render_report(data, title=title, qrels_name=qrels_name)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return data


# ------------------------------------------------------------------------------------------ HTML
def esc(value) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float) -> str:
    """The exact value for data-value attributes (what sorting and tests read)."""
    return repr(float(value)) if math.isfinite(value) else "0"


def _table(head: Sequence[str], rows: Sequence[Sequence], values: Sequence[Sequence] | None = None,
           cls: str = "", caption: str = "") -> str:
    """A plain HTML table; ``values`` (same shape as rows, None where not numeric) become data-value."""
    out = ['<div class="scroll">' + (f'<table class="{esc(cls)}">' if cls else "<table>")]
    if caption:
        out.append(f"<caption>{caption}</caption>")
    out.append("<thead><tr>" + "".join(f'<th scope="col">{esc(h)}</th>' for h in head) + "</tr></thead><tbody>")
    for i, row in enumerate(rows):
        cells = []
        for j, cell in enumerate(row):
            v = values[i][j] if values else None
            attr = f' data-value="{_num(v)}"' if v is not None else ""
            tag = "th scope=\"row\"" if j == 0 else "td"
            cells.append(f"<{tag}{attr}>{cell}</{tag.split()[0]}>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _breakable(name: str) -> str:
    """A run name, escaped, that may wrap after its separators: names are often paths or file names with
    no spaces, and would otherwise set the width of the whole table."""
    return re.sub(r"([._/\\-])", r"\1<wbr>", esc(name))


def _means_section(data: dict) -> str:
    base, alpha = data["baseline"], data["settings"]["alpha"]
    head = ["run"] + data["measures"]
    rows, values = [], []
    for n in data["runs"]:
        row, vals = [_breakable(n) + (' <span class="tag">baseline</span>' if n == base else "")], [None]
        for m in data["measures"]:
            value = data["means"][n][m]
            cell = f'<span class="v">{esc(fmt_value(value, 4))}</span>'
            if n != base:
                c = next(r for r in data["comparisons"][m] if r["system"] == n)
                if c["significant"]:
                    up = c["delta"] > 0
                    cell += (f'<span class="mark {"up" if up else "down"}" title="significantly '
                             f'{"better" if up else "worse"} than the baseline (p(Holm) = {c["p_holm"]:.4f})">'
                             f'{"▲" if up else "▼"}</span>')
                cell += (f' <span class="ci" title="mean per-query delta and its {100 * (1 - alpha):g}% bootstrap '
                         f'CI">{esc(format(c["delta"], "+.4f"))} <span class="nw">{esc(ci_text(c))}</span></span>')
            row.append(cell)
            vals.append(value)
        rows.append(row)
        values.append(vals)
    notes = [f"Means as <code>retr eval</code> prints them. ▲/▼: significantly better/worse than the baseline "
             f"({'paired t-test' if data['settings']['test'] == 't' else 'randomization test'}, Holm-corrected over "
             f"the {len(data['runs']) - 1} comparisons per measure, α = {alpha:g}); below each mean, the mean "
             f"per-query delta and its {100 * (1 - alpha):g}% bootstrap confidence interval."]
    gaps = {n: k for n, k in data["missing"].items() if k}
    if gaps and data["settings"]["empty"] == "skip":
        notes.append("Judged queries with no hits are left out: of each run's mean, and of the tests and deltas "
                     "where any run has none (as <code>retr eval significance --skip-empty</code>); left out: "
                     + ", ".join(f"{esc(n)} {k}" for n, k in gaps.items()) + ".")
    elif gaps:
        notes.append("Means, tests and deltas score a judged query with no hits as 0 (trec_eval -c, as <code>retr "
                     "eval</code> and <code>retr eval significance</code>); such queries: "
                     + ", ".join(f"{esc(n)} {k}" for n, k in gaps.items()) + ".")
    return ('<section id="measures"><h2>Measures</h2>\n' + _table(head, rows, values, "measures sortable") +
            "".join(f'\n<p class="note">{n}</p>' for n in notes) + "</section>")


def _significance_section(data: dict) -> str:
    if len(data["runs"]) < 2:
        return ""
    alpha = data["settings"]["alpha"]
    parts = ['<section id="significance"><h2>Against the baseline</h2>',
             f'<p class="note">Per measure, as <code>retr eval significance</code> prints it (* significant at '
             f'α = {alpha:g} after Holm correction), with wins / ties / losses over the {data["queries"]} judged '
             f'queries (a tie: |delta| ≤ {TIE:g}).</p>']
    for m in data["measures"]:
        rows = data["comparisons"][m]
        head, body = comparison_table(rows, m, alpha)
        head = head + ["win", "tie", "loss"]
        cells, values = [], []
        for r, line in zip(rows, body):
            w = data["wtl"].get(r["system"], {}).get(m)
            line = [esc(c) for c in line] + ([str(w["wins"]), str(w["ties"]), str(w["losses"])] if w else ["", "", ""])
            cells.append(line)
            if r.get("baseline"):
                values.append([None, r["mean"]] + [None] * (len(line) - 2))
            else:
                values.append([None, r["mean"], r["delta"], r["ci_low"], r["p"], r["p_holm"], None]
                              + [None] * (len(line) - 10) + [w["wins"], w["ties"], w["losses"]])
        parts.append(_table(head, cells, values, "significance sortable", caption=esc(m)))
    parts.append("</section>")
    return "\n".join(parts)


def _per_query_section(data: dict) -> str:
    if len(data["runs"]) < 2:
        return ""
    m, base = data["primary"], data["baseline"]
    parts = ['<section id="per-query"><h2>Per-query deltas</h2>',
             f'<p class="note">{esc(m)} of each run minus the baseline\'s ({esc(base)}) on every judged query, '
             "sorted by delta (hover a bar for the query).</p>"]
    for n, rows in data["per_query"].items():
        w = data["wtl"][n][m]
        parts.append(f'<figure><figcaption>{esc(n)} vs {esc(base)}: {w["wins"]} wins, {w["ties"]} ties, '
                     f'{w["losses"]} losses</figcaption>{delta_svg(rows, m)}</figure>')
    parts.append("</section>")
    return "\n".join(parts)


def _hits_html(hits: list[dict]) -> str:
    if not hits:
        return '<span class="muted">no results</span>'
    items = []
    for h in hits:
        grade = "unjudged" if h["grade"] is None else f"rel {h['grade']}"
        title = f' {esc(h["title"])}' if h.get("title") else ""
        items.append(f'<li><span class="grade g{"u" if h["grade"] is None else esc(h["grade"])}">{esc(grade)}</span>'
                     f'{title} <span class="docid">{esc(h["docid"])}</span></li>')
    return "<ol>" + "".join(items) + "</ol>"


def _extremes_section(data: dict) -> str:
    if len(data["runs"]) < 2 or not data["settings"]["top"]:
        return ""
    m, base = data["primary"], data["baseline"]
    parts = ['<section id="extremes"><h2>Largest gains and losses</h2>',
             f'<p class="note">By {esc(m)} delta; each side\'s top {data["settings"]["hits"]} documents with their '
             f'judgment{"" if data["titles"] else " (give --index for their titles)"}'
             f'{"" if data["query_texts"] else "; give --queries (or --index) for the query texts"}.</p>']
    for n, ex in data["extremes"].items():
        for kind in ("gains", "losses"):
            rows = ex[kind]
            if not rows:
                parts.append(f'<p class="muted">{esc(n)}: no {kind[:-1]}s against {esc(base)}.</p>')
                continue
            head = ["query", "text", f"{base} {m}", f"{n} {m}", "delta"] + (
                [f"{n} top {data['settings']['hits']}", f"{base} top {data['settings']['hits']}"]
                if data["settings"]["hits"] else [])
            cells = [[esc(r["qid"]), esc(r["text"]) if r["text"] is not None else '<span class="muted">–</span>',
                      esc(fmt_value(r["baseline"], 4)), esc(fmt_value(r["run"], 4)), esc(f"{r['delta']:+.4f}")]
                     + ([_hits_html(r["run_hits"]), _hits_html(r["baseline_hits"])] if data["settings"]["hits"] else [])
                     for r in rows]
            values = [[None, None, r["baseline"], r["run"], r["delta"]] + [None] * (len(head) - 5) for r in rows]
            parts.append(_table(head, cells, values, f"extremes {kind}",
                                caption=f"{esc(n)}: largest {kind} against {esc(base)}"))
    parts.append("</section>")
    return "\n".join(parts)


def _judged_section(data: dict) -> str:
    k = data["settings"]["judged_k"]
    head, rows = unjudged_table(data["judged"], k)
    values = [[None, r["queries"], r[f"Judged@{k}"], r[f"unjudged@{k}"], r[f"retrieved@{k}"], r["queries_with_unjudged"]]
              for r in data["judged"].values()]
    return (f'<section id="judged"><h2>Judged@{k}</h2>\n<p class="note">How much of each run\'s top {k} is '
            f"judged, as <code>retr eval unjudged -k {k}</code> prints it; unjudged documents count as non-relevant "
            "in the measures above, so a low rate means the run's scores are lower bounds.</p>\n"
            + _table(head, [[esc(c) for c in r] for r in rows], values, "judged sortable") + "</section>")


def _partial_section(data: dict) -> str:
    if "partial" not in data:
        return ""
    from .plots import partial_svg

    result = data["partial"]
    head, rows, note = partial_table(result)
    return ('<section id="partial"><h2>Partial annotation</h2>\n<p class="note">From <code>retr eval partial</code> '
            f"over {esc(', '.join(map(str, result['systems'])))}: how far the system ranking (Kendall's τ), the "
            "order of system pairs and the significance conclusions move when only part of the relevant documents "
            "is judged, for each measure and its condensed variant (′).</p>\n"
            f'<figure class="wide">{partial_svg(result)}</figure>\n'
            + _table(head, [[esc(c) for c in r] for r in rows], None, "partial")
            + f'\n<p class="note">{esc(note)}</p></section>')


def _settings(data: dict, qrels_name: str | None) -> str:
    s = data["settings"]
    opts = [f"relevant from grade {s['rel_threshold'] if s['rel_threshold'] is not None else 1} (binary measures)"]
    opts += ["condensed lists (-J)"] if s["judged_only"] else []
    opts += ["judged queries with no hits left out (--skip-empty)"] if s["empty"] == "skip" else []
    opts += [f"top {s['max_docs']} documents per query (-M)"] if s["max_docs"] else []
    test = "paired t-test" if s["test"] == "t" else f"randomization test ({s['n_resamples']:,} resamples)"
    items = [("qrels", esc(qrels_name)) if qrels_name else None,
             ("runs", ", ".join(esc(n) for n in data["runs"])), ("baseline", esc(data["baseline"])),
             ("judged queries", f"{data['queries']:,}"), ("measures", esc(", ".join(data["measures"]))),
             ("options", esc("; ".join(opts))),
             ("tests", esc(f"{test}, Holm-corrected, α = {s['alpha']:g}; BCa bootstrap CIs ({s['n_resamples']:,} "
                           f"resamples, seed {s['seed']})"))]
    return "<dl class=\"settings\">" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in filter(None, items)) + "</dl>"


def render_report(data: dict, title: str = "Evaluation report", qrels_name: str | None = None) -> str:
    """The HTML of ``compute_report``'s numbers (text escaped; the same data gives the same bytes)."""
    body = [f"<h1>{esc(title)}</h1>", _settings(data, qrels_name), _means_section(data),
            _per_query_section(data), _extremes_section(data), _significance_section(data), _judged_section(data),
            _partial_section(data), '<p class="foot">Made by <code>retr eval report</code>.</p>']
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(p for p in body if p) + f"\n<script>{_JS}</script>\n</body>\n</html>\n")


# --------------------------------------------------------------------------- plots (hand-written SVG)
def _ticks(low: float, high: float, n: int = 4) -> list[float]:
    span = high - low
    if span <= 0:
        return [low]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw)
    start = math.ceil(low / step - 1e-9) * step
    out, t = [], start
    while t <= high + 1e-9 * span:
        out.append(0.0 if abs(t) < step * 1e-9 else t)
        t += step
    return out


def delta_svg(rows: Sequence[dict], measure: str, width: int = 760, height: int = 230) -> str:
    """Bars of per-query deltas (rows as ``compute_report``'s per_query, already sorted): green above
    zero, red below, a hover title per bar; axes labelled. Plain SVG, no scripts, no fonts embedded."""
    left, right, top_, bottom = 56, 12, 12, 34
    pw, ph = width - left - right, height - top_ - bottom
    deltas = [r["delta"] for r in rows]
    low, high = min(0.0, *deltas) if deltas else 0.0, max(0.0, *deltas) if deltas else 0.0
    if high - low < 1e-12:
        low, high = -0.05, 0.05
    pad = 0.05 * (high - low)
    low, high = low - (pad if low < 0 else 0), high + (pad if high > 0 else 0)

    def y(v: float) -> float:
        return top_ + ph * (high - v) / (high - low)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="delta" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(f"per-query delta of {measure}")}">']
    for t in _ticks(low, high):
        yy = y(t)
        out.append(f'<line x1="{left}" y1="{yy:.2f}" x2="{left + pw}" y2="{yy:.2f}" class="grid"/>'
                   f'<text x="{left - 6}" y="{yy + 4:.2f}" text-anchor="end" class="tick">{t:+.2g}</text>'
                   if t else
                   f'<text x="{left - 6}" y="{yy + 4:.2f}" text-anchor="end" class="tick">0</text>')
    n = max(1, len(rows))
    bw = pw / n
    zero = y(0.0)
    for i, r in enumerate(rows):
        d = r["delta"]
        x = left + i * bw
        cls = "gain" if d > TIE else "loss" if d < -TIE else "tie"
        y0, y1 = sorted((zero, y(d)))
        h = max(y1 - y0, 1.0 if cls == "tie" else 0.5)
        tip = f"{r['qid']}: {d:+.4f} ({r['baseline']:.4f} → {r['run']:.4f})"
        out.append(f'<rect x="{x + 0.1 * bw:.2f}" y="{y0 if cls != "tie" else zero - 0.5:.2f}" '
                   f'width="{max(0.8 * bw, 0.5):.2f}" height="{h:.2f}" class="{cls}"><title>{esc(tip)}</title></rect>')
    out.append(f'<line x1="{left}" y1="{zero:.2f}" x2="{left + pw}" y2="{zero:.2f}" class="axis"/>'
               f'<line x1="{left}" y1="{top_}" x2="{left}" y2="{top_ + ph}" class="axis"/>'
               f'<text x="{left + pw / 2:.1f}" y="{height - 8}" text-anchor="middle" class="label">'
               f'{len(rows)} queries, sorted by delta</text>'
               f'<text x="14" y="{top_ + ph / 2:.1f}" text-anchor="middle" class="label" '
               f'transform="rotate(-90 14 {top_ + ph / 2:.1f})">Δ {esc(measure)}</text></svg>')
    return "".join(out)


_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:#1d2327;
max-width:1100px;margin:2em auto;padding:0 1em}
h1{font-size:1.6em;margin:.2em 0 .6em}h2{font-size:1.25em;border-bottom:1px solid #dde;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;margin:.6em 0 1em;font-variant-numeric:tabular-nums}
caption{text-align:left;font-weight:600;padding:.2em 0}
th,td{padding:.3em .7em;border-bottom:1px solid #e3e6ea;vertical-align:top}
thead th{border-bottom:2px solid #9aa4ad;text-align:right;white-space:nowrap}
thead th:first-child,tbody th{text-align:left}td{text-align:right}tbody th{font-weight:500;overflow-wrap:break-word;
min-width:8em;max-width:20em}.scroll{overflow-x:auto}table.significance td:nth-child(4){white-space:nowrap}
table.extremes td:nth-child(2),table.extremes td:nth-child(6),table.extremes td:nth-child(7){text-align:left}
table.extremes ol{margin:0;padding-left:1.3em;max-width:24em}table.extremes td:nth-child(2){max-width:16em}
.mark{margin-left:.2em;font-size:.85em}.mark.up{color:#1a7f37}.mark.down{color:#c62828}
.ci{display:block;font-size:.78em;color:#5b6670}.nw{white-space:nowrap}.tag{font-size:.72em;background:#eef1f4;border-radius:3px;
padding:0 .35em;color:#4a5560}.note{color:#4a5560;font-size:.9em;max-width:60em}.muted{color:#8a949c}
.grade{font-size:.75em;border-radius:3px;padding:0 .3em;margin-right:.3em;background:#eef1f4}
.grade.gu{background:#fff3cd}.grade.g0{background:#fde2e1}.grade.g1,.grade.g2,.grade.g3{background:#d9f2e0}
.docid{font-size:.78em;color:#6b757d;font-family:ui-monospace,Menlo,Consolas,monospace}
dl.settings{display:grid;grid-template-columns:max-content 1fr;gap:.15em 1em;font-size:.92em}
dl.settings dt{color:#5b6670}dl.settings dd{margin:0}
figure{margin:.8em 0}figcaption{font-weight:600;margin-bottom:.2em}figure.wide svg{max-width:100%;height:auto}
svg.delta .grid{stroke:#e6e9ec}svg.delta .axis{stroke:#6b757d}svg.delta .gain{fill:#2e9d57}
svg.delta .loss{fill:#d0473b}svg.delta .tie{fill:#9aa4ad}svg.delta text{font-size:11px;fill:#4a5560}
svg.delta rect:hover{opacity:.7}th.sorted-asc::after{content:" ▴"}th.sorted-desc::after{content:" ▾"}
table.sortable thead th{cursor:pointer}.foot{margin-top:2em;color:#8a949c;font-size:.85em}
@media print{body{margin:0;max-width:none}h2{break-after:avoid}table,figure{break-inside:avoid}}
"""

_JS = """
/* optional: sort a table by a header click (the tables are complete without this) */
document.querySelectorAll("table.sortable").forEach(function (t) {
  t.querySelectorAll("thead th").forEach(function (th, i) {
    th.addEventListener("click", function () {
      var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var desc = !th.classList.contains("sorted-desc");
      t.querySelectorAll("thead th").forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
      th.classList.add(desc ? "sorted-desc" : "sorted-asc");
      function key(r) { var c = r.cells[i], v = c && c.getAttribute("data-value");
        return v === null || v === undefined ? (c ? c.textContent : "") : parseFloat(v); }
      rows.sort(function (a, b) { var x = key(a), y = key(b);
        var r = (typeof x === "number" && typeof y === "number") ? x - y : String(x).localeCompare(String(y));
        return desc ? -r : r; });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""
