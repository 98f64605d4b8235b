"""The decision flow of the practitioner guide as an inline SVG figure (`lalm_judge.analysis.flow`): one column per
question (available input, transcript quality, priority), the recommendations on the right, each with its judge
cell, value, 95 % interval and number of candidates; a combination without a measured judge is drawn dashed and
says so. Laid out from the flow alone, so the figure reads without the guide table."""

from __future__ import annotations

import html
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lalm_judge.analysis.flow import QUESTIONS
from lalm_judge.analysis.guide import NO_USABLE_CONFIGURATION
from lalm_judge.analysis.support import NOT_ESTIMABLE
from lalm_judge.core.vocabulary import cascade_source
from lalm_judge.report.tables import cell_text

# Column x positions and widths (SVG user units; the figure scales to the page width).
COLUMNS = ((0, 80), (100, 150), (270, 200), (490, 190), (700, 460))
WIDTH = 1160
ROW_HEIGHT = 50
HEADER = 40
CHARACTER_WIDTH = 6.4  # of the 11.5 px sans-serif labels, to wrap them inside their box
LINE_HEIGHT = 13
METRIC_LABELS = {
    "avg_abs_pb_sensitivity": "AvgAbsPB of sensitivity",
    "avg_abs_pb_specificity": "AvgAbsPB of specificity",
}


@dataclass(frozen=True)
class Box:
    node: Mapping[str, Any]
    x: float
    y: float
    width: float
    height: float


def _subtree_rows(flow: Mapping[str, Any]) -> tuple[dict[str, list[str]], list[str]]:
    """Children of every node and the leaves in order (the rows of the figure)."""
    children: dict[str, list[str]] = {}
    for edge in flow["edges"]:
        children.setdefault(edge["from"], []).append(edge["to"])
    leaves = [node["id"] for node in flow["nodes"] if "recommendation" in node]
    return children, leaves


def layout(flow: Mapping[str, Any]) -> list[Box]:
    """A box per node: leaves one per row, every other node centred on the rows of its leaves."""
    children, leaves = _subtree_rows(flow)
    row_of = {leaf: i for i, leaf in enumerate(leaves)}

    def span(node_id: str) -> tuple[int, int]:
        if node_id in row_of:
            return row_of[node_id], row_of[node_id]
        spans = [span(child) for child in children.get(node_id, [])]
        return min(s[0] for s in spans), max(s[1] for s in spans)

    boxes = []
    for node in flow["nodes"]:
        if node["id"] not in row_of and not children.get(node["id"]):
            continue
        first, last = span(node["id"])
        x, width = COLUMNS[node["level"]]
        height = ROW_HEIGHT - 8 if node["level"] == 4 else min(ROW_HEIGHT * (last - first + 1) - 8, 64)
        centre = HEADER + ROW_HEIGHT * (first + last + 1) / 2
        boxes.append(Box(node, x, centre - height / 2, width, height))
    return boxes


def _lines(text: str, width: float) -> list[str]:
    return textwrap.wrap(text, max(8, int((width - 12) / CHARACTER_WIDTH))) or [""]


def leaf_lines(recommendation: Mapping[str, Any], weak_judges: Mapping[str, str]) -> list[str]:
    """The text of a recommendation box: the judge cell and prompt, then the value, interval and candidates (or,
    without a measured judge, that and why)."""
    if not recommendation["measured"]:
        # The guide's standard reason repeats the first line; what else its note says (judges left out) stays.
        note = recommendation.get("note") or ""
        rest = [part for part in note.split("; ") if part and not part.startswith(NO_USABLE_CONFIGURATION)]
        return ["no measured judge takes this input", *rest]
    source, audio_input = recommendation["transcript_source"], recommendation["audio_input"]
    cell = recommendation["modality"] if source in (None, "none") else f"{recommendation['modality']}/{source}"
    if cascade_source(audio_input) is not None:
        cell += f" ({audio_input})"
    judge = recommendation["judge"] + (" (weak demo model)" if recommendation["judge"] in weak_judges else "")
    low, high = recommendation["ci_lo"], recommendation["ci_hi"]
    interval = f" [{cell_text(low)}, {cell_text(high)}]" if low is not None and high is not None else ""
    if recommendation.get("status") == NOT_ESTIMABLE:
        interval = " (not estimable)"
    candidates = recommendation["n_candidates"]
    metric = METRIC_LABELS.get(recommendation["metric"], recommendation["metric"])
    tied = recommendation.get("n_tied") or 0
    standing = (
        f"tied with {tied} of the other {candidates - 1} candidates"
        if tied
        else f"best of {candidates} candidate{'s' if candidates != 1 else ''}"
    )
    return [
        f"{judge} · {cell} · {recommendation['prompt']} prompt",
        f"{metric} {cell_text(recommendation['value'])}{interval} · {standing}",
    ]


def _wrapped(lines: Sequence[str], width: float, most: int = 3) -> list[str]:
    """Lines wrapped to the box width, at most `most` of them (the last one cut with an ellipsis)."""
    wrapped = [part for line in lines if line for part in _lines(line, width)]
    if len(wrapped) > most:
        wrapped = [*wrapped[: most - 1], wrapped[most - 1].rstrip(" .,;") + " …"]
    return wrapped


def _text(x: float, y: float, lines: Sequence[str], css_class: str) -> str:
    spans = "".join(
        f'<tspan x="{x:.1f}" dy="{0 if i == 0 else LINE_HEIGHT}">{html.escape(line)}</tspan>'
        for i, line in enumerate(lines)
    )
    return f'<text class="{css_class}" x="{x:.1f}" y="{y:.1f}">{spans}</text>'


def _box_svg(box: Box, weak_judges: Mapping[str, str]) -> str:
    node = box.node
    recommendation = node.get("recommendation")
    if recommendation is not None:
        lines = _wrapped(leaf_lines(recommendation, weak_judges), box.width)
        css = "leaf" if recommendation["measured"] else "leaf unmeasured"
    else:
        lines = _lines(node["label"], box.width)
        css = "question" if node["level"] == 0 else "answer"
    top = box.y + box.height / 2 - (len(lines) - 1) * LINE_HEIGHT / 2 + 4
    rect = (
        f'<rect class="{css}" x="{box.x:.1f}" y="{box.y:.1f}" width="{box.width:.1f}" height="{box.height:.1f}" '
        'rx="6"/>'
    )
    return f'<g class="node" data-id="{html.escape(node["id"])}">{rect}{_text(box.x + 8, top, lines, css)}</g>'


def _edge_svg(parent: Box, child: Box) -> str:
    x0, y0 = parent.x + parent.width, parent.y + parent.height / 2
    x1, y1 = child.x, child.y + child.height / 2
    middle = (x0 + x1) / 2
    return f'<path class="edge" d="M{x0:.1f},{y0:.1f} H{middle:.1f} V{y1:.1f} H{x1:.1f}"/>'


FLOW_STYLE = """
svg.flow { width: 100%; height: auto; font-family: sans-serif; font-size: 11.5px; }
svg.flow rect.question { fill: #2c3e50; }
svg.flow text.question { fill: #fff; font-weight: bold; }
svg.flow rect.answer { fill: #eaf1f8; stroke: #7a9cc6; }
svg.flow rect.leaf { fill: #eef7ee; stroke: #5a9a5a; }
svg.flow rect.leaf.unmeasured { fill: #f6f6f6; stroke: #999; stroke-dasharray: 4 3; }
svg.flow text.leaf.unmeasured { fill: #666; font-style: italic; }
svg.flow path.edge { fill: none; stroke: #888; stroke-width: 1.2; }
svg.flow text.header { font-weight: bold; fill: #333; }
"""


def flow_svg(flow: Mapping[str, Any], weak_judges: Mapping[str, str] | None = None) -> str:
    """The flow as an inline SVG element (scales to the width of its container)."""
    weak_judges = weak_judges or {}
    boxes = layout(flow)
    by_id = {box.node["id"]: box for box in boxes}
    height = HEADER + ROW_HEIGHT * max(1, sum(1 for b in boxes if b.node["level"] == 4)) + 8
    headers = ["", *QUESTIONS, "Use"]
    parts = [
        _text(x + 2, 13, _lines(headers[level], width), "header")
        for level, (x, width) in enumerate(COLUMNS)
        if headers[level]
    ]
    parts += [
        _edge_svg(by_id[edge["from"]], by_id[edge["to"]])
        for edge in flow["edges"]
        if edge["from"] in by_id and edge["to"] in by_id
    ]
    parts += [_box_svg(box, weak_judges) for box in boxes]
    title = "Decision flow of the practitioner guide: input, transcript, priority, then the judge to use"
    return (
        f'<svg class="flow" role="img" aria-labelledby="flow-title" viewBox="0 0 {WIDTH} {height:.0f}" '
        f'xmlns="http://www.w3.org/2000/svg"><title id="flow-title">{html.escape(title)}</title>'
        + "".join(parts)
        + "</svg>"
    )
