"""What the two offline sample viewers share (`lalm_judge.report.samples` for the safety track,
`lalm_judge.report.pairwise_samples` for the pairwise track): the data files, the static page and scripts, the
paths of audio already on disk, and the links from the report's tables into a viewer.

A viewer is a folder opened from `file://` with no server and no network: `index.html`, the scripts and styles
of `static/samples/`, and `data/`. A page opened from `file://` cannot `fetch` files, so every data file is a
small script, `LALM_VIEWER.put("<key>", <JSON>);`, that the page loads on demand (`data/catalog.js` first, then
one file per judge cell when a list needs it, one file per sample or item when it is opened). Audio is never
copied: the pages point at the clips the workflow wrote (relative paths, so the results folder can move as a
whole); only audio that exists nowhere on disk (a turn masked or with noise added) is written by the viewer.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import os
import shutil
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any
from urllib.parse import quote, urlencode

import polars as pl

from lalm_judge.core.files import atomic_path

# The viewer's folder inside a report folder, and its page.
VIEWER_DIR = "samples"
VIEWER_PAGE = f"{VIEWER_DIR}/index.html"
STATIC_DIR = Path(__file__).parent / "static" / "samples"
SHARED_ASSETS = ("viewer.css", "common.js")
# Scores and durations are shown with 3 decimals; 4 keep the order of differences between them.
DECIMALS = 4
# Data files whose JSON is longer are stored gzip-compressed: the raw answers of a paper-scale run shrink
# about fivefold (docs/benchmarks.md); smaller files stay readable as they are.
PACK_ABOVE = 16_384
# zlib's fastest level: a tenth of the time of level 6, for files about 15 % larger.
PACK_LEVEL = 1
_PUT, _UNPACK = "LALM_VIEWER.put", "LALM_VIEWER.unpack"
# Shown in every row where a table has them, even when one value fills a table (other such columns are settings
# of the cell): how a verdict was read, why a generation stopped.
PER_ROW = ("verdict_rule", "finish_reason", "finish_reason_swapped")


def rounded(value: Any) -> Any:
    """A number as the data files store it (NaN and infinities as null); other values unchanged."""
    if isinstance(value, float):
        return None if not math.isfinite(value) else round(value, DECIMALS)
    return value


def to_json(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False, sort_keys=False)


def data_script(key: str, payload: Any) -> str:
    """The text of one data file: a call that hands `payload` to the page under `key` (`script_text`)."""
    return script_text(key, to_json(payload))


def script_text(key: str, body: str) -> str:
    """A data file handing the JSON text `body` to the page under `key`; above PACK_ABOVE characters packed as
    gzip (base64), which the page unpacks (DecompressionStream)."""
    if len(body) <= PACK_ABOVE:
        return f"{_PUT}({json.dumps(key)},{body});\n"
    packed = base64.b64encode(gzip.compress(body.encode("utf-8"), compresslevel=PACK_LEVEL, mtime=0))
    return f'{_UNPACK}({json.dumps(key)},"{packed.decode("ascii")}");\n'


def read_data(path: str | os.PathLike) -> tuple[str, Any]:
    """(key, payload) of a data file, packed or not (what the page receives)."""
    text = Path(path).read_text(encoding="utf-8")
    call, _, rest = text.partition("(")
    key, _, body = rest.partition(",")
    body = body.rstrip().removesuffix(");")
    if call == _UNPACK:
        body = gzip.decompress(base64.b64decode(json.loads(body))).decode("utf-8")
    elif call != _PUT:
        raise ValueError(f"{os.fspath(path)!r} is not a viewer data file (it starts with {call!r})")
    return json.loads(key), json.loads(body)


def write_data(viewer_dir: str | os.PathLike, key: str, payload: Any) -> Path:
    """Write `data/<key>.js` (atomically); return its path."""
    return write_json_text(viewer_dir, key, to_json(payload))


def write_json_text(viewer_dir: str | os.PathLike, key: str, body: str) -> Path:
    """Write `data/<key>.js` from the JSON text of its payload (atomically); return its path."""
    path = Path(viewer_dir) / "data" / f"{key}.js"
    with atomic_path(path) as tmp:
        tmp.write_text(script_text(key, body), encoding="utf-8")
    return path


# Per track: the page title and the name of its list.
PAGES = {
    "safety": {"title": "Samples and judge answers", "list": "Sample list"},
    "pairwise": {"title": "Items and judge verdicts", "list": "Item list"},
}


def copy_assets(viewer_dir: str | os.PathLike, track: str) -> Path:
    """Write the page of `track` ('safety' or 'pairwise') as index.html, with the shared scripts and styles and
    the track's own script; return index.html."""
    viewer_dir = Path(viewer_dir)
    for name in (*SHARED_ASSETS, f"{track}.js"):
        with atomic_path(viewer_dir / name) as tmp:
            shutil.copyfile(STATIC_DIR / name, tmp)
    page = Template((STATIC_DIR / "page.html").read_text(encoding="utf-8"))
    index = viewer_dir / "index.html"
    with atomic_path(index) as tmp:
        tmp.write_text(page.substitute(track=track, **PAGES[track]), encoding="utf-8")
    return index


def file_url(path: str | os.PathLike, viewer_dir: str | os.PathLike) -> str:
    """The URL of a file on disk relative to the viewer's folder (paths relative to the working directory, as
    the workflow records them, or absolute)."""
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(viewer_dir))
    return quote(Path(relative).as_posix())


def cell_id(keys: Mapping[str, Any]) -> str:
    """A judge cell's name in the viewer, as its score tables' folder: '<judge>/<modality>-<source>/<prompt>/<cond>'."""
    return f"{keys['judge']}/{keys['modality']}-{keys['transcript_source']}/{keys['prompt']}/{keys['condition']}"


def viewer_intro(what: str) -> str:
    """The report's paragraph that opens its viewer (HTML)."""
    return (
        f'<p class="viewer"><a href="{VIEWER_PAGE}"><strong>Open the sample viewer</strong></a>: {what} '
        "(offline; the tables' 'samples' links open the rows behind them).</p>"
    )


def viewer_link(view: str, filters: Mapping[str, Any], prefix: str = "") -> str:
    """A link into a viewer from its report's page: `samples/index.html#view=<view>&<filter>=<value>...`
    (filters with a None value are left out)."""
    shown = {"view": view, **{key: value for key, value in filters.items() if value is not None}}
    return f"{prefix}{VIEWER_PAGE}#{urlencode({k: str(v) for k, v in shown.items()}, quote_via=quote)}"


def sample_links(
    rows: Sequence[Mapping[str, Any]], keys: Sequence[str], severity_key: str | None = None, **extra: Any
) -> list[str]:
    """One link per row into the list of the samples of its judge cell (the row's values of those `keys` it has,
    e.g. judge, modality, transcript_source, prompt and condition; with `severity_key`, the severity of that
    column), with `extra` filters."""
    links = []
    for row in rows:
        filters = {key: row[key] for key in keys if key in row}
        if severity_key:
            filters["severity"] = row[severity_key]
        links.append(viewer_link("list", {**filters, **extra}))
    return links


def sample_link(sample_id: str, version: str | None = None) -> str:
    """A link to one sample's page in the safety viewer (a version: '<condition>/<scored sample id>')."""
    return viewer_link("sample", {"sample": sample_id, "version": version})


def columnar(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> dict[str, list[Any]]:
    """Rows as one list per column (the compact form of the data files), numbers rounded."""
    return {name: [rounded(row.get(name)) for row in rows] for name in columns}


@dataclass
class CellFile:
    """One table file of one judge cell (a shard of it, or all of it): the columns constant within it."""

    path: str
    cell: str
    part: int | None
    constant: dict[str, Any]


def split_columns(frame: pl.DataFrame, columns: Sequence[str]) -> tuple[dict[str, Any], set[str]]:
    """Of `columns` of one table, those with one value (and it) and those that vary."""
    if not columns or frame.height == 0:
        return {}, set()
    counts = frame.select(pl.col(list(columns)).n_unique()).row(0, named=True)
    first = frame.row(0, named=True)
    constant = {name: rounded(first[name]) for name, n in counts.items() if n == 1}
    return constant, {name for name, n in counts.items() if n > 1}


def cell_constants(files: Sequence[CellFile], varying: set[str]) -> dict[str, dict[str, Any]]:
    """Per cell, the columns constant within each of its files (and varying in none): one value, or
    {"by_shard": {part: value}} where its files differ."""
    per_cell: dict[str, dict[str, dict[Any, Any]]] = defaultdict(lambda: defaultdict(dict))
    for item in files:
        for name, value in item.constant.items():
            if name not in varying:
                per_cell[item.cell][name][item.part] = value
    out: dict[str, dict[str, Any]] = {}
    for cell, columns in per_cell.items():
        out[cell] = {}
        for name, by_part in sorted(columns.items()):
            distinct = {json.dumps(value, sort_keys=True) for value in by_part.values()}
            out[cell][name] = next(iter(by_part.values())) if len(distinct) == 1 else {"by_shard": by_part}
    return out
