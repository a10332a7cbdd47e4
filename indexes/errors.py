"""Errors that the CLI turns into one clear line and a non-zero exit.

They live in the lowest layer so that every package above can raise them.
"""
from __future__ import annotations


class RetrError(Exception):
    """Base class for every error retr reports to a user."""


class InputError(RetrError):
    """Bad user input: a malformed file, a missing path, an unknown option value."""

    def __init__(self, message: str, path: object = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class IndexFormatError(RetrError):
    """An index folder that is missing, incomplete or of an unknown format."""
