"""A kind's options and commands are data (retrieval.options); cli.params renders them with click. These
tests render declared options and parse real command lines through them, and check that a kind's usage
errors stay usage errors of the command that shows them."""
from __future__ import annotations

import importlib
import math
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cli import params
from cli.main import main
from retrieval.options import Command, Option, Range, UsageError, Values


def _parse(options, *argv):
    """Run a command declared as data on ``argv``: what its function received, or the CliRunner result."""
    got = {}

    def run(v):  # one value (retrieval.options.Values), each option's value an attribute of it
        values = vars(v)
        if values.get("refuse"):
            raise UsageError("--refuse says no")
        got.update(values)

    r = CliRunner().invoke(params.click_command(Command("probe", run, options=options)), list(argv))
    return got, r


PROBE = (
    Option("--count", type="int", range=Range(1, 5), default=2),
    Option("--share", type="float", range=Range(0, 1, max_open=True)),
    Option("--mode", type="choice", choices=("a", "b"), default="a"),
    Option(("--out", "-o"), type="path", path_kind="dir"),
    Option("--model", name="model_name", bare_value="tiny", metavar="[MODEL]"),
    Option("--refuse", type="bool"),
    Option("--seed", type="int", default=0),
)


def test_declared_options_parse_as_their_types_with_their_defaults(tmp_path):
    got, r = _parse(PROBE)
    assert r.exit_code == 0, r.output
    assert got == {"count": 2, "share": None, "mode": "a", "out": None, "model_name": None, "refuse": False,
                   "seed": 0}
    got, r = _parse(PROBE, "--count", "5", "--share", "0.25", "--mode", "b", "-o", str(tmp_path), "--model",
                    "--seed", "-3")
    assert r.exit_code == 0, r.output
    assert got == {"count": 5, "share": 0.25, "mode": "b", "out": tmp_path, "model_name": "tiny", "refuse": False,
                   "seed": -3}
    assert isinstance(got["out"], Path)
    got, r = _parse(PROBE, "--model", "mine")
    assert got["model_name"] == "mine"


@pytest.mark.parametrize("argv,needle", [
    (["--count", "6"], "6 is not in the range 1<=x<=5"),
    (["--share", "1"], "0<=x<1"),
    (["--share", "nan"], "is not a finite number"),
    (["--mode", "c"], "'c' is not one of 'a', 'b'"),
    (["--out", __file__], "is a file"),
    (["--refuse"], "--refuse says no"),
])
def test_declared_bounds_and_a_usage_error_are_refused_by_the_command_line(argv, needle):
    got, r = _parse(PROBE, *argv)
    assert r.exit_code == 2 and not got and needle in r.output, r.output


def test_help_shows_the_declared_defaults_ranges_and_metavars():
    _, r = _parse(PROBE, "--help")
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    for needle in ("--count INTEGER RANGE [default: 2; 1<=x<=5]", "--share FLOAT RANGE [0<=x<1]", "--mode [a|b] "
                   "[default: a]", "-o, --out DIRECTORY", "--model [MODEL]", "--seed INTEGER [default: 0]"):
        assert needle in text, (needle, text)
    assert "--refuse [default" not in text  # a flag shows no default


def test_a_declaration_s_mistakes_are_refused_when_it_is_made():
    for bad in (dict(flags="-x"), dict(flags="--x", type="decimal"), dict(flags="--x", choices=("a",)),
                dict(flags="--x", type="choice"), dict(flags="--x", range=Range(0, 1)),
                dict(flags="--x", path_kind="dir"), dict(flags="--x", required=True, default="a")):
        with pytest.raises(ValueError):
            Option(**bad)
    with pytest.raises(ValueError, match="twice"):
        Command("c", lambda v: None, options=(Option("--a"), Option("--b", name="a")))
    assert Option("--dev-share").name == "dev_share" and Option(("-o", "--output")).flag == "--output"


@pytest.mark.parametrize("command", ["index", "search", "explain"])
def test_each_kind_s_options_sit_under_its_heading(command):
    from cli.main import retr
    from retrieval.kinds import known, options_of

    r = CliRunner().invoke(retr, [command, "--help"])
    assert r.exit_code == 0, r.output
    sections, heading = {}, None
    for line in r.output.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            heading = line[:-1]
            sections[heading] = ""
        elif heading:
            sections[heading] += line + "\n"
    where = "index" if command == "index" else "search"
    kinds = [options_of(k) for k in known() if options_of(k).options_for(where)]
    assert list(sections) == ["Options"] + [f"{o.title} options" for o in kinds]
    for o in kinds:
        for opt in o.options_for(where):
            assert opt.section == o.title and f" {opt.flag} " in sections[f"{o.title} options"], opt.flag
            assert f" {opt.flag} " not in sections["Options"], opt.flag


def test_a_kind_s_usage_errors_point_at_the_command_s_help(small_index, capsys, tmp_path):
    """A kind's options module raises retrieval.options.UsageError; cli shows it as the command's
    usage error, the same as click's own."""
    capsys.readouterr()
    assert main(["search", "--index", str(small_index.path), "aspirin", "--fb-terms", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["retr: error: --fb-terms needs --rm3 or --rocchio (see 'retr search --help')"], err
    out = tmp_path / "model"
    assert main(["train", "deepct", "--corpus", "x", "--output", str(out), "--queries", "q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["retr: error: give both --queries and --qrels, or neither (then titles supervise, HDCT-style) "
                   "(see 'retr train deepct --help')"], err
    assert not out.exists()


def test_ranges_are_finite_where_the_old_click_types_were():
    # cli.params' named types are rendered from retrieval.options' ranges
    assert params.K1.min == 0 and params.B.max == 1 and params.LEVEL.min_open and params.LEVEL.max_open
    with pytest.raises(click.BadParameter):
        params.POSITIVE.convert(str(math.inf), None, None)


def _every_option():
    from retrieval.kinds import known, options_of

    for kind in known():
        yield from options_of(kind).options
        for c in options_of(kind).commands:
            yield from c.options


def test_a_repeated_default_is_the_one_of_the_dataclass_it_names():
    """Where a kind's option repeats a default (its dataclass's module is too heavy to import when a
    command starts), ``default_from`` names the field, and the two agree."""
    checked = 0
    for opt in _every_option():
        if opt.default_from:
            module, attr = opt.default_from.split(":")
            cls, name = attr.split(".")
            assert getattr(getattr(importlib.import_module(module), cls), name) == opt.default, opt
            checked += 1
    assert checked >= 10
    from retrieval.deepct import options, weights

    assert (options.MODES, options.SCALES) == (weights.MODES, weights.SCALES)


def test_starting_the_command_line_imports_no_numpy_torch_or_sub_index_code():
    """The kinds' options are read by every command, so reading them stays light."""
    code = ("import sys, cli.main; print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'torch') "
            "or (m.endswith('.subindex') and m != 'retrieval.bm25.subindex')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr)


def test_a_command_gets_one_value_and_makes_its_config_from_it():
    from dataclasses import dataclass

    @dataclass
    class Cfg:
        lr: float = 1.0
        seed: int = 0

    got, r = _parse((Option("--lr", type="float"), Option("--seed", type="int", default=0), Option("--output")),
                    "--lr", "0.5", "--output", "o")
    assert r.exit_code == 0, r.output
    v = Values(got)
    assert v.output == "o" and v.config(Cfg) == Cfg(lr=0.5, seed=0) and v.config(Cfg, seed=4) == Cfg(0.5, 4)
    with pytest.raises(AttributeError):
        v.missing
    with pytest.raises(ValueError, match="config"):  # it would hide Values.config
        Command("c", lambda v: None, options=(Option("--config"),))


def test_an_index_option_hands_over_the_folder_opened(small_index, tmp_path):
    from retrieval.index import Index

    got, r = _parse((Option("--index", type="index", required=True),), "--index", str(small_index.path))
    assert r.exit_code == 0, r.output
    assert isinstance(got["index"], Index) and got["index"].path == small_index.path
    got["index"].close()
    got, r = _parse((Option("--index", type="index", required=True),), "--index", str(tmp_path / "none"))
    assert r.exit_code != 0 and not got  # the library's error (one line at `retr`): no index there
