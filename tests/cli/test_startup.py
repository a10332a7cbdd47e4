"""A one-off `retr search` loads only what it needs, and query-time encoding follows the thread policy
(retrieval.models.query_threads: torch's default, or RETR_QUERY_THREADS). Real processes, real index."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.conftest import ROOT, run_retr

HEAVY = ("torch", "transformers", "faiss", "pandas", "ray", "fastapi", "sentence_transformers")


def _imported(stderr: str) -> set:
    """Top-level packages named in `python -X importtime` output."""
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", stderr, re.M)
    return {n.split(".")[0] for n in names}


def test_bm25_search_imports_no_model_or_frame_library(small_index):
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "cli.main", "search", "--index",
                        str(small_index.path), "--retriever", "bm25", "--k", "3", "vitamin D deficiency"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.search(r"^\s+1\. ", r.stdout, re.M), r.stdout  # it searched
    mods = _imported(r.stderr)
    assert "indexes" in mods and "jnius" in mods  # (the importtime output was read)
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))
    assert "eval" not in mods  # the evaluator (ir_measures, numpy) is not the search's


_PROBE = """
import json, sys, torch
before = torch.get_num_threads()  # torch's own default, before retr is imported
import retrieval
idx = retrieval.open_index(sys.argv[1])
idx.search("vitamin D deficiency", k=3, retriever="bm25+dense")
print(json.dumps({"before": before, "after": torch.get_num_threads()}))
"""


def _threads(index, override):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    env.pop("RETR_QUERY_THREADS", None)
    if override is not None:
        env["RETR_QUERY_THREADS"] = override
    r = subprocess.run([sys.executable, "-c", _PROBE, str(index.path)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_query_encoding_thread_policy_default_and_override(small_dense_index):
    default = _threads(small_dense_index, None)
    assert default["after"] == default["before"]  # torch's default kept (whatever the machine gives)
    other = str(default["before"] + 1)  # an override that differs from the default on any machine
    assert _threads(small_dense_index, other) == {"before": default["before"], "after": int(other)}
    assert _threads(small_dense_index, "0") == default  # 0: torch's default


def test_bad_query_threads_is_one_error_line(small_dense_index):
    env = dict(os.environ, RETR_QUERY_THREADS="many")
    r = subprocess.run([sys.executable, "-m", "cli.main", "search", "--index", str(small_dense_index.path),
                        "--retriever", "bm25+dense", "vitamin D"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "retr: error: RETR_QUERY_THREADS='many' is not a number of threads (0: torch's default)"]
    assert run_retr("search", "--index", small_dense_index.path, "--retriever", "bm25", "vitamin D").returncode == 0
