"""Pictures of the documentation site: its landing page and one API reference page, built with
`mkdocs build --strict` into a temporary folder, served on loopback and photographed in the system Chromium
through Playwright (as benchmarks/report_screenshot.py and tests/browser do).

    python benchmarks/docs_screenshots.py   # -> benchmarks/results/screenshots/docs_home.png, docs_api.png
"""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "benchmarks" / "results" / "screenshots"


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):   # no request log on stderr
        pass


PAGES = {"docs_home.png": "", "docs_api.png": "reference/api/#retrieval.index.Index"}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", tmp],
                       cwd=ROOT, check=True, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
        handler = functools.partial(Quiet, directory=tmp)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        from playwright.sync_api import sync_playwright

        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        SHOTS.mkdir(parents=True, exist_ok=True)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
                for name, path in PAGES.items():
                    page.goto(base + path, wait_until="networkidle")
                    page.screenshot(path=str(SHOTS / name))
                browser.close()
        finally:
            server.shutdown()
    print("wrote " + ", ".join(str((SHOTS / n).relative_to(ROOT)) for n in PAGES))


if __name__ == "__main__":
    main()
