"""`retr eval report`: the HTML's tables hold exactly the numbers `retr eval` (and its significance and
unjudged subcommands) print and return, on real TREC DL 2019 runs; text is escaped; bad input is one
error line; the same input gives the same bytes; titles and query texts come from an index."""
from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

import eval as E
from cli.main import main
from eval.report import compute_report, write_report
from eval.significance import compare
from eval.tables import fmt_value
from tests.conftest import DATA, need

RUNS = ("BM25", "BM25_RM3", "SPLADE_P_P_ENSEMBLE_DISTIL")


class Tables(HTMLParser):
    """Every <table>: caption, head, and rows of (text, data-value or None); plus tags seen."""

    def __init__(self, text: str):
        super().__init__()
        self.tables, self.tags, self._cell, self._in_caption, self._in_head = [], [], None, False, False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"class": a.get("class", ""), "caption": "", "head": [], "rows": []})
        elif tag == "caption":
            self._in_caption = True
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = [[], a.get("data-value")]

    def handle_endtag(self, tag):
        if tag == "caption":
            self._in_caption = False
        elif tag == "thead":
            self._in_head = False
        elif tag in ("td", "th") and self._cell is not None:
            self._row.append(("".join(self._cell[0]).strip(), self._cell[1]))
            self._cell = None
        elif tag == "tr":
            if self._in_head:
                self.tables[-1]["head"] = [c for c, _ in self._row]
            else:
                self.tables[-1]["rows"].append(self._row)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[0].append(data)
        elif self._in_caption:
            self.tables[-1]["caption"] += data

    def find(self, cls: str, caption: str | None = None) -> dict:
        return next(t for t in self.tables if cls in t["class"].split() and (caption is None or t["caption"] == caption))


@pytest.fixture(scope="module")
def dl19():
    base = need(DATA / "msmarco-passage-eval")
    return base / "qrels" / "dl19.tsv", [base / "runs" / f"{r}.dl19.top100.trec" for r in RUNS], base / "queries_dl19.jsonl"


def run_cli(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def report(dl19, tmp_path_factory):
    qrels, runs, queries = dl19
    path = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["eval", "report", "--qrels", str(qrels), "-l", "2", *map(str, runs), "--queries", str(queries),
                 "-o", str(path)]) == 0
    return path.read_text(encoding="utf-8")


def test_measures_table_equals_retr_eval(report, dl19, capsys):
    qrels, runs, _ = dl19
    rc, out, _ = run_cli(capsys, "eval", "--qrels", qrels, "-l", "2", *runs, "--json")
    printed = {r["name"]: r["means"] for r in json.loads(out)["runs"]}
    rc, text, _ = run_cli(capsys, "eval", "--qrels", qrels, "-l", "2", *runs)
    lines = [line.split() for line in text.splitlines()]
    t = Tables(report).find("measures")
    assert t["head"] == lines[0]
    q = E.read_qrels(qrels)
    for row, line, path in zip(t["rows"], lines[1:], runs):
        name = path.name
        assert row[0][0].startswith(name) and line[0] == name
        direct = E.evaluate(q, E.read_run(path), E.DEFAULT_MEASURES, rel_threshold=2)
        for (cell, value), m, shown in zip(row[1:], lines[0][1:], line[1:]):
            assert float(value) == printed[name][m] == direct[m]  # the exact float, not a rounding of it
            assert cell.split()[0].rstrip("▲▼") == shown == fmt_value(direct[m], 4)


def test_significance_and_judged_tables_equal_the_subcommands(report, dl19, capsys):
    qrels, runs, _ = dl19
    page = Tables(report)
    rc, out, _ = run_cli(capsys, "eval", "significance", "--qrels", qrels, "-l", "2", "--baseline", runs[0], *runs[1:],
                         "-m", "nDCG@10", "-m", "AP", "--json")
    assert rc == 0
    for m, rows in json.loads(out).items():
        t = page.find("significance", caption=m)
        for r, cells in zip(rows, t["rows"]):
            assert cells[0][0].startswith(r["system"]) and float(cells[1][1]) == r["mean"]
            if not r.get("baseline"):
                assert [float(cells[i][1]) for i in (2, 3, 4, 5)] == [r["delta"], r["ci_low"], r["p"], r["p_holm"]]
                assert cells[3][0] == f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]"
                assert (cells[6][0] == "*") == r["significant"]
        assert len(t["rows"]) == len(rows)
    measures = page.find("measures")  # ▲ exactly where the significance table says so
    for cells in measures["rows"][1:]:
        name = cells[0][0]
        row = next(r for r in json.loads(out)["nDCG@10"] if r["system"] == name)
        assert ("▲" in cells[1][0] or "▼" in cells[1][0]) == row["significant"]
    rc, out, _ = run_cli(capsys, "eval", "unjudged", "--qrels", qrels, *runs, "--json")
    judged = json.loads(out)
    t = page.find("judged")
    assert [c[0][0] for c in t["rows"]] == list(judged)
    for cells in t["rows"]:
        r = judged[cells[0][0]]
        assert [float(v) for _, v in cells[1:]] == [r["queries"], r["Judged@10"], r["unjudged@10"], r["retrieved@10"],
                                                    r["queries_with_unjudged"]]


def test_per_query_deltas_and_wins(dl19):
    qrels, runs, queries = dl19
    q = E.read_qrels(qrels)
    rs = {p.name: E.read_run(p) for p in runs}
    texts = {json.loads(line)["_id"]: json.loads(line)["text"] for line in open(queries)}
    data = compute_report(q, rs, measures=["nDCG@10", "AP"], rel_threshold=2, queries=texts, top=3, hits=2)
    base = runs[0].name
    per_q = {n: E.evaluate(q, r, ["nDCG@10", "AP"], rel_threshold=2, per_query=True) for n, r in rs.items()}
    for n in list(rs)[1:]:
        deltas = [per_q[n][x]["nDCG@10"] - per_q[base][x]["nDCG@10"] for x in per_q[base]]
        assert [r["delta"] for r in data["per_query"][n]] == sorted(deltas, reverse=True)
        w = data["wtl"][n]["AP"]
        d_ap = [per_q[n][x]["AP"] - per_q[base][x]["AP"] for x in per_q[base]]
        assert (w["wins"], w["losses"], w["wins"] + w["ties"] + w["losses"]) == \
               (sum(d > 1e-9 for d in d_ap), sum(d < -1e-9 for d in d_ap), len(d_ap))
        gains = data["extremes"][n]["gains"]
        assert [g["delta"] for g in gains] == sorted(deltas, reverse=True)[:3]
        assert all(g["text"] == texts[g["qid"]] and len(g["run_hits"]) == 2 for g in gains)
        top = E.io.ranked(rs[n][gains[0]["qid"]])[0][0]
        assert gains[0]["run_hits"][0] == {"docid": top, "grade": q[gains[0]["qid"]].get(top), "title": None}
    scores = {n: {x: row["AP"] for x, row in t.items()} for n, t in per_q.items()}
    assert data["comparisons"]["AP"] == compare(scores, base)


def small_files(tmp_path):
    (tmp_path / "qrels.txt").write_text("q1 0 a 2\nq1 0 b 1\nq1 0 c 0\nq2 0 d 1\nq3 0 e 1\n")
    (tmp_path / "one.trec").write_text("q1 Q0 a 1 3 x\nq1 Q0 z 2 2 x\nq1 Q0 b 3 1 x\nq2 Q0 d 1 5 x\nq2 Q0 y 2 4 x\n"
                                       "q3 Q0 y 1 1 x\n")
    (tmp_path / "two.trec").write_text("q1 Q0 c 1 3 x\nq1 Q0 b 2 2 x\nq2 Q0 y 1 5 x\nq2 Q0 d 2 4 x\nq3 Q0 e 1 1 x\n")
    return E.read_qrels(tmp_path / "qrels.txt"), {"one": E.read_run(tmp_path / "one.trec"),
                                                   "two": E.read_run(tmp_path / "two.trec")}


EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def test_text_is_escaped(tmp_path):
    qrels, runs = small_files(tmp_path)
    runs = {EVIL + "run": runs["one"], "two & <b>": runs["two"]}
    path = tmp_path / "r.html"
    write_report(path, qrels, runs, title=EVIL, qrels_name=EVIL, queries={q: EVIL for q in qrels},
                 titles=lambda d: EVIL + d, n_resamples=200)
    text = path.read_text()
    assert EVIL not in text and "<b>" not in text and "onerror=alert" not in text.replace("onerror=alert(1)&gt;", "")
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text and "two &amp; &lt;b&gt;" in text
    page = Tables(text)
    assert page.tags.count("script") == 1 and "img" not in page.tags  # only the report's own sorting script
    assert page.find("measures")["rows"][0][0][0].startswith(EVIL + "run")
    row = page.find("extremes")["rows"][0]  # the query's text, and each top hit's title then its docid
    assert row[1][0] == EVIL and all(EVIL in row[i][0] for i in (5, 6))


def test_same_input_same_bytes(tmp_path):
    base = need(DATA / "msmarco-passage-eval")
    qrels = E.read_qrels(base / "qrels" / "dl19.tsv")
    runs = {r: E.read_run(base / "runs" / f"{r}.dl19.top100.trec") for r in RUNS}
    from eval.partial import Budget, analyse_partial

    partial = analyse_partial(qrels, runs, measures=["nDCG@10"], budgets=[Budget("count", 1), Budget("fraction", 0.5)],
                              seeds=2, rel_threshold=2)
    for name in ("a.html", "b.html"):
        write_report(tmp_path / name, qrels, runs, test="perm", n_resamples=500, partial=partial, rel_threshold=2)
    a, b = (tmp_path / "a.html").read_bytes(), (tmp_path / "b.html").read_bytes()
    assert a == b and b"<svg" in a and b"Partial annotation" in a
    import re
    assert len(re.findall(rb"https?://", a)) == len(re.findall(rb'xmlns(?::\w+)?="http://www\.w3\.org/', a))  # namespaces


def test_bad_input_is_one_error_line(tmp_path, capsys):
    qrels, _ = small_files(tmp_path)
    q, one, two = tmp_path / "qrels.txt", tmp_path / "one.trec", tmp_path / "two.trec"
    (tmp_path / "other.trec").write_text("q9 Q0 a 1 3 x\n")
    (tmp_path / "bad.json").write_text('{"systems": []}')
    (tmp_path / "notjson.json").write_text("budget,tau\n")
    out = tmp_path / "r.html"
    cases = [
        (["--qrels", q, tmp_path / "missing.trec", "-o", out], "missing.trec' does not exist"),
        (["--qrels", q, one, "-m", "nDCG@ten", "-o", out], "unknown measure 'nDCG@ten'"),
        (["--qrels", q, one, tmp_path / "other.trec", "-o", out], "other.trec: no query of the run is judged"),
        (["--qrels", q, one, "-o", tmp_path / "nowhere" / "r.html"], "no such folder"),
        (["--qrels", q, one, "-o", tmp_path], "is a directory"),
        (["--qrels", q, one, two, "--partial", tmp_path / "bad.json", "-o", out], "bad.json: the partial-annotation"),
        (["--qrels", q, one, two, "--partial", tmp_path / "notjson.json", "-o", out], "notjson.json: not JSON"),
        (["--qrels", q, one, "--index", tmp_path, "-o", out], ""),
    ]
    for args, expected in cases:
        rc, stdout, err = run_cli(capsys, "eval", "report", *args)
        assert rc == 2 and stdout == "" and len(err.splitlines()) == 1, (args, err)
        assert err.startswith("retr: error: ") and expected in err, (args, err)
        assert not out.exists()


def test_titles_and_query_texts_from_an_index(small_index, small_corpus, tmp_path, capsys):
    """With --index, the top hits carry their titles from the index's document store, and the query texts
    come from the collection the index was built from (its queries.jsonl)."""
    import retrieval

    qrels_path = small_corpus / "qrels" / "test.tsv"
    qrels = E.read_qrels(qrels_path)
    idx = retrieval.open_index(small_index.path) if hasattr(small_index, "path") else small_index
    texts = {q.qid: q.text for q in retrieval.collections.read_queries(small_corpus / "queries.jsonl")}
    bm25 = {q: {h.docid: h.score for h in hits} for q, hits in
            idx.batch_search([retrieval.Query(q, texts[q]) for q in sorted(qrels)], k=20, quiet=True).items()}
    # a second "system": BM25's list with the judged documents moved to the bottom on half the queries
    worse = {q: {d: (s - 100 if d in qrels[q] and i % 2 else s) for d, s in docs.items()}
             for i, (q, docs) in enumerate(sorted(bm25.items()))}
    E.write_run(bm25, tmp_path / "bm25.trec")
    E.write_run(worse, tmp_path / "worse.trec")
    folder = idx.path if hasattr(idx, "path") else small_index
    rc, _, err = run_cli(capsys, "eval", "report", "--qrels", qrels_path, tmp_path / "bm25.trec", tmp_path / "worse.trec",
                         "--index", folder, "-o", tmp_path / "r.html", "--hits", "2")
    assert rc == 0, err
    page = Tables((tmp_path / "r.html").read_text())
    losses = page.find("extremes", caption="worse.trec: largest losses against bm25.trec")
    assert losses["rows"]
    for cells in losses["rows"]:
        qid = cells[0][0]
        assert cells[1][0] == texts[qid]
        first = E.io.ranked(bm25[qid])[0][0]
        doc = idx.get(first)
        assert (doc.title or " ".join(doc.text.split()[:16])) in cells[6][0] and first in cells[6][0]
