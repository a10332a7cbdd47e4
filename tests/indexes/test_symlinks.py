"""Symlinks planted among a folder's own entries (issue #43, item 1): a folder is untrusted input, so a
``.lock`` that points at someone's notes, a ``.readers`` that points at their folder, a ``shards.json``
or a shard's own lock that points out, never make retr open, create, truncate or delete anything
outside the folder. Every command refuses such a folder in one line (exit 2) before it touches it, and
``retr check`` reports it as a problem.

Real ``retr`` processes on a real 20-document BM25 folder and a 2-shard one; the files outside are
compared byte for byte before and after each command."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_retr

DOCS = [{"_id": f"d{i}", "text": f"small doc {i} aspirin protein"} for i in range(20)]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A folder and a 2-shard folder of the same 20 documents, built by `retr index`."""
    root = tmp_path_factory.mktemp("symlinks")
    corpus = write_jsonl(root / "corpus.jsonl", DOCS)
    for name, extra in (("IDX", []), ("SH", ["--shards", "2"])):
        r = run_retr("index", "--corpus", corpus, "--index", root / name, "--quiet", *extra)
        assert r.returncode == 0, r.stderr
    return root


@pytest.fixture
def outside(tmp_path):
    """A user's files beside the index: notes.txt and mydata/ with files named 0 and 1 (the names of
    readers' pins), and a copy of a valid manifest to point a link at."""
    out = tmp_path / "outside"
    (out / "mydata").mkdir(parents=True)
    (out / "notes.txt").write_text("my notes\n")
    (out / "mydata" / "0").write_text("zero\n")
    (out / "mydata" / "1").write_text("one\n")
    return out


def snapshot(folder: Path) -> dict:
    """Every entry under ``folder`` (not following links) with its content."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(folder.rglob("*"))}


def plant(path: Path, target: Path) -> None:
    """Replace ``path`` (a file or a folder retr made) by a symlink to ``target``."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


def one_error(r, needle: str) -> None:
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("retr: error: "), (r.returncode, r.stderr)
    assert needle in lines[0] and "symbolic link" in lines[0], lines[0]


def refused_everywhere(index: Path, planted: Path, outside: Path, tmp_path: Path, commands) -> None:
    """Each command exits 2 with one line naming ``planted``; the files outside stay as they were (no
    content changed, none removed, no pin made there), and so does the folder (refused before any lock
    file or pin is made in it, in any shard); `retr check` reports one problem."""
    new = write_jsonl(tmp_path / "new.jsonl", [{"_id": "new1", "text": "a new aspirin passage"}])
    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    argv = {"delete": ["delete", "--index", index, "d1"],
            "add": ["add", "--index", index, "--corpus", new],
            "update": ["update", "--index", index, "--corpus", new],
            "compact": ["compact", "--index", index],
            "search": ["search", "--index", index, "aspirin"],
            "info": ["info", "--index", index],
            "overwrite": ["index", "--corpus", corpus, "--index", index, "--overwrite", "--quiet"]}
    before, inside = snapshot(outside), snapshot(index)
    for c in commands:
        r = run_retr(*argv[c])
        one_error(r, str(planted))
        assert snapshot(outside) == before, c
        assert snapshot(index) == inside, c
    r = run_retr("check", "--index", index)
    assert r.returncode != 0 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and str(planted) in lines[0] and "symbolic link" in lines[0], r.stdout
    assert snapshot(outside) == before and snapshot(index) == inside


# --------------------------------------------------------------------------- one folder
SINGLE = {
    # the cases: a write truncated notes.txt through .lock and removed mydata/0 and mydata/1
    # through .readers (made a pin there too)
    "lock": lambda idx, out: plant(idx / ".lock", out / "notes.txt"),
    "readers": lambda idx, out: plant(idx / ".readers", out / "mydata"),
    # SQLite opens its write-ahead log beside the store by name (SQLite itself refuses a link there, but
    # only once the writer has made its lock file: now it is refused first, with the others)
    "store-wal": lambda idx, out: plant(idx / "docs.sqlite-wal", out / "notes.txt"),
    # a pin in .readers that points out: a writer collecting old generations would open it
    "pin": lambda idx, out: plant(idx / ".readers" / "0", out / "mydata" / "0"),
}


@pytest.mark.parametrize("case", list(SINGLE))
def test_a_folder_with_a_planted_link_is_refused_by_every_command_and_nothing_outside_changes(
        built, outside, tmp_path, case):
    idx = tmp_path / "IDX"
    shutil.copytree(built / "IDX", idx, symlinks=True)
    (idx / ".readers").mkdir(exist_ok=True)
    SINGLE[case](idx, outside)
    planted = {"lock": idx / ".lock", "readers": idx / ".readers", "store-wal": idx / "docs.sqlite-wal",
               "pin": idx / ".readers" / "0"}[case]
    commands = {"lock": ["delete", "add", "compact", "search", "update", "info", "overwrite"],
                "readers": ["delete", "add", "compact", "search"]}.get(case, ["delete", "compact", "search"])
    refused_everywhere(idx, planted, outside, tmp_path, commands)


def test_a_symlinked_manifest_is_refused(built, outside, tmp_path):
    """A manifest.json that is a link to a valid manifest elsewhere: refused, not read through."""
    idx = tmp_path / "IDX"
    shutil.copytree(built / "IDX", idx, symlinks=True)
    shutil.copy(idx / "manifest.json", outside / "manifest.json")
    plant(idx / "manifest.json", outside / "manifest.json")
    refused_everywhere(idx, idx / "manifest.json", outside, tmp_path, ["delete", "search"])


def test_a_fifo_for_a_manifest_is_refused_without_waiting_on_it(built, tmp_path):
    """A named pipe where manifest.json belongs: reading it would wait for ever; refused at once."""
    idx = tmp_path / "IDX"
    shutil.copytree(built / "IDX", idx, symlinks=True)
    (idx / "manifest.json").unlink()
    os.mkfifo(idx / "manifest.json")
    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    for args in (["search", "--index", idx, "aspirin"],
                 ["index", "--corpus", corpus, "--index", idx, "--overwrite", "--quiet"]):
        r = run_retr(*args, timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "manifest.json: is a special file" in lines[0], r.stderr


# --------------------------------------------------------------------------- a sharded folder
SHARDED = {
    "shards.json": lambda sh, out: (shutil.copy(sh / "shards.json", out / "shards.json"),
                                    plant(sh / "shards.json", out / "shards.json")),
    "shard-lock": lambda sh, out: plant(sh / "shard-001" / ".lock", out / "notes.txt"),
    "shard-readers": lambda sh, out: plant(sh / "shard-001" / ".readers", out / "mydata"),
}


@pytest.mark.parametrize("case", list(SHARDED))
def test_a_sharded_folder_with_a_planted_link_is_refused_and_nothing_outside_changes(built, outside, tmp_path, case):
    sh = tmp_path / "SH"
    shutil.copytree(built / "SH", sh, symlinks=True)
    SHARDED[case](sh, outside)
    planted = {"shards.json": sh / "shards.json", "shard-lock": sh / "shard-001" / ".lock",
               "shard-readers": sh / "shard-001" / ".readers"}[case]
    refused_everywhere(sh, planted, outside, tmp_path, ["delete", "add", "compact", "search"])


def test_a_shard_folder_that_is_a_symlink_is_refused(built, tmp_path):
    """shards.json names shard-001; a link there, even to the shard moved elsewhere inside the folder
    (one out of it was refused before), is refused: retr would lock and write the shard through it."""
    sh = tmp_path / "SH"
    shutil.copytree(built / "SH", sh, symlinks=True)
    (sh / "shard-001").rename(sh / "moved")
    (sh / "shard-001").symlink_to("moved")
    before = snapshot(sh / "moved")
    for args in (["delete", "--index", sh, "d1"], ["search", "--index", sh, "aspirin"]):
        one_error(run_retr(*args), str(sh / "shard-001"))
        assert snapshot(sh / "moved") == before


# --------------------------------------------------------------------------- the mechanisms themselves
def test_pins_and_the_lock_never_follow_a_link(built, outside, tmp_path):
    """The writer lock, a reader's pin and the collection of pins, called directly: each refuses a link
    in one line, and collection removes only plain files named by a number."""
    from indexes import generations as gens
    from indexes.errors import IndexFormatError

    idx = tmp_path / "IDX"
    shutil.copytree(built / "IDX", idx, symlinks=True)
    plant(idx / ".lock", outside / "notes.txt")
    with pytest.raises(IndexFormatError, match="symbolic link"):
        with gens.writer_lock(idx):
            pass
    assert gens.writer_busy(idx) is None
    (idx / ".lock").unlink()
    plant(idx / ".readers", outside / "mydata")
    with pytest.raises(IndexFormatError, match="symbolic link"):
        gens.hold_generation(idx, 5)
    with pytest.raises(IndexFormatError, match="symbolic link"):
        gens.held_generations(idx, 9)
    assert sorted(os.listdir(outside / "mydata")) == ["0", "1"]
    (idx / ".readers").unlink()
    (idx / ".readers").mkdir()
    (idx / ".readers" / "2").symlink_to(outside / "mydata" / "0")
    with pytest.raises(IndexFormatError, match="symbolic link"):
        gens.hold_generation(idx, 2)
    (idx / ".readers" / "3").write_text("")
    assert gens.held_generations(idx, 9) == set()  # 3 was nobody's: removed; the link left alone
    assert sorted(os.listdir(idx / ".readers")) == ["2"] and (outside / "mydata" / "0").read_text() == "zero\n"
    fd = gens.hold_generation(idx, 4)
    try:
        assert gens.held_generations(idx, 9) == {4}
    finally:
        os.close(fd)
