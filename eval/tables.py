"""Aligned plain-text and Markdown tables."""
from __future__ import annotations

from collections.abc import Sequence


def format_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the first column left-aligned, the others right-aligned."""
    cells = [list(map(str, head))] + [list(map(str, r)) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in cells]
    return "\n".join(lines)


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """GitHub Markdown table, numbers right-aligned."""
    out = ["| " + " | ".join(map(str, head)) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    out += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(out)


def means_table(results: dict[str, dict[str, float]], digits: int = 4, markdown: bool = False) -> str:
    """{run: {measure: value}} as one row per run, one column per measure."""
    measures = list(next(iter(results.values()), {}))
    rows = [[name] + [fmt_value(results[name][m], digits) for m in measures] for name in results]
    return (markdown_table if markdown else format_table)(["run"] + measures, rows)


def fmt_value(value: float, digits: int) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) >= 2 else f"{value:.{digits}f}"


def unjudged_table(reports: dict[str, dict], k: int) -> tuple[list[str], list[list]]:
    """Head and cells of `retr eval unjudged`'s table: {run: ``unjudged_report``} at depth k."""
    head = ["run", "queries", f"Judged@{k}", f"unjudged in top {k}", "of", "queries with unjudged"]
    rows = [[n, r["queries"], f"{r[f'Judged@{k}']:.4f}", r[f"unjudged@{k}"], r[f"retrieved@{k}"],
             r["queries_with_unjudged"]] for n, r in reports.items()]
    return head, rows
