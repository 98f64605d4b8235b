"""The practitioner guide as a decision flow (the study's Fig. 6): available input -> transcript quality ->
priority -> the judge cell to use, with its value, interval and number of candidates.

`decision_flow` is a pure function of the guide rows (`lalm_judge.analysis.guide.GUIDE_SCHEMA`, one row per input x
transcript quality x priority): a tree whose question nodes are the input, the transcript and the priority, and
whose leaves are the guide's recommendations; a leaf whose combination has no measured judge says so (`measured`
false, its note). A leaf carries what the guide row says of its support: the value's status, how many candidates
are estimable, and the candidates it is tied with (no paired difference beyond the noise), which its label names.
The metrics stage writes it from the guide table (`results/metrics/guide.parquet`) as
`results/metrics/decision_flow.json` with the study's caveat; the report draws it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from lalm_judge.analysis.guide import AUDIO_ONLY
from lalm_judge.core.files import stable_hash, write_json
from lalm_judge.core.vocabulary import TranscriptSource

FLOW_VERSION = 1

CAVEAT = (
    "Built from this run's measurements on synthetic speech (generated turns read by TTS voices, transcribed by the "
    "ASR models of the run): re-check a recommendation on real recordings of your own setting before deploying it."
)

QUESTIONS = ("Which input does the judge get?", "Which transcript is there?", "What matters most?")

PRIORITY_LABELS = {
    "sensitivity": "sensitivity (catch even mild harm)",
    "specificity": "specificity (order the severities)",
    "stability": "stability (least position bias)",
}

RECOMMENDATION_KEYS = (
    "judge",
    "modality",
    "transcript_source",
    "audio_input",
    "prompt",
    "prompt_choice",
    "condition",
    "metric",
    "value",
    "ci_lo",
    "ci_hi",
    "status",
    "n_candidates",
    "n_estimable",
    "n_tied",
    "n_separated",
    "tied_with",
    "note",
)


def quality_label(available_input: str, quality: str) -> str:
    """How a transcript quality reads in the flow: the ground truth, an ASR model's transcript, or none."""
    source = TranscriptSource(quality)
    if not source.has_transcript:
        return "no transcript: audio-native judges"
    if source.is_asr:
        kind = "ASR of the audio" if available_input == AUDIO_ONLY else "ASR transcript"
        return f"{kind} ({source.asr_model})"
    return "ground-truth transcript"


def _node(node_id: str, level: int, label: str, **fields: Any) -> dict[str, Any]:
    return {"id": node_id, "level": level, "label": label, **fields}


def _recommendation(row: Mapping[str, Any]) -> dict[str, Any]:
    recommendation = {key: row.get(key) for key in RECOMMENDATION_KEYS}
    recommendation["measured"] = row.get("judge") is not None
    return recommendation


def decision_flow(guide: pl.DataFrame, caveat: str = CAVEAT) -> dict[str, Any]:
    """The flow of a guide table: `nodes` (id, level 0-4, label; question nodes carry their `question`, leaves
    their `recommendation`), `edges` (from, to, label), the `levels` and the `caveat`. Inputs, qualities and
    priorities keep the guide's order."""
    nodes = [_node("root", 0, "start", question=QUESTIONS[0])]
    edges: list[dict[str, str]] = []
    seen: set[str] = set()
    for row in guide.iter_rows(named=True):
        available, quality, priority = row["available_input"], row["transcript_quality"], row["priority"]
        path = [
            ("root", f"input={available}", available, QUESTIONS[1]),
            (
                f"input={available}",
                f"input={available}/transcript={quality}",
                quality_label(available, quality),
                QUESTIONS[2],
            ),
        ]
        for level, (parent, node_id, label, question) in enumerate(path, start=1):
            if node_id not in seen:
                seen.add(node_id)
                nodes.append(_node(node_id, level, label, question=question))
                edges.append({"from": parent, "to": node_id, "label": label})
        parent = path[-1][1]
        choice = f"{parent}/priority={priority}"
        label = PRIORITY_LABELS.get(priority, priority)
        nodes.append(_node(choice, 3, label))
        edges.append({"from": parent, "to": choice, "label": label})
        leaf = f"{choice}/recommendation"
        recommendation = _recommendation(row)
        nodes.append(_node(leaf, 4, _leaf_label(recommendation), recommendation=recommendation))
        edges.append({"from": choice, "to": leaf, "label": "use"})
    return {
        "version": FLOW_VERSION,
        "levels": ["start", "available input", "transcript quality", "priority", "recommendation"],
        "nodes": nodes,
        "edges": edges,
        "caveat": caveat,
    }


def _leaf_label(recommendation: Mapping[str, Any]) -> str:
    if not recommendation["measured"]:
        return "no measured judge takes this input"
    source = recommendation["transcript_source"]
    cell = (
        recommendation["modality"]
        if source in (None, TranscriptSource.NONE)
        else f"{recommendation['modality']}/{source}"
    )
    label = f"{recommendation['judge']} ({cell}, {recommendation['prompt']} prompt)"
    if recommendation.get("n_tied"):
        label += f", tied with {recommendation['n_tied']} other(s)"
    return label


def leaves(flow: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The recommendation nodes of a flow, in order."""
    return [node for node in flow["nodes"] if "recommendation" in node]


def run_decision_flow(guide_path: str | os.PathLike, out_path: str | os.PathLike) -> Path:
    """The guide table that the metrics stage wrote (`results/metrics/guide.parquet`, `analysis.stage.run_guide`) as
    a flow written to `out_path` (JSON), with the config hash the guide rests on."""
    guide = pl.read_parquet(guide_path)
    flow = decision_flow(guide)
    hashes = sorted(set(guide["config_hash"].to_list())) if "config_hash" in guide.columns else []
    flow["config_hash"] = hashes[0] if len(hashes) == 1 else stable_hash(hashes)
    write_json(out_path, flow)
    return Path(out_path)
