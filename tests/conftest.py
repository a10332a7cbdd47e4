"""Shared fixtures: small real data from ../shared/datasets and a real index."""
from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Under pytest-xdist (`make test` runs two workers on two cores) each worker and the processes it starts
# use one math thread: two workers' torch/OpenMP pools of two threads each oversubscribe the cores and
# their idle threads spin against each other (a test of in-process encoding ran 42 s alone and 319 s next
# to another worker). Set before anything imports torch; a test that wants more threads asks torch for
# them. One process (TEST_WORKERS=0) keeps the libraries' defaults.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
DATA = Path(os.environ.get("RETR_DATA", ROOT.parent / "shared" / "datasets")).resolve()
SCIFACT = DATA / "scifact"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"dataset not found: {path} (set RETR_DATA)")
    return path


@pytest.fixture(scope="session")
def scifact_dir() -> Path:
    return need(SCIFACT)


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory, scifact_dir) -> Path:
    """A 400-passage BEIR folder: the documents judged for the first test
    queries plus the first passages of the corpus, with those queries/qrels."""
    out = tmp_path_factory.mktemp("scifact-small")
    qrels = [l.rstrip("\n").split("\t") for l in (scifact_dir / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    qrels = qrels[:60]
    wanted = {d for _, d, _ in qrels}
    docs, rest = [], []
    with open(scifact_dir / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            obj = json.loads(line)
            (docs if obj["_id"] in wanted else rest).append(line)
    docs += rest[: 400 - len(docs)]
    (out / "corpus.jsonl").write_text("".join(docs), encoding="utf-8")
    qids = {q for q, _, _ in qrels}
    with open(scifact_dir / "queries.jsonl", encoding="utf-8") as f:
        qlines = [l for l in f if json.loads(l)["_id"] in qids]
    (out / "queries.jsonl").write_text("".join(qlines), encoding="utf-8")
    (out / "qrels").mkdir()
    (out / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{r}\n" for q, d, r in qrels), encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def small_index(tmp_path_factory, small_corpus):
    import retrieval

    path = tmp_path_factory.mktemp("idx") / "small"
    return retrieval.build_index(small_corpus, path, quiet=True)


@pytest.fixture(scope="session")
def small_dense_index(tmp_path_factory, small_corpus):
    """BM25 + MiniLM dense (mean pooling) over the 400 passages; the dense
    sub-index is added to the existing folder, as `retr index --dense` does."""
    import retrieval
    from retrieval.writer import add_subindex
    from retrieval.dense.subindex import DenseSpec

    path = tmp_path_factory.mktemp("dense") / "IDX"
    idx = retrieval.build_index(small_corpus, path, quiet=True)
    return add_subindex(idx, DenseSpec(), quiet=True)


@pytest.fixture(scope="session")
def pruned_dense_index(tmp_path_factory, small_corpus):
    """The 400 passages pruned by 30% with the learned quality estimator, in process, with a dense
    sub-index made of the estimator's vectors: built once for test_quality and test_ray_executor
    (the in-process reference of the Ray build), which only read it."""
    from retrieval.dense.subindex import DenseSpec
    from retrieval.writer import build_pruned_index

    return build_pruned_index(small_corpus, tmp_path_factory.mktemp("pruned") / "P", 0.3, "learned",
                              subindexes={"dense": DenseSpec()}, quiet=True)


def dense_vectors(path):
    """(docids, vectors) of a dense sub-index: a folder, or an index folder (its current
    generation's dense sub-index, added rows included)."""
    import numpy as np

    from indexes.faiss_live import open_live

    path = Path(path)
    if (path / "manifest.json").exists():
        path = path / json.loads((path / "manifest.json").read_text())["subindexes"]["dense"]["path"]
    live = open_live(path)  # a LiveFaiss once rows were added or deleted, else the FaissIndex itself
    if hasattr(live, "vectors"):
        return live.docids, live.vectors(np.arange(len(live.docids)))
    return list(live._docids), live.index.reconstruct_n(0, live.ntotal)


def encoded_by(index) -> dict:
    """The vectors of ``index``'s dense sub-index as ``build_index(precomputed=...)`` takes them (the form
    of the quality estimator's): a build over passages it holds reuses them instead of encoding again
    when its encoder is the same, and records ``vectors_from`` = their source."""
    ids, vectors = dense_vectors(index.path)
    sub = index.path / index.manifest["subindexes"]["dense"]["path"]
    return {"config": json.loads((sub / "encoder.json").read_text()), "docids": ids, "array": vectors,
            "source": f"{index.path.name} (the same encoder, the same passages)"}


def judged_slice(scifact_dir, n_qrels: int, n_docs: int, corpus_dir, data_dir=None):
    """A small SciFact training set: the first ``n_qrels`` training qrels, the passages they judge
    first, then others up to ``n_docs`` (``corpus_dir/corpus.jsonl``), and those queries and qrels
    (``data_dir``, default ``corpus_dir``: ``queries.jsonl``, ``qrels/train.tsv``). Returns ``data_dir``."""
    data_dir = data_dir or corpus_dir
    pairs = [l.split("\t") for l in (scifact_dir / "qrels" / "train.tsv").read_text().splitlines()[1:]][:n_qrels]
    wanted = {d for _q, d, _r in pairs}
    docs, rest = [], []
    for line in open(scifact_dir / "corpus.jsonl", encoding="utf-8"):
        (docs if json.loads(line)["_id"] in wanted else rest).append(line)
    (corpus_dir / "corpus.jsonl").write_text("".join(docs + rest[:n_docs - len(docs)]), encoding="utf-8")
    qids = {q for q, _d, _r in pairs}
    (data_dir / "queries.jsonl").write_text("".join(l for l in open(scifact_dir / "queries.jsonl", encoding="utf-8")
                                                    if json.loads(l)["_id"] in qids), encoding="utf-8")
    (data_dir / "qrels").mkdir()
    (data_dir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                                  + "".join(f"{q}\t{d}\t{r}\n" for q, d, r in pairs))
    return data_dir


def with_meta(src, dst):
    """A copy of a BEIR corpus whose documents carry metadata derived from their id."""
    dst.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, line in enumerate(open(src / "corpus.jsonl", encoding="utf-8")):
        o = json.loads(line)
        d = int(o["_id"])
        o["metadata"] = {"year": 1990 + d % 30, "shard": "odd" if d % 2 else "even",
                         "tags": ["a", "b"] if i % 3 == 0 else ["c"]}
        if i % 7 == 0:
            del o["metadata"]["year"]
        lines.append(json.dumps(o) + "\n")
    (dst / "corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    return dst


@pytest.fixture(scope="session")
def meta_corpus(tmp_path_factory, small_corpus):
    return with_meta(small_corpus, tmp_path_factory.mktemp("meta"))


@pytest.fixture(scope="session")
def meta_index(tmp_path_factory, meta_corpus):
    """BM25 over the 400 passages, with metadata."""
    import retrieval

    return retrieval.build_index(meta_corpus, tmp_path_factory.mktemp("midx") / "IDX", quiet=True)


@pytest.fixture(scope="session")
def meta_dense_index(tmp_path_factory, meta_corpus, small_dense_index):
    """BM25 + MiniLM dense over the 400 passages, with metadata. Their texts are small_dense_index's,
    whose vectors MiniLM encoded in this session: the dense sub-index takes them (as a pruned build
    takes the quality estimator's, when they are its encoder's) instead of encoding the 400 again."""
    import retrieval
    from retrieval.dense.subindex import DenseSpec

    pre = encoded_by(small_dense_index)
    idx = retrieval.build_index(meta_corpus, tmp_path_factory.mktemp("mdidx") / "IDX", quiet=True,
                                subindexes={"dense": DenseSpec()}, precomputed=pre)
    assert idx.manifest["subindexes"]["dense"]["vectors_from"] == pre["source"]
    return idx


def run_retr(*args, cwd=None, input=None, timeout=600):
    """Run the real `retr` console entry point in a child process."""
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], cwd=cwd or ROOT,
                          capture_output=True, text=True, input=input, timeout=timeout)


def retr_in_process(*args, input=None):
    """`retr` in this process: cli.main.main (the entry point's own one-line error handling) with
    stdin/stdout/stderr swapped by click's CliRunner, as a CompletedProcess. For tests where the
    child process is not what is tested: each command path keeps a real-process test (:func:`run_retr`)
    of its one-line error and exit code, since only a child shows what a library prints to fd 2 or a
    handler bound to the old stderr."""
    from click.testing import CliRunner

    from cli.main import main

    argv = [str(a) for a in args]
    term = signal.getsignal(signal.SIGTERM)  # main() installs its own; pytest's comes back after
    try:
        with CliRunner().isolation(input=input) as (out, err, _both):
            rc = main(argv)
            return subprocess.CompletedProcess(["retr", *argv], rc, out.getvalue().decode(),
                                               err.getvalue().decode())
    finally:
        signal.signal(signal.SIGTERM, term)


@pytest.fixture
def retr():
    return run_retr


class RetrProcess:
    """A real `retr` process started with ``RETR_TEST_PAUSE=pause`` (and, with ``seconds``, a pause
    that carries on by itself); its stderr is read by a thread, so :meth:`wait_for` can block until
    the process says it paused at a point."""

    def __init__(self, *args, pause: str = "", seconds: float = 0.0):
        env = dict(os.environ, RETR_TEST_PAUSE=pause)
        if seconds:
            env["RETR_TEST_PAUSE_SECONDS"] = str(seconds)
        self.proc = subprocess.Popen([sys.executable, "-m", "cli.main", *map(str, args)], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: "queue.Queue" = queue.Queue()
        self.seen: list = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, point: str, timeout: float = 300) -> None:
        """Block until the process prints that it paused at ``point``; fail the test if it exits
        first or says nothing for ``timeout`` seconds."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                self.proc.kill()
                pytest.fail(f"{point} never reached: {''.join(self.seen)}")
            if line is None:
                self.proc.wait()
                pytest.fail(f"exited ({self.proc.returncode}) before {point}: {''.join(self.seen)}")
            self.seen.append(line)
            if f"retr-test-paused {point} " in line:  # (after a progress bar's carriage return)
                return

    def kill(self, sig=signal.SIGKILL, timeout: float = 600):
        self.proc.send_signal(sig)
        self.proc.wait(timeout=timeout)
        return self.proc.returncode


@pytest.fixture(scope="session")
def ray_address():
    """ONE local Ray cluster for every test of this pytest worker (`make test` runs two) that needs one
    (2 CPUs: actors take fractional CPUs), started once (about 6 s) and shut down at the end. It lives in a helper process of its own:
    the JVM (Lucene searches in this process) and Ray's core worker must not share a process
    (its signal handlers crash the JVM). The builds under test join it by address."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'retr[ray]')")
    code = ("import ray, sys; ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, "
            "logging_level='WARNING'); print(ray.get_runtime_context().gcs_address, flush=True); "
            "sys.stdin.read(); ray.shutdown()")
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    try:
        address = p.stdout.readline().strip()
        assert address, "the Ray helper process did not start a cluster"
        yield address
    finally:
        p.stdin.close()
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class Proxy:
    """A listener that counts requests: set as HTTP(S)_PROXY, it sees every request a download would make
    (a proxy request opens with its method line, kept in ``requests``; a bare connection that sends no
    request within a second, e.g. another test's client probing a port this one reuses, is not one)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.hits = 0
        self.requests: list = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            try:
                conn.settimeout(1.0)
                first = conn.recv(512).split(b"\r\n", 1)[0]
            except OSError:
                first = b""
            if first.split(b" ", 1)[0].isalpha() and first.split(b" ", 1)[0].isupper():  # CONNECT, GET, ...
                self.hits += 1
                self.requests.append(first.decode("latin-1"))
            conn.close()  # the download fails at once either way

    def close(self):
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture
def offline_env(monkeypatch):
    """No network for the children: every proxy variable points at a counting listener."""
    proxy = Proxy()
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(var, proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("IR_DATASETS_DL_TRIES", "1")  # were the guard to fail: one try, not three
    yield proxy
    proxy.close()
