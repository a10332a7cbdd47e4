"""Exceptions raised by the evaluator."""
from __future__ import annotations


class EvalError(Exception):
    """Bad input to the evaluator (file format, measure name, argument); the message is one line."""


class SkippedQueries(UserWarning):
    """``empty="skip"`` left judged queries with no hits out of the means; ``count`` says how many.
    Made by :meth:`of`; the constructor takes the message alone, as ``warnings`` and pytest-xdist
    (which rebuilds a worker's warning from its arguments) call it."""

    def __init__(self, message: str, count: int | None = None):
        super().__init__(message)
        self.count = count

    @classmethod
    def of(cls, count: int) -> "SkippedQueries":
        return cls(f"{count:,} judged {'query' if count == 1 else 'queries'} with no hits left out of the "
                   f"means (empty='skip'; by default they score 0)", count)
