"""Benchmarks of the evaluator, written to benchmarks/results/:

  reproduce  published BM25 nDCG@10 on DL19 / DL20 / TREC-COVID from the shipped runs (eval_reproduce.*)
  speed      eval vs pytrec_eval on a synthetic 7k-query x 1000-hit run, same process (eval_speed.*)
  partial    partial-annotation study on DL19, DL20 (4 shipped runs), Cranfield and NFCorpus
             (BM25 configurations from `retr`) (partial_*.json/.md/.png)

Usage: python benchmarks/bench_eval.py [reproduce|speed|partial|all] [--quiet]
Data: ../shared/datasets (or $RETR_DATA). Work files: work/bench_eval (or $WORK).
"""
from __future__ import annotations

import gc
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytrec_eval  # noqa: E402

import eval as E  # noqa: E402
from eval.partial import analyse_partial  # noqa: E402
from eval.plots import plot_partial  # noqa: E402
from eval.tables import markdown_table  # noqa: E402

DATA = Path(os.environ.get("RETR_DATA", ROOT.parent / "shared" / "datasets")).resolve()
WORK = Path(os.environ.get("WORK", ROOT / "work")).resolve() / "bench_eval"
OUT = ROOT / "benchmarks" / "results"
MSM = DATA / "msmarco-passage-eval"
DL_RUNS = ["BM25", "BM25_RM3", "D_BERT_KD_TASB", "SPLADE_P_P_ENSEMBLE_DISTIL"]


def _save(name: str, result: dict, markdown: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (OUT / f"{name}.md").write_text(markdown.rstrip() + "\n")
    print(markdown)


def reproduce() -> dict:
    """nDCG@10 (graded gains) and, TREC DL style, AP / RR@10 / R@100 with rel >= 2, for every shipped run."""
    published = {"dl19": 0.5058, "dl20": 0.4796, "covid": 0.5947}
    qrels_paths = {"dl19": MSM / "qrels/dl19.tsv", "dl20": MSM / "qrels/dl20.tsv",
                   "covid": DATA / "trec-covid-eval/qrels/test.tsv"}
    measures = ["nDCG@10", "RR@10", "AP", "R@100", "Judged@10"]
    result, rows = {"published_bm25_ndcg10": published, "measures": measures,
                    "conventions": "nDCG@10 graded gains; RR@10, AP, R@100 count grade >= 2 relevant on DL19/DL20 "
                                   "(trec_eval -l 2) and grade >= 1 on TREC-COVID (BEIR convention); runs are "
                                   "top-100, so AP is AP@100 and R@100 is recall of the whole run",
                    "runs": {}}, []
    for ds, qp in qrels_paths.items():
        qrels = E.read_qrels(qp)
        level = 2 if ds.startswith("dl") else 1
        for path in sorted(MSM.glob(f"runs/*.{ds}.top100.trec")):
            system = path.name.split(".")[0]
            run = E.read_run(path)
            means = E.evaluate(qrels, run, measures, rel_threshold=level)
            oracle = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
            means["pytrec_eval nDCG@10"] = float(np.mean([v["ndcg_cut_10"] for v in oracle.values()]))
            result["runs"][f"{system}.{ds}"] = means
            pub = published[ds] if system == "BM25" else None
            same = abs(means["nDCG@10"] - means["pytrec_eval nDCG@10"]) < 1e-12
            rows.append([ds, system, f"{means['nDCG@10']:.4f}", "equal" if same else "DIFFERENT",
                         (f"{pub:.4f} " + ("(reproduced)" if round(means["nDCG@10"], 4) == pub else "(NOT reproduced)"))
                         if pub else "", *(f"{means[m]:.4f}" for m in measures[1:])])
    md = ("# Reproduction of published BM25 nDCG@10 (and the other shipped runs)\n\n"
          f"Command: `python benchmarks/bench_eval.py reproduce`. {result['conventions']}.\n\n" +
          markdown_table(["set", "run", "nDCG@10", "vs pytrec_eval", "published BM25", *measures[1:]], rows))
    _save("eval_reproduce", result, md)
    return result


def _synthetic(directory: Path, n_q: int = 6980, depth: int = 1000, seed: int = 0) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)
    run_path, qrels_path = directory / "synthetic.trec", directory / "synthetic.qrels"
    with open(run_path, "w") as run, open(qrels_path, "w") as qrels:
        for q in range(n_q):
            docs = rng.choice(8_841_823, depth + 10, replace=False)
            scores = np.sort(np.round(rng.normal(10, 2, depth), 4))[::-1]  # rounded: some ties
            run.write("".join(f"{q} Q0 {d} {i + 1} {s} synthetic\n" for i, (d, s) in enumerate(zip(docs, scores))))
            n_rel = int(rng.integers(1, 4))  # MS MARCO dev: ~1.1 relevant per query; a few judged non-relevant
            for j, d in enumerate(rng.choice(docs, n_rel + 3, replace=False)):
                qrels.write(f"{q} 0 {d} {int(j < n_rel)}\n")
    return run_path, qrels_path


def speed(repeats: int = 3) -> dict:
    """Total time (read qrels + run, evaluate, average) of eval vs pytrec_eval, alternating, same process."""
    measures = ["nDCG@10", "AP", "RR", "R@100", "P@10", "Bpref"]
    requests = {"ndcg_cut.10", "map", "recip_rank", "recall.100", "P.10", "bpref"}
    times: dict[str, list[float]] = {"pytrec_eval": [], "eval": [], "eval + Judged@10": [], "eval + RR@10": []}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        run_path, qrels_path = _synthetic(Path(tmp))
        size = run_path.stat().st_size
        for _ in range(repeats):
            gc.collect()
            t = time.perf_counter()
            with open(qrels_path) as fq, open(run_path) as fr:
                qrels, run = pytrec_eval.parse_qrel(fq), pytrec_eval.parse_run(fr)
            res = pytrec_eval.RelevanceEvaluator(qrels, requests).evaluate(run)
            ref = {m: float(np.mean([v[m] for v in res.values()])) for m in next(iter(res.values()))}
            times["pytrec_eval"].append(time.perf_counter() - t)
            del qrels, run, res
            for label, ms in (("eval", measures), ("eval + Judged@10", measures + ["Judged@10"]),
                              ("eval + RR@10", measures + ["RR@10"])):
                gc.collect()
                t = time.perf_counter()
                means = E.evaluate(E.read_qrels(qrels_path), E.read_run(run_path), ms)
                times[label].append(time.perf_counter() - t)
            assert abs(means["nDCG@10"] - ref["ndcg_cut_10"]) < 1e-12 and abs(means["AP"] - ref["map"]) < 1e-12
    best = {k: min(v) for k, v in times.items()}
    result = {"queries": 6980, "hits_per_query": 1000, "run_bytes": size, "measures": measures,
              "repeats": repeats, "seconds": times, "best_seconds": best,
              "ratio_vs_pytrec_eval": best["eval"] / best["pytrec_eval"],
              "ratio_with_judged_vs_pytrec_eval": best["eval + Judged@10"] / best["pytrec_eval"],
              "ratio_with_rr10_vs_pytrec_eval": best["eval + RR@10"] / best["pytrec_eval"],
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"}
    md = ("# Speed: eval vs pytrec_eval (same process, best of {r})\n\n"
          "Synthetic MS MARCO-dev-sized run: 6,980 queries x 1,000 hits ({mb:.0f} MB), 1-3 relevant + 3 judged "
          "non-relevant per query. Total time = read qrels and run, evaluate {ms}, average.\n\n".format(
              r=repeats, mb=size / 1e6, ms=", ".join(measures)) +
          markdown_table(["evaluator", "seconds (best)", "ratio vs pytrec_eval"],
                         [[k, f"{v:.2f}", f"{v / best['pytrec_eval']:.2f}"] for k, v in best.items()]) +
          "\n\neval computes every value through ir_measures' providers: the six measures above by pytrec_eval "
          "(on the run as read), Judged@10 by ir_measures' judged provider and RR@10 by its msmarco provider, both "
          "given each query's top 10 in trec_eval's order of tied scores (eval.measures._top). eval's extra time "
          "over pytrec_eval is reading the files with file:line errors (eval.io) and ir_measures' per-value "
          "records. Requirement: within 1.5x of pytrec_eval. Timings vary with the shared host; only the ratio, "
          "measured in one process, is meaningful.")
    _save("eval_speed", result, md)
    return result


def _partial_md(title: str, res: dict, command: str) -> str:
    head = ["budget", "kept rel/q"] + [f"{v} {s}" for v in res["budgets"][0]["results"] for s in ("tau", "swaps", "flips")]
    rows = [[b["label"], f"{b['kept_per_query']:.1f}"] +
            [x for r in b["results"].values() for x in (f"{r['tau_mean']:.3f}", f"{r['swapped_mean']:.2f}",
                                                       f"{r['flipped_mean']:.2f}")] for b in res["budgets"]]
    full = markdown_table(["system"] + list(res["full"]),
                          [[s] + [f"{res['full'][m][s]:.4f}" for m in res["full"]] for s in res["systems"]])
    return (f"# Partial vs full annotation: {title}\n\n"
            f"Command: `{command}`. {len(res['systems'])} systems, {res['queries']} queries with a relevant "
            f"document (grade >= {res['rel_threshold']}), {res['relevant_per_query']:.1f} relevant per query; "
            f"{res['seeds']} random subsamples per budget; judged non-relevant documents "
            f"{'kept' if res['keep_nonrel'] else 'dropped'}. tau = Kendall's tau between the system ranking "
            "under the subsampled qrels and the ranking by the standard measure under the full qrels; swaps = "
            "system pairs ordered the other way; flips = share of system pairs whose paired t-test conclusion "
            f"(alpha {res['alpha']}, correction: {res['correction']}) differs. Means over seeds. "
            "A prime (') marks the condensed-list variant (unjudged documents removed).\n\n"
            "## Full-annotation scores\n\n" + full + "\n\n## Over the annotation budget\n\n" +
            markdown_table(head, rows))


def partial(quiet: bool = False, seeds: int = 10) -> dict:
    studies = {}
    for ds in ("dl19", "dl20"):
        runs = {n: E.read_run(MSM / f"runs/{n}.{ds}.top100.trec") for n in DL_RUNS}
        studies[ds] = (E.read_qrels(MSM / f"qrels/{ds}.tsv"), runs, 2, f"TREC DL {ds[2:]} passage (4 shipped runs)")
    from bench_eval_runs import make_runs
    for ds, folder, title_only in (("cranfield", "cranfield", True), ("nfcorpus", "nfcorpus-preproc", False)):
        qrels_path = DATA / folder / "qrels/test.tsv"
        paths = make_runs(DATA / folder, qrels_path, WORK / ds, title_only=title_only)
        runs = {n: E.read_run(p) for n, p in paths.items()}
        studies[ds] = (E.read_qrels(qrels_path), runs, 1, f"{ds} (BM25 configurations via retr, top 100)")
    out = {}
    for ds, (qrels, runs, level, title) in studies.items():
        t = time.perf_counter()
        res = analyse_partial(qrels, runs, measures=["nDCG@10", "AP@100"], seeds=seeds, rel_threshold=level,
                              quiet=quiet)
        res["seconds"] = time.perf_counter() - t
        plot_partial(res, OUT / f"partial_{ds}.png", title)
        _save(f"partial_{ds}", res, _partial_md(title, res, "python benchmarks/bench_eval.py partial") +
              f"\n\n![curves](partial_{ds}.png)")
        out[ds] = res
    return out


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "all"
    quiet = "--quiet" in sys.argv
    if what in ("reproduce", "all"):
        reproduce()
    if what in ("speed", "all"):
        speed()
    if what in ("partial", "all"):
        partial(quiet)
