"""`retr train ...`: the group of commands that train models (registered by cli/main.py
as ``train``). The sub-index kinds add their trainers to it (``KindOptions.commands``:
DeepCT's ``retr train deepct``, the dense kind's ``retr train dimsel``)."""
from __future__ import annotations

import click

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group("train", context_settings=CONTEXT)
def train():
    """Train models: DeepCT term weights, dimension selectors."""
