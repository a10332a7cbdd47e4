"""The documentation site (docs/, mkdocs.yml) builds and says what retr is.

- ``mkdocs build --strict`` into a temporary folder: a broken link, a missing page, a reference that does not
  resolve or a snippet that is not there fails the build.
- Every name of ``retrieval.__all__`` has an entry in the Python API reference (an anchor with the object's
  dotted path, as mkdocstrings writes it), and every ``retr`` command and subcommand (walking the click group)
  one in the CLI reference.
- Every file of ``benchmarks/results/`` is a page that names the machine it ran on, linked from the results page.
- The Python blocks of the pages marked ``<!-- docs-test: run -->`` run as written, each in a fresh folder holding
  ``notes/``, a few files of a reader's own (the blocks index it). Unmarked blocks are examples over collections
  or models a test cannot have in seconds; any other ``docs-test`` comment is an error.
- ``make demo`` needs nothing beside the clone: with ``RETR_DATA`` an empty folder it indexes docs/, answers its
  questions from the right pages, and says in one line that SciFact's reproduction was skipped.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"<!--\s*docs-test:((?:(?!-->).)*)-->\s*\Z", re.S)
NOTES = {
    "router.md": "# Router\n\nTo reset the router, hold the reset button for ten seconds until the lights blink.\n",
    "dogs.md": "# Dog training\n\nReward the dog at once when it sits. Short sessions work best, twice a day.\n",
    "garden.txt": "Tomatoes want sun, deep watering twice a week and a stake once the first fruit sets.\n",
}


def env():
    return dict(os.environ, NO_MKDOCS_2_WARNING="1",
                PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs")
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return out


def test_the_site_builds_strict(site):
    assert (site / "index.html").is_file()
    for page in ("getting-started", "tasks/documents", "tasks/serving", "reference/cli", "reference/api",
                 "results", "limits", "architecture", "defaults", "changelog"):
        assert (site / page / "index.html").is_file(), page


def test_every_public_name_has_an_api_entry(site):
    import retrieval

    html = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    missing = []
    for name in retrieval.__all__:
        obj = getattr(retrieval, name)
        ident = f"{obj.__module__}.{obj.__qualname__}"
        if f'id="{ident}"' not in html:
            missing.append(f"{name} ({ident})")
    assert not missing, f"no API reference entry for: {missing}"


def commands(group, path=("retr",)):
    """Every command path under the click group, as click resolves it (lazy groups too)."""
    import click

    ctx = click.Context(group, info_name=path[-1])
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        yield path + (name,)
        if isinstance(cmd, click.Group):
            yield from commands(cmd, path + (name,))


def test_every_command_has_a_cli_entry(site):
    from cli.main import retr

    html = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    paths = list(commands(retr))
    assert ("retr", "index") in paths and ("retr", "eval", "partial") in paths
    missing = [" ".join(p) for p in paths if f'id="{"-".join(p)}"' not in html]
    assert not missing, f"no CLI reference entry for: {missing}"
    assert "--corpus" in html and "--retriever" in html   # options are listed, not only the commands


def test_every_benchmark_result_is_a_page_naming_its_machine(site):
    index = (site / "results" / "index.html").read_text(encoding="utf-8")
    stems = sorted(p.stem for p in RESULTS.glob("*.md"))
    assert stems
    for stem in stems:
        page = site / "results" / "bench" / stem / "index.html"
        assert page.is_file(), stem
        assert "Measured on" in page.read_text(encoding="utf-8"), stem
        assert f'href="bench/{stem}/"' in index, f"results page does not link {stem}"


def marked_blocks():
    """``(page, line, code)`` of each python block marked to run, in page order."""
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            marker = MARKER.search(text[:m.start()].rstrip())
            if not marker:
                continue
            if marker.group(1).strip() != "run":
                raise ValueError(f"{page}: unknown docs-test marker {marker.group(0)!r} (the one there is: "
                                 "<!-- docs-test: run -->)")
            out.append((page.relative_to(DOCS).as_posix(), text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


BLOCKS = marked_blocks()


def test_some_task_blocks_are_marked_to_run():
    assert any(p.startswith("tasks/") for p, _, _ in BLOCKS) and any(p == "getting-started.md" for p, _, _ in BLOCKS)


@pytest.mark.parametrize("page,line,code", BLOCKS, ids=[f"{b[0]}:{b[1]}" for b in BLOCKS])
def test_marked_block_runs(page, line, code, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in NOTES.items():
        (notes / name).write_text(text, encoding="utf-8")
    block = tmp_path / "block.py"
    block.write_text(code, encoding="utf-8")
    r = subprocess.run([sys.executable, str(block)], cwd=tmp_path, env=env(), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"docs/{page}:{line}: the block failed\n{r.stderr[-4000:]}"
    assert "router.md" in r.stdout   # the blocks search the notes for the router


def test_make_demo_needs_nothing_beside_the_clone(tmp_path):
    """The demo's own recipe (the Makefile's), with this interpreter's venv taken as installed and an empty
    RETR_DATA: docs/ is indexed and each question is answered from the page that holds its answer."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv = Path(sys.executable).parent.parent
    if not (venv / "bin" / "retr").exists():
        pytest.skip(f"no retr console script in {venv}")
    empty = tmp_path / "data"
    empty.mkdir()
    r = subprocess.run(["make", "--no-print-directory", "-o", f"{venv}/.installed", "demo", f"VENV={venv}",
                        f"RETR_DATA={empty}", f"WORK={tmp_path / 'work'}"],
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    answers = {}
    for block in r.stdout.split("\nQ: ")[1:]:
        question, _, hits = block.partition("\n")
        answers[question] = re.findall(r"^\s+\d+\. (\S+?)#\d+ ", hits, re.M)
    assert len(answers) >= 3, r.stdout
    assert all(len(h) == 3 for h in answers.values()), answers
    expect = {"sync": "tasks/documents.md", "serve": "tasks/serving.md"}
    for word, page in expect.items():
        [hits] = [h for q, h in answers.items() if word in q]
        assert page in hits, (word, hits)
    assert "no SciFact under" in r.stdout and "skipped" in r.stdout
    assert not (tmp_path / "work" / "scifact").exists()
