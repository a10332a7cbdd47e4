"""Data for the evaluator tests: trec_eval's own fixtures and the shipped MS MARCO / TREC-COVID runs."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("RETR_DATA", ROOT.parent / "shared" / "datasets")).resolve()


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"dataset not found: {path} (set RETR_DATA)")
    return path


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return need(DATA / "trec-eval-fixtures")


@pytest.fixture(scope="session")
def msmarco() -> Path:
    return need(DATA / "msmarco-passage-eval")
