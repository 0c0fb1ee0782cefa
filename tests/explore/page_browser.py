"""Open an explorer page in Debian's chromium through Playwright, recording what a test checks:
console errors, page errors and every request the page makes.

Playwright's own browser download cannot reach its host here, so the system chromium
(/usr/bin/chromium, ``apt-get install chromium``; ``make install-test`` does it) is launched with
``executable_path``. Missing Playwright or chromium skips the tests, and fails them under CI
(tests/oracles.py).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager

import pytest

from oracles import require, require_program

CHROMIUM = os.environ.get("NPFORMER_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str:
    """The chromium binary; skips (fails under CI) when it is not installed."""
    return require_program(CHROMIUM, "chromium", "apt-get install chromium (make install-test does, as root)")


@contextmanager
def browser_context():
    """A fresh headless chromium with its own throwaway profile."""
    sync_api = require("playwright.sync_api")
    path = chromium_path()
    profile = tempfile.mkdtemp(prefix="npformer-chromium-")
    try:
        with sync_api.sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(profile, executable_path=path, headless=True, args=ARGS,
                                                       viewport={"width": 1400, "height": 1000},
                                                       accept_downloads=True)
            try:
                yield ctx
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


# a canvas's pixels (its PNG data URL) hashed in the page: FNV-1a, and the URL's length
HASH_JS = """c => {
    const s = c.toDataURL('image/png'); let h = 2166136261;
    for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619) >>> 0; }
    return h.toString(16) + ':' + s.length; }"""


class Opened:
    """A page with the record of its console errors and requests."""

    def __init__(self, page):
        self.page = page
        self.errors: list[str] = []
        self.requests: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("request", lambda r: self.requests.append(r.url))

    def open(self, url: str, timeout_ms: int = 30000):
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='1']", timeout=timeout_ms)
        return self

    def foreign_requests(self, allowed_prefixes: tuple[str, ...]) -> list[str]:
        return [u for u in self.requests if not u.startswith(allowed_prefixes)]

    def click_tab(self, view: str):
        self.page.click(f"#tabs button[data-view='{view}']")

    def canvas_hash(self, selector: str) -> str:
        """The canvas's pixels as a PNG data URL's hash, computed in the page."""
        return self.page.eval_on_selector(selector, HASH_JS)


@pytest.fixture(scope="module")
def browser():
    with browser_context() as ctx:
        yield ctx


@pytest.fixture
def opened(browser):
    """A factory: opened(url) -> Opened page; each page is closed after the test."""
    pages = []

    def _open(url):
        o = Opened(browser.new_page())
        pages.append(o.page)
        return o.open(url)
    yield _open
    for p in pages:
        p.close()
