"""Data for the evaluator tests: trec_eval's own fixtures and the shipped MS MARCO / TREC-COVID runs."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import DATA, need  # one place that finds the datasets and skips when they are absent


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return need(DATA / "trec-eval-fixtures")


@pytest.fixture(scope="session")
def msmarco() -> Path:
    return need(DATA / "msmarco-passage-eval")
