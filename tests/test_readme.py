"""The README's Python code blocks run as written (issue #29).

Every fenced ```python block of README.md is one test, run in README order, each in its own Python
process whose working directory stands in for a reader's: a small SciFact slice with metadata as
``corpus.jsonl``, ``NEW_DOCS.jsonl`` (ten more passages), ``queries.jsonl``, ``qrels/train.tsv``, ``notes/``
(three Markdown and text files of the reader's own), a
BM25 + dense index folder ``IDX`` built from it, a ``token`` file; for a block that names ``"MODEL"``,
a DeepCT model trained there in seconds (``retr train deepct --base splade-tiny``, 2 epochs: the
README's placeholder for "a trained DeepCT model"); and for the serving examples, a real
``retr serve --index sf=IDX`` on a free loopback port (the README's ``127.0.0.1:8080`` is replaced by
that port; nothing else in a block is changed). Blocks share the folder, so a block sees what the
ones before it wrote, as a reader following the README would. A block with top-level ``await``
runs as the asyncio REPL (``python -m asyncio``) runs it: compiled with
``ast.PyCF_ALLOW_TOP_LEVEL_AWAIT`` and awaited in one event loop.

A block preceded (blank lines aside) by ``<!-- readme-test: skip (reason) -->`` is skipped with that
reason: for examples that need what a test cannot have in minutes (a trained model, long training).
Any other ``readme-test`` comment is an error, so a typo never runs or skips a block by accident.
``RETR_README`` names another file to check (a proposed README before it is merged).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT, SCIFACT, encoded_by, with_meta

README = Path(os.environ.get("RETR_README", ROOT / "README.md"))
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"<!--\s*readme-test:((?:(?!-->).)*)-->\s*\Z", re.S)   # the comment right before
SKIP = re.compile(r"skip\s*\((.+)\)\s*\Z", re.S)
PORT = "127.0.0.1:8080"   # the README's example server
NOTES = {   # notes/: a few files of a reader's own, as the README's first section indexes them
    "router.md": "# Router\n\nTo reset the router, hold the reset button for ten seconds until the lights blink.\n"
                 "Then connect again with the password printed under the device.\n",
    "dogs.md": "# Dog training\n\nReward the dog at once when it sits. Short sessions work best, twice a day.\n",
    "garden.txt": "Tomatoes want sun, deep watering twice a week and a stake once the first fruit sets.\n",
}


def blocks(text: str):
    """``(line, code, skip reason or None)`` for each python block, in order."""
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip()
        reason = None
        marker = MARKER.search(before)
        if marker:
            skip = SKIP.fullmatch(marker.group(1).strip())
            if not skip:
                raise ValueError(f"{README.name}:{line}: unknown readme-test marker {marker.group(0)!r} "
                                 "(the one there is: <!-- readme-test: skip (reason) -->)")
            reason = skip.group(1).strip()
        out.append((line, m.group(1), reason))
    return out


BLOCKS = blocks(README.read_text(encoding="utf-8")) if README.is_file() else []

# Runs one block file: top-level await allowed, as in `python -m asyncio`.
RUNNER = textwrap.dedent("""
    import ast, asyncio, inspect, sys
    path = sys.argv[1]
    code = compile(open(path, encoding="utf-8").read(), path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    ns = {"__name__": "__main__"}
    result = eval(code, ns)
    if inspect.iscoroutine(result):
        asyncio.run(result)
""")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, small_dense_index):
    """The reader's folder: the README's file names, over 150 SciFact passages. Its dense sub-index
    takes the vectors MiniLM made of the same passages for the session's shared dense index (the
    first 150 of the corpus are among its 400), as a pruned build takes the quality estimator's."""
    import retrieval
    from retrieval.dense.subindex import DenseSpec

    if not SCIFACT.exists():
        pytest.skip(f"dataset not found: {SCIFACT} (set RETR_DATA)")
    src = tmp_path_factory.mktemp("readme-src")
    lines = open(SCIFACT / "corpus.jsonl", encoding="utf-8").readlines()
    (src / "corpus.jsonl").write_text("".join(lines[:160]), encoding="utf-8")
    meta = with_meta(src, tmp_path_factory.mktemp("readme-meta"))
    rows = (meta / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    wd = tmp_path_factory.mktemp("readme")
    (wd / "corpus.jsonl").write_text("".join(rows[:150]), encoding="utf-8")
    (wd / "NEW_DOCS.jsonl").write_text("".join(rows[150:]), encoding="utf-8")
    ids = {json.loads(r)["_id"] for r in rows[:150]}
    qrels = [l.split("\t") for l in (SCIFACT / "qrels" / "train.tsv").read_text().splitlines()[1:]]
    qrels = [q for q in qrels if q[1] in ids]
    qids = {q[0] for q in qrels}
    (wd / "queries.jsonl").write_text("".join(l for l in open(SCIFACT / "queries.jsonl", encoding="utf-8")
                                              if json.loads(l)["_id"] in qids), encoding="utf-8")
    (wd / "qrels").mkdir()
    (wd / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join("\t".join(q) + "\n"
                                                                                    for q in qrels))
    (wd / "token").write_text("readme-test-token-0123456789abcdef\n")
    notes = wd / "notes"   # the README's folder of the reader's own files (retr index --corpus notes/)
    notes.mkdir()
    for name, text in NOTES.items():
        (notes / name).write_text(text, encoding="utf-8")
    idx = retrieval.build_index(wd / "corpus.jsonl", wd / "IDX", quiet=True, subindexes={"dense": DenseSpec()},
                                precomputed=encoded_by(small_dense_index))
    assert idx.manifest["subindexes"]["dense"]["vectors_from"] != "encoded"
    idx.close()
    return wd


@pytest.fixture(scope="module")
def served(workdir):
    """`retr serve --index sf=IDX` over the reader's folder, started when a block needs it."""
    from tests.server.conftest import Server

    holder = {}
    yield lambda: holder.setdefault("s", Server("--index", "sf=IDX", token=(workdir / "token").read_text().strip(),
                                                tmp=workdir, cwd=workdir))
    if "s" in holder:
        holder["s"].stop()


@pytest.fixture(scope="module")
def deepct_model(workdir):
    """``MODEL``: a tiny DeepCT trained on the folder's training qrels, made when a block needs it
    (`retr train deepct` through its entry point in this process)."""
    from tests.conftest import retr_in_process

    def make():
        if not (workdir / "MODEL").exists():
            w = workdir
            r = retr_in_process("train", "deepct", "--corpus", w / "corpus.jsonl", "--queries", w / "queries.jsonl",
                                "--qrels", w / "qrels" / "train.tsv", "--output", w / "MODEL", "--base", "splade-tiny",
                                "--epochs", "2", "--lr", "1e-3", "--max-length", "64", "--dev-fraction", "0.2",
                                "--quiet")
            assert r.returncode == 0, r.stderr
    return make


def test_the_readme_has_python_blocks():
    assert BLOCKS, f"no ```python blocks in {README}"


@pytest.mark.parametrize("line,code,reason", BLOCKS, ids=[f"line{b[0]}" for b in BLOCKS])
def test_readme_block_runs(line, code, reason, workdir, served, deepct_model, tmp_path):
    if reason is not None:
        pytest.skip(f"README line {line}: {reason}")
    if '"MODEL"' in code:
        deepct_model()
    if PORT in code:
        code = code.replace(PORT, served().url.split("://", 1)[1])
    block = tmp_path / f"readme_line{line}.py"
    block.write_text(code, encoding="utf-8")
    runner = tmp_path / "run_block.py"
    runner.write_text(RUNNER, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, str(runner), str(block)], cwd=workdir, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"README line {line}: the block failed\n{r.stderr[-4000:]}"
