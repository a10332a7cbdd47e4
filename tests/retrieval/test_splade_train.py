"""`retr train splade`: fine-tuning SPLADE-tiny on training qrels (small: 120 SciFact passages, 28 training
queries, two epochs at 64 passage word-pieces), the refusals, the card, Ctrl-C and --resume, and a
trained model indexed and searched through the normal paths."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from safetensors.torch import load_file

import retrieval
from tests.conftest import ROOT, retr_in_process, run_retr

# two epochs: the Ctrl-C test interrupts the second (the first's checkpoint on disk) and resumes it
SMALL = ["--epochs", "2", "--batch-size", "8", "--max-length", "64", "--dev-share", "0.2", "--lr", "1e-4"]


@pytest.fixture(scope="module")
def data(tmp_path_factory, scifact_dir):
    """120 passages: those judged for 30 training qrels lines, then the corpus's first others."""
    out = tmp_path_factory.mktemp("splade-train")
    pairs = [l.split("\t") for l in (scifact_dir / "qrels" / "train.tsv").read_text().splitlines()[1:]][:30]
    wanted = {d for _q, d, _r in pairs}
    docs, rest = [], []
    for line in open(scifact_dir / "corpus.jsonl", encoding="utf-8"):
        (docs if json.loads(line)["_id"] in wanted else rest).append(line)
    (out / "corpus.jsonl").write_text("".join(docs + rest[:120 - len(docs)]), encoding="utf-8")
    qids = {q for q, _d, _r in pairs}
    (out / "queries.jsonl").write_text("".join(l for l in open(scifact_dir / "queries.jsonl", encoding="utf-8")
                                               if json.loads(l)["_id"] in qids), encoding="utf-8")
    (out / "qrels").mkdir()
    body = "".join(f"{q}\t{d}\t{r.strip()}\n" for q, d, r in pairs)
    (out / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + body, encoding="utf-8")
    (out / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + body, encoding="utf-8")
    return out


def _args(data, out, *more):
    return ["train", "splade", "--corpus", data / "corpus.jsonl", "--queries", data / "queries.jsonl",
            "--qrels", data / "qrels" / "train.tsv", "-o", out, *more]


@pytest.fixture(scope="module")
def model(tmp_path_factory, data):
    """`retr train splade` with SMALL's settings, uninterrupted, in a process of its own."""
    out = tmp_path_factory.mktemp("splade-model") / "M"
    r = run_retr(*_args(data, out, *SMALL, "--quiet"))
    assert r.returncode == 0, r.stderr
    return out


def test_the_card_says_what_was_trained_and_the_weights_moved(model, data):
    from retrieval.models import model_hash, resolve_model_path

    card = json.loads((model / "retr_train.json").read_text())
    assert card["kind"] == "splade" and card["settings"]["lambda_q"] == 5e-5 and card["settings"]["epochs"] == 2
    assert card["base_sha256"] == model_hash(resolve_model_path("splade-tiny"))
    assert card["data"]["examples"]["queries_used"] >= 20 and card["data"]["examples"]["dev_queries"] >= 4
    assert [e["epoch"] for e in card["history"]] == [1, 2] and all(e["dev_ndcg10"] is not None for e in card["history"])
    best = max(e["dev_ndcg10"] for e in card["history"])  # the epoch kept: the best held-out, the earliest of ties
    assert card["best_epoch"] == next(e["epoch"] for e in card["history"] if e["dev_ndcg10"] == best)
    assert card["seconds"]["train"] > 0
    assert "Held-out nDCG@10" in (model / "README.md").read_text()
    assert not (model / ".checkpoint").exists()
    base = load_file(resolve_model_path("splade-tiny") / "model.safetensors")
    mine = load_file(model / "model.safetensors")
    moved = [k for k in mine if k in base and mine[k].shape == base[k].shape and not (mine[k] == base[k]).all()]
    assert len(moved) > 10


def test_a_trained_model_is_indexed_searched_and_grown_through_the_normal_paths(tmp_path, model, data):
    from retrieval.check import check_index
    from retrieval.splade.model import SpladeEncoder
    from retrieval.types import Document
    from retrieval.writer import add_documents

    r = run_retr("index", "--corpus", data / "corpus.jsonl", "--index", tmp_path / "IDX", "--splade", model, "--quiet")
    assert r.returncode == 0, r.stderr
    idx = retrieval.open_index(tmp_path / "IDX")
    assert idx.manifest["subindexes"]["splade"]["model"]["name"] == str(model)
    q = retrieval.read_queries(data / "queries.jsonl")[0]
    hits = idx.search(q.text, k=5, retriever="splade", text=False)
    enc = SpladeEncoder(str(model), threads=1)
    doc = idx.get(hits[0].docid)
    qi, di = enc.impacts([q.text])[0], enc.impacts([doc.contents])[0]
    assert hits[0].score == pytest.approx(sum(w * di.get(t, 0) for t, w in qi.items()))
    idx = add_documents(idx, [Document("new-1", "zyxwvut quokka habitat on rottnest island", "Quokka")], quiet=True)
    assert idx.search("quokka rottnest", k=1, retriever="splade")[0].docid == "new-1"
    assert len(idx) == 121 and check_index(idx.path, full=True, strict=True).ok


def test_ctrl_c_keeps_the_last_epoch_and_resume_finishes_as_an_uninterrupted_run(tmp_path, data, model):
    """The same command as the ``model`` fixture's, in another process, stopped by Ctrl-C in its second
    epoch and resumed by a third: the weights and the history are the uninterrupted run's to the bit,
    so the same command also gives the same weights twice (processes apart)."""
    out = tmp_path / "M"
    # two epochs: Ctrl-C lands in the second (the first's checkpoint is on disk), --resume runs it
    args = [str(a) for a in _args(data, out, *SMALL)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-m", "cli.main", *args], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 600
    while not (out / ".checkpoint" / "state.pt").exists() and time.time() < deadline and p.poll() is None:
        time.sleep(0.2)
    assert (out / ".checkpoint" / "state.pt").exists(), p.communicate()[1] if p.poll() is not None else "timeout"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 130, err
    assert "--resume to continue" in err and "Traceback" not in err
    r = retr_in_process(*args)  # without --resume: refused
    assert r.returncode != 0 and "--resume" in r.stderr and "Traceback" not in r.stderr
    r = run_retr(*args, "--resume", "--quiet")  # a new process picks up the checkpoint
    assert r.returncode == 0, r.stderr
    ref = model  # the same command, uninterrupted
    a, b = load_file(out / "model.safetensors"), load_file(ref / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert json.loads((out / "retr_train.json").read_text())["history"] == \
        json.loads((ref / "retr_train.json").read_text())["history"]


def test_bad_input_is_one_line(tmp_path, data):
    from retrieval.models import resolve_model_path

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    stray = tmp_path / "stray.tsv"
    stray.write_text("query-id\tcorpus-id\tscore\nnope\tnone\t1\n")
    cases = [
        (_args(data, tmp_path / "a", "--qrels", data / "qrels" / "test.tsv"), "test qrels"),
        (["train", "splade", "--corpus", data / "corpus.jsonl", "-o", tmp_path / "b"], "--queries and --qrels"),
        (_args(data, tmp_path / "c", "--base", "minilm"), "no trained MLM head"),
        (_args(data, tmp_path / "d", "--base", tmp_path), "config.json"),
        (["train", "splade", "--corpus", data / "corpus.jsonl", "--queries", data / "queries.jsonl",
          "--qrels", stray, "-o", tmp_path / "e"], "none of the queries"),
        (["train", "splade", "--corpus", empty, "--queries", data / "queries.jsonl",
          "--qrels", data / "qrels" / "train.tsv", "-o", tmp_path / "f"], "retr: error:"),
        (_args(data, tmp_path / "g", "--lambda-q", "-1"), "lambda-q"),
    ]
    assert resolve_model_path("minilm")
    for i, (args, want) in enumerate(cases):
        # the first in a real process (what reaches fd 2 there counts too), the others in this one
        r = (run_retr if i == 0 else retr_in_process)(*args, "--quiet")
        assert r.returncode != 0, args
        assert want in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert len([l for l in r.stderr.splitlines() if l.strip()]) <= 2, (args, r.stderr)
    assert not any((tmp_path / n).exists() for n in "abcdefg")
