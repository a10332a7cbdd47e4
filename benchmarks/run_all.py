"""Run every benchmark in turn (hours on 2 cores; each script can also run alone).
bench_gpu.py is left out: it needs a CUDA machine (see its docstring).

    .venv/bin/python benchmarks/run_all.py [--only bm25 hybrid ...]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Order: cheap and foundational first; later ones reuse the shared indexes the earlier ones build.
SCRIPTS = {"bm25": ["bench_bm25.py"], "eval": ["bench_eval.py", "all"], "hybrid": ["bench_hybrid.py"],
           "dense": ["bench_dense.py"], "ditto_heads": ["bench_ditto_heads.py"],
           "dense_speed": ["bench_dense_speed.py"], "sts": ["bench_sts.py"],
           "dimsel": ["bench_dimsel.py"], "deepct": ["bench_deepct.py"],
           "defaults_fusion": ["bench_defaults_fusion.py"], "defaults_pruning": ["bench_defaults_pruning.py"],
           "defaults_deepct": ["bench_defaults_deepct.py"],
           "quality": ["bench_quality.py", "--expensive-on", "cranfield"], "scale": ["bench_scale.py"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", nargs="*", choices=sorted(SCRIPTS))
    args = ap.parse_args()
    failed = []
    for name in args.only or SCRIPTS:
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(HERE / SCRIPTS[name][0]), *SCRIPTS[name][1:]], cwd=HERE).returncode:
            failed.append(name)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
