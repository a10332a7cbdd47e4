"""``retr serve --sharded``: each shard of a sharded index is a Ray Serve deployment, and this
process (uvicorn and retr's FastAPI app, the same as ``retr serve``) is the router.

- **Deployments.** Shard i is the Serve application ``retr-<NAME>-shard-NNN`` with one deployment of
  :class:`retrieval.server.shard_replica.ShardReplica` (``--replicas`` R), whose config is the shard's
  folder, the sharded manifest and its position. Serve's HTTP proxy is not started: the router calls the
  replicas through ``DeploymentHandle``s, and Serve's controller health-checks them (``check_health``)
  and replaces a replica that dies or fails its check.
- **Placement.** A node that holds shard i's folder advertises the custom resource named after the
  folder (``ray start --resources '{"shard-003": 1}'``); each replica of shard i then asks for a little
  of it, so it runs where the files are. A cluster that advertises none of them places replicas
  anywhere (one machine, or a shared file system); one that advertises some but not all is refused.
  ``--ray-address local`` starts a cluster on this machine advertising every shard.
- **Calls.** :class:`ShardCalls` is the ``call`` of :class:`retrieval.sharded.index.ShardedIndex`: a
  method is sent to every shard at once and the answers gathered in shard order. A shard with no live
  replica (seen by a call that failed with the replica's death, or by the watcher, which reads Serve's
  replica states twice a second and pings shards marked down) fails the call at once with a 503 naming
  it, or, inside ``partial_results(allow=True)``, answers as a shard without documents would.
  Application errors raised in a replica (a bad filter) reach the app's handlers as themselves.
- **One commit.** Where the router reads the whole sharded folder (this machine, or a shared file
  system: every shard folder is there), each request reads one commit of every shard: the router reads
  the generations the newest commit names (:class:`retrieval.sharded.pins.Commits`: an ``os.stat`` per
  request, the files re-read when they changed) and every call carries its shard's (``at``), at which
  the replica answers or fails (``MovedOn``: the request runs again on the newest commit). A write
  through the router is one commit of the sharded index, made by one replica
  (``ServedShard.commit``: :mod:`retrieval.sharded.write`), as ``retr add --index SHARDED`` makes it;
  ``retr add`` by another process is taken by the next request, whole. Where shards are only on their
  own nodes, each replica follows its folder and commits its own shard's writes.

Ray lives in this process, so the router runs no JVM: every search, highlight and write is done in the
replicas; ``retr serve`` refuses ``--index`` folders beside ``--sharded`` (see run.py).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from indexes import sharded as sh
from indexes.errors import IndexFormatError, InputError, ParameterError
from retrieval.server.gate import ApiError
from retrieval.server.sharded import ShardedServed, current_scope

SHARD_TIMEOUT = 30.0        # seconds a shard may take to answer one call (--shard-timeout)
WATCH_EVERY = 0.5           # seconds between two looks at the replicas' states
PING_TIMEOUT = 2.0
REPLICA_CPUS = 0.5          # CPUs each replica reserves (--replica-cpus)
RESOURCE_SHARE = 0.001      # of a node's shard resource, per replica: a node with {"shard-003": 1} takes 1000
MAX_ONGOING = 16            # requests one replica answers at once (Serve's default is 5)
log = logging.getLogger("retr.server")


# ------------------------------------------------------------------------------- connecting
def _token_mode(address: Optional[str]) -> None:
    """Ray 2.60's local clusters use token authentication (the token in ~/.ray/auth_token), but a
    process joining one sends it only in token mode, set before ray is imported (as
    retrieval._ray_driver does); a cluster without authentication accepts it too."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    if address or os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or \
            os.path.isfile(os.path.expanduser("~/.ray/auth_token")):
        os.environ["RAY_AUTH_MODE"] = "token"


def connect(address: Optional[str], folders: Sequence[str]) -> None:
    """Join the cluster at ``address`` (``auto`` or HOST:PORT), or start one on this machine
    (``local``/None) that advertises every shard's resource."""
    local = address in (None, "", "local")
    _token_mode(None if local else address)
    try:
        import ray
    except ImportError:
        raise ParameterError("{sharded} needs Ray Serve, which is not installed: pip install 'retr[ray]' "
                             "(ray[serve])") from None
    for name in ("ray", "ray.serve"):
        logging.getLogger(name).setLevel(logging.WARNING)
    kw: Dict[str, Any] = dict(log_to_driver=False, logging_level=logging.WARNING)
    try:
        if local:
            ray.init(num_cpus=os.cpu_count() or 1, resources={f: 1.0 for f in folders}, include_dashboard=False,
                     **kw)
        else:
            ray.init(address=address, **kw)
    except Exception as e:  # noqa: BLE001 - any failure to reach the cluster is one line
        raise ParameterError("cannot join the Ray cluster at {ray_address}: %s" % _last_line(str(e))) from None


def placement(folders: Sequence[str]) -> Dict[str, Dict[str, float]]:
    """Each shard's custom resources: its folder's name where the cluster's nodes advertise them."""
    import ray

    advertised = set()
    for node in ray.nodes():
        if node.get("Alive"):
            advertised |= set(node.get("Resources", {}))
    have = [f for f in folders if f in advertised]
    if not have:
        return {f: {} for f in folders}
    missing = [f for f in folders if f not in advertised]
    if missing:
        raise InputError(f"the Ray cluster's nodes advertise the resources of shards {', '.join(have)} but not of "
                         f"{', '.join(missing)}: start the node holding each shard's folder with "
                         f"ray start --resources '{{\"{missing[0]}\": 1}}'")
    return {f: {f: RESOURCE_SHARE} for f in folders}


def _last_line(text: str) -> str:
    """The one line worth showing of a Ray error (often a whole remote traceback): the last line
    naming a retr error, else the last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        for cls in ("IndexFormatError", "InputError", "RetrError", "NotFound", "ParameterError"):
            if f"{cls}: " in line:
                return line.split(f"{cls}: ", 1)[1]
    return lines[-1] if lines else "unknown error"


# ------------------------------------------------------------------------------- deploying
def app_name(name: str, folder: str) -> str:
    return f"retr-{name}-{folder}"


def check_local(path: Path, record: dict) -> None:
    """Where a shard's folder is on this machine, refuse at once one that is not shard i of this
    index (a replica would refuse it too, later and slower)."""
    from indexes import manifest as mf

    for i, p in enumerate(sh.shard_paths(path, record)):
        if p.is_dir():
            sh.check_member(mf.read_manifest(p), record, i, p)


def deploy(name: str, path: Path, record: dict, replicas: int, cpus: float, exact: bool = False) -> List[Any]:
    """Every shard's Serve application, started together; their handles in shard order. ``exact``:
    the replicas answer at the generation each call names (see :class:`ShardCalls`)."""
    from ray import serve

    from retrieval.server.shard_replica import ShardReplica

    serve.start(proxy_location="Disabled")
    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # Serve sets up its logger when it starts
    folders = list(record["folders"])
    where = placement(folders)
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # a server's searches run side by side (run.py)
    targets = []
    for i, (folder, p) in enumerate(zip(folders, sh.shard_paths(path, record))):
        dep = serve.deployment(ShardReplica, name=folder).options(
            num_replicas=replicas, max_ongoing_requests=MAX_ONGOING, health_check_period_s=2,
            health_check_timeout_s=30, max_constructor_retry_count=2,
            ray_actor_options={"num_cpus": cpus, "resources": where[folder], "runtime_env": {"env_vars": env}})
        targets.append(serve.RunTarget(dep.bind(str(p.resolve()), record, i, exact), name=app_name(name, folder),
                                       route_prefix=None))
    try:
        serve.run_many(targets)
    except Exception as e:  # noqa: BLE001 - a shard that cannot be opened: one line, nothing served
        undeploy(name, folders)
        raise IndexFormatError(f"a shard of {name!r} could not be opened: {_last_line(str(e))}") from None
    return [serve.get_deployment_handle(f, app_name(name, f)) for f in folders]


def undeploy(name: str, folders: Sequence[str]) -> None:
    """Delete this index's applications (and Serve itself when nothing else is deployed)."""
    from ray import serve

    try:
        for f in folders:
            serve.delete(app_name(name, f))
        if not serve.status().applications:
            serve.shutdown()
    except Exception as e:  # noqa: BLE001 - leaving: report, do not mask the reason we leave
        log.warning("could not remove the shard deployments of %s: %s", name, _last_line(str(e)))


# ------------------------------------------------------------------------------- calling
class RemoteShard:
    """One shard's handle; its methods (for code that calls a shard directly) go through the calls."""

    def __init__(self, name: str, app: str, handle, calls: "ShardCalls"):
        self.name, self.app, self.handle, self._calls = name, app, handle, calls

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *a, **kw: self._calls([self], method, a, kw)[0]

    def close(self) -> None:
        pass


def _unreachable(e: BaseException) -> bool:
    """A failure of the replica rather than of the request: dead, unavailable, cancelled, too slow."""
    import ray.exceptions as rex
    from ray.serve import exceptions as sex

    kinds = (rex.RayActorError, rex.ActorUnavailableError, sex.DeploymentUnavailableError,
             sex.RequestCancelledError, TimeoutError)
    if hasattr(sex, "ReplicaUnavailableError"):
        kinds += (sex.ReplicaUnavailableError,)
    return isinstance(e, kinds)


def _cause(e: BaseException) -> BaseException:
    """The exception a replica raised (Ray wraps it in a RayTaskError)."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e


#: what a shard that does not answer contributes to a partial answer: what a shard without documents would
EMPTY = {"stats": lambda args: {n: None for n in args[1]}, "search": lambda args: {}, "count": lambda args: 0,
         "fetch": lambda args: {}, "get": lambda args: None, "present": lambda args: []}


class _Unanswered(Exception):
    """A shard gave no answer: ``why`` is "down" (no live replica) or "slow" (past --shard-timeout)."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class ShardCalls:
    """The router's ``call`` over remote shards (see the module docstring); ``watch()`` starts the
    watcher thread that tells which shards have a live replica."""

    def __init__(self, index_name: str, timeout: float = SHARD_TIMEOUT, replicas: int = 1):
        self.index_name, self.timeout, self.replicas = index_name, timeout, replicas
        self._inflight: Dict[str, set] = {}      # shard name -> its DeploymentResponses not yet answered
        self.shards: List[RemoteShard] = []
        self._down: Dict[str, str] = {}          # shard name -> why
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._described: Dict[str, Any] = {}
        self.events: List[tuple] = []            # (time, shard, "down"/"up", why): for logs and benchmarks
        self.commits = None                      # retrieval.sharded.pins.Commits: each call's generation

    # -- state ---------------------------------------------------------------------------------
    def is_down(self, shard: str) -> bool:
        return shard in self._down

    def mark(self, shard: str, down: bool, why: str = "") -> None:
        with self._lock:
            if down == (shard in self._down):
                return
            if down:
                self._down[shard] = why
                stuck = list(self._inflight.get(shard, ()))
            else:
                self._down.pop(shard, None)
                stuck = []
            self.events.append((time.time(), shard, "down" if down else "up", why))
        for resp in stuck:  # waiting for a replica that is not there: answered now (503 or partial)
            resp.cancel()
        log.warning("shard %s of %s is %s%s", shard, self.index_name, "down" if down else "up again",
                    f" ({why})" if why else "")

    def live(self) -> RemoteShard:
        """A shard with a live replica (the first one if none is)."""
        return next((s for s in self.shards if not self.is_down(s.name)), self.shards[0])

    # -- calls ----------------------------------------------------------------------------------
    def __call__(self, shards: Sequence[RemoteShard], method: str, args: tuple, kwargs: dict) -> List[Any]:
        if method in ("confidence", "expand"):  # any one shard answers it: take a live one
            shards = [self.live()]
        answers: List[Any] = [None] * len(shards)
        why: Dict[int, str] = {}  # shard position -> "down" (no live replica) or "slow" (--shard-timeout)
        sent = []
        for j, s in enumerate(shards):
            if self.is_down(s.name):
                why[j] = "down"
            else:
                sent.append((j, s, self._send(s, method, args, kwargs)))
        failure = None
        for j, s, resp in sent:
            try:
                answers[j] = self._wait(s, resp, method, args, kwargs)
            except _Unanswered as e:
                why[j] = e.why
            except Exception as e:  # noqa: BLE001 - the request's own error, raised in the replica
                failure = failure or _cause(e)
        if failure is not None:
            raise failure
        if method == "describe":
            self._remember(shards, answers, why)
        if why:
            self._fill(shards, method, args, answers, why)
        return answers

    def _send(self, s: RemoteShard, method: str, args: tuple, kwargs: dict):
        at = None
        if self.commits is not None:  # the generation of this shard the request reads (None outside one)
            at = self.commits.generation(next(i for i, x in enumerate(self.shards) if x.name == s.name))
        resp = s.handle.call.remote(method, args, kwargs, at)
        with self._lock:
            self._inflight.setdefault(s.name, set()).add(resp)
        return resp

    def _wait(self, s: RemoteShard, resp, method: str, args: tuple, kwargs: dict, retried: bool = False):
        """The answer of ``resp``; :class:`_Unanswered` when the shard cannot give it. A replica that
        died is retried once on another where the shard has several; with one, the shard is down
        (and its other requests in flight are cancelled: they would wait for a new replica)."""
        try:
            return resp.result(timeout_s=self.timeout)
        except Exception as e:  # noqa: BLE001 - sorted here: the shard's failure, or the request's
            if not _unreachable(e):
                raise
            resp.cancel()
            if isinstance(e, TimeoutError):
                raise _Unanswered("slow") from None
            if self.replicas > 1 and not retried and not self.is_down(s.name):
                return self._wait(s, self._send(s, method, args, kwargs), method, args, kwargs, True)
            self.mark(s.name, True, type(e).__name__)
            raise _Unanswered("down") from None
        finally:
            with self._lock:
                self._inflight.get(s.name, set()).discard(resp)

    def _remember(self, shards, answers, why: Dict[int, str]) -> None:
        for j, s in enumerate(shards):
            if j in why and s.name in self._described:
                answers[j] = self._described[s.name]
                del why[j]
            elif j not in why:
                self._described[s.name] = answers[j]

    def _fill(self, shards, method: str, args: tuple, answers: List[Any], why: Dict[int, str]) -> None:
        missing = sorted(why)
        names = [shards[j].name for j in missing]
        scope = current_scope()
        live = [s for s in self.shards if not self.is_down(s.name)]
        if scope is not None and scope.allow and method in EMPTY and live:
            for j in missing:
                answers[j] = EMPTY[method](args)
            scope.add(names)
            return
        what = ", ".join(repr(n) for n in names)
        if all(why[j] == "slow" for j in missing):
            raise ApiError(503, f"shard {what} of index {self.index_name!r} did not answer within {self.timeout:g} s "
                                f"(--shard-timeout); retry, or send \"allow_partial\": true for the other shards' hits")
        plural = "s" if len(names) > 1 else ""
        raise ApiError(503, f"shard{plural} {what} of index {self.index_name!r} ha{'ve' if plural else 's'} no live "
                            f"replica (Ray Serve is restarting it); retry shortly, or send \"allow_partial\": true "
                            f"for the other shards' hits", headers={"Retry-After": "1"})

    # -- the watcher -----------------------------------------------------------------------------
    def watch(self) -> None:
        threading.Thread(target=self._watch, name=f"retr-shards-{self.index_name}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        from ray import serve

        while not self._stop.wait(WATCH_EVERY):
            try:
                apps = serve.status().applications
            except Exception as e:  # noqa: BLE001 - the controller restarting: look again
                log.warning("cannot read Ray Serve's status: %s", _last_line(str(e)))
                continue
            for s in self.shards:
                app = apps.get(s.app)
                dep = app.deployments.get(s.name) if app is not None else None
                running = (dep.replica_states or {}).get("RUNNING", 0) if dep is not None else 0
                if not running:
                    self.mark(s.name, True, "no replica RUNNING")
                elif self.is_down(s.name):
                    self._ping(s)

    def _ping(self, s: RemoteShard) -> None:
        resp = s.handle.call.remote("ping", (), {})
        try:
            resp.result(timeout_s=PING_TIMEOUT)
        except Exception:  # noqa: BLE001 - still down
            resp.cancel()
            return
        self.mark(s.name, False)


def serve_sharded(name: str, path: Path, address: Optional[str], replicas: int = 1, cpus: float = REPLICA_CPUS,
                  timeout: float = SHARD_TIMEOUT) -> ShardedServed:
    """Deploy the shards of the sharded index ``path`` on Ray Serve and return the router's
    :class:`ShardedServed` for it (closing it stops the watcher and deletes the deployments)."""
    path = Path(path)
    record = sh.read(path)
    check_local(path, record)
    folders = list(record["folders"])
    if address in (None, "", "local"):  # every shard is on this machine: a missing one is known now
        for i, p in enumerate(sh.shard_paths(path, record)):
            if not p.is_dir():
                raise IndexFormatError(f"{p}: shard {i} of {record['shards']} is missing")
    # the router reads the whole folder (one machine, a shared file system): one commit per write and per
    # request; else (shards only on their nodes) each replica follows and commits its own shard
    exact = all(p.is_dir() for p in sh.shard_paths(path, record))
    connect(address, folders)
    handles = deploy(name, path, record, replicas, cpus, exact)
    calls = ShardCalls(name, timeout, replicas)
    calls.shards = [RemoteShard(f, app_name(name, f), h, calls) for f, h in zip(folders, handles)]

    def close() -> None:
        calls.stop()
        undeploy(name, folders)

    try:
        if exact:
            from retrieval.sharded.pins import Commits

            calls.commits = Commits(path, record)
        served = ShardedServed(name, path, calls.shards, folders, call=calls, on_close=close, pins=calls.commits)
    except BaseException:
        close()
        raise
    served.calls = calls
    if exact:
        served.one_commit = True
        served.commit_remote = lambda op, wire: calls([calls.live()], "commit", (op, wire), {})[0]["documents"]
    calls.watch()
    return served
