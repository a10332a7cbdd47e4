"""Progress bars (tqdm on stderr), silenced by ``quiet``."""
from __future__ import annotations

from tqdm.auto import tqdm


def progress(iterable=None, *, total=None, desc=None, unit="it", quiet=False):
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=quiet, dynamic_ncols=True,
                mininterval=0.5, leave=False)
