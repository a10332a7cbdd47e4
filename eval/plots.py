"""Curves of the partial-annotation study over the annotation budget (matplotlib, written as PNG)."""
from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

_PANELS = (("tau_mean", "tau_std", "Kendall's tau vs full"), ("swapped_mean", None, "swapped system pairs"),
           ("flipped_mean", None, "flipped significance\nconclusions (share)"))


def plot_partial(result: dict, path: str | os.PathLike, title: str = "") -> None:
    """The curves of ``partial_figure`` written to ``path`` (PNG, or the format its suffix names)."""
    fig = partial_figure(result, title)
    try:
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def partial_svg(result: dict, title: str = "") -> str:
    """The curves of ``partial_figure`` as one ``<svg>`` element (no XML prolog), the same bytes for the
    same result: fixed ids (svg.hashsalt), no date, text drawn as paths (no font needed to view it)."""
    import io

    with matplotlib.rc_context({"svg.hashsalt": "retr", "svg.fonttype": "path"}):
        fig = partial_figure(result, title)
        try:
            buf = io.StringIO()
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
        finally:
            plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def partial_figure(result: dict, title: str = ""):
    """One row per budget kind (count, fraction), one column per statistic; solid lines for standard
    measures, dashed for their condensed variants. The caller closes the figure."""
    modes = [m for m in ("count", "fraction") if any(b["mode"] == m for b in result["budgets"])]
    fig, axes = plt.subplots(len(modes), 3, figsize=(13, 3.6 * len(modes)), squeeze=False)
    variants = list(result["budgets"][0]["results"])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, mode in enumerate(modes):
        budgets = [b for b in result["budgets"] if b["mode"] == mode]
        x = [b["value"] if mode == "count" else 100 * b["value"] for b in budgets]
        for col, (key, err, label) in enumerate(_PANELS):
            ax = axes[row][col]
            for i, v in enumerate(variants):
                base = i // 2 if len(variants) % 2 == 0 else i
                style = "--" if "'" in v else "-"
                y = [b["results"][v][key] for b in budgets]
                ax.plot(x, y, style, marker="o", ms=3, color=colors[base % len(colors)], label=v)
                if err:
                    e = [b["results"][v][err] for b in budgets]
                    ax.fill_between(x, [max(-1.0, a - s) for a, s in zip(y, e)], [min(1.0, a + s) for a, s in zip(y, e)],
                                    color=colors[base % len(colors)], alpha=0.12)
            if mode == "count":
                ax.set_xscale("log")
                ax.set_xticks(x, [f"{v:g}" for v in x])
                ax.set_xlabel("relevant documents kept per query")
            else:
                ax.set_xlabel("% of relevant documents kept")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            if key == "tau_mean":
                ax.set_ylim(min(-0.05, ax.get_ylim()[0]), 1.05)
    axes[0][0].legend(fontsize=8, loc="lower right")
    sub = f"{len(result['systems'])} systems, {result['queries']} queries, " \
          f"{result['relevant_per_query']:.1f} relevant/query, {result['seeds']} seeds"
    fig.suptitle(f"{title}  ({sub})" if title else sub)
    fig.tight_layout()
    return fig
