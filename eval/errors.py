"""Exceptions raised by the evaluator."""


class EvalError(Exception):
    """Bad input to the evaluator (file format, measure name, argument); the message is one line."""


class SkippedQueries(UserWarning):
    """``empty="skip"`` left judged queries with no hits out of the means; ``count`` says how many."""

    def __init__(self, count: int):
        super().__init__(f"{count:,} judged {'query' if count == 1 else 'queries'} with no hits left out of the "
                         f"means (empty='skip'; by default they score 0)")
        self.count = count
