"""What the search page at / of `retr serve` adds over the JSON API (#28), and its screenshots.

A BM25 index of a 1,000-passage SciFact subset (the passages judged for the test queries first), one
`retr serve` on loopback, and 50 test queries. Per query, in turn: the page's own request through
httpx (k=10 with text, "highlight" and "ranks", as the page sends it), the plain request without
them (what highlighting and ranks cost the server), and the page in Chromium: submit (Enter in the
query box) to hits rendered, timed inside the page (performance.now() at the submit event and after
the hits are in the DOM; page.js leaves both in data attributes), and its fetch alone. The overhead is
the page's submit-to-rendered time minus the same request through httpx. Then the screenshots:
benchmarks/results/screenshots/search_page.png and search_page_explain.png.

    python benchmarks/bench_page.py [--queries 50] [--passages 1000]
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import RESULTS, ROOT, WORK, Collection, machine, md_table, write_results

SCIFACT = Collection("scifact", "scifact")
SHOT_QUERY = "statin side effects"


def subset_index(n: int, nq: int):
    """BM25 over the first ``n`` SciFact passages, the test queries' judged ones first (built once)."""
    import retrieval

    path = WORK / f"page-scifact-{n}"
    if (path / "manifest.json").exists():
        return retrieval.open_index(path)
    qrels = SCIFACT.qrels()
    wanted = {d for q in list(qrels)[:nq] for d in qrels[q]}
    docs, rest = [], []
    with open(SCIFACT.corpus, encoding="utf-8") as f:
        for line in f:
            (docs if json.loads(line)["_id"] in wanted else rest).append(line)
    src = WORK / f"page-scifact-{n}-corpus"
    src.mkdir(parents=True, exist_ok=True)
    (src / "corpus.jsonl").write_text("".join(docs + rest[:max(0, n - len(docs))]), encoding="utf-8")
    return retrieval.build_index(src / "corpus.jsonl", path, quiet=True, overwrite=True)


def serve(index_path: Path, token_file: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--index", f"sf={index_path}", "--port",
                             str(port), "--token-file", str(token_file)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"


def stats(xs):
    xs = sorted(xs)
    return {"median": statistics.median(xs), "p90": xs[int(0.9 * (len(xs) - 1))], "mean": statistics.fmean(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--passages", type=int, default=1000)
    a = ap.parse_args()
    import httpx
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("RETR_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("no Chromium (make browser)", file=sys.stderr)
        return 1
    idx = subset_index(a.passages, a.queries)
    load_before = os.getloadavg()[0]
    queries = [q.text for q in SCIFACT.queries()][:a.queries]
    token = secrets.token_hex(16)
    tf = WORK / f".page-token-{os.getpid()}"
    tf.write_text(token + "\n")
    proc, url = serve(idx.path, tf)
    auth = {"Authorization": f"Bearer {token}"}
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/readyz", headers=auth, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        client = httpx.Client(headers=auth, timeout=60)
        page_body = {"k": 10, "retriever": "bm25", "text": True, "highlight": True, "ranks": True}
        plain_body = {"k": 10, "retriever": "bm25", "text": True}

        def timed(body):
            t0 = time.perf_counter()
            r = client.post(url + "/v1/sf/search", json=body)
            dt = (time.perf_counter() - t0) * 1000
            r.raise_for_status()
            return dt

        rows = {"httpx_page_request": [], "httpx_plain_request": [], "browser_bare_fetch": [],
                "browser_bare_fetch_page_options": [], "browser_bare_fetch_after_typing": [], "browser_fetch": [],
                "browser_submit_to_rendered": []}
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            ctx = b.new_context(viewport={"width": 1200, "height": 900})
            page = ctx.new_page()
            page.goto(url + "/")
            page.fill("#token", token)
            page.press("#token", "Enter")
            page.wait_for_selector("#search-form:not([hidden])")

            def browser(q):
                before = page.get_attribute("#hits", "data-seq") or ""
                page.fill("#query", q)
                page.press("#query", "Enter")
                # polled on a timer, not Playwright's default requestAnimationFrame: that polling makes Chromium
                # produce a frame on every tick while the search is in flight and slows the page being measured
                page.wait_for_function("b => (document.getElementById('hits').dataset.seq || '') !== b", arg=before,
                                       polling=50)
                d = page.evaluate("({...document.body.dataset})")
                return float(d["fetchMs"]), float(d["renderMs"])

            bare_js = ("""async ([body, token]) => { const t0 = performance.now();
                const r = await fetch('/v1/sf/search', {method: 'POST', body: JSON.stringify(body),
                    headers: {'Authorization': 'Bearer ' + token, 'Content-Type': 'application/json'}});
                await r.json(); return performance.now() - t0; }""")

            def bare(q):  # the same request by fetch() in the page, nothing rendered: the browser's own cost
                return float(page.evaluate(bare_js, [{**page_body, "query": q}, token]))

            # the same bare fetch with page.js's fetch options (cache, credentials, referrer policy): whether an
            # option, not the page's code, is what costs
            opts_js = bare_js.replace("{method: 'POST',", "{method: 'POST', cache: 'no-store', credentials: 'omit', "
                                                        "referrerPolicy: 'no-referrer',")

            def bare_opts(q):
                return float(page.evaluate(opts_js, [{**page_body, "query": q}, token]))

            typed_js = bare_js.replace("async ([body, token]) => {", "async ([body, token]) => { "
                                       "document.getElementById('query').value = body.query + ' ';")

            def bare_typed(q):  # the bare fetch right after a change to the page (the query box), as a submit has
                return float(page.evaluate(typed_js, [{**page_body, "query": q}, token]))

            def page_run(q):
                f, r = browser(q)
                rows["browser_fetch"].append(f)
                rows["browser_submit_to_rendered"].append(r)

            steps = [lambda q: rows["httpx_page_request"].append(timed({**page_body, "query": q})),
                     lambda q: rows["httpx_plain_request"].append(timed({**plain_body, "query": q})),
                     page_run,
                     lambda q: rows["browser_bare_fetch"].append(bare(q)),
                     lambda q: rows["browser_bare_fetch_page_options"].append(bare_opts(q)),
                     lambda q: rows["browser_bare_fetch_after_typing"].append(bare_typed(q))]
            for q in queries[:20]:  # warm-up: the JIT (the analyser, the search), caches, connections
                timed({**page_body, "query": q})
                browser(q)
                bare(q)
                bare_opts(q)
            for i, q in enumerate(queries):
                # each query repeats the same search six ways; the order turns with the query so that no way
                # is always the first (cold) or the last (warmest) to run it
                for j in range(len(steps)):
                    steps[(i + j) % len(steps)](q)

            shots = RESULTS / "screenshots"
            shots.mkdir(parents=True, exist_ok=True)
            browser(SHOT_QUERY)
            page.screenshot(path=str(shots / "search_page.png"))
            page.click("#hits .hit:first-child")
            page.wait_for_selector("#explain[open] #explain-body[data-docid]")
            page.screenshot(path=str(shots / "search_page_explain.png"))
            b.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        tf.unlink(missing_ok=True)

    load_after = os.getloadavg()[0]
    s = {k: stats(v) for k, v in rows.items()}
    over = [r - h for r, h in zip(rows["browser_submit_to_rendered"], rows["httpx_page_request"])]
    dom = [r - f for r, f in zip(rows["browser_submit_to_rendered"], rows["browser_fetch"])]
    hl = [p_ - q_ for p_, q_ in zip(rows["httpx_page_request"], rows["httpx_plain_request"])]
    s["page_overhead_vs_httpx"] = stats(over)
    s["render_after_fetch"] = stats(dom)
    s["page_overhead_vs_bare_fetch"] = stats([r - b_ for r, b_ in zip(rows["browser_submit_to_rendered"],
                                                                       rows["browser_bare_fetch"])])
    s["highlight_and_ranks_server_cost"] = stats(hl)
    payload = {"machine": machine(), "collection": "scifact", "passages": len(idx), "queries": len(queries),
               "k": 10, "retriever": "bm25", "load_1min": [load_before, load_after], "ms": s, "raw_ms": rows}
    md = [f"# The search page's overhead (`benchmarks/bench_page.py`)\n",
          f"SciFact subset: {len(idx)} passages, BM25, {len(queries)} test queries, k=10 with text; one `retr serve` "
          f"on loopback; the system Chromium driven by Playwright. Milliseconds per query.\n",
          md_table(["measure", "median", "p90", "mean"],
                   [[k.replace("_", " "), v["median"], v["p90"], v["mean"]] for k, v in s.items()]),
          "\n- *httpx page request*: the page's body (`highlight`, `ranks`) through httpx; *plain*: without them.",
          "- *browser bare fetch*: the same request by `fetch()` from the page's context, nothing rendered: "
          "what Chromium's own network path costs over httpx; *with page options*: the same with page.js's fetch "
          "options (`cache`, `credentials`, `referrerPolicy`).",
          "- *browser submit to rendered*: Enter in the query box to hits in the DOM, timed in the page.",
          "- *page overhead vs httpx*: that minus the httpx page request, per query; *render after fetch*: the "
          "page's own work after its fetch returned (parsing, DOM, highlights); *page overhead vs bare fetch*: "
          "what page.js adds over the browser's plain fetch of the same request.",
          "- Per query the six are run in an order that turns with the query (none always first or last).",
          f"\nMachine: {machine()['cpus']} CPUs, 1-minute load average {load_before:.2f} before and "
          f"{load_after:.2f} after the run; {machine()['date']}."]
    write_results("page", payload, "\n".join(md))
    print(md_table(["measure", "median", "p90"], [[k, v["median"], v["p90"]] for k, v in s.items()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
