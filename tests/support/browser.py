"""A real headless browser for the browser tests: Debian's chromium driven by playwright, and a tab that records
page errors, console errors and every URL the page requests (the tests check that a page logs no error and asks
for nothing it should not). Accessibility checks: tests/support/axe.py.

    @pytest.fixture(scope="module")
    def browser():
        with launched_chromium() as launched:
            yield launched
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The Debian wrapper skips --disable-dev-shm-usage when it misreads /dev/shm; pass it ourselves.
CHROMIUM_ARGS = ["--disable-dev-shm-usage", "--autoplay-policy=no-user-gesture-required"]


@contextmanager
def launched_chromium() -> Iterator:
    """Headless chromium (skips, saying how to install it, where it is missing)."""
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed: 'make setup' installs it as root ('apt-get install chromium')")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


class RecordedTab:
    """One browser tab (its own context), recording page errors, console errors and every URL it requests."""

    def __init__(self, browser):
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.requested: list[str] = []
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        self.page.on("request", lambda r: self.requested.append(r.url))

    def close_checked(self, allowed: Callable[[str], bool]) -> None:
        """Close the tab; it logged no error, and requested something and only URLs `allowed` accepts."""
        self.context.close()
        assert self.problems == [], self.problems
        assert self.requested and all(allowed(url) for url in self.requested), self.requested
