"""`retr eval report` in a real Chromium: the report of three real TREC DL 2019 runs (with a partial-annotation
study) opened from a file:// URL shows `retr eval`'s numbers in its tables (read through the DOM), renders
every plot, fetches nothing, and keeps its tables with JavaScript disabled."""
from __future__ import annotations

import json

import pytest

from cli.main import main
from eval.tables import fmt_value
from tests.browser.conftest import Requests
from tests.conftest import DATA, need

RUNS = ("BM25", "BM25_RM3", "SPLADE_P_P_ENSEMBLE_DISTIL")
READ = """() => Array.from(document.querySelectorAll("table")).map(t => ({
    cls: t.className, caption: t.caption ? t.caption.textContent : "",
    head: Array.from(t.tHead.rows[0].cells).map(c => c.textContent.trim()),
    rows: Array.from(t.tBodies[0].rows).map(r => Array.from(r.cells).map(
        c => [c.textContent.trim(), c.getAttribute("data-value")]))}))"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    base = need(DATA / "msmarco-passage-eval")
    qrels, runs = base / "qrels" / "dl19.tsv", [base / "runs" / f"{r}.dl19.top100.trec" for r in RUNS]
    out = tmp_path_factory.mktemp("report")
    import eval as E
    from eval.partial import Budget, analyse_partial

    study = analyse_partial(E.read_qrels(qrels), {p.name: E.read_run(p) for p in runs}, measures=["nDCG@10"],
                            budgets=[Budget("count", 1), Budget("count", 5), Budget("fraction", 0.5)], seeds=2,
                            rel_threshold=2)
    (out / "partial.json").write_text(json.dumps(study))
    assert main(["eval", "report", "--qrels", str(qrels), "-l", "2", *map(str, runs), "--queries",
                 str(base / "queries_dl19.jsonl"), "--partial", str(out / "partial.json"), "-o",
                 str(out / "report.html")]) == 0
    return qrels, runs, out / "report.html"


def printed(capsys, qrels, runs) -> dict:
    capsys.readouterr()
    assert main(["eval", "--qrels", str(qrels), "-l", "2", *map(str, runs), "--json"]) == 0
    return {r["name"]: r["means"] for r in json.loads(capsys.readouterr().out)["runs"]}


def test_report_in_chromium(page, made, capsys):
    qrels, runs, path = made
    seen = Requests(page)
    page.goto(path.as_uri())
    tables = page.evaluate(READ)
    expected = printed(capsys, qrels, runs)
    measures = next(t for t in tables if "measures" in t["cls"].split())
    assert measures["head"][1:] == list(next(iter(expected.values())))
    assert len(measures["rows"]) == len(runs)
    for row in measures["rows"]:
        name = row[0][0].split()[0]
        for (text, value), m in zip(row[1:], measures["head"][1:]):
            assert float(value) == expected[name][m]
            assert text.split()[0].rstrip("▲▼") == fmt_value(expected[name][m], 4)  # as `retr eval` prints it
    kinds = {c for t in tables for c in t["cls"].split()}
    assert {"measures", "significance", "extremes", "judged", "partial"} <= kinds
    # every plot drawn with a size: the delta bars (one per compared run) and the partial curves
    boxes = page.eval_on_selector_all("svg", "s => s.map(e => { const r = e.getBoundingClientRect(); "
                                             "return [r.width, r.height, e.querySelectorAll('rect,path').length]; })")
    assert len(boxes) == len(runs) - 1 + 1 and all(w > 0 and h > 0 and n > 0 for w, h, n in boxes)
    images = page.eval_on_selector_all("img", "i => i.map(e => [e.complete, e.naturalWidth])")
    assert all(ok and w > 0 for ok, w in images)
    assert seen.outside() == []
    # the optional sorting: a click on the nDCG@10 header orders the rows by it, highest first
    page.click("table.measures thead th:nth-child(2)")
    order = page.eval_on_selector_all("table.measures tbody tr td:nth-child(2)", "c => c.map(e => +e.dataset.value)")
    assert order == sorted(order, reverse=True)


def test_tables_without_javascript(browser, made, capsys):
    qrels, runs, path = made
    ctx = browser.new_context(java_script_enabled=False)
    try:
        page = ctx.new_page()
        seen = Requests(page)
        page.goto(path.as_uri())
        assert page.evaluate("1 + 1") == 2  # evaluate still runs (Playwright's own), the page's scripts do not
        assert page.eval_on_selector_all("th.sorted-desc, th.sorted-asc", "x => x.length") == 0
        page.click("table.measures thead th:nth-child(2)")  # no script: the order stays as written
        tables = page.evaluate(READ)
        expected = printed(capsys, qrels, runs)
        measures = next(t for t in tables if "measures" in t["cls"].split())
        assert [r[0][0].split()[0] for r in measures["rows"]] == [p.name for p in runs]
        for row in measures["rows"]:
            assert [float(v) for _, v in row[1:]] == list(expected[row[0][0].split()[0]].values())
        assert len(tables) >= 1 + 6 + 1 + 1 and seen.outside() == []
        boxes = page.eval_on_selector_all("svg", "s => s.map(e => e.getBoundingClientRect().width)")
        assert boxes and all(w > 0 for w in boxes)
    finally:
        ctx.close()


def test_long_run_names_wrap_inside_the_page(page, tmp_path):
    """Run names are often paths with no spaces; the measures table must wrap them, not push the page wide."""
    base = need(DATA / "msmarco-passage-eval")
    qrels = base / "qrels" / "dl19.tsv"
    runs = []
    for r in RUNS[:2]:
        p = tmp_path / ("experiments_" + "-".join([r.lower()] * 12) + "_k1000_depth1000_final.trec")
        p.write_bytes((base / "runs" / f"{r}.dl19.top100.trec").read_bytes())
        runs.append(p)
    assert len(runs[0].name) > 80
    out = tmp_path / "report.html"
    assert main(["eval", "report", "--qrels", str(qrels), "-l", "2", *map(str, runs), "-o", str(out)]) == 0
    page.set_viewport_size({"width": 1000, "height": 800})
    page.goto(out.as_uri())
    widths = page.evaluate("""() => { const t = document.querySelector("table.measures");
        return [t.getBoundingClientRect().width, t.parentElement.clientWidth,
                document.documentElement.scrollWidth, window.innerWidth]; }""")
    table, box, doc, view = widths
    assert table <= box + 1 and doc <= view, widths
