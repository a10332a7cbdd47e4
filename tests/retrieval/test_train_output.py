"""What a trainer may do to the folder `--output` names (issue 43, item 2), and a model folder cut
short (item 7): every trainer writes only into a missing path, an empty folder or its own earlier
output (--overwrite replaces a finished model of its own), refuses anything else in one line with
nothing touched, reads and checks its inputs before it removes anything, and swaps the new model in
at the end, so a kill leaves the old one. Real `retr` processes and in-process runs of the same
entry point; real (tiny) training runs where a model must come out."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, retr_in_process, run_retr


@pytest.fixture(scope="module")
def data(tmp_path_factory, scifact_dir):
    """40 SciFact passages (those judged for 12 training qrels lines first), their queries, the
    qrels, and qrels with no judgments at all."""
    out = tmp_path_factory.mktemp("train-output")
    pairs = [l.split("\t") for l in (scifact_dir / "qrels" / "train.tsv").read_text().splitlines()[1:]][:12]
    wanted = {d for _q, d, _r in pairs}
    docs, rest = [], []
    for line in open(scifact_dir / "corpus.jsonl", encoding="utf-8"):
        (docs if json.loads(line)["_id"] in wanted else rest).append(line)
    (out / "corpus.jsonl").write_text("".join(docs + rest[:40 - len(docs)]), encoding="utf-8")
    qids = {q for q, _d, _r in pairs}
    (out / "queries.jsonl").write_text("".join(l for l in open(scifact_dir / "queries.jsonl", encoding="utf-8")
                                               if json.loads(l)["_id"] in qids), encoding="utf-8")
    head = "query-id\tcorpus-id\tscore\n"
    (out / "train.tsv").write_text(head + "".join(f"{q}\t{d}\t{r.strip()}\n" for q, d, r in pairs))
    (out / "empty.tsv").write_text(head)
    return out


@pytest.fixture(scope="module")
def cut_base(tmp_path_factory):
    """A copy of the bundled SPLADE-tiny folder whose model.safetensors lost its second half."""
    from retrieval.models import bundled_model_path

    out = tmp_path_factory.mktemp("cut") / "splade-tiny-cut"
    shutil.copytree(bundled_model_path("splade-tiny"), out)
    weights = out / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    return out


def _args(trainer: str, data: Path, out: Path, qrels: str = "train.tsv", *more) -> list:
    """The smallest run of each trainer (one epoch, 32 word-pieces), with --overwrite."""
    common = ["--corpus", data / "corpus.jsonl", "--queries", data / "queries.jsonl", "--qrels", data / qrels,
              "--output", out, "--epochs", "1", "--max-length", "32", "--overwrite", "-q"]
    extra = {"dense": ["--base", "splade-tiny", "--batch-size", "8", "--threads", "1", "--device", "cpu"],
             "splade": ["--batch-size", "8", "--device", "cpu"],
             "deepct": ["--base", "splade-tiny", "--device", "cpu"]}[trainer]
    return ["train", trainer, *common, *extra, *more]


def _previous(trainer: str, path: Path) -> Path:
    """A finished output of ``trainer`` as its files make it known (the card, head or selector), and a
    file of the old model only a replacement removes."""
    path.mkdir(parents=True)
    files = {"dense": {"retr_train.json": '{"kind": "dense", "pooling": "mean"}'},
             "splade": {"retr_train.json": '{"kind": "splade"}'},
             "deepct": {"deepct.json": '{"format": "retr-deepct"}', "deepct_head.safetensors": "old head"},
             "dimsel": {"selector.json": "{}", "selector.pt": "old selector"}}[trainer]
    for name, text in {**files, "model.safetensors": "old weights", "old-only.txt": "from the old model"}.items():
        (path / name).write_text(text)
    return path


def _unfinished(trainer: str, path: Path) -> Path:
    """An interrupted run of ``trainer``: its checkpoint, named by the trainer file."""
    (path / ".checkpoint").mkdir(parents=True)
    (path / ".checkpoint" / "trainer").write_text(f"retr train {trainer}\n")
    (path / ".checkpoint" / "state.pt").write_text("an epoch's state")
    return path


def _tree(path: Path) -> dict:
    """Every entry under ``path`` with its bytes (folders as None)."""
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None) for p in sorted(path.rglob("*"))}


def _one_line(r) -> str:
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("retr: error:"), (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    return lines[0]


@pytest.mark.parametrize("trainer", ["dense", "splade", "deepct"])
def test_a_trainer_refuses_a_folder_it_did_not_make_whatever_overwrite_says(trainer, data, small_index, tmp_path):
    notes = tmp_path / "thesis"
    notes.mkdir()
    (notes / "notes.txt").write_text("three years of work")
    line = _one_line(run_retr(*_args(trainer, data, notes)))  # a real process: nothing else reaches fd 2
    assert "did not make" in line and str(notes) in line and "--output" in line
    assert _tree(notes) == {"notes.txt": b"three years of work"}

    idx = tmp_path / "IDX"  # a copy: the session's index is never written to
    shutil.copytree(small_index.path, idx)
    before = _tree(idx)
    _one_line(retr_in_process(*_args(trainer, data, idx)))
    assert _tree(idx) == before

    other = _previous("dimsel" if trainer != "dimsel" else "dense", tmp_path / "other")
    before = _tree(other)
    line = _one_line(retr_in_process(*_args(trainer, data, other)))
    assert "`retr train dimsel`" in line and f"not of `retr train {trainer}`" in line
    assert _tree(other) == before


@pytest.mark.parametrize("trainer", ["dense", "splade", "deepct"])
def test_bad_input_with_overwrite_leaves_the_trainers_previous_output_as_it_was(trainer, data, cut_base, tmp_path):
    prev = _unfinished(trainer, _previous(trainer, tmp_path / "M"))
    before = _tree(prev)
    # a base whose weights were cut short: one line naming it (no SafetensorError traceback), in a real process
    line = _one_line(run_retr(*_args(trainer, data, prev, "train.tsv", "--base", cut_base)))
    assert str(cut_base) in line and "model.safetensors" in line
    assert _tree(prev) == before
    # qrels that judge no query: refused before anything of the old folder is removed
    line = _one_line(retr_in_process(*_args(trainer, data, prev, "empty.tsv")))
    assert _tree(prev) == before
    assert not [p for p in tmp_path.iterdir() if p.name != "M"]  # no staging folder left beside it either


def _wait_for_pause(p: subprocess.Popen, timeout: float = 300) -> str:
    """The stderr of ``p`` up to its pause line (RETR_TEST_PAUSE), or up to its end."""
    seen, deadline = "", time.time() + timeout
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        seen += line
        if line.startswith("retr-test-paused"):
            break
    return seen


def test_dense_overwrite_swaps_the_model_in_at_the_end_and_a_kill_before_leaves_the_old_one(data, tmp_path):
    prev = tmp_path / "M"
    _previous("dense", prev)
    (prev / "retr_train.json").write_text('{"pooling": "mean", "settings": {}}')  # a card from before "kind"
    before = _tree(prev)
    env = dict(os.environ, RETR_TEST_PAUSE="train:before-swap")
    p = subprocess.Popen([sys.executable, "-m", "cli.main", *map(str, _args("dense", data, prev))], cwd=ROOT,
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        err = _wait_for_pause(p)
        assert "retr-test-paused train:before-swap" in err, err
        os.kill(p.pid, signal.SIGKILL)
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=60)
        p.stderr.close()
    # killed with the new model written beside it: the old one is whole, the finished run's checkpoint in it
    assert {k: v for k, v in _tree(prev).items() if not k.startswith(".checkpoint")} == before
    assert (prev / ".checkpoint" / "state.pt").is_file()
    assert (prev / ".checkpoint" / "trainer").read_text().strip() == "retr train dense"
    left = [q for q in tmp_path.iterdir() if q.name.startswith("M.tmp-")]
    assert len(left) == 1 and (left[0] / "retr_train.json").is_file()
    # the same command with --resume finishes the replacement from the checkpoint (no epoch again)
    r = run_retr(*_args("dense", data, prev, "train.tsv", "--resume"))
    assert r.returncode == 0, r.stderr
    card = json.loads((prev / "retr_train.json").read_text())
    assert card["kind"] == "dense" and [e["epoch"] for e in card["history"]["finetune"]] == [1]
    assert not (prev / "old-only.txt").exists() and not (prev / ".checkpoint").exists()
    assert (prev / "model.safetensors").stat().st_size > 1000
    assert [q.name for q in tmp_path.iterdir()] == ["M"]  # the killed run's staging folder is gone too


def test_deepct_overwrite_replaces_its_own_model_whole(data, tmp_path):
    prev = _previous("deepct", tmp_path / "M")
    r = run_retr(*_args("deepct", data, prev))
    assert r.returncode == 0, r.stderr
    card = json.loads((prev / "deepct.json").read_text())
    assert card["format"] == "retr-deepct" and card["training"]["steps"] > 0
    assert not (prev / "old-only.txt").exists() and not (prev / ".checkpoint").exists()
    assert [q.name for q in tmp_path.iterdir()] == ["M"]
    again = retr_in_process(*[a for a in _args("deepct", data, prev) if a != "--overwrite"])
    assert again.returncode == 2 and "--overwrite" in again.stderr  # without it, a model is kept


def test_dimsel_output_takes_its_own_folder_again_and_nothing_else(small_dense_index, small_corpus, small_index,
                                                                   tmp_path):
    def train(out, *more):
        return retr_in_process("train", "dimsel", "--index", small_dense_index.path, "--queries",
                               small_corpus / "queries.jsonl", "--qrels", small_corpus / "qrels" / "test.tsv",
                               "--output", out, "--epochs", "2", "--hidden", "8", "--dev-share", "0",
                               "--alpha", "0.5", "-q", *more)

    manifest = (small_dense_index.path / "manifest.json").read_bytes()
    sel = tmp_path / "sel"
    assert train(sel).returncode == 0
    first = json.loads((sel / "selector.json").read_text())
    r = train(sel, "--hidden", "16")  # its own folder: replaced whole
    assert r.returncode == 0, r.stderr
    assert first["model"]["hidden"] == 8 and json.loads((sel / "selector.json").read_text())["model"]["hidden"] == 16
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sel"]
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine")
    line = _one_line(run_retr("train", "dimsel", "--index", small_dense_index.path, "--queries",
                              small_corpus / "queries.jsonl", "--qrels", small_corpus / "qrels" / "test.tsv",
                              "--output", notes, "--epochs", "2", "--hidden", "8", "-q"))
    assert "did not make" in line and _tree(notes) == {"notes.txt": b"mine"}
    idx = tmp_path / "IDX"
    shutil.copytree(small_index.path, idx)
    before = _tree(idx)
    _one_line(train(idx))
    assert _tree(idx) == before
    assert (small_dense_index.path / "manifest.json").read_bytes() == manifest  # --output: the index is only read


def test_quality_train_replaces_only_a_head_of_its_own(data, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a quality head")
    args = ["quality", "train", "--corpus", data / "corpus.jsonl", "-q"]
    line = _one_line(run_retr(*args, "--qrels", data / "train.tsv", "--output", notes))
    assert "--output" in line and notes.read_text() == "not a quality head"
    head = tmp_path / "head.json"
    head.write_text('{"format": "retr-quality-head/2", "name": "old"}')
    assert retr_in_process(*args, "--qrels", data / "empty.tsv", "--output", head).returncode == 2
    assert json.loads(head.read_text())["name"] == "old"
    r = retr_in_process(*args, "--qrels", data / "train.tsv", "--output", head)
    assert r.returncode == 0, r.stderr
    new = json.loads(head.read_text())
    assert new["name"] == "head" and new["format"].startswith("retr-quality-head/") and "card" in new
    assert sorted(p.name for p in tmp_path.iterdir()) == ["head.json", "notes.txt"]


def test_a_model_folder_cut_short_is_one_line_wherever_it_is_named(data, cut_base, tmp_path):
    line = _one_line(run_retr("index", "--corpus", data / "corpus.jsonl", "--index", tmp_path / "IDX",
                              "--dense", cut_base, "-q"))
    assert str(cut_base) in line and "model.safetensors" in line
    assert not (tmp_path / "IDX").exists()
    line = _one_line(retr_in_process("index", "--corpus", data / "corpus.jsonl", "--index", tmp_path / "IDX",
                                     "--splade", cut_base, "-q"))
    assert str(cut_base) in line


def test_what_the_output_folder_is_known_by(tmp_path):
    from retrieval.dense.training import TRAINER as DENSE
    from retrieval.trainrun import LEGACY, UNKNOWN, TrainOutput, made_by

    assert made_by(_previous("splade", tmp_path / "s")) == {"retr train splade"}
    assert made_by(_previous("deepct", tmp_path / "d")) == {"retr train deepct"}
    old = tmp_path / "old"
    (old / ".checkpoint").mkdir(parents=True)
    (old / ".checkpoint" / "best.pt").write_text("x")
    assert made_by(old) == {LEGACY}  # a checkpoint from before the trainer file: some retr run's
    out = TrainOutput(old, DENSE, "k", overwrite=True)  # checked, not touched: begin() discards it
    assert out.state is None and out.discard and (old / ".checkpoint" / "best.pt").exists()
    odd = tmp_path / "odd"
    (odd / ".checkpoint").mkdir(parents=True)
    (odd / ".checkpoint" / "trainer").write_text("rm -rf /\n")
    assert made_by(odd) == {UNKNOWN}
