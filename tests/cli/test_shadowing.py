"""Issue #29: a user's own eval/ (or indexes/) in the working directory does not replace retr's
packages under `retr eval`: not for the console script, not for `python -m cli.main`, not with a
PYTHONPATH that names the working directory. Plain `python -c "import eval"` there does get the
user's folder (Python's own rule, which the README's limits describe)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

BOGUS = 'raise SystemExit("bogus {} imported from the working directory")\n'


@pytest.fixture
def shadowed(tmp_path):
    for name in ("eval", "indexes"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(BOGUS.format(name))
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq1 0 d2 0\nq2 0 d3 2\n")
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 2.0 r\nq1 Q0 d2 2 1.0 r\nq2 Q0 d4 1 3.0 r\nq2 Q0 d3 2 2.0 r\n")
    return tmp_path


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra)
    return env


def _check(r):
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bogus" not in r.stdout + r.stderr
    lines = r.stdout.split()
    assert lines[:3] == ["run", "P@1", "run.trec"] and float(lines[3]) == 0.5   # q1: d1 relevant, q2: d4 not


def test_python_m_cli_main_ignores_the_working_directory(shadowed):
    # the working directory is sys.path[0] here; ROOT reaches retr's packages as an installed copy would
    r = subprocess.run([sys.executable, "-m", "cli.main", "eval", "--qrels", "qrels.txt", "run.trec", "-m", "P@1"],
                       cwd=shadowed, env=_env(PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300)
    _check(r)


@pytest.mark.parametrize("pythonpath", [None, ":", "."])
def test_console_script_ignores_the_working_directory(shadowed, pythonpath):
    script = Path(sys.executable).parent / "retr"
    if not script.exists():
        pytest.skip(f"no console script at {script} (retr not installed in this environment)")
    env = _env() if pythonpath is None else _env(PYTHONPATH=pythonpath)
    r = subprocess.run([str(script), "eval", "--qrels", "qrels.txt", "run.trec", "-m", "P@1"], cwd=shadowed,
                       env=env, capture_output=True, text=True, timeout=300)
    _check(r)


def test_plain_python_does_import_the_working_directory(shadowed):
    """The limit the README states: user code run from such a folder gets its own eval."""
    r = subprocess.run([sys.executable, "-c", "import eval"], cwd=shadowed, env=_env(PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "bogus eval imported" in r.stderr
