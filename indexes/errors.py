"""Errors that the CLI turns into one clear line and a non-zero exit.

They live in the lowest layer so that every package above can raise them.
"""
from __future__ import annotations

import string
from typing import Mapping


class RetrError(Exception):
    """Base class for every error retr reports to a user."""


class FilterWarning(UserWarning):
    """A filter names a metadata field that no document of the index carries (a misspelt field, or
    one this collection lacks): it matches nothing. Raised with :func:`warnings.warn` by
    ``Index.search``/``batch_search``; ``Index.fields()`` lists the fields there are."""


class InputError(RetrError):
    """Bad user input: a malformed file, a missing path, an unknown option value."""

    def __init__(self, message: str, path: object = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class NotFound(InputError):
    """Something asked for by name that is not there: a document id (the server answers 404)."""


class ParameterError(InputError):
    """Bad input that names parameters of a library call. ``template`` puts each parameter's name
    in braces and ``values`` fill its other fields (``ParameterError("{workers} must be at least 1,
    got {got}", got=0)``): the message calls the parameters by their names, and :meth:`renamed`
    calls them otherwise, as the CLI does with its flags (``--workers``)."""

    def __init__(self, template: str, **values):
        self.template, self.values = template, values
        super().__init__(template.format_map(_Fields(values)))

    def renamed(self, names: Mapping[str, str]) -> "ParameterError":
        """The same error with the parameters in ``names`` called by their names there."""
        out = ""
        for literal, field, spec, conv in string.Formatter().parse(self.template):
            out += literal.replace("{", "{{").replace("}", "}}")
            if field is not None:
                if field in names and field not in self.values:
                    out += names[field].replace("{", "{{").replace("}", "}}")
                else:
                    out += "{" + field + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
        return ParameterError(out, **self.values)

    def __reduce__(self):
        return _parameter_error, (self.template, self.values)


def _parameter_error(template: str, values: dict) -> ParameterError:
    return ParameterError(template, **values)


class _Fields(dict):
    def __missing__(self, key: str) -> str:  # a parameter: its own name
        return key


class IndexFormatError(RetrError):
    """An index folder that is missing, incomplete or of an unknown format."""


class DuplicateIds(InputError):
    """Adding documents whose ids the index already holds (a folder or a sharded folder alike):
    nothing was added. The CLI prints it as one line (exit 2), the server answers 409."""

    def __init__(self, count: int, first: str, path: object = None):
        self.count, self.first = int(count), str(first)
        super().__init__(f"{self.count} document id(s) are already in the index (first: {self.first[:200]!r}); "
                         f"nothing was added (update replaces documents)", path)

    def __reduce__(self):  # (raised in a Ray replica, re-raised in the router)
        return DuplicateIds, (self.count, self.first, self.path)
