"""A real Chromium (the system's package: Debian's `chromium`, which `make test` installs) driven by
Playwright. Browsers that download themselves cannot be reached from these machines, so Playwright is
pointed at the system binary (``RETR_CHROMIUM`` overrides where it is). Without a Chromium the browser
tests are skipped, except under ``RETR_BROWSER_REQUIRED=1`` (set by `make test`), where that fails."""
from __future__ import annotations

import os
import shutil
from urllib.parse import urlparse

import pytest


def chromium_path():
    for name in (os.environ.get("RETR_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and (found := shutil.which(name)):
            return found
    return None


# module-scoped: Playwright's sync API keeps an asyncio loop running in this thread while it is open, and
# tests elsewhere (the MCP client, the async integrations) call asyncio.run, which a running loop refuses
@pytest.fixture(scope="module")
def browser():
    path = chromium_path()
    if path is None:
        msg = "no Chromium on this machine (`make browser` installs Debian's; RETR_CHROMIUM names another)"
        if os.environ.get("RETR_BROWSER_REQUIRED") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


class Requests:
    """Every URL a page asked for, and those that left ``allowed_origins`` (``file:``, ``data:``,
    ``blob:`` and ``about:`` stay inside the page)."""

    def __init__(self, page, *allowed_origins: str):
        self.urls = []
        self.allowed = {o.rstrip("/") for o in allowed_origins}
        page.on("request", lambda r: self.urls.append(r.url))

    def outside(self):
        out = []
        for u in self.urls:
            p = urlparse(u)
            if p.scheme in ("file", "data", "blob", "about"):
                continue
            if f"{p.scheme}://{p.netloc}" not in self.allowed:
                out.append(u)
        return out


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    yield pg
    ctx.close()
