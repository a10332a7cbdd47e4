"""`retr train ...`: the group of commands that train models (registered by cli/main.py
as ``train``). The sub-index kinds add their trainers to it (``KindOptions.commands``:
DeepCT's ``retr train deepct``)."""
from __future__ import annotations

import importlib

import click

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group("train", context_settings=CONTEXT)
def train():
    """Train models: DeepCT term weights, dimension selectors."""


for _module, _attr in (("cli.dimsel_cmds", "dimsel"),):
    try:
        train.add_command(getattr(importlib.import_module(_module), _attr), name=_attr)
    except ModuleNotFoundError as _e:  # a sibling module that a later change adds
        if _e.name != _module:
            raise
