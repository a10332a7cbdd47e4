"""Where the model stages of a build run: in this process, or on a Ray cluster.

A *stage* is a picklable object that loads a model once (``setup``) and maps a
block of texts to a block of results (``run``): dense vectors, DeepCT word
weights, quality scores. An *executor* maps a stage over the documents of a
build, block by block, and hands the results back **in document order**,
keyed by docid::

    with open_executor(Executor("ray", workers=2, cpus_per_worker=0.5)) as ex:
        for docids, vectors in ex.map(stage, StoreSource(store_path), total=n, desc="encoding"):
            ...   # the driver writes faiss / Lucene from these

Both executors cut the documents into the same blocks (``block_size`` documents,
the stage's own default unless the executor names one) and run the same
``stage.run`` on each, so a build gives the same result wherever it ran
(encoders batch inside a block; a vector depends on its batch's padding, never
on the thread count).

The Ray executor drives a Ray Data pipeline from a child process
(:mod:`retrieval._ray_driver`): read tasks pinned to this machine read blocks of
the document store (a corpus or a list of documents is spooled into one first),
an actor pool (``ActorPoolStrategy``) runs the stage with the model loaded once
per actor, and results stream back over a pipe. Keeping Ray in a child process
keeps the JVM out of Ray's processes and keeps Ray out of ours: when a cluster
goes away Ray ends its driver process, and here that is the child, so the build
fails with one line and its staging folder is removed like any failed build.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from indexes.errors import InputError, ParameterError, RetrError
from retrieval.progress import progress
from retrieval.types import contents

EXECUTORS = ("local", "ray")  # the kinds of executor
RAY_PIN = "ray[data]==2.60.0"
INSTALL_HINT = f"pip install 'retr[ray]' (or: pip install '{RAY_PIN}')"
NOT_INSTALLED = "{kind=ray} needs Ray, which is not installed: {hint}"  # a ParameterError's template
#: CPUs each read task reserves; an actor pool must leave at least this much free (ray-project/ray#44687)
READ_CPUS = 0.25


class ExecutorError(RetrError):
    """A Ray cluster that cannot be reached, or a job that failed on it."""


@dataclass
class Executor:
    """Where the model stages of a build run (``kind``: ``local`` or ``ray``).

    For ``ray``: ``address`` None starts a local cluster sized to this machine (and
    stops it afterwards); ``auto`` or ``HOST:PORT`` joins a running cluster.
    ``workers`` actors (default: as many as the cluster has CPUs, or GPUs with
    ``gpus_per_worker``), each reserving ``cpus_per_worker`` CPUs (fractions allowed;
    default: 1, less when that would reserve every CPU) and ``gpus_per_worker`` GPUs.
    ``block_size``: documents per block (default: the stage's own). ``connect_timeout``:
    seconds to wait for the cluster (default: ``$RETR_RAY_CONNECT_TIMEOUT`` or 60). ``ship_code``:
    send this process's ``retrieval``/``indexes`` code to the workers (default: when
    joining a cluster). ``on_block`` (not recorded) is called in this process with
    each block's ``{"seq", "docs", "pid", "node", "device", "seconds"}`` as it arrives
    (``seconds``: the worker's time in ``stage.run`` for it).
    """

    kind: str = "local"
    address: Optional[str] = None
    workers: Optional[int] = None
    cpus_per_worker: Optional[float] = None
    gpus_per_worker: float = 0.0
    block_size: Optional[int] = None
    connect_timeout: float = field(default_factory=lambda: float(os.environ.get("RETR_RAY_CONNECT_TIMEOUT", 60)))
    ship_code: Optional[bool] = None
    on_block: Optional[Callable[[dict], None]] = field(default=None, repr=False, compare=False)

    def validate(self) -> "Executor":
        if self.kind not in EXECUTORS:
            raise InputError(f"unknown executor {self.kind!r} (choose from: {', '.join(EXECUTORS)})")
        if self.kind == "local":
            given = [n for n, v in (("address", self.address), ("workers", self.workers),
                                    ("cpus_per_worker", self.cpus_per_worker),
                                    ("gpus_per_worker", self.gpus_per_worker or None)) if v is not None]
            if given:
                raise ParameterError(", ".join("{%s}" % n for n in given) + " only apply with {kind=ray}")
        if self.workers is not None and int(self.workers) < 1:
            raise ParameterError("{workers} must be at least 1, got {got}", got=self.workers)
        if self.cpus_per_worker is not None and not float(self.cpus_per_worker) > 0:
            raise ParameterError("{cpus_per_worker} must be positive, got {got}", got=self.cpus_per_worker)
        if float(self.gpus_per_worker or 0) < 0:
            raise ParameterError("{gpus_per_worker} must not be negative, got {got}", got=self.gpus_per_worker)
        if self.block_size is not None and int(self.block_size) < 1:
            raise ParameterError("{block_size} must be at least 1, got {got}", got=self.block_size)
        if self.address is not None and not str(self.address).strip():
            raise ParameterError("{address} is empty (give auto or HOST:PORT)")
        if self.kind == "ray":
            check_ray()
        return self

    def describe(self) -> dict:
        return {"executor": self.kind, "address": self.address, "workers": self.workers,
                "cpus_per_worker": self.cpus_per_worker, "gpus_per_worker": self.gpus_per_worker,
                "block_size": self.block_size}


LOCAL = Executor()


def check_ray() -> None:
    """Raise one clear line when Ray (the ``ray`` extra) is not installed. Ray is found, not
    imported: its core worker never runs in this process (the JVM may), only in the child."""
    import importlib.util

    spec = importlib.util.find_spec("ray")
    locs = list(spec.submodule_search_locations or []) if spec is not None else []
    if not any((Path(p) / "data" / "__init__.py").is_file() for p in locs):
        raise ParameterError(NOT_INSTALLED, hint=INSTALL_HINT)


# ------------------------------------------------------------------------------------- stages
class Stage:
    """A model stage: picklable (only its description travels), loads its model once
    per process in :meth:`setup`, then maps blocks of texts with :meth:`run`."""

    name = "stage"
    block_size = 1024     # documents per block unless the executor names another
    adaptive_blocks = False  # True: results do not depend on the blocks, which may shrink on small corpora
    #: True: ``run(texts, bar=...)`` takes an object with ``update(n)`` and moves it as it goes (its model's
    #: batches), so an in-process bar moves within a block instead of once per block
    reports_progress = False

    def setup(self, threads: Optional[int] = None, gpu: bool = False) -> None:
        """Load the model (``gpu``: the worker holds a GPU; ``threads``: torch threads)."""

    def run(self, texts: List[str]) -> Any:
        raise NotImplementedError

    def device(self) -> str:
        return "cpu"


# ------------------------------------------------------------------------------------ sources
@dataclass
class StoreSource:
    """The visible documents of a document store file (``docs`` table, in rowid order; a live
    index's store also holds deleted and replaced rows, which are skipped), as
    ``(docid, "title text")`` pairs: what the kinds encode."""

    path: Path

    def __iter__(self) -> Iterator[Tuple[str, str]]:
        from indexes.docstore import DocStore

        for docid, title, text, _meta in DocStore(self.path).iter_docs():
            yield docid, contents(title, text)

    def __len__(self) -> int:
        from indexes.docstore import DocStore

        return len(DocStore(self.path))

    def ranges(self, block: int) -> List[Tuple[int, int]]:
        """Half-open rowid ranges of ``block`` documents each, in order."""
        from indexes.docstore import DocStore

        return DocStore(self.path).rowid_ranges(block)


def read_range(path: Union[str, Path], lo: int, hi: int) -> Tuple[List[str], List[str]]:
    """(docids, texts) of the store's visible rows with ``lo <= rowid < hi``, in order."""
    from indexes.docstore import DocStore

    rows = DocStore(path).range_docs(lo, hi)
    return [r[0] for r in rows], [contents(r[1], r[2]) for r in rows]


def spool(docs: Iterable[Tuple[str, str]], folder: Path) -> StoreSource:
    """Write ``(docid, text)`` pairs into a document store file in ``folder`` (for the read tasks)."""
    from indexes.docstore import DocStoreWriter

    w = DocStoreWriter(Path(folder) / "spool.sqlite")
    try:
        for docid, text in docs:
            w.add(docid, "", text)
    finally:
        w.close()
    return StoreSource(Path(folder) / "spool.sqlite")


def _blocks(docs: Iterable[Tuple[str, str]], size: int) -> Iterator[Tuple[List[str], List[str]]]:
    ids: List[str] = []
    texts: List[str] = []
    for d, t in docs:
        ids.append(d)
        texts.append(t)
        if len(ids) == size:
            yield ids, texts
            ids, texts = [], []
    if ids:
        yield ids, texts


# ------------------------------------------------------------------------------------ runners
class BlockRun:
    """The blocks of one stage as ``(docids, result)`` in document order; after the
    loop, :meth:`record` says how they were computed (for the manifest)."""

    def __init__(self, blocks: Iterator[Tuple[List[str], Any]], info: dict):
        self._blocks = blocks
        self.info = info

    def __iter__(self):
        return self._blocks

    def record(self) -> dict:
        return dict(self.info)


class _Share:
    """One block's share of the runner's bar, handed to a stage that reports progress: its updates
    move the bar, never past the block's size."""

    def __init__(self, bar, size: int):
        self.bar, self.left = bar, size

    def update(self, n: int = 1) -> None:
        n = max(0, min(int(n), self.left))
        self.left -= n
        self.bar.update(n)


class LocalRunner:
    """Runs stages in this process (the driver), one block after another."""

    kind = "local"

    def __init__(self, spec: Executor = LOCAL):
        self.spec = spec

    def block_size(self, stage: Stage) -> int:
        return int(self.spec.block_size or stage.block_size)

    def map(self, stage: Stage, docs, total: Optional[int] = None, desc: str = "encoding",
            quiet: bool = False, threads: Optional[int] = None) -> BlockRun:
        size = self.block_size(stage)
        info = {"executor": "in-process", "block_size": size, "workers": 1, "threads": threads}

        def gen():
            stage.setup(threads=threads)
            info["devices"] = [stage.device()]
            with progress(total=total, desc=desc, unit="doc", quiet=quiet) as bar:
                for ids, texts in _blocks(docs, size):
                    if getattr(stage, "reports_progress", False):
                        share = _Share(bar, len(ids))
                        out = stage.run(texts, bar=share)
                        bar.update(share.left)   # what the stage did not report
                    else:
                        out = stage.run(texts)
                        bar.update(len(ids))
                    yield ids, out

        return BlockRun(gen(), info)

    def close(self) -> None:
        pass


def _write_frame(fh, obj) -> None:
    data = pickle.dumps(obj, protocol=5)
    fh.write(struct.pack("<Q", len(data)))
    fh.write(data)
    fh.flush()


def _read_frame(fh):
    head = fh.read(8)
    if len(head) < 8:
        raise EOFError
    (n,) = struct.unpack("<Q", head)
    data = fh.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


def _code_root() -> Path:
    # the folder holding the package (this module is retrieval/executors.py)
    return Path(__file__).resolve().parents[1]


class RaySession:
    """A Ray driver in a child process, connected to (or owning) one cluster for the
    whole build; :meth:`map` runs one Ray Data job per stage."""

    kind = "ray"

    def __init__(self, spec: Executor):
        check_ray()
        self.spec = spec
        self._log_dir = tempfile.TemporaryDirectory(prefix="retr-ray-")
        self._log_path = Path(self._log_dir.name) / "driver.log"
        self._log = open(self._log_path, "wb")
        root = str(_code_root())
        env = dict(os.environ)
        # the child (and, for a local cluster, every Ray process it starts) imports this code
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env.setdefault("RAY_DEDUP_LOGS", "0")
        r, w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from retrieval._ray_driver import main; sys.exit(main())", str(w)],
            stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT, env=env, pass_fds=(w,),
            start_new_session=True)
        os.close(w)
        self._frames = os.fdopen(r, "rb")
        self._busy = False
        self._abandoned = False
        self._connected = False
        ship = spec.ship_code if spec.ship_code is not None else spec.address is not None
        try:
            self._send({"op": "connect", "address": spec.address, "ship_code": ship,
                        "code": [str(Path(root) / "retrieval"), str(Path(root) / "indexes")],
                        "workers": spec.workers, "cpus": spec.cpus_per_worker,
                        "gpus": float(spec.gpus_per_worker or 0)})
            # a local cluster takes its time on a loaded machine; a remote one answers or not
            self.cluster = self._expect("connected", timeout=spec.connect_timeout if spec.address else
                                        max(spec.connect_timeout, 180.0),
                                        what=f"connecting to the Ray cluster at {spec.address}" if spec.address
                                        else "starting a local Ray cluster")
            self._connected = True
        except BaseException:
            self.close()
            raise

    # -- plumbing ---------------------------------------------------------------------------
    def _send(self, obj) -> None:
        try:
            _write_frame(self.proc.stdin, obj)
        except (BrokenPipeError, OSError):
            raise ExecutorError(self._died("the Ray driver process"))

    def _log_tail(self) -> str:
        try:
            self._log.flush()
            lines = self._log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        keep = [l.strip() for l in lines if l.strip() and "WARNING" not in l and not l.startswith(" ")]
        return keep[-1][:300] if keep else ""

    def _died(self, what: str) -> str:
        rc = self.proc.poll()
        tail = self._log_tail()
        how = f"exited with code {rc}" if rc is not None else "stopped answering"
        return f"{what} {how}; the Ray cluster went away or refused the job" + (f" (last log line: {tail})"
                                                                                  if tail else "")

    def _expect(self, op: str, timeout: Optional[float] = None, what: str = ""):
        got: dict = {}

        def read():
            try:
                got["frame"] = _read_frame(self._frames)
            except (EOFError, OSError, pickle.UnpicklingError) as e:
                got["error"] = e

        if timeout is None:
            read()
        else:
            t = threading.Thread(target=read, daemon=True)
            t.start()
            t.join(timeout)
            if t.is_alive():
                self.close()
                hint = (" (is the address right, and is this machine allowed to join?)" if self.spec.address
                        else "")
                raise ExecutorError(f"{what}: no answer within {timeout:g} s{hint}")
        if "error" in got:
            raise ExecutorError(self._died(f"{what}: the Ray driver" if what else "the Ray driver"))
        frame = got["frame"]
        if frame.get("op") == "error":
            head = f"{what}: " if what else ""
            if "template" in frame:  # names parameters, which the caller may call otherwise (cli.params.flags)
                raise ParameterError(head.replace("{", "{{").replace("}", "}}") + frame["template"], **frame["values"])
            raise (InputError if frame.get("user") else ExecutorError)(head + frame["message"])
        if frame.get("op") != op:
            raise ExecutorError(f"unexpected message from the Ray driver: {frame.get('op')!r}")
        return frame

    # -- work -------------------------------------------------------------------------------
    def block_size(self, stage: Stage, total: Optional[int] = None) -> int:
        """The executor's block size, else the stage's; a stage whose results do not depend on
        the blocks (``adaptive_blocks``: dense vectors, equal to 1e-5) gets smaller blocks on a
        small corpus, at least 4 per worker, so that every worker has work until the end."""
        if self.spec.block_size:
            return int(self.spec.block_size)
        size = int(stage.block_size)
        if getattr(stage, "adaptive_blocks", False) and total:
            workers = int(self.cluster.get("plan", {}).get("workers", 1))
            size = max(64, min(size, -(-int(total) // (4 * workers))))
        return size

    def map(self, stage: Stage, docs, total: Optional[int] = None, desc: str = "encoding",
            quiet: bool = False, threads: Optional[int] = None) -> BlockRun:
        size = self.block_size(stage, total)
        info: dict = {"executor": "ray", "address": self.spec.address or "local",
                      "block_size": size, "nodes": self.cluster.get("nodes")}

        def gen():
            if self._busy:
                raise RetrError("one Ray job at a time per session")
            self._busy = True
            scratch = None
            finished = False
            try:
                src = docs
                if not isinstance(src, StoreSource):
                    scratch = tempfile.TemporaryDirectory(prefix="retr-spool-")
                    src = spool(docs, Path(scratch.name))
                ranges = src.ranges(size)
                if not ranges:
                    finished = True
                    return
                self._send({"op": "job", "store": str(Path(src.path).resolve()), "ranges": ranges,
                            "stage": pickle.dumps(stage, protocol=5), "label": desc,
                            "workers": self.spec.workers, "cpus": self.spec.cpus_per_worker,
                            "gpus": float(self.spec.gpus_per_worker or 0)})
                plan = self._expect("plan", what=desc)
                info.update({k: plan[k] for k in ("workers", "cpus_per_worker", "gpus_per_worker", "threads")})
                pids, nodes, devices = set(), set(), set()
                pending: Dict[int, tuple] = {}
                nxt = 0
                with progress(total=total, desc=f"{desc} (ray, {plan['workers']} workers)", unit="doc",
                              quiet=quiet) as bar:
                    while nxt < len(ranges):
                        f = self._expect("block", what=desc)
                        ids, out = pickle.loads(f["data"])
                        pids.add(f["pid"])
                        nodes.add(f["node"])
                        devices.add(f["device"])
                        if self.spec.on_block is not None:
                            self.spec.on_block({"seq": f["seq"], "docs": len(ids), "pid": f["pid"],
                                                "node": f["node"], "device": f["device"],
                                                "seconds": f.get("seconds")})
                        pending[f["seq"]] = (ids, out)
                        while nxt in pending:  # Ray preserves the order; this only guards it
                            ids, out = pending.pop(nxt)
                            bar.update(len(ids))
                            nxt += 1
                            yield ids, out
                self._expect("done", what=desc)
                info.update({"devices": sorted(devices), "worker_processes": len(pids),
                             "nodes_used": len(nodes)})
                finished = True
            finally:
                self._busy = False
                if not finished:
                    self._abandoned = True  # the child may still be sending: close() stops it
                if scratch is not None:
                    scratch.cleanup()

        return BlockRun(gen(), info)

    def close(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is None:
            return
        # a session that never connected, or whose job was abandoned, is stopped; else asked to quit
        graceful = self._connected and not self._abandoned
        if proc.poll() is None and graceful:
            try:
                _write_frame(proc.stdin, {"op": "quit"})
            except (BrokenPipeError, OSError, ValueError):
                pass
        with contextlib.suppress(OSError, ValueError):
            proc.stdin.close()
        for sig, wait in ((None, 30 if graceful else 0), (signal.SIGTERM, 10 if self._connected else 2),
                          (signal.SIGKILL, None)):
            if proc.poll() is not None:
                break
            if sig is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(Exception):
            self._frames.close()
        with contextlib.suppress(Exception):
            self._log.close()
        self._log_dir.cleanup()
        self.proc = None


Runner = Union[LocalRunner, RaySession]


@contextlib.contextmanager
def open_executor(executor: Union[Executor, LocalRunner, RaySession, str, None]) -> Iterator[Runner]:
    """A runner for ``executor`` (an :class:`Executor`, ``"local"``/``"ray"``, or None for
    in-process). An already opened runner is handed on as it is, and left open."""
    if isinstance(executor, (LocalRunner, RaySession)):
        yield executor
        return
    spec = Executor(executor) if isinstance(executor, str) else (executor or LOCAL)
    spec.validate()
    runner: Runner = RaySession(spec) if spec.kind == "ray" else LocalRunner(spec)
    try:
        yield runner
    finally:
        runner.close()


def runner_of(executor) -> Runner:
    """The runner to use inside a stage: an opened one, or in-process for None/local.
    (A kind handed an unopened Ray spec opens its own session through :func:`open_executor`.)"""
    if isinstance(executor, (LocalRunner, RaySession)):
        return executor
    if executor is None or (isinstance(executor, Executor) and executor.kind == "local"):
        return LocalRunner(executor or LOCAL)
    raise RetrError("open the executor first (retrieval.executors.open_executor)")
