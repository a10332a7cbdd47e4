"""Exceptions raised by the evaluator."""


class EvalError(Exception):
    """Bad input to the evaluator (file format, measure name, argument); the message is one line."""
