"""Option types shared by the commands of cli/: click checks a value's range before any work is done,
and shows the range in ``--help``."""
from __future__ import annotations

import math

import click

FLOAT32_MAX = 3.4028234663852886e38  # Lucene takes BM25's k1 and b as Java floats


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and infinities (every comparison with nan is false, so a
    plain FloatRange lets nan through), and numbers beyond a 32-bit float."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv) or abs(rv) > FLOAT32_MAX:
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


K1 = FiniteFloatRange(min=0)                           # Lucene's BM25Similarity: finite and >= 0
B = FiniteFloatRange(0, 1)                             # ... and b in [0, 1]
SHARE_OPEN_CLOSED = FiniteFloatRange(0, 1, min_open=True)   # a share kept, (0, 1]
SHARE_CLOSED_OPEN = FiniteFloatRange(0, 1, max_open=True)   # a share dropped or held out, [0, 1)
LEVEL = FiniteFloatRange(0, 1, min_open=True, max_open=True)  # a significance level, (0, 1)
POSITIVE = FiniteFloatRange(min=0, min_open=True)      # a rate, ratio or margin, > 0
