"""`--format table|csv|tsv|json` on the eval subcommands that print measure tables (#29): partial,
significance, unjudged, as plain `retr eval` has it. csv/tsv hold the JSON's numbers at full precision;
table stays the default; --json is --format json and cannot go with another format."""
import csv
import io
import json

import pytest

from tests.eval.test_cli import files, invoke  # noqa: F401  (the fixture and the click runner)


def rows(text: str, fmt: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text), delimiter="," if fmt == "csv" else "\t"))


def both(args: list) -> tuple[dict, dict]:
    """The JSON of ``args`` and its csv and tsv, checked to be one table."""
    out = json.loads(run_ok(args + ["--format", "json"]))
    assert run_ok(args + ["--json"]) == run_ok(args + ["--format", "json"])
    assert run_ok(args + ["--format", "table"]) == run_ok(args)
    tables = {fmt: rows(run_ok(args + ["--format", fmt]), fmt) for fmt in ("csv", "tsv")}
    assert tables["csv"] == tables["tsv"] and tables["csv"]
    return out, tables["csv"]


def run_ok(args: list) -> str:
    res = invoke(args)
    assert res.exit_code == 0, res.output
    return res.stdout


def test_unjudged(files):  # noqa: F811
    out, table = both(["unjudged", "--qrels", files / "qrels.txt", files / "one.trec", files / "two.trec", "-k", "2"])
    assert [r["run"] for r in table] == ["one.trec", "two.trec"]
    for r in table:
        want = out[r["run"]]
        assert list(r)[1:] == list(want) == ["queries", "Judged@2", "unjudged@2", "retrieved@2", "queries_with_unjudged"]
        assert float(r["Judged@2"]) == want["Judged@2"] and int(r["unjudged@2"]) == want["unjudged@2"]


def test_significance(files):  # noqa: F811
    args = ["significance", "--qrels", files / "qrels.txt", "--baseline", files / "one.trec", files / "two.trec",
            "-m", "AP", "-m", "nDCG@10", "--resamples", "200"]
    out, table = both(args)
    assert [(r["measure"], r["system"], r["baseline"]) for r in table] == [
        ("AP", "one.trec", "true"), ("AP", "two.trec", "false"),
        ("nDCG@10", "one.trec", "true"), ("nDCG@10", "two.trec", "false")]
    for r in table:
        want = next(w for w in out[r["measure"]] if w["system"] == r["system"])
        assert float(r["mean"]) == want["mean"]
        if r["baseline"] == "false":
            assert (float(r["delta"]), float(r["p"]), float(r["p_holm"]), float(r["ci_low"])) == \
                (want["delta"], want["p"], want["p_holm"], want["ci_low"])
            assert r["significant"] == str(want["significant"]).lower()
        else:
            assert r["delta"] == r["p"] == ""
    assert "tost_p" not in table[0]
    _, with_margin = both(args + ["--margin", "0.1"])
    assert with_margin[1]["tost_p"] and with_margin[1]["equivalent"] in ("true", "false")


def test_partial(files):  # noqa: F811
    out, table = both(["partial", "--qrels", files / "qrels.txt", "--run", files / "one.trec", "--run",
                       files / "two.trec", "--budget", "1", "--budget", "50%", "--seeds", "2", "-q", "-m", "AP"])
    assert [r["budget"] for r in table] == ["full"] + [b["label"] for b in out["budgets"]]
    assert list(table[0])[:5] == ["budget", "kept_per_query", "AP tau", "AP swapped", "AP flipped"]
    assert float(table[0]["kept_per_query"]) == out["relevant_per_query"]
    assert float(table[0]["AP tau"]) == out["reference"]["AP"]["tau"]
    for r, b in zip(table[1:], out["budgets"]):
        assert float(r["kept_per_query"]) == b["kept_per_query"]
        assert float(r["AP' flipped"]) == b["results"]["AP'"]["flipped_mean"]


@pytest.mark.parametrize("sub", [["unjudged"], ["significance", "--baseline", "B"], ["partial", "--run", "B"]])
def test_json_with_another_format_is_one_usage_line(files, sub):  # noqa: F811
    args = [a if a != "B" else files / "one.trec" for a in sub] + ["--qrels", files / "qrels.txt"]
    args += [files / "two.trec"] if sub[0] != "partial" else ["--run", files / "two.trec"]
    res = invoke(args + ["--json", "--format", "csv"])
    assert res.exit_code == 2 and "--json is --format json; it cannot go with --format csv" in res.output
    res = invoke(args + ["--format", "xml"])
    assert res.exit_code == 2 and "'xml' is not one of 'table', 'csv', 'tsv', 'json'" in res.output
