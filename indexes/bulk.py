"""Building many long-lived Python objects at once (a batch's hits) without paying for the cyclic
garbage collector over and over.

``Index.batch_search`` makes a ``Hit`` per hit: 300,000 of them for 300 queries at k=1000. None
can form a reference cycle, but each counts towards the collector's thresholds, and as they
survive CPython keeps running collections, full ones included, over every object of the process
(millions with torch or Pyserini imported). Holding the automatic collector off while a batch's
hits are made took the largest share of ``Index.batch_search``'s time away at k=1000 in a process
with torch imported; the retrievers' (docid, score) tuples and single searches gained nothing
measurable that way, so they are left alone. Reference counting still frees everything as usual, and the
collector runs again afterwards. ``no_gc()`` nests and is shared by threads: the collector comes
back when the last holder leaves, and only if it was enabled before the first came.
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_holders = 0
_was_enabled = False


@contextmanager
def no_gc() -> Iterator[None]:
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()
