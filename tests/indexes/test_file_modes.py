"""Every file retr writes gets the mode ``open()`` gives under the process's umask (0644 under 022,
0600 under 077): files written atomically (indexes.atomic) included, which mkstemp made 0600 whatever
the umask (index.faiss, docids.txt, faiss.json, DeepCT's weights, the dense shards, runs).

Real `retr` child processes started under the umask (one per test, running its commands in turn),
real Lucene, faiss, MiniLM and SQLite."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from indexes import atomic
from indexes import folder

from tests.conftest import ROOT

TEXTS = ["aspirin lowers the risk of colorectal cancer", "vitamin D deficiency and bone density",
         "stem cells in mice regenerate tissue", "insulin resistance in obesity", "the tumor suppressor p53",
         "bacterial infection treated with antibiotics", "sleep and memory consolidation in adults",
         "air pollution and asthma in children"]


def mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


@pytest.fixture
def umask():
    """Set the umask of this process for the test (restored afterwards)."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda m: os.umask(m)
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002, 0o027])
def test_atomic_write_gives_the_umask_mode_and_replaces_in_one_step(tmp_path, umask, mask):
    umask(mask)
    assert atomic.current_umask() == mask
    assert atomic.file_mode() == 0o666 & ~mask
    target = tmp_path / "f.json"
    target.write_text("old\n")
    os.chmod(target, 0o600)
    with atomic.atomic_write(target) as f:
        f.write("new\n")
        (tmp, ) = [p for p in tmp_path.iterdir() if p != target]
        # the temporary name is one retr's leftover clean-up recognises, and the target is untouched
        assert folder.inner_leftovers(tmp_path, {}) == [tmp] and target.read_text() == "old\n"
    assert target.read_text() == "new\n" and mode(target) == 0o666 & ~mask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]
    atomic.write_bytes(tmp_path / "b.bin", b"\x00\x01")
    assert mode(tmp_path / "b.bin") == 0o666 & ~mask
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("the writer failed")
    assert target.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["b.bin", "f.json"]


# Several `retr` commands, one after another, in ONE child process started under the umask (each
# through cli.main.main, the console entry point's function): what each writes, the later ones
# included, follows the umask the process started with, and the child pays Python, torch and the JVM
# once instead of once per command.
SEQUENCE = ("import json, sys; from cli.main import main\n"
            "for argv in json.loads(sys.argv[1]):\n"
            "    rc = main(argv)\n"
            "    if rc: sys.exit(f'{argv[0]} exited {rc}')\n")


def retr_sequence_under(mask: int, *commands):
    r = subprocess.run([sys.executable, "-c", SEQUENCE, json.dumps([[str(a) for a in c] for c in commands])],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, preexec_fn=lambda: os.umask(mask))
    assert r.returncode == 0, r.stderr
    return r


def wrong_modes(root: Path, file_mode: int, dir_mode: int):
    """Every file and folder under ``root`` whose mode is not the umask's, as (path, octal mode)."""
    out = []
    for p in sorted(root.rglob("*")):
        want = dir_mode if p.is_dir() else file_mode
        if mode(p) != want:
            out.append((str(p.relative_to(root)), oct(mode(p))))
    return out


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("mask,file_mode,dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)],
                         ids=["umask-022", "umask-077"])
def test_dense_index_and_its_changes_follow_the_umask(tmp_path, mask, file_mode, dir_mode):
    work = tmp_path / "w"
    work.mkdir(mode=dir_mode)
    os.chmod(work, dir_mode)
    corpus = write_jsonl(work / "corpus.jsonl", [{"_id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)])
    more = write_jsonl(work / "more.jsonl", [{"_id": "n1", "text": "aspirin and heart attacks in the elderly"}])
    queries = write_jsonl(work / "queries.jsonl", [{"_id": "q1", "text": "aspirin cancer"}])
    for p in (corpus, more, queries):
        os.chmod(p, file_mode)
    idx = work / "IDX"
    retr_sequence_under(mask, ["index", "--corpus", corpus, "--index", idx, "--dense", "-q"],
                        ["add", "--index", idx, "--corpus", more, "-q"],     # dense.g1/delta-g1.npy, .ids
                        ["delete", "--index", idx, "d3", "-q"],               # dense.g2/deleted-g2.rows
                        ["search", "--index", idx, "--queries", queries, "--retriever", "bm25+dense",
                         "--output", work / "run.trec", "-q"])
    written = {str(p.relative_to(work)) for p in work.rglob("*") if p.is_file()}
    for name in ("IDX/manifest.json", "IDX/dense.g2/index.faiss", "IDX/dense.g2/docids.txt",
                 "IDX/dense.g2/faiss.json", "IDX/dense.g2/delta-g1.npy", "IDX/dense.g2/delta-g1.ids",
                 "IDX/dense.g2/deleted-g2.rows", "run.trec"):
        assert name in written, sorted(written)
    assert wrong_modes(work, file_mode, dir_mode) == []


def test_deepct_model_and_index_follow_the_umask(tmp_path):
    """`retr train deepct` (the model's safetensors files) and a DeepCT sub-index (weights.jsonl.gz)."""
    work = tmp_path / "w"
    work.mkdir()
    os.chmod(work, 0o755)
    corpus = write_jsonl(work / "corpus.jsonl", [{"_id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)])
    queries = write_jsonl(work / "queries.jsonl", [{"_id": f"q{i}", "text": t.split()[0] + " " + t.split()[-1]}
                                                   for i, t in enumerate(TEXTS)])
    (work / "qrels").mkdir()
    (work / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                              + "".join(f"q{i}\td{i}\t1\n" for i in range(len(TEXTS))))
    for p in (work / "qrels", ):
        os.chmod(p, 0o755)
    for p in (corpus, queries, work / "qrels" / "train.tsv"):
        os.chmod(p, 0o644)
    retr_sequence_under(0o022, ["train", "deepct", "--corpus", corpus, "--queries", queries, "--qrels",
                                work / "qrels" / "train.tsv", "--output", work / "M", "--base", "splade-tiny",
                                "--epochs", "1", "--max-length", "32", "--dev-fraction", "0.25", "--quiet"],
                        ["index", "--corpus", corpus, "--index", work / "IDX", "--deepct", work / "M", "-q"])
    written = {str(p.relative_to(work)) for p in work.rglob("*") if p.is_file()}
    assert {"M/model.safetensors", "M/deepct_head.safetensors", "IDX/deepct/weights.jsonl.gz"} <= written, \
        sorted(written)
    assert wrong_modes(work, 0o644, 0o755) == []
