"""The README's picture of `retr eval report`: a report of four real TREC DL 2019 passage runs (BM25 as the
baseline, BM25+RM3, TAS-B, SPLADE++; ../shared/datasets/msmarco-passage-eval) with the query texts and a
partial-annotation study, written by the CLI itself (the commands below are the README's), then opened in
the system Chromium through Playwright (as tests/browser) and photographed.

    python benchmarks/report_screenshot.py    # -> benchmarks/results/report_example.html,
                                              #    benchmarks/results/report_example_partial.json,
                                              #    benchmarks/results/screenshots/eval_report.png
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "msmarco-passage-eval"
OUT = ROOT / "benchmarks" / "results"
SYSTEMS = ("BM25", "BM25_RM3", "D_BERT_KD_TASB", "SPLADE_P_P_ENSEMBLE_DISTIL")


def retr(*args: str, stdout=None) -> None:
    subprocess.run([str(Path(sys.executable).with_name("retr")), *args], check=True, cwd=DATA, stdout=stdout)


def main() -> None:
    runs = [f"runs/{s}.dl19.top100.trec" for s in SYSTEMS]
    partial = OUT / "report_example_partial.json"
    html = OUT / "report_example.html"
    # retr eval partial --qrels qrels/dl19.tsv -l 2 --run RUN ... --json -q > partial.json
    with open(partial, "w") as fh:
        retr("eval", "partial", "--qrels", "qrels/dl19.tsv", "-l", "2", *[a for r in runs for a in ("--run", r)],
             "--json", "-q", stdout=fh)
    # retr eval report --qrels qrels/dl19.tsv -l 2 RUN ... --queries queries_dl19.jsonl --partial partial.json -o ...
    retr("eval", "report", "--qrels", "qrels/dl19.tsv", "-l", "2", *runs, "--queries", "queries_dl19.jsonl",
         "--partial", str(partial), "--title", "TREC DL 2019 passage: four systems against BM25", "-o", str(html))
    shots = OUT / "screenshots"
    shots.mkdir(exist_ok=True)
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1180, "height": 1500}, device_scale_factor=1)
        page.goto(html.as_uri())
        page.screenshot(path=str(shots / "eval_report.png"))
        browser.close()
    print(f"wrote {html.relative_to(ROOT)}, {partial.relative_to(ROOT)}, "
          f"{(shots / 'eval_report.png').relative_to(ROOT)}")


if __name__ == "__main__":
    main()
