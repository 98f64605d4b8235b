"""CSV files a spreadsheet opens safely: the one writer of every CSV the project writes (`lalm-judge anchors export`
and the rating app's `export.csv`).

A spreadsheet (Excel, LibreOffice, Google Sheets) runs a cell that starts with `=`, `+`, `-` or `@` as a formula
(some strip a leading tab or carriage return first), so a rater's comment `=HYPERLINK("http://...")` would run in the
study owner's spreadsheet beside the hidden labels (OWASP, "CSV Injection"). Every text cell that starts with one of
those six characters is written with a `'` in front (`'=HYPERLINK(...)`), which a spreadsheet shows as the text and
does not evaluate; numbers, booleans and empty cells are written as they are. A program that reads the CSV back sees
the `'` (in the ratings: a comment, or a rater id that starts with `-`, which stays one id per rater).
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO

import polars as pl

from lalm_judge.core.files import atomic_path

# The first characters that make a spreadsheet read a cell as a formula (OWASP's list: = + - @, tab, CR).
FORMULA_START = r"^[=+\-@\t\r]"
ESCAPE = "'"


def neutralised(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with every text cell that a spreadsheet would run as a formula prefixed by `'`."""
    texts = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    return frame.with_columns(
        pl.when(pl.col(name).str.contains(FORMULA_START))
        .then(ESCAPE + pl.col(name))
        .otherwise(pl.col(name))
        .alias(name)
        for name in texts
    )


def write_csv(frame: pl.DataFrame, target: str | os.PathLike | BinaryIO) -> None:
    """Write `frame` as CSV, formulas neutralised (module docstring): to a path atomically, or to a binary stream."""
    safe = neutralised(frame)
    if isinstance(target, str | os.PathLike):
        with atomic_path(target) as staging:
            safe.write_csv(staging)
    else:
        safe.write_csv(target)


def csv_bytes(frame: pl.DataFrame) -> bytes:
    """The CSV of `frame`, formulas neutralised, as bytes (a download)."""
    buffer = io.BytesIO()
    write_csv(frame, buffer)
    return buffer.getvalue()
