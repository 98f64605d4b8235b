"""Accessibility checks for the browser tests: axe-core (from the npm registry: `make setup` installs the version
the Makefile pins, with npm, into the environment, `<venv>/node/node_modules/axe-core`) injected into a playwright
page, and the violations of the impacts that make a page unusable with a keyboard or a screen reader.

    from tests.support.axe import assert_accessible
    assert_accessible(page, "the sample list")   # fails naming each serious or critical violation

Without npm on the machine the check skips and says why; with npm but without the package installed it fails,
since `make setup` should have installed it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

AXE_SCRIPT = Path(sys.prefix) / "node" / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING_IMPACTS = ("serious", "critical")


def axe_source() -> str:
    """The text of axe.min.js; skip without npm, fail if npm is there but the package was not installed."""
    if not AXE_SCRIPT.exists():
        if shutil.which("npm") is None:
            pytest.skip("npm is not installed, so axe-core is not either: install npm, then run 'make setup'")
        pytest.fail(f"{AXE_SCRIPT} is missing: run 'make setup' (it installs axe-core with npm)")
    return AXE_SCRIPT.read_text(encoding="utf-8")


def violations(page, impacts: tuple[str, ...] = BLOCKING_IMPACTS) -> list[dict]:
    """axe-core's violations on the page as it is now (every rule axe-core runs by default), of `impacts`."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=axe_source())
    # No preload: axe would fetch the page's stylesheets again, which a file:// page refuses (a console error).
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations'], preload: false})")
    return [v for v in result["violations"] if v["impact"] in impacts]


def describe(found: list[dict]) -> str:
    return "\n".join(
        f"{v['impact']} {v['id']}: {v['help']} ({v['helpUrl']}) at "
        + json.dumps([node["target"] for node in v["nodes"][:5]])
        for v in found
    )


def assert_accessible(page, where: str) -> None:
    """No serious or critical axe-core violation on the page."""
    found = violations(page)
    assert not found, f"accessibility violations on {where}:\n{describe(found)}"
