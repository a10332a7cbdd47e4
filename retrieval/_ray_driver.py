"""The Ray driver: a child process of a build (see :mod:`retrieval.executors`).

It connects to a cluster (or starts a local one), then runs one Ray Data job per
request read from stdin, and writes frames to the pipe whose file descriptor is
its first argument: ``connected``, then per job ``plan``, ``block``... ``done``, or
``error`` (one line). Texts and results travel as opaque pickles: this process
imports neither torch nor the models; the actors do.

The job: one row per block of documents (``seq``, rowid range) -> a read task
pinned to this node (the document store file is here) -> an actor pool running
the stage (model loaded once per actor) -> rows back in order (``preserve_order``).
"""
from __future__ import annotations

import logging
import os
import pickle
import signal
import sys

from indexes.errors import ParameterError
from retrieval.executors import READ_CPUS, _read_frame, _write_frame, read_range


def _read_block(batch, store):
    import numpy as np

    data = [pickle.dumps(read_range(store, lo, hi), protocol=5) for lo, hi in zip(batch["lo"], batch["hi"])]
    return {"seq": batch["seq"], "data": np.array(data, dtype=object)}


class _StageActor:
    """One worker: the stage's model, loaded once; maps blocks of texts to results."""

    def __init__(self, stage_bytes: bytes, threads: int, gpu: bool):
        import ray

        self.stage = pickle.loads(stage_bytes)
        self.stage.setup(threads=threads, gpu=gpu)
        self.pid = os.getpid()
        self.node = ray.get_runtime_context().get_node_id()
        self.dev = self.stage.device()

    def __call__(self, batch):
        import numpy as np

        import time

        out, secs = [], []
        for data in batch["data"]:
            ids, texts = pickle.loads(data)
            t0 = time.perf_counter()
            res = self.stage.run(list(texts))
            secs.append(time.perf_counter() - t0)
            out.append(pickle.dumps((ids, res), protocol=5))
        n = len(out)
        return {"seq": batch["seq"], "data": np.array(out, dtype=object), "seconds": np.array(secs),
                "pid": np.full(n, self.pid),
                "node": np.array([self.node] * n, dtype=object), "device": np.array([self.dev] * n, dtype=object)}


class UserError(Exception):
    pass


def plan(cluster: dict, workers, cpus, gpus: float, blocks: int) -> dict:
    """Actors and their reservations on this cluster; raises UserError (ParameterError where it names
    a setting) for a pool that cannot run (more than the cluster has, or every CPU reserved:
    ray-project/ray#44687)."""
    total_cpu, total_gpu = cluster["cpus"], cluster["gpus"]
    if gpus > 0:
        if total_gpu < gpus:
            raise ParameterError(f"{{gpus_per_worker}} {gpus:g} but the cluster has {total_gpu:g} GPUs")
        w = int(workers or max(1, int(total_gpu // gpus)))
        if w * gpus > total_gpu + 1e-9:
            raise UserError(f"{w} workers x {gpus:g} GPUs is more than the cluster's {total_gpu:g} GPUs")
    else:
        w = int(workers or max(1, int((total_cpu - READ_CPUS) // cpus) if cpus else max(1, int(total_cpu))))
    c = float(cpus) if cpus else max(0.05, min(1.0, int((total_cpu - 2 * READ_CPUS) / w * 20) / 20))
    if c > cluster["max_node_cpus"] + 1e-9:
        raise ParameterError(f"{{cpus_per_worker}} {c:g} is more than any node has ({cluster['max_node_cpus']:g})")
    if w * c + READ_CPUS > total_cpu + 1e-9:
        raise ParameterError(f"{w} workers x {c:g} CPUs leaves less than {READ_CPUS} of the cluster's {total_cpu:g} "
                             f"CPUs for reading documents, and the job would hang (ray-project/ray#44687); give "
                             f"fewer {{workers}} or a fractional {{cpus_per_worker}}")
    w = max(1, min(w, blocks))
    return {"workers": w, "cpus_per_worker": c, "gpus_per_worker": gpus, "threads": max(1, int(c))}


def _cluster(ray) -> dict:
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    res = ray.cluster_resources()
    return {"cpus": float(res.get("CPU", 0)), "gpus": float(res.get("GPU", 0)), "nodes": len(nodes),
            "max_node_cpus": max([float(n["Resources"].get("CPU", 0)) for n in nodes] or [0.0]),
            "node_id": ray.get_runtime_context().get_node_id()}


def _error(e: BaseException, message: str, user: bool = True) -> dict:
    """An ``error`` frame; one for a ParameterError carries its template, so that the parent can
    name the parameters as its caller does (the CLI's flags)."""
    frame = {"op": "error", "user": user, "message": message}
    if isinstance(e, ParameterError):
        frame.update(template=e.template, values=e.values)
    return frame


def _one_line(e: BaseException) -> tuple:
    cause = getattr(e, "cause", None) or e.__cause__ or e
    from indexes.errors import RetrError

    user = isinstance(cause, (RetrError, UserError, ConnectionError))
    msg = str(cause).strip().splitlines()
    text = msg[-1] if msg and not user else (msg[0] if msg else type(cause).__name__)
    return (text if user else f"{type(cause).__name__}: {text}")[:500], user


def run_job(ray, job: dict, cluster: dict, out) -> None:
    import ray.data as rd
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ranges = job["ranges"]
    p = plan(cluster, job["workers"], job["cpus"], job["gpus"], len(ranges))
    _write_frame(out, dict(op="plan", **p))
    ctx = rd.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    items = [{"seq": i, "lo": lo, "hi": hi} for i, (lo, hi) in enumerate(ranges)]
    here = NodeAffinitySchedulingStrategy(node_id=cluster["node_id"], soft=False)
    ds = rd.from_items(items, override_num_blocks=len(items))
    ds = ds.map_batches(_read_block, fn_kwargs={"store": job["store"]}, batch_size=1, num_cpus=READ_CPUS,
                        scheduling_strategy=here)
    ds = ds.map_batches(_StageActor, fn_constructor_args=(job["stage"], p["threads"], p["gpus_per_worker"] > 0),
                        batch_size=1, compute=rd.ActorPoolStrategy(size=p["workers"], max_tasks_in_flight_per_actor=2),
                        num_cpus=p["cpus_per_worker"], num_gpus=p["gpus_per_worker"] or None)
    for row in ds.iter_rows():
        _write_frame(out, {"op": "block", "seq": int(row["seq"]), "data": row["data"], "pid": int(row["pid"]),
                           "seconds": float(row["seconds"]),
                           "node": str(row["node"]), "device": str(row["device"])})
    _write_frame(out, {"op": "done"})


def _token_mode(hello: dict) -> None:
    # Ray 2.60 starts local clusters with token authentication (token in ~/.ray/auth_token), but a process
    # joining one sends its token only in token mode (read when ray is imported); a cluster without
    # authentication accepts it too
    if hello["address"] and "RAY_AUTH_MODE" not in os.environ and (
            os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
            or os.path.isfile(os.path.expanduser("~/.ray/auth_token"))):
        os.environ["RAY_AUTH_MODE"] = "token"


def _connect(ray, hello: dict, out) -> dict | None:
    """Start or join the cluster ``hello`` names and plan the workers on it; its description, or None
    once the failure is reported to the parent (one line) and Ray is shut down."""
    logging.getLogger("ray").setLevel(logging.WARNING)
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    kw = dict(log_to_driver=False, logging_level=logging.WARNING, include_dashboard=False)
    try:
        if hello["address"]:
            if hello.get("ship_code"):
                kw["runtime_env"] = {"py_modules": hello["code"]}
            kw.pop("include_dashboard")
            ray.init(address=hello["address"], **kw)
        else:
            ray.init(**kw)
        cluster = _cluster(ray)
        cluster["plan"] = plan(cluster, hello["workers"], hello["cpus"], hello["gpus"], 1 << 30)  # fail early
        return cluster
    except Exception as e:  # noqa: BLE001 - any failure to connect is reported as one line
        msg, _user = _one_line(e)
        _write_frame(out, _error(e, msg))
        try:
            if ray.is_initialized():
                ray.shutdown()
        except Exception:  # noqa: BLE001
            pass
        return None


def _serve(ray, cluster: dict, inp, out) -> int:
    """Run the parent's jobs, one frame each, until it quits or closes the pipe; then shut Ray down."""
    try:
        while True:
            try:
                req = _read_frame(inp)
            except EOFError:
                return 0
            if req.get("op") == "quit":
                return 0
            try:
                run_job(ray, req, cluster, out)
            except (UserError, ParameterError) as e:
                _write_frame(out, _error(e, str(e)))
            except Exception as e:  # noqa: BLE001 - a failed job is one line for the parent
                msg, user = _one_line(e)
                _write_frame(out, {"op": "error", "user": user, "message": f"Ray job failed: {msg}"})
    finally:
        try:
            ray.shutdown()
        except Exception:  # noqa: BLE001
            pass


def main() -> int:
    out = os.fdopen(int(sys.argv[1]), "wb")
    inp = sys.stdin.buffer

    def stop(_sig, _frame):
        raise SystemExit(143)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    hello = _read_frame(inp)
    _token_mode(hello)
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:  # the parent only looked for the package; importing it is the real test
        from retrieval.executors import INSTALL_HINT, NOT_INSTALLED

        e = ParameterError(NOT_INSTALLED, hint=INSTALL_HINT)
        _write_frame(out, _error(e, str(e)))
        return 2
    cluster = _connect(ray, hello, out)
    if cluster is None:
        return 2
    _write_frame(out, dict(op="connected", **cluster))
    return _serve(ray, cluster, inp, out)


if __name__ == "__main__":
    sys.exit(main())
