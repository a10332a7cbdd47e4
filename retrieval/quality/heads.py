"""The shipped quality head: ``default_head.json.gz`` beside this module, written by
``benchmarks/bench_quality.py --ship-head`` (its model card says how it was trained)."""
from __future__ import annotations

import gzip
import json
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=1)
def default_head() -> dict:
    """The shipped head (parsed once; callers must not modify it)."""
    raw = resources.files("retrieval.quality").joinpath("default_head.json.gz").read_bytes()
    return json.loads(gzip.decompress(raw))


def __getattr__(name):
    # ``DEFAULT_HEAD`` stays importable as before, loaded on first use.
    if name == "DEFAULT_HEAD":
        return default_head()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
