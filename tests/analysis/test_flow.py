"""The guide's decision flow: a tree over input -> transcript -> priority whose leaves are the guide's rows."""

from __future__ import annotations

import polars as pl

from lalm_judge.analysis import flow
from lalm_judge.analysis.guide import GUIDE_SCHEMA

ASR = "asr:whisper_large_v3"


def guide_rows() -> pl.DataFrame:
    rows = []
    for available, qualities in (("text only", ["gt", ASR]), ("audio only", ["none", ASR])):
        for quality in qualities:
            for priority, metric in (("sensitivity", "sensitivity"), ("stability", "avg_abs_pb_sensitivity")):
                measured = not (available == "audio only" and quality == "none")
                rows.append(
                    {
                        "available_input": available,
                        "transcript_quality": quality,
                        "priority": priority,
                        "metric": metric,
                        "judge": "llama" if measured else None,
                        "modality": "text" if measured else None,
                        "transcript_source": quality if measured else None,
                        "audio_input": "none" if measured else None,
                        "prompt": "basic" if measured else None,
                        "condition": "clean" if measured else None,
                        "value": 0.4 if measured else None,
                        "ci_lo": 0.3 if measured and priority == "sensitivity" else None,
                        "ci_hi": 0.5 if measured and priority == "sensitivity" else None,
                        "n_candidates": 3 if measured else 0,
                        "n_tied": 0,
                        "note": None if measured else "no usable configuration: no measured cell takes this input",
                    }
                )
    return pl.DataFrame(rows, schema=GUIDE_SCHEMA)


def test_the_flow_is_a_tree_whose_leaves_are_the_guide_rows_in_order():
    guide = guide_rows()
    tree = flow.decision_flow(guide)
    ids = [node["id"] for node in tree["nodes"]]
    assert len(ids) == len(set(ids))
    # start, 2 inputs, 4 transcript qualities, 8 priorities, 8 recommendations; every node but the start has a parent.
    assert [sum(1 for n in tree["nodes"] if n["level"] == level) for level in range(5)] == [1, 2, 4, 8, 8]
    parents = {edge["to"]: edge["from"] for edge in tree["edges"]}
    assert set(parents) == set(ids) - {"root"} and set(parents.values()) <= set(ids)
    leaves = flow.leaves(tree)
    assert [leaf["recommendation"]["judge"] for leaf in leaves] == guide["judge"].to_list()
    first = leaves[0]["recommendation"]
    assert (first["value"], first["ci_lo"], first["ci_hi"], first["n_candidates"]) == (0.4, 0.3, 0.5, 3)
    assert parents[parents[parents[leaves[0]["id"]]]] == "input=text only"
    assert tree["caveat"] == flow.CAVEAT and "real recordings" in tree["caveat"]


def test_a_leaf_without_a_measured_judge_says_so():
    leaves = flow.leaves(flow.decision_flow(guide_rows()))
    unmeasured = [leaf for leaf in leaves if not leaf["recommendation"]["measured"]]
    assert len(unmeasured) == 2
    for leaf in unmeasured:
        assert leaf["label"] == "no measured judge takes this input"
        assert (
            leaf["recommendation"]["n_candidates"] == 0 and "no usable configuration" in leaf["recommendation"]["note"]
        )


def test_transcript_qualities_read_as_what_the_practitioner_has():
    assert flow.quality_label("text only", "gt") == "ground-truth transcript"
    assert flow.quality_label("text only", ASR) == "ASR transcript (whisper_large_v3)"
    assert flow.quality_label("audio only", ASR) == "ASR of the audio (whisper_large_v3)"
    assert flow.quality_label("audio only", "none") == "no transcript: audio-native judges"
