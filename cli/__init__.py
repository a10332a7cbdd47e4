"""The `retr` command line (click): :mod:`cli.main` wires the commands.

Importing this package first keeps the working directory from shadowing retr's own top-level
packages (``eval``, ``indexes``, ``retrieval``): :func:`_unshadow`."""
from __future__ import annotations

import os
import sys


def _unshadow() -> None:
    """Drop the working directory from ``sys.path`` unless retr itself lives there.

    ``python -m cli.main`` puts the working directory first on ``sys.path`` (so does an empty or
    ``.`` entry of PYTHONPATH), ahead of where retr is installed: a user's own ``eval/`` or
    ``eval.py`` there would be imported as retr's evaluator. The ``retr`` console script starts
    with its bin directory first instead, so this changes nothing for it unless PYTHONPATH names the
    working directory. The same as ``python -P`` (PYTHONSAFEPATH), applied by the command line only:
    retr never imports a user's module by name."""
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:  # the working directory was removed: nothing resolves to it
        return
    if cwd == os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))):
        return  # a source checkout run from its root: the working directory is retr
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != cwd]


_unshadow()
