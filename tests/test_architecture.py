"""docs/architecture.md is drawn from the import contracts: each contract of pyproject.toml (the ones `lint-imports`
checks in `make lint`) stands in the document as written there, layers in order, so that the documented
architecture is the checked one."""

from __future__ import annotations

import tomllib

from tests.support.workflow import ROOT


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def rendered(contract: dict) -> str:
    """A contract as docs/architecture.md shows it (inside its code block of contracts)."""
    kind = contract["type"]
    if kind == "layers":
        where = f" in {', '.join(contract['containers'])}" if "containers" in contract else ""
        body = [f"    {layer}" for layer in contract["layers"]]
        return "\n".join([f"{contract['name']} (layers{where}, top to bottom):", *body])
    if kind == "forbidden":
        sources, forbidden = ", ".join(contract["source_modules"]), ", ".join(contract["forbidden_modules"])
        return f"{contract['name']} (forbidden):\n    {sources}\n    may not import {forbidden}"
    if kind == "protected":
        protected, importers = ", ".join(contract["protected_modules"]), ", ".join(contract["allowed_importers"])
        return f"{contract['name']} (protected):\n    {protected}\n    only by {importers}"
    return f"{contract['name']} ({kind}): {', '.join(contract['ancestors'])}"


def test_every_import_contract_stands_in_the_architecture_document():
    document = (ROOT / "docs" / "architecture.md").read_text()
    missing = [contract["name"] for contract in contracts() if rendered(contract) not in document]
    assert missing == [], "update docs/architecture.md, 'Import contracts', from pyproject.toml"
    assert not any("ignore_imports" in contract for contract in contracts()), "contracts without exceptions"


if __name__ == "__main__":  # print the section's code block from the contracts
    print("\n\n".join(rendered(contract) for contract in contracts()))
