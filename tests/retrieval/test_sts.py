"""STS evaluation protocol and Ditto head selection, checked against scipy computed here."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import spearmanr

from indexes.errors import InputError
from retrieval.dense import sts
from retrieval.dense.encoder import DenseEncoder
from retrieval.dense.pooling import UnknownPoolingError


@pytest.fixture(scope="module")
def sts_dir():
    try:
        return sts.find_sts_dir()
    except InputError:
        pytest.skip("STS data not found (set RETR_STS)")


@pytest.fixture(scope="module")
def tiny_enc():
    return DenseEncoder("splade-tiny", device="cpu")


@pytest.fixture(scope="module")
def minilm():
    return DenseEncoder("minilm", device="cpu")


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RETR_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_loader_counts_match_the_data_manifest(sts_dir):
    counts = json.loads((sts_dir / "counts.json").read_text())
    folders = {"STS12": "sts12", "STS13": "sts13", "STS14": "sts14", "STS15": "sts15", "STS16": "sts16",
               "STS-B": "stsb", "SICK-R": "sickr"}
    for name, key in folders.items():
        s1, s2, y = sts.load_set(name, "senteval", sts_dir)
        r1, r2, ry = sts.load_set(name, "raw", sts_dir)
        assert len(s1) == len(s2) == len(y) == len(ry)
        np.testing.assert_array_equal(y, ry)  # same pairs, same order
        entry = counts[key]
        expect = entry.get("test", {}).get("pairs") or entry.get("official_pairs")
        if expect:
            assert len(y) == expect, name
    with pytest.raises(InputError, match="unknown STS set"):
        sts.load_set("STS99", sts_dir=sts_dir)


def test_all_setting_and_poolers_against_scipy(tiny_enc, sts_dir):
    """STS16 "all" = one Spearman over the concatenated subsets; recomputed from the subset files."""
    res = sts.evaluate(tiny_enc, ["mean", "first-last"], sets=["STS16", "STS-B"], sts_dir=sts_dir, quiet=True)
    s1, s2, y = [], [], []
    for f in sorted((sts_dir / "sts16" / "subsets").glob("*.senteval.tsv")):
        a, b, g = sts.read_pairs(f)
        s1 += a; s2 += b; y.append(g)
    A, B = tiny_enc.encode(s1, quiet=True), tiny_enc.encode(s2, quiet=True)
    ref = spearmanr((A * B).sum(1), np.concatenate(y)).statistic * 100
    assert res["mean"]["STS16"] == pytest.approx(ref, abs=0.01)
    assert res["mean"]["avg"] == pytest.approx((res["mean"]["STS16"] + res["mean"]["STS-B"]) / 2)
    assert res["first-last"]["STS16"] != pytest.approx(res["mean"]["STS16"], abs=0.1)


def test_sweep_matches_per_head_encoder_and_is_stored(minilm, sts_dir, home):
    rec = sts.select_ditto_head(minilm, max_pairs=60, sts_dir=sts_dir, quiet=True)
    assert set(rec["scores"]) == {"first-last", "last"}
    grids = {st: np.array(g) for st, g in rec["scores"].items()}
    assert all(g.shape == (6, 12) for g in grids.values())
    best = max(grids, key=lambda st: grids[st].max())
    assert rec["states"] == best
    assert (rec["layer"], rec["head"]) == np.unravel_index(grids[best].argmax(), (6, 12))
    s1, s2, y = sts.load_dev_pairs(60, "senteval", sts_dir)
    for st, layer, head in [(rec["states"], rec["layer"], rec["head"]), ("first-last", 5, 1), ("last", 2, 3)]:
        e = DenseEncoder.from_config({**minilm.config(), "pooling": "ditto", "ditto_layer": layer,
                                      "ditto_head": head, "ditto_states": st}, device="cpu")
        assert e.ditto_states == st
        cos = (e.encode(s1, quiet=True) * e.encode(s2, quiet=True)).sum(1)
        assert grids[st][layer, head] == pytest.approx(spearmanr(cos, y).statistic * 100, abs=0.02)
    # the stored choice is what --pooling ditto now uses for this model
    picked = DenseEncoder("minilm", pooling="ditto", auto_select=False, device="cpu")
    assert picked.ditto_layer_head == (rec["layer"], rec["head"]) and picked.ditto_states == rec["states"]
    assert picked.config()["ditto_states"] == rec["states"]
    # a manifest written before the states choice existed means the authors' first-last average
    old = {**picked.config(), "ditto_states": None}
    assert DenseEncoder.from_config(old, device="cpu").ditto_states == "first-last"
    assert picked.ditto_source.startswith("stored:") and str(home) in picked.ditto_source


def test_no_stored_choice_is_a_clear_error(home):
    with pytest.raises(UnknownPoolingError, match="ditto-select"):
        DenseEncoder("splade-tiny", pooling="ditto", auto_select=False, device="cpu")


def test_cli_ditto_select_and_eval_sts(sts_dir, home):
    from cli.dense_cmds import ditto_select, sts as sts_cmd
    r = CliRunner().invoke(ditto_select, ["--model", "splade-tiny", "--max-pairs", "80", "--sts-dir", str(sts_dir), "-q"])
    assert r.exit_code == 0, r.output
    assert "best: layer" in r.output and "stored in" in r.output and "best per states: first-last" in r.output
    assert len(list((home / "ditto").glob("*.json"))) == 1
    out = home / "sts.json"
    r = CliRunner().invoke(sts_cmd, ["--model", "splade-tiny", "--pooling", "mean", "--pooling", "ditto",
                                     "--set", "STS-B", "--sts-dir", str(sts_dir), "-q", "-o", str(out)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == "| pooling | STS-B | avg |" and lines[2].startswith("| mean |")
    assert lines[3].startswith("| ditto (")
    saved = json.loads(out.read_text())
    assert set(saved["spearman"]) == {"mean", "ditto"}
    bad = CliRunner().invoke(sts_cmd, ["--model", "splade-tiny", "--pooling", "max", "--sts-dir", str(sts_dir)])
    assert bad.exit_code != 0 and isinstance(bad.exception, InputError)
