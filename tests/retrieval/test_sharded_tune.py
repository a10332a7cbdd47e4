"""A sharded DeepCT build tunes once, over the whole index, as one folder would (issue #30).

DeepCT chooses its defaults (mode, weight scale, k1/b of BM25 over pseudo term frequencies) and
the ``bm25+deepct`` default fusion on its model card's held-out training queries. A sharded build
makes that choice once through the sharded search (the index's global statistics), so every shard
records the single folder's choice, and the default runs equal the folder's byte for byte. Real
Lucene, a DeepCT model trained here on SPLADE-tiny with held-out (dev) queries over this corpus."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from tests.conftest import judged_slice, run_retr

DEFAULT_RUNS = ("deepct", "deepct-query", "bm25+deepct", "bm25")
NOT_COMPARED = ("tuned_at", "seconds")  # when and how fast a fusion was tuned: each build's own


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, scifact_dir):
    """100 SciFact passages (those judged for the first 45 training qrels first), those queries
    and their qrels."""
    return judged_slice(scifact_dir, 45, 100, tmp_path_factory.mktemp("st-data"))


@pytest.fixture(scope="module")
def model(tmp_path_factory, corpus):
    """Trained with a third of the queries held out: the card names them (its dev queries)."""
    import warnings

    from retrieval.deepct.train import TrainConfig, train_deepct

    out = tmp_path_factory.mktemp("st-model") / "M"
    cfg = TrainConfig(base="splade-tiny", epochs=1, lr=1e-3, batch_size=8, max_length=64, dev_fraction=0.34,
                      max_windows=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        card = train_deepct(corpus, out, queries=corpus / "queries.jsonl", qrels=corpus / "qrels" / "train.tsv",
                            cfg=cfg, quiet=True)
    assert len(card["data"]["dev_queries"]) >= 10
    return out


def _spec(model, **kw):
    from retrieval.deepct.subindex import DeepCTSpec

    return {"deepct": DeepCTSpec(model=str(model), max_length=64, **kw)}


@pytest.fixture(scope="module")
def pair(tmp_path_factory, corpus, model):
    import retrieval
    from retrieval.sharded.write import build_sharded

    base = tmp_path_factory.mktemp("st")
    single = retrieval.build_index(corpus, base / "single", subindexes=_spec(model), quiet=True)
    sharded = build_sharded(corpus, base / "sharded", 2, subindexes=_spec(model), quiet=True)
    yield single, sharded
    sharded.close()
    single.close()


def _shard_manifests(path: Path):
    from indexes import manifest as mf
    from indexes import sharded as sh

    return [mf.read_manifest(p) for p in sh.shard_paths(path, sh.read(path))]


def _tuned(m: dict) -> dict:
    """What a build's tuning records in a manifest: each DeepCT entry's config, tuning and spec,
    and the tuned pipelines (without their time stamps)."""
    subs = m["subindexes"]
    return {"entries": {n: {k: subs[n].get(k) for k in ("config", "tuning", "spec")}
                        for n in ("deepct", "deepct-query")},
            "pipelines": {b: {k: v for k, v in p.items() if k not in NOT_COMPARED}
                          for b, p in m.get("pipelines", {}).items()}}


def _run_text(idx, queries, retriever, k=30) -> str:
    from retrieval.runs import write_run

    res = idx.batch_search(queries, k=k, retriever=retriever)
    with tempfile.TemporaryDirectory() as d:
        write_run(res, Path(d) / "run", tag="t")
        return (Path(d) / "run").read_text()


def _queries(corpus: Path) -> dict:
    qs = {json.loads(l)["_id"]: json.loads(l)["text"] for l in open(corpus / "queries.jsonl", encoding="utf-8")}
    qs.update({"short": "cell", "two": "cancer risk", "none": "zzzqx"})
    return qs


def _assert_same_runs(single, sharded, corpus):
    qs = _queries(corpus)
    unequal = [r for r in DEFAULT_RUNS if _run_text(single, qs, r) != _run_text(sharded, qs, r)]
    assert not unequal, unequal


def test_a_sharded_build_records_the_single_folder_s_tuning_in_every_shard(pair, corpus):
    single, sharded = pair
    want = _tuned(single.manifest)
    t = want["entries"]["deepct"]["tuning"]
    assert t and t["queries"] >= 10 and len(t["grid"]) == 2 * 7 * 5  # it did tune, on the dev queries
    assert "bm25+deepct" in want["pipelines"]
    shards = _shard_manifests(sharded.path)
    assert [_tuned(m) for m in shards] == [want, want]
    assert shards[0]["pipelines"] == shards[1]["pipelines"]  # one record, time stamps included
    assert all(m["subindexes"]["deepct"]["spec"]["tune"] for m in shards)  # the user's spec, as asked
    # the tuning is one commit of the sharded index, after the shards' own builds
    from indexes import sharded as sh

    assert sh.read(sharded.path)["generations"] == [m["generation"] for m in shards]
    _assert_same_runs(single, sharded, corpus)


def test_retuning_a_sharded_index_commits_once_and_matches_the_folder(pair, corpus, tmp_path):
    """`retr deepct-tune --index SHARDED` pins a default in every shard with one commit; back on
    auto it is the folder's choice again. `retr tune --index SHARDED` stores the folder's fusion."""
    from indexes import sharded as sh

    single, sharded = pair
    want = _tuned(single.manifest)
    before = sh.read(sharded.path)["generations"]
    r = run_retr("deepct-tune", "--index", sharded.path, "--mode", "impact", "--scale", "sqrt", "--quiet")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("deepct: impact-sqrt") and "dev queries" in r.stdout, r.stdout
    after = sh.read(sharded.path)["generations"]
    assert after == [g + 1 for g in before]
    for m in _shard_manifests(sharded.path):
        for name in ("deepct", "deepct-query"):
            assert (m["subindexes"][name]["config"]["mode"], m["subindexes"][name]["config"]["scale"]) == \
                ("impact", "sqrt")
    r = run_retr("deepct-tune", "--index", sharded.path, "--name", "bm25")
    assert r.returncode == 2 and "no DeepCT sub-index named 'bm25'" in r.stderr, r.stderr
    assert r.stderr.startswith("retr: error:") and len(r.stderr.strip().splitlines()) == 1
    first = sh.shard_paths(sharded.path, sh.read(sharded.path))[0]  # one shard alone would choose on its part
    r = run_retr("deepct-tune", "--index", first)
    assert r.returncode == 2 and "is shard 0 of 2 of a sharded index: retune the sharded index" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = run_retr("tune", "--index", first, "--queries", corpus / "queries.jsonl", "--qrels",
                 corpus / "qrels" / "train.tsv", "--retriever", "bm25+deepct")
    assert r.returncode == 2 and "is shard 0 of 2 of a sharded index: tune the sharded index" in r.stderr, r.stderr
    assert sh.read(sharded.path)["generations"] == after  # nothing committed
    r = run_retr("deepct-tune", "--index", sharded.path, "--quiet")
    assert r.returncode == 0, r.stderr
    assert [_tuned(m) for m in _shard_manifests(sharded.path)] == [want, want]
    sharded.refresh()
    _assert_same_runs(single, sharded, corpus)
    # a fusion tuned on training queries: the same report as the folder's, stored in every shard
    args = ("--queries", corpus / "queries.jsonl", "--qrels", corpus / "qrels" / "train.tsv",
            "--retriever", "bm25+deepct-query", "--depth", "100", "--quiet")
    a = run_retr("tune", "--index", single.path, *args)
    b = run_retr("tune", "--index", sharded.path, *args)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout and a.stdout.startswith("best bm25+deepct-query")
    single.refresh()
    got = [_tuned(m)["pipelines"] for m in _shard_manifests(sharded.path)]
    assert got == [_tuned(single.manifest)["pipelines"]] * 2
    sharded.refresh()
    qs = _queries(corpus)
    assert _run_text(single, qs, "bm25+deepct-query") == _run_text(sharded, qs, "bm25+deepct-query")


def test_a_change_of_one_shard_drops_the_tuned_fusions_of_all_as_in_the_folder(pair, corpus, tmp_path):
    """One folder drops its tuned pipelines when its documents change; a sharded index whose change
    reaches one shard drops them in every shard (the router reads one common record)."""
    from indexes import sharded as sh
    from retrieval import writer
    from retrieval.collections import read_corpus

    single, sharded = pair
    assert all(m.get("pipelines") for m in _shard_manifests(sharded.path))
    docid = next(f"new{i}" for i in range(100) if sh.shard_of(f"new{i}", 2) == 1)  # shard 1 alone changes
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"_id": docid, "title": "added", "text": "vitamin d and bone density in cells"}) + "\n")
    r = run_retr("add", "--index", sharded.path, "--corpus", new, "-q")
    assert r.returncode == 0, r.stderr
    writer.add_documents(single.path, list(read_corpus(new)), quiet=True).close()
    single.refresh()
    sharded.refresh()
    assert not single.manifest.get("pipelines")
    assert [m.get("pipelines") for m in _shard_manifests(sharded.path)] == [None, None]
    _assert_same_runs(single, sharded, corpus)


def test_the_cli_builds_a_sharded_index_with_the_deepct_options(corpus, model, tmp_path):
    """`retr index --shards N --deepct` takes a single build's DeepCT switches: a pinned mode and
    scale are kept, and k1/b and the fusion are tuned once for every shard."""
    r = run_retr("index", "--corpus", corpus, "--index", tmp_path / "S", "--shards", "2", "--deepct", model,
                 "--deepct-mode", "bm25", "--deepct-scale", "sqrt", "--quiet")
    assert r.returncode == 0, r.stderr
    shards = _shard_manifests(tmp_path / "S")
    got = [_tuned(m) for m in shards]
    assert got[0] == got[1]
    cfg = got[0]["entries"]["deepct"]["config"]
    assert (cfg["mode"], cfg["scale"]) == ("bm25", "sqrt")
    t = got[0]["entries"]["deepct"]["tuning"]
    assert t["scales"] == ["sqrt"] and (cfg["k1"], cfg["b"]) == (t["best"]["k1"], t["best"]["b"])
    assert "bm25+deepct" in got[0]["pipelines"]
