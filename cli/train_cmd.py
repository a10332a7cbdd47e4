"""`retr train ...`: commands that train models (registered by cli/main.py as ``train``).

Each trainer lives in its own module and is added here: ``deepct`` (cli/deepct_cmds.py)
and, when present, ``dimsel`` (cli/dimsel_cmds.py).
"""
from __future__ import annotations

import importlib

import click

from cli.deepct_cmds import deepct

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group("train", context_settings=CONTEXT)
def train():
    """Train models: DeepCT term weights, dimension selectors."""


train.add_command(deepct, name="deepct")

for _module, _attr in (("cli.dimsel_cmds", "dimsel"),):
    try:
        train.add_command(getattr(importlib.import_module(_module), _attr), name=_attr)
    except ModuleNotFoundError as _e:  # a sibling module that a later change adds
        if _e.name != _module:
            raise
