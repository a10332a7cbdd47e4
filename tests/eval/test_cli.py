"""`retr eval` through click's test runner (no dependence on the lead's cli/main.py)."""
import json

import click
import pytest
from click.testing import CliRunner

import eval as E
from cli.eval_cmd import eval_cmd
from eval.errors import EvalError


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "qrels.txt").write_text("q1 0 a 2\nq1 0 b 1\nq1 0 c 0\nq2 0 d 1\nq3 0 e 1\n")
    (tmp_path / "one.trec").write_text("q1 Q0 a 1 3 x\nq1 Q0 z 2 2 x\nq1 Q0 b 3 1 x\nq2 Q0 d 1 5 x\nq2 Q0 y 2 4 x\n")
    (tmp_path / "two.trec").write_text("q1 Q0 c 1 3 x\nq1 Q0 b 2 2 x\nq2 Q0 y 1 5 x\nq2 Q0 d 2 4 x\nq3 Q0 e 1 1 x\n")
    return tmp_path


def invoke(args):
    return CliRunner().invoke(eval_cmd, [str(a) for a in args], prog_name="retr eval")


MEASURES = ["nDCG@10", "AP", "RR", "R@100", "P@10", "Bpref", "Judged@10"]


def test_json_one_and_several_runs(files):
    args = ["--qrels", files / "qrels.txt"]
    for m in MEASURES:
        args += ["-m", m]
    res = invoke(args + [files / "one.trec", "--json"])
    assert res.exit_code == 0, res.output
    # one.trec lacks q3: stdout stays JSON, the counts go to stderr
    assert res.stderr.strip() == ("retr: warning: one.trec: 2 queries in the run, 3 in the qrels, 2 in both; 1 judged "
                                  "queries missing from the run score 0 (--skip-empty leaves them out)")
    qrels, run = E.read_qrels(files / "qrels.txt"), E.read_run(files / "one.trec")
    one = json.loads(res.stdout)
    assert one["measures"] == MEASURES and [r["name"] for r in one["runs"]] == ["one.trec"]
    assert one["runs"][0]["means"] == pytest.approx(E.evaluate(qrels, run, MEASURES))
    assert one["runs"][0]["queries"] == 3 and one["runs"][0]["path"] == str(files / "one.trec")
    res = invoke(args + [files / "one.trec", files / "two.trec", "--json", "-l", "2"])
    out = json.loads(res.stdout)
    assert set(out) == set(one) == {"measures", "runs"}               # the same shape for one run and for two
    assert [r["name"] for r in out["runs"]] == ["one.trec", "two.trec"]
    assert out["runs"][1]["means"] == pytest.approx(
        E.evaluate(qrels, E.read_run(files / "two.trec"), MEASURES, rel_threshold=2))


def test_same_run_twice_is_shown_twice(files):
    res = invoke(["--qrels", files / "qrels.txt", files / "one.trec", files / "one.trec", "-m", "AP", "--json"])
    runs = json.loads(res.stdout)["runs"]
    assert [r["name"] for r in runs] == ["one.trec", "one.trec#2"] and runs[0]["means"] == runs[1]["means"]
    res = invoke(["--qrels", files / "qrels.txt", files / "one.trec", files / "one.trec", "-m", "AP"])
    assert [line.split()[0] for line in res.stdout.splitlines()[1:]] == ["one.trec", "one.trec#2"]


def test_measures_comma_separated_and_ir_measures_names(files):
    import ir_measures

    res = invoke(["--qrels", files / "qrels.txt", files / "one.trec", "-m", "nDCG@10,P@2", "-m", "AP(rel=2),RR",
                  "--json"])
    out = json.loads(res.stdout)
    assert out["measures"] == ["nDCG@10", "P@2", "AP(rel=2)", "RR"]
    qrels, run = E.read_qrels(files / "qrels.txt"), E.read_run(files / "one.trec")
    irm = E.evaluate(qrels, run, [ir_measures.nDCG@10, ir_measures.parse_measure("P@2"), ir_measures.AP(rel=2),
                                  ir_measures.RR])
    assert irm == pytest.approx(out["runs"][0]["means"])
    # and the values are ir_measures' own (which scores a judged query missing from the run 0, as retr does)
    theirs = ir_measures.calc_aggregate([ir_measures.nDCG@10, ir_measures.parse_measure("P@2")], qrels, run)
    assert irm["nDCG@10"] == pytest.approx(theirs[ir_measures.nDCG@10])
    assert irm["P@2"] == pytest.approx(theirs[ir_measures.parse_measure("P@2")])


def test_table_and_per_query(files):
    res = invoke(["--qrels", files / "qrels.txt", files / "one.trec", files / "two.trec", "-m", "AP", "-m", "P@2"])
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["run", "AP", "P@2"]
    assert lines[1].split()[0] == "one.trec" and len({len(line) for line in lines}) == 1  # aligned
    res = invoke(["--qrels", files / "qrels.txt", files / "one.trec", "-m", "AP", "--per-query", "--json", "--skip-empty"])
    rec = json.loads(res.stdout)["runs"][0]
    out = rec["per_query"]
    assert set(out) == {"q1", "q2"} and rec["means"]["AP"] == pytest.approx((out["q1"]["AP"] + out["q2"]["AP"]) / 2)
    assert rec["skipped"] == 1 and "1 judged queries missing from the run are left out (--skip-empty)" in res.stderr
    for flags in ([], ["-c"]):  # -c, trec_eval's flag, is the default
        res = invoke(["--qrels", files / "qrels.txt", files / "one.trec", "-m", "AP", "--json", *flags])
        rec = json.loads(res.stdout)["runs"][0]
        assert rec["means"]["AP"] == pytest.approx((out["q1"]["AP"] + out["q2"]["AP"]) / 3) and rec["queries"] == 3
        assert rec["skipped"] == 0
    res = invoke(["--qrels", files / "qrels.txt", files / "one.trec", "-c", "--skip-empty"])
    assert res.exit_code == 2 and "give one" in res.output


def test_bad_input_raises_eval_error_with_location(files):
    (files / "bad.trec").write_text("q1 Q0 a 1 3 x\nq1 Q0 b 2 two x\n")
    res = invoke(["--qrels", files / "qrels.txt", files / "bad.trec"])
    assert isinstance(res.exception, EvalError) and str(res.exception).endswith("bad.trec:2: score 'two' is not a number")
    res = invoke(["--qrels", files / "qrels.txt", files / "one.trec", "-m", "nDCG@ten"])
    assert isinstance(res.exception, EvalError) and "unknown measure 'nDCG@ten'" in str(res.exception)
    res = invoke([files / "one.trec"])
    assert res.exit_code == 2 and "Missing option '--qrels'" in res.output and "evaluate" not in res.output


def test_help_and_added_subcommands(files):
    res = invoke(["--help"])
    assert res.exit_code == 0 and "--qrels" in res.output and "partial" in res.output and "evaluate" not in res.output

    @click.command("hello")
    def hello():
        click.echo("hello from a subcommand")

    eval_cmd.add_command(hello)
    try:
        assert invoke(["hello"]).output == "hello from a subcommand\n"
        assert invoke(["--qrels", files / "qrels.txt", files / "one.trec", "-m", "AP"]).exit_code == 0
    finally:
        eval_cmd.commands.pop("hello")


def test_subcommands(files, tmp_path):
    res = invoke(["significance", "--qrels", files / "qrels.txt", "--baseline", files / "one.trec", files / "two.trec",
                  "-m", "AP", "--margin", "0.1", "--json"])
    rows = json.loads(res.stdout)["AP"]
    assert rows[0]["system"] == "one.trec" and rows[1]["system"] == "two.trec" and "tost_p" in rows[1]
    res = invoke(["unjudged", "--qrels", files / "qrels.txt", files / "one.trec", "-k", "2", "--json"])
    assert json.loads(res.stdout)["one.trec"]["unjudged@2"] == 2
    res = invoke(["partial", "--qrels", files / "qrels.txt", "--run", files / "one.trec", "--run", files / "two.trec",
                  "--budget", "1", "--seeds", "2", "-q", "--plot", tmp_path / "p.png"])
    assert res.exit_code == 0, res.output
    assert "keep 1" in res.output and (tmp_path / "p.png").exists()


# --- issue #29: --format, and partial's reference row

def test_format_csv_tsv_json_table(files):
    import csv
    import io

    args = ["--qrels", files / "qrels.txt", files / "one.trec", files / "two.trec", "-m", "nDCG@10,ERR@2", "-m", "SetP"]
    qrels = E.read_qrels(files / "qrels.txt")
    for fmt, delimiter in (("csv", ","), ("tsv", "\t")):
        res = invoke(args + ["--format", fmt])
        assert res.exit_code == 0, res.output
        rows = list(csv.reader(io.StringIO(res.stdout), delimiter=delimiter))
        assert rows[0] == ["run", "query", "nDCG@10", "ERR@2", "SetP"]
        assert [r[:2] for r in rows[1:]] == [["one.trec", "all"], ["two.trec", "all"]]
        want = E.evaluate(qrels, E.read_run(files / "two.trec"), ["nDCG@10", "ERR@2", "SetP"])
        assert [float(x) for x in rows[2][2:]] == list(want.values())  # full precision
        res = invoke(args + ["--format", fmt, "--per-query"])
        rows = list(csv.reader(io.StringIO(res.stdout), delimiter=delimiter))
        assert [r[:2] for r in rows[1:]] == [["one.trec", "q1"], ["one.trec", "q2"], ["one.trec", "q3"], ["one.trec", "all"],
                                             ["two.trec", "q1"], ["two.trec", "q2"], ["two.trec", "q3"],
                                             ["two.trec", "all"]]
    as_json = invoke(args + ["--format", "json"])
    assert as_json.stdout == invoke(args + ["--json"]).stdout == invoke(args + ["--json", "--format", "json"]).stdout
    assert set(json.loads(as_json.stdout)) == {"measures", "runs"}
    assert invoke(args + ["--format", "table"]).stdout == invoke(args).stdout


def test_bad_format_and_measures_are_one_line(files, capsys):
    from cli.main import main

    base = ["eval", "--qrels", str(files / "qrels.txt"), str(files / "one.trec")]
    for extra, message in ((["--format", "xml"], "Invalid value for '--format': 'xml' is not one of 'table', 'csv', "
                                                "'tsv', 'json'"),
                           (["--format", "csv", "--json"], "--json is --format json; it cannot go with --format csv"),
                           (["-m", "alpha_nDCG@10"], "'alpha_nDCG@10' is a diversity measure: it needs subtopic qrels"),
                           (["-m", "nDCG@10,Nope@3"], "unknown measure 'Nope@3'")):
        assert main(base + extra) == 2
        out = capsys.readouterr()
        assert out.out == "" and out.err.startswith("retr: error: ") and message in out.err, out.err
        assert out.err.count("\n") == 1


def test_partial_shows_the_full_judgments(files):
    res = invoke(["partial", "--qrels", files / "qrels.txt", "--run", files / "one.trec", "--run", files / "two.trec",
                  "--budget", "1", "--seeds", "2", "-q", "-m", "AP"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "Under the full judgments (the reference):"
    assert lines[1].split() == ["system", "rank", "AP", "AP'"]
    qrels = E.read_qrels(files / "qrels.txt")
    full = {n: E.evaluate(qrels, E.read_run(files / n), ["AP"])["AP"] for n in ("one.trec", "two.trec")}
    ranked_names = sorted(full, key=lambda n: -full[n])
    assert [line.split()[:3] for line in lines[2:4]] == [[n, str(i), f"{full[n]:.4f}"]
                                                        for i, n in enumerate(ranked_names, 1)]
    table = lines[lines.index("") + 1:]
    assert table[0].split()[:2] == ["budget", "kept/q"]
    assert table[1].split()[:5] == ["full", "1.3", "1.000", "0.0", "0.00"]  # 4 relevant documents, 3 queries
    assert table[2].split()[:2] == ["keep", "1"] and table[-1].endswith("the first row is the full qrels themselves")
