"""`retr train dense` / retrieval.dense.train: MLM pre-training (random, ROM) and contrastive
fine-tuning on the tiny SPLADE body, a few hundred real SciFact passages, real Lucene, real files."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import ROOT, need, retr_in_process, run_retr

SETTINGS = dict(base="splade-tiny", pretrain_max_length=64, max_length=64, query_length=32, batch_size=16,
                pretrain_batch_size=16, epochs=1, threads=1, device="cpu")


@pytest.fixture(scope="module")
def train_data(tmp_path_factory, scifact_dir):
    """160 passages: those judged for the first 60 training qrels, then the corpus's first ones."""
    out = tmp_path_factory.mktemp("dense-train")
    qrels = [l.split("\t") for l in (need(scifact_dir / "qrels" / "train.tsv")).read_text().splitlines()[1:61]]
    wanted = {d for _, d, _ in qrels}
    docs, rest = [], []
    for line in open(scifact_dir / "corpus.jsonl", encoding="utf-8"):
        (docs if json.loads(line)["_id"] in wanted else rest).append(line)
    docs += rest[:160 - len(docs)]
    (out / "corpus.jsonl").write_text("".join(docs), encoding="utf-8")
    qids = {q for q, _, _ in qrels}
    (out / "queries.jsonl").write_text("".join(l for l in open(scifact_dir / "queries.jsonl", encoding="utf-8")
                                               if json.loads(l)["_id"] in qids), encoding="utf-8")
    (out / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join("\t".join(r) + "\n" for r in qrels))
    return out


def _weights(folder: Path) -> dict:
    return load_file(str(folder / "model.safetensors"))


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def trained(train_data, tmp_path_factory):
    from retrieval.dense.training import train

    out = tmp_path_factory.mktemp("model") / "rom-ft"
    d = train_data
    train(d / "corpus.jsonl", out, d / "queries.jsonl", d / "train.tsv", pretrain="rom", quiet=True, **SETTINGS)
    return out


def test_the_card_records_base_hashes_settings_times_and_the_held_out_metric(trained, train_data):
    card = json.loads((trained / "retr_train.json").read_text())
    assert card["settings"]["pretrain"] == "rom" and card["settings"]["importance"] == "bm25"
    assert card["data"]["mlm_head"] == "trained"  # SPLADE-tiny ships its MLM head
    assert len(card["data"]["corpus_sha256"]) == 16 and len(card["data"]["qrels_sha256"]) == 16
    assert card["data"]["passages"] == 160 and card["data"]["examples"]["dev_queries"] >= 1
    assert [e["epoch"] for e in card["history"]["finetune"]] == [1]
    assert 0 <= card["history"]["finetune"][0]["dev_ndcg10"] <= 1
    assert card["seconds"]["pretrain"] > 0 and card["seconds"]["finetune"] > 0
    # ROM masked exactly random's budget of tokens: 15% of each passage, rounded half up
    assert card["data"]["masked_tokens_per_epoch"] > 0.13 * 160 * 20
    assert not (trained / ".checkpoint").exists()
    assert "held-out nDCG@10" in (trained / "README.md").read_text()


def test_training_changes_the_weights_and_the_same_settings_give_the_same_model(trained, train_data, tmp_path):
    from retrieval.dense.training import train
    from retrieval.models import bundled_model_path

    d = train_data
    again = train(d / "corpus.jsonl", tmp_path / "again", d / "queries.jsonl", d / "train.tsv", pretrain="rom",
                  quiet=True, **SETTINGS)
    assert _same(_weights(trained), _weights(again))
    base = _weights(bundled_model_path("splade-tiny"))
    mine = _weights(trained)
    shared = [k for k in mine if "bert." + k in base]
    assert shared and any(not torch.equal(mine[k], base["bert." + k]) for k in shared)
    other = train(d / "corpus.jsonl", tmp_path / "seed1", d / "queries.jsonl", d / "train.tsv", pretrain="rom",
                  quiet=True, **dict(SETTINGS, seed=1))
    assert not _same(_weights(trained), _weights(other))


def test_a_trained_model_is_indexed_added_to_and_searched_like_minilm(trained, train_data, tmp_path):
    import retrieval
    from retrieval.check import check_index
    from retrieval.dense.encoder import DenseEncoder
    from retrieval.dense.subindex import DenseSpec

    idx = retrieval.build_index(train_data / "corpus.jsonl", tmp_path / "IDX", quiet=True,
                                subindexes={"dense": DenseSpec(model=str(trained))})
    hits = idx.search("cancer cells", k=5, retriever="dense")
    assert len(hits) == 5 and all(h.text for h in hits)
    from retrieval.types import Document
    from retrieval.writer import add_documents

    before = {h.docid for h in idx.search("cancer cells", k=160, retriever="dense")}
    idx = add_documents(idx, [Document("new-1", "Tumour cells divide without control.")], quiet=True)
    after = {h.docid for h in idx.search("cancer cells", k=161, retriever="dense")}
    assert after == before | {"new-1"} and len(before) == 160
    enc = DenseEncoder(trained, device="cpu")
    assert enc.max_length == 64  # the training length: SPLADE-tiny has no sentence-transformers config
    assert idx.manifest["subindexes"]["dense"]["model"]["sha256"] == enc.model_hash
    # sentence-transformers reads the same folder and embeds as retr does
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(str(trained), device="cpu")
    assert abs(st.encode(["cancer cells"]) - enc.encode(["cancer cells"])).max() < 1e-5
    report = check_index(idx.path)
    assert report.ok, report


def _cli(train_data, out, *extra):
    d = train_data
    return [sys.executable, "-m", "cli.main", "train", "dense", "--corpus", d / "corpus.jsonl", "--queries",
            d / "queries.jsonl", "--qrels", d / "train.tsv", "--output", out, "--base", "splade-tiny",
            "--pretrain", "random", "--pretrain-epochs", "1", "--epochs", "2", "--max-length", "64",
            "--batch-size", "16", "--threads", "1", "--device", "cpu", *extra]


def test_ctrl_c_keeps_the_last_epoch_and_resume_gives_the_uninterrupted_model(train_data, tmp_path):
    whole = tmp_path / "whole"
    r = retr_in_process(*_cli(train_data, whole, "-q")[3:])  # the reference: the same command, uninterrupted
    assert r.returncode == 0, r.stderr
    out = tmp_path / "cut"
    p = subprocess.Popen(list(map(str, _cli(train_data, out))), cwd=ROOT, stderr=subprocess.PIPE, text=True,
                         stdout=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (out / ".checkpoint" / "best.pt").exists() and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)  # best.pt appears with the first fine-tuning epoch: both stages have run
    assert p.poll() is None, "the run ended before it could be interrupted"
    p.send_signal(signal.SIGINT)
    err = p.communicate(timeout=120)[1]
    assert p.returncode == 130, err
    assert "--resume" in err and str(out / ".checkpoint") in err and "the last finished epoch (" in err
    assert not (out / "retr_train.json").exists()
    again = retr_in_process(*_cli(train_data, out)[3:])  # without --resume: refused, nothing touched
    assert again.returncode != 0 and "--resume" in again.stderr and (out / ".checkpoint" / "state.pt").exists()
    done = run_retr(*_cli(train_data, out, "--resume", "-q")[3:])
    assert done.returncode == 0, done.stderr
    assert _same(_weights(whole), _weights(out))
    a, b = (json.loads((f / "retr_train.json").read_text()) for f in (whole, out))
    assert a["history"] == b["history"] and a["best_epoch"] == b["best_epoch"]


def test_bad_input_is_one_error_line(train_data, tmp_path, scifact_dir):
    d = train_data
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    other = tmp_path / "other.tsv"
    other.write_text("query-id\tcorpus-id\tscore\nnope\t1\t1\n")
    notmodel = tmp_path / "notmodel"
    notmodel.mkdir()
    (notmodel / "config.json").write_text("{}")
    base = ["train", "dense", "--output", tmp_path / "o", "--base", "splade-tiny", "--threads", "1", "-q"]
    cases = {
        "no passages": [*base, "--corpus", empty, "--pretrain", "random"],
        "qrels that match no query": [*base, "--corpus", d / "corpus.jsonl", "--queries", d / "queries.jsonl",
                                      "--qrels", other],
        "test qrels": [*base, "--corpus", d / "corpus.jsonl", "--queries", d / "queries.jsonl",
                       "--qrels", scifact_dir / "qrels" / "test.tsv"],
        "a base that is not a model": ["train", "dense", "--output", tmp_path / "o", "--base", notmodel,
                                       "--corpus", d / "corpus.jsonl", "--pretrain", "random", "-q"],
        "nothing to train": [*base, "--corpus", d / "corpus.jsonl"],
        "bad importance": [*base, "--corpus", d / "corpus.jsonl", "--pretrain", "rom", "--importance", "tfidf"],
        "queries without qrels": [*base, "--corpus", d / "corpus.jsonl", "--queries", d / "queries.jsonl"],
    }
    for i, (name, args) in enumerate(cases.items()):
        # the first in a real process (what reaches fd 2 there counts too), the others in this one
        r = (run_retr if i == 0 else retr_in_process)(*args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode != 0 and len(lines) == 1 and lines[0].startswith("retr: error:"), (name, r.stderr)
        assert "Traceback" not in r.stderr
        if name == "test qrels":
            assert "test" in r.stderr.replace("retr: error:", "")


def test_an_output_folder_that_holds_a_model_is_not_overwritten(trained, train_data):
    before = _weights(trained)
    r = retr_in_process("train", "dense", "--corpus", train_data / "corpus.jsonl", "--output", trained,
                        "--pretrain", "random", "--base", "splade-tiny", "-q")
    assert r.returncode != 0 and "--overwrite" in r.stderr
    assert _same(before, _weights(trained))


def test_deepct_importance_is_the_models_weight_of_each_whole_word(train_data, tmp_path):
    from retrieval.deepct.model import DeepCTEncoder
    from retrieval.deepct.train import TrainConfig, train_deepct
    from retrieval.dense import masking, mlm
    from retrieval.models import bundled_model_path

    d = train_data
    model = tmp_path / "deepct"
    train_deepct(d / "corpus.jsonl", model, d / "queries.jsonl", d / "train.tsv",
                 TrainConfig(base="splade-tiny", epochs=1, max_length=64), quiet=True)
    texts = [json.loads(line)["text"] for line in open(d / "corpus.jsonl", encoding="utf-8")][:6]
    tok = mlm.load_mlm(bundled_model_path("splade-tiny")).tokenizer
    weights = mlm.importance_of(f"deepct:{model}", texts, tok, 64)
    scored = DeepCTEncoder(model, device="cpu").encode_words(texts)
    for text, w, pairs in zip(texts, weights, scored):
        ws = masking.words(tok, text, 64)
        table = {masking._plain(word): v for word, v in pairs}
        assert len(w) == len(ws) and (w >= 0).all() and w.max() > 0
        # a word DeepCT scored carries its weight (negatives clipped to 0); the window may be cut shorter here
        seen = [(v, table[masking._plain(t)]) for t, v in zip(ws.texts, w) if masking._plain(t) in table]
        assert len(seen) > len(ws) // 2 and all(v == max(x, 0.0) for v, x in seen)
    r = retr_in_process("train", "dense", "--corpus", d / "corpus.jsonl", "--output", tmp_path / "o", "--pretrain",
                        "rom", "--importance", f"deepct:{tmp_path / 'missing'}", "--base", "splade-tiny", "-q")
    assert r.returncode != 0 and r.stderr.startswith("retr: error:") and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_the_command_line_defaults_are_the_apis():
    """`retr train dense` without options trains what `retrieval.dense.train` does without settings:
    every option backed by a DenseTrainConfig field has that field's default (the README's recipe
    relies on it, and a default changed in one place only would split the two)."""
    from dataclasses import fields

    from cli.main import retr
    from retrieval.dense.train_config import DenseTrainConfig

    defaults = {f.name: f.default for f in fields(DenseTrainConfig)}
    shared = [p for p in retr.commands["train"].commands["dense"].params if p.name in defaults]
    assert {p.name for p in shared} >= {"epochs", "lr", "batch_size", "hard_negatives", "max_length", "mask_rate",
                                        "pretrain_epochs", "dev_share", "pooling", "seed", "pretrain", "importance"}
    for p in shared:
        assert p.default == defaults[p.name], (p.name, p.default, defaults[p.name])


def test_positives_per_query_caps_each_querys_examples_per_epoch_and_redraws_them():
    """A query with many relevant passages (NFCorpus has dozens) brings at most ``per_query`` of them
    to an epoch, a different draw each epoch, seeded; without the cap every example comes, once."""
    from retrieval.pairs import batches
    from retrieval.pairs import Example

    counts = {"a": 6, "b": 1, "c": 3}
    examples = [Example(q, f"query {q}", f"{q}{i}", f"passage {q}{i}", (f"n{q}{i}",), (f"negative {q}{i}",))
                for q, n in counts.items() for i in range(n)]

    def epoch(e, per_query, seed=0):
        rows = [r for b in batches(examples, 2, 1, seed, e, per_query) for r in b]
        for b in batches(examples, 2, 1, seed, e, per_query):
            assert len({r[0] for r in b}) == len(b)  # a query at most once per batch
        return sorted(r[1] for r in rows)

    everything = epoch(0, None)
    assert everything == sorted(e.positive for e in examples)
    draws = [epoch(e, 2) for e in range(6)]
    for d in draws:
        assert [sum(p.startswith(f"passage {q}") for p in d) for q in counts] == [2, 1, 2]
        assert set(d) <= set(everything) and len(set(d)) == len(d)
    assert len({tuple(d) for d in draws}) > 1            # redrawn across epochs
    assert draws[3] == epoch(3, 2)                        # the same seed and epoch, the same draw
    assert any(epoch(e, 2, seed=1) != draws[e] for e in range(6))
