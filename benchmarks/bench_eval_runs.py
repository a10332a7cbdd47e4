"""Benchmark-only baselines for the partial-annotation study on Cranfield and NFCorpus: several BM25
configurations made with the project's own `retr index` / `retr search` (Lucene BM25, different k1/b,
and a title-only index for Cranfield). Runs are cached under the work folder."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RETR = [str(ROOT / ".venv" / "bin" / "retr")] if (ROOT / ".venv" / "bin" / "retr").exists() else \
    [sys.executable, "-m", "cli.main"]
CONFIGS = [(0.9, 0.4), (1.2, 0.75), (2.0, 0.75), (0.5, 0.3), (1.5, 1.0), (3.0, 0.2)]


def _retr(*args: str) -> None:
    subprocess.run([*RETR, *args], check=True, cwd=ROOT)


def _title_only(corpus: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with open(corpus / "corpus.jsonl") as src, open(out / "corpus.jsonl", "w") as dst:
        for line in src:
            doc = json.loads(line)
            dst.write(json.dumps({"_id": doc["_id"], "title": "", "text": doc.get("title") or doc["text"]}) + "\n")
    shutil.copy(corpus / "queries.jsonl", out / "queries.jsonl")
    return out


def make_runs(dataset: Path, qrels: Path, work: Path, title_only: bool = False, depth: int = 100) -> dict[str, Path]:
    """{system name: run path}; builds the indexes and runs that are not cached yet."""
    work.mkdir(parents=True, exist_ok=True)
    variants = {"full": dataset}
    if title_only:
        variants["title"] = _title_only(dataset, work / "title-corpus")
    runs = {}
    for variant, corpus in variants.items():
        index = work / f"index-{variant}"
        if not (index / "manifest.json").exists() and not index.exists():
            _retr("index", "--corpus", str(corpus), "--index", str(index), "--empty", "keep", "--quiet")
        configs = CONFIGS if variant == "full" else CONFIGS[:1]
        for k1, b in configs:
            name = f"BM25{'-title' if variant == 'title' else ''}(k1={k1},b={b})"
            path = work / f"{variant}-k1{k1}-b{b}.trec"
            if not path.exists():
                _retr("search", "--index", str(index), "--queries", str(dataset / "queries.jsonl"), "--qrels",
                      str(qrels), "--k", str(depth), "--retriever", "bm25", "--k1", str(k1), "--b", str(b), "--tag",
                      name.replace(" ", ""), "-o", str(path), "--quiet")
            runs[name] = path
    return runs
