"""Shared pieces of the benchmark harness: the collections, result writing,
paired tests. Benchmarks are the one place that imports both retrieval and eval."""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = Path(os.environ.get("RETR_DATA", ROOT.parent / "shared" / "datasets")).resolve()
RESULTS = ROOT / "benchmarks" / "results"
WORK = Path(os.environ.get("RETR_BENCH_WORK", ROOT / "work" / "bench"))


@dataclass(frozen=True)
class Collection:
    name: str
    folder: str
    split: str = "test"

    @property
    def root(self) -> Path:
        return DATA / self.folder

    @property
    def corpus(self) -> Path:
        return self.root / "corpus.jsonl"

    @property
    def queries_path(self) -> Path:
        return self.root / "queries.jsonl"

    def qrels_path(self, split: str | None = None) -> Path:
        return self.root / "qrels" / f"{split or self.split}.tsv"

    def qrels(self, split: str | None = None) -> Dict[str, Dict[str, int]]:
        from eval.io import read_qrels

        return read_qrels(self.qrels_path(split))

    def queries(self, split: str | None = None):
        from retrieval.collections import read_queries

        keep = self.qrels(split)
        return [q for q in read_queries(self.queries_path) if q.qid in keep]


COLLECTIONS: List[Collection] = [
    Collection("scifact", "scifact"),
    Collection("nfcorpus", "nfcorpus-preproc"),
    Collection("cranfield", "cranfield"),
    Collection("vaswani", "vaswani"),
]


def by_name(names: Sequence[str] | None) -> List[Collection]:
    if not names:
        return COLLECTIONS
    return [c for c in COLLECTIONS if c.name in names]


def machine() -> dict:
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def cpu_line() -> str:
    """The CPU a run used, for a results page's header: model, cores, bf16 in hardware, load average."""
    model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
                 platform.processor() or "unknown CPU") if os.path.exists("/proc/cpuinfo") else platform.processor()
    from retrieval.models import cpu_has_fast_bf16

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{model}, {os.cpu_count()} cores, bf16 in hardware: {'yes' if cpu_has_fast_bf16() else 'no'}, "
            f"load average {load:.2f} at the start")


def write_results(stem: str, payload: dict, markdown: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(payload, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text(markdown.rstrip() + "\n")
    print(f"wrote {RESULTS / (stem + '.json')} and .md")


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def fmt(x):
        if isinstance(x, float):
            return f"{x:.4f}" if abs(x) < 10 else f"{x:.1f}"
        return str(x)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(fmt(x) for x in r) + " |" for r in rows]
    return "\n".join(out)


def synthetic_corpus(n: int, out_path: Path, seed: int = 0, sources: Sequence[Collection] | None = None) -> Path:
    """A BEIR-style corpus of ``n`` passages for scale benchmarks, built from the local collections:
    passage ``i`` gets the new id ``syn-<i>`` and the text of two passages of ``sources`` (default: all
    of COLLECTIONS; title and text, passages without text skipped) drawn at random with ``seed`` and
    joined by a space, so every passage is distinct while the vocabulary and term statistics are
    those of real text. Written once to ``out_path`` (JSONL, ``{"_id", "title", "text"}``); a call
    with the same ``n``, ``seed`` and sources reuses the file (recorded in ``<out_path>.meta.json``)."""
    import random

    out_path = Path(out_path)
    sources = list(COLLECTIONS if sources is None else sources)
    meta = {"n": n, "seed": seed, "sources": [c.folder for c in sources], "version": 1}
    meta_path = out_path.with_name(out_path.name + ".meta.json")
    if out_path.exists() and meta_path.exists() and json.loads(meta_path.read_text()) == meta:
        return out_path
    pool: List[str] = []
    for c in sources:
        with open(c.corpus, encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                text = " ".join(x for x in (d.get("title") or "", d.get("text") or "") if x.strip())
                if text.strip():
                    pool.append(text)
    rng = random.Random(seed)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + f".tmp-{os.getpid()}")
    width = len(str(max(n - 1, 0)))
    with open(tmp, "w", encoding="utf-8") as out:
        for i in range(n):
            a, b = rng.randrange(len(pool)), rng.randrange(len(pool))
            out.write(json.dumps({"_id": f"syn-{i:0{width}d}", "title": "", "text": f"{pool[a]} {pool[b]}"}) + "\n")
    tmp.replace(out_path)
    meta_path.write_text(json.dumps(meta) + "\n")
    return out_path


def run_dict(results) -> Dict[str, Dict[str, float]]:
    return {qid: {h.docid: h.score for h in hits} for qid, hits in results.items()}


def bench_index(col: Collection, dense: Sequence[str] = ()):
    """The shared benchmark index of a collection under WORK (built once, reused
    by every benchmark): BM25 plus the requested dense sub-indexes, named
    ``dense`` (MiniLM, mean pooling) or ``dense-<pooling>`` (MiniLM), passages in torch fp32."""
    import retrieval
    from retrieval.writer import add_subindex
    from retrieval.dense.subindex import DenseSpec

    import fcntl

    path = WORK / col.name
    WORK.mkdir(parents=True, exist_ok=True)
    # One builder at a time per collection: a second benchmark process waits
    # here and then finds the sub-index built instead of encoding it again.
    with open(WORK / f".{col.name}.build-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / "manifest.json").exists():
            retrieval.build_index(col.corpus, path, empty="skip", overwrite=True, quiet=True)
        idx = retrieval.open_index(path)
        for pooling in dense:
            name = "dense" if pooling == "mean" else f"dense-{pooling}"
            if name not in idx.retrievers:
                print(f"[{col.name}] encoding for {name} ...", flush=True)
                # torch fp32 passages, the reference every recorded quality number was measured on (the
                # CPU default may encode them in bf16: benchmarks/results/encode-ndcg.md gives its cost)
                idx = add_subindex(idx, DenseSpec(pooling=pooling, backend="torch", precision="fp32"), name=name,
                                   quiet=True)
    return idx
