"""Model stages on Ray (`--executor ray`): the same index as in-process, a killed worker
retried, a cluster that goes away, and bad input. A real local Ray cluster (one for the
whole session, 2 CPUs, fractional CPUs per actor), real models, real kills."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import retrieval
from tests.conftest import ROOT, retr_in_process, run_retr
from tests.conftest import dense_vectors as _vectors
from tests.conftest import encoded_by

pytest.importorskip("ray", reason="Ray is not installed (pip install 'retr[ray]')")

from retrieval.dense.subindex import DenseSpec  # noqa: E402
from retrieval.executors import Executor  # noqa: E402


def _runs(idx, queries, retriever, k=100):
    return {q: [(h.docid, h.score) for h in hits]
            for q, hits in idx.batch_search(queries, k=k, retriever=retriever).items()}


def _same_runs(a, b, tol=1e-5):
    """The same run up to float ties: at every rank the scores agree within ``tol``, every
    document in both agrees within ``tol``, documents in only one sit at the cut-off, and at
    least 99% of the queries have the very same top 10 (vectors encoded in other batches
    differ in the 7th decimal, so two documents that tie within that may swap)."""
    assert a.keys() == b.keys()
    same10 = 0
    for q in a:
        sa, sb = dict(a[q]), dict(b[q])
        assert np.allclose([s for _, s in a[q]], [s for _, s in b[q]], atol=tol), q
        assert all(abs(sa[d] - sb[d]) <= tol for d in sa.keys() & sb.keys()), q
        cut = min(s for _, s in a[q]) if a[q] else 0
        assert all(abs(sa.get(d, sb.get(d)) - cut) <= tol for d in sa.keys() ^ sb.keys()), q
        same10 += [d for d, _ in a[q][:10]] == [d for d, _ in b[q][:10]]
    assert same10 >= 0.99 * len(a)


@pytest.fixture(scope="module")
def queries(small_corpus):
    from retrieval.collections import read_queries

    return list(read_queries(small_corpus / "queries.jsonl"))


def _descendants(pid):
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    kids, rows = {}, {}
    for line in out.splitlines():
        p, pp, args = line.split(None, 2) if len(line.split(None, 2)) == 3 else (*line.split(None, 1), "")
        kids.setdefault(int(pp), []).append(int(p))
        rows[int(p)] = args
    todo, found = [pid], {}
    while todo:
        for c in kids.get(todo.pop(), []):
            found[c] = rows[c]
            todo.append(c)
    return found


# ---------------------------------------------------------------------------------- same result
def test_dense_on_ray_is_the_in_process_index_even_when_a_worker_is_killed(tmp_path, small_corpus, small_dense_index,
                                                                          ray_address, queries):
    """160 SciFact passages, MiniLM, 2 workers x 0.5 CPU, blocks of 10 (16 blocks, as 400 in blocks
    of 25 were); the worker that returned the first block is killed (SIGKILL) while it holds more:
    Ray restarts it, retries its blocks, and the folder equals the in-process one: the vectors are
    the shared dense index's (MiniLM in process) for those passages, and the runs are those of an
    in-process build of the same 160 passages with those vectors."""
    lines = (small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:160]
    corpus = tmp_path / "in" / "c.jsonl"
    corpus.parent.mkdir()
    corpus.write_text("".join(lines), encoding="utf-8")
    seen, killed = [], []

    def on_block(b):
        seen.append(b["pid"])
        if not killed:
            os.kill(b["pid"], signal.SIGKILL)
            killed.append(b["pid"])

    ex = Executor("ray", address=ray_address, workers=2, cpus_per_worker=0.5, block_size=10, on_block=on_block)
    idx = retrieval.index_corpus(corpus, tmp_path / "RAY", subindexes={"dense": DenseSpec()}, quiet=True,
                                 executor=ex)
    # blocks it finished before the kill may still arrive; the rest came from a restarted actor
    assert killed and len(set(seen)) >= 3 and seen.index(max(set(seen), key=seen.index)) > 0
    ids_a, va = _vectors(small_dense_index.path / "dense")
    ids_b, vb = _vectors(idx.path / "dense")
    want = [json.loads(l)["_id"] for l in lines]
    assert ids_b == want and ids_a[:160] == want  # (the shared index holds the corpus in its order)
    assert np.abs(va[:160] - vb).max() <= 1e-5
    e = idx.manifest["subindexes"]["dense"]["encoded_by"]
    assert e["executor"] == "ray" and e["workers"] == 2 and e["cpus_per_worker"] == 0.5 and e["devices"] == ["cpu"]
    assert e["worker_processes"] == len(set(seen)) and e["block_size"] == 10
    assert small_dense_index.manifest["subindexes"]["dense"]["encoded_by"]["executor"] == "in-process"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RAY", "in"]  # no staging folder, no encoding cache
    ref = retrieval.build_index(corpus, tmp_path / "REF", subindexes={"dense": DenseSpec()}, quiet=True,
                                precomputed=encoded_by(small_dense_index))
    assert ref.manifest["subindexes"]["dense"]["vectors_from"] != "encoded"
    # a fusion named in full, as in the shared fixture (another test stores a tuned bm25+dense there)
    for r in ("dense", "bm25", "bm25+dense:combmnz(norm=minmax)"):
        _same_runs(_runs(ref, queries, r), _runs(idx, queries, r))


@pytest.fixture(scope="module")
def deepct_model(tmp_path_factory, scifact_dir):
    """A tiny DeepCT model (SPLADE-tiny body, 60 training passages, one epoch)."""
    from retrieval.deepct.train import TrainConfig, train_deepct

    d = tmp_path_factory.mktemp("ray-deepct")
    pairs = [l.split("\t") for l in (scifact_dir / "qrels" / "train.tsv").read_text().splitlines()[1:]][:20]
    wanted = {p[1] for p in pairs}
    lines = [l for l in open(scifact_dir / "corpus.jsonl", encoding="utf-8") if json.loads(l)["_id"] in wanted]
    (d / "corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    qids = {p[0] for p in pairs}
    (d / "queries.jsonl").write_text("".join(l for l in open(scifact_dir / "queries.jsonl", encoding="utf-8")
                                             if json.loads(l)["_id"] in qids), encoding="utf-8")
    (d / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join("\t".join(p) + "\n" for p in pairs))
    cfg = TrainConfig(base="splade-tiny", epochs=1, lr=1e-3, batch_size=8, max_length=64, dev_fraction=0.0,
                      max_windows=1, checkpoint_every=1000)
    train_deepct(d / "corpus.jsonl", d / "M", queries=d / "queries.jsonl", qrels=d / "qrels.tsv", cfg=cfg, quiet=True)
    return d / "M"


def _weights(folder):
    with gzip.open(folder / "weights.jsonl.gz", "rt", encoding="utf-8") as f:
        return f.read()


def test_deepct_on_ray_gives_identical_weights_and_runs(tmp_path, small_corpus, deepct_model, ray_address, queries):
    """DeepCT passage weights computed by 2 Ray workers in blocks of 50 (200 passages: 4 blocks)
    are the weights of the in-process encoder over the same blocks, byte for byte, and every DeepCT
    retriever returns the same run. Stemming (the JVM) stays in the driver."""
    from retrieval.deepct.subindex import DeepCTSpec
    from retrieval.writer import add_subindex

    lines = (small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:200]
    (tmp_path / "c.jsonl").write_text("".join(lines), encoding="utf-8")
    base = retrieval.build_index(tmp_path / "c.jsonl", tmp_path / "base", quiet=True).path
    out = {}
    for name, ex in (("local", Executor("local", block_size=50)),
                     ("ray", Executor("ray", address=ray_address, workers=2, cpus_per_worker=0.5, block_size=50))):
        shutil.copytree(base, tmp_path / name)
        out[name] = add_subindex(retrieval.open_index(tmp_path / name), DeepCTSpec(model=str(deepct_model)),
                                 quiet=True, executor=ex)
    a, b = out["local"], out["ray"]
    assert _weights(a.path / "deepct") == _weights(b.path / "deepct")
    ea, eb = a.manifest["subindexes"]["deepct"], b.manifest["subindexes"]["deepct"]
    assert ea["variant_bytes"].keys() == eb["variant_bytes"].keys()
    assert ea["documents_without_terms"] == eb["documents_without_terms"]
    assert eb["encoded_by"]["executor"] == "ray" and eb["encoded_by"]["workers"] == 2
    for r in ("deepct", "deepct-query", "bm25+deepct"):
        ra, rb = _runs(a, queries, r), _runs(b, queries, r)
        assert ra == rb, r
    # the in-process default (blocks of 2048: one here) scores the same words the same way
    shutil.copytree(base, tmp_path / "default")
    c = add_subindex(retrieval.open_index(tmp_path / "default"), DeepCTSpec(model=str(deepct_model)), quiet=True)
    wa = [json.loads(l) for l in _weights(a.path / "deepct").splitlines()]
    wc = [json.loads(l) for l in _weights(c.path / "deepct").splitlines()]
    assert [x["id"] for x in wa] == [x["id"] for x in wc]
    assert all(x["w"].keys() == y["w"].keys() and np.allclose(list(x["w"].values()), list(y["w"].values()), atol=2e-5)
               for x, y in zip(wa, wc))


def test_splade_on_ray_gives_the_in_process_index(tmp_path, small_corpus, ray_address, queries):
    """SPLADE impacts computed by 2 Ray workers are the in-process encoder's to the bit (each passage is
    encoded alone, whatever its block), so the runs are identical, scores included."""
    from indexes.lucene import postings
    from retrieval.splade.subindex import SpladeSpec

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join((small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(True)[:80]),
                      encoding="utf-8")
    out = {}
    for name, ex in (("local", Executor("local", block_size=25)),
                     ("ray", Executor("ray", address=ray_address, workers=2, cpus_per_worker=0.5, block_size=30))):
        out[name] = retrieval.build_index(corpus, tmp_path / name, subindexes={"splade": SpladeSpec()}, quiet=True,
                                          executor=ex)
    a, b = out["local"], out["ray"]
    assert b.manifest["subindexes"]["splade"]["encoded_by"]["executor"] == "ray"
    pa, pb = (postings(i.path / i.manifest["subindexes"]["splade"]["path"] / "impact") for i in (a, b))
    assert pa == pb and pa["documents"] == 80
    for r in ("splade", "bm25+splade"):
        assert _runs(a, queries, r, k=50) == _runs(b, queries, r, k=50), r


def test_pruned_build_on_ray_prunes_the_same_passages(tmp_path, small_corpus, ray_address, queries,
                                                     pruned_dense_index):
    """The learned quality estimator scored on Ray (blocks of 100) keeps the same passages as in
    process, its vectors stand in for the dense encoding as they do in process, and the runs agree."""
    from retrieval.dense.subindex import DenseSpec

    # the learned head named: the default estimator (length) needs no model and scores in the driver
    a = pruned_dense_index  # in process: build_pruned_index, which index_corpus(prune=) runs in its staging folder
    b = retrieval.index_corpus(small_corpus, tmp_path / "B", prune=0.3, quality="learned", subindexes={"dense": DenseSpec()}, quiet=True,
                               executor=Executor("ray", address=ray_address, workers=1, cpus_per_worker=0.5,
                                                 block_size=100))
    pa, pb = a.manifest["pruning"], b.manifest["pruning"]
    assert {d for d, *_ in a.docstore.iter_docs()} == {d for d, *_ in b.docstore.iter_docs()}
    assert pa["dropped"] == pb["dropped"] == 120 and abs(pa["threshold"] - pb["threshold"]) < 1e-5
    assert pb["scored_by"]["executor"] == "ray" and pa["scored_by"]["executor"] == "in-process"
    for idx in (a, b):
        assert idx.manifest["subindexes"]["dense"]["vectors_from"].startswith("quality estimator")
    assert np.abs(_vectors(a.path / "dense")[1] - _vectors(b.path / "dense")[1]).max() <= 1e-5
    for r in ("bm25", "dense"):
        _same_runs(_runs(a, queries, r), _runs(b, queries, r))


# -------------------------------------------------------------------------------------- the CLI
def test_cli_index_and_add_on_ray_match_in_process(tmp_path, small_corpus, small_dense_index, ray_address):
    """`retr index --dense --executor ray` joining a cluster, then `retr add --executor ray`: the
    vectors are the in-process encoder's of the same 80 passages (the shared dense index encoded
    them in process; encoding them again here in process would test nothing more)."""
    lines = (small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "c.jsonl").write_text("".join(lines[:60]), encoding="utf-8")
    (tmp_path / "more.jsonl").write_text("".join(lines[60:80]), encoding="utf-8")
    # one worker: several workers and a killed one are the in-process test's; here the CLI's path
    ray_opts = ["--executor", "ray", "--ray-address", ray_address, "--workers", "1", "--cpus-per-worker", "0.5",
                "--block-size", "16"]
    r = run_retr("index", "--corpus", tmp_path / "c.jsonl", "--index", tmp_path / "R", "--dense", "--quiet", *ray_opts)
    assert r.returncode == 0, r.stderr
    r = run_retr("add", "--index", tmp_path / "R", "--corpus", tmp_path / "more.jsonl", "--quiet", *ray_opts)
    assert r.returncode == 0, r.stderr
    ids_l, vl = _vectors(small_dense_index.path)
    ids_r, vr = _vectors(tmp_path / "R")
    assert ids_r == [json.loads(l)["_id"] for l in lines[:80]] and ids_l[:80] == ids_r
    assert np.abs(vl[:80] - vr).max() <= 1e-5
    m = json.loads((tmp_path / "R" / "manifest.json").read_text())
    assert m["subindexes"]["dense"]["encoded_by"]["executor"] == "ray"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["R", "c.jsonl", "more.jsonl"]


def test_live_index_changes_on_ray_match_in_process(tmp_path, small_corpus, ray_address, queries):
    """The live index on Ray: deletions and an update leave replaced and deleted rows in the
    document store; a dense sub-index added afterwards must encode only the visible ones, and
    `retr update --executor ray` only the changed text, exactly as in process. Every count
    agrees afterwards (`retr check --full`), nothing that was there is lost, and after
    compaction the runs equal a fresh in-process build of the final corpus. (Before it, BM25
    statistics still count deleted rows in whichever Lucene segments were not merged, which
    depends on the build's indexing threads: README, "Deleted documents and BM25".)"""
    from retrieval.check import check_index
    from retrieval.writer import add_subindex, compact, delete_documents, update_documents

    lines = (small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:80]
    (tmp_path / "c.jsonl").write_text("".join(lines), encoding="utf-8")
    docs = [json.loads(l) for l in lines]
    changed = [dict(d, text=d["text"] + " revised with a new closing sentence about aspirin") for d in docs[10:20]]
    (tmp_path / "changed.jsonl").write_text("".join(json.dumps(d) + "\n" for d in changed), encoding="utf-8")
    gone = [d["_id"] for d in docs[:5]]
    # one worker (each loads torch and MiniLM): several workers' blocks in order are tested above
    ray_ex = Executor("ray", address=ray_address, workers=1, cpus_per_worker=0.5, block_size=16)
    out = {}
    for name, ex in (("L", Executor("local", block_size=16)), ("R", ray_ex)):
        idx = retrieval.index_corpus(tmp_path / "c.jsonl", tmp_path / name, quiet=True)
        delete_documents(idx, gone, quiet=True)
        update_documents(tmp_path / name, [retrieval.Document(d["_id"], d["text"], d.get("title", ""))
                                           for d in docs[20:25]], quiet=True)  # same text: old rows stay behind
        idx = add_subindex(retrieval.open_index(tmp_path / name), DenseSpec(), quiet=True, executor=ex)
        assert len(idx) == 75
        if name == "R":  # `retr update --executor ray` in its own process; in process, the call it makes
            r = run_retr("update", "--index", tmp_path / name, "--corpus", tmp_path / "changed.jsonl", "--quiet",
                         "--executor", "ray", "--ray-address", ray_address, "--workers", "1", "--cpus-per-worker",
                         "0.5", "--block-size", "16")
            assert r.returncode == 0, r.stderr
        else:
            update_documents(tmp_path / name, tmp_path / "changed.jsonl", quiet=True, executor=ex)
        out[name] = retrieval.open_index(tmp_path / name)
        rep = check_index(tmp_path / name, full=True)
        assert rep.ok, rep.problems
    a, b = out["L"], out["R"]
    assert len(a) == len(b) == 75
    ea, eb = a.manifest["subindexes"]["dense"], b.manifest["subindexes"]["dense"]
    assert eb["encoded_by"]["executor"] == "ray" and ea["encoded_by"]["executor"] == "in-process"
    # every surviving passage is there, with its latest text, in both
    for d in docs[5:]:
        want = next((c["text"] for c in changed if c["_id"] == d["_id"]), d["text"])
        assert a.get(d["_id"]).text == b.get(d["_id"]).text == want
    assert all(a.get(g) is None and b.get(g) is None for g in gone)
    fresh = retrieval.index_corpus([retrieval.Document(d["_id"], next((c["text"] for c in changed
                                                                        if c["_id"] == d["_id"]), d["text"]),
                                                       d.get("title", "")) for d in docs[5:]],
                                   tmp_path / "F", subindexes={"dense": DenseSpec()}, quiet=True)
    ids_a, va = _vectors(a.path)
    ids_b, vb = _vectors(b.path)
    assert ids_a == ids_b and np.abs(va - vb).max() <= 1e-5
    _same_runs(_runs(a, queries, "dense"), _runs(b, queries, "dense"))
    a, b = compact(a, quiet=True), compact(b, quiet=True)
    for r in ("bm25", "dense"):
        _same_runs(_runs(a, queries, r), _runs(b, queries, r))
        _same_runs(_runs(b, queries, r), _runs(fresh, queries, r))


def _one_error_line(r):
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("retr: error:"), r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    return lines[0]


def test_bad_executor_options_fail_with_one_line_and_leave_nothing(tmp_path, small_corpus, ray_address):
    out = tmp_path / "IDX"
    base = ["index", "--corpus", small_corpus, "--index", out, "--dense", "--quiet"]
    # one in a real process (as the two tests below), the others through the same entry point here
    assert "only apply with --executor ray" in _one_error_line(run_retr(*base, "--workers", "2"))
    assert "'--workers'" in _one_error_line(retr_in_process(*base, "--executor", "ray", "--workers", "0"))
    # an actor pool reserving every CPU would hang Ray Data (ray-project/ray#44687): refused up front
    line = _one_error_line(retr_in_process(*base, "--executor", "ray", "--ray-address", ray_address, "--workers",
                                           "2", "--cpus-per-worker", "1"))
    assert "leaves less than" in line and "44687" in line
    assert "give fewer --workers or a fractional --cpus-per-worker" in line  # the library's names, as flags
    line = _one_error_line(retr_in_process(*base, "--executor", "ray", "--ray-address", ray_address,
                                           "--gpus-per-worker", "1"))
    assert "GPUs" in line and "--gpus-per-worker 1 " in line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


def test_unreachable_cluster_fails_with_one_line(tmp_path, small_corpus):
    env = dict(os.environ, RETR_RAY_CONNECT_TIMEOUT="3")  # nothing listens there: any wait is the timeout
    r = subprocess.run([sys.executable, "-m", "cli.main", "index", "--corpus", small_corpus, "--index",
                        tmp_path / "IDX", "--dense", "--quiet", "--executor", "ray", "--ray-address", "127.0.0.1:9"],
                       cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert "127.0.0.1:9" in _one_error_line(r)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_without_ray_installed_one_line_says_how_to_install(tmp_path, small_corpus):
    """A `ray` package that cannot be imported stands in for a machine without the extra."""
    shim = tmp_path / "shim" / "ray"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "shim"), str(ROOT)]))
    r = subprocess.run([sys.executable, "-m", "cli.main", "index", "--corpus", small_corpus, "--index",
                        tmp_path / "IDX", "--dense", "--executor", "ray"], cwd=ROOT, capture_output=True, text=True,
                       env=env, timeout=300)
    line = _one_error_line(r)
    assert "pip install 'retr[ray]'" in line and "ray[data]==2.60.0" in line
    assert not (tmp_path / "IDX").exists()


def test_a_cluster_that_goes_away_fails_the_build_with_one_line(tmp_path, small_corpus):
    """`retr index --executor ray` on its own local cluster; once encoding has begun, the
    cluster's raylet and GCS are killed. The build fails with one line and leaves no folder."""
    out = tmp_path / "IDX"
    p = subprocess.Popen([sys.executable, "-m", "cli.main", "index", "--corpus", small_corpus, "--index", out,
                          "--dense", "--quiet", "--executor", "ray", "--workers", "1", "--block-size", "50"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = {}
    try:
        while p.poll() is None and not list(tmp_path.glob(".IDX.encode-*/meta.json")):
            time.sleep(0.2)
        procs = _descendants(p.pid)
        victims = [pid for pid, args in procs.items() if "raylet" in args.split()[0] or "gcs_server" in args.split()[0]]
        assert p.poll() is None and victims, procs
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        _stdout, stderr = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for pid in procs:  # whatever the dead cluster left behind (only processes this test started)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    r = subprocess.CompletedProcess(p.args, p.returncode, "", stderr)
    line = _one_error_line(r)
    print(line)
    assert "Ray" in line
    assert not out.exists() and not list(tmp_path.glob("IDX.tmp-*"))
