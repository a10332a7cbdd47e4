"""Progress bars (tqdm on stderr), silenced by ``quiet``. A bar appears only once its work has taken a
second, so quick commands, and bad input caught at once, print nothing but their result or error line."""
from __future__ import annotations

from tqdm.auto import tqdm


def progress(iterable=None, *, total=None, desc=None, unit="it", quiet=False):
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=quiet, dynamic_ncols=True,
                mininterval=0.5, leave=False, delay=1.0)
