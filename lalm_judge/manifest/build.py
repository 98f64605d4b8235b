"""The manifest stage: gather one dialogue's turns, variants, clips and transcripts (per source) into
`results/manifests/<dialogue>.json`, and the per-shard index the judge jobs depend on.

Inputs are the canonical dialogue, its TTS tables (the variant rows with their clips), one ASR table per
ASR model and, when a condition needs them, its TTS control table (the `controls` of the manifest: re-synthesized
safe turns and injected sentences); `lalm_judge.manifest.samples` and `lalm_judge.manifest.conditions` read
the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.files import hashed_paths, read_json, write_json
from lalm_judge.core.tables import ASR, CONTROL_CLIPS, TTS
from lalm_judge.core.taxonomy import original_id
from lalm_judge.core.vocabulary import TranscriptSource


def build_manifest(
    dialogue_json: str,
    tts_tables: Sequence[str],
    asr_tables: Mapping[str, str],
    out_path: str,
    control_tables: Sequence[str] = (),
) -> dict[str, Any]:
    """Write and return the manifest of one dialogue; `asr_tables` maps ASR model name -> its table."""
    dialogue = Dialogue.load(dialogue_json)
    transcripts: dict[str, dict[tuple[str, int], str]] = {}
    for name, table in asr_tables.items():
        frame = ASR.read(table)
        transcripts[TranscriptSource.asr(name)] = {
            (r["sample_id"], r["turn_index"]): r["text"] for r in frame.iter_rows(named=True)
        }

    def texts_for(sample: str, turn_index: int, ground_truth: str) -> dict[str, str]:
        return {
            TranscriptSource.GT: ground_truth,
            **{source: table[(sample, turn_index)] for source, table in transcripts.items()},
        }

    turns = [
        {
            "index": t.index,
            "speaker": t.speaker,
            "emotion": t.emotion,
            "clip": t.clip,
            "start": t.start,
            "end": t.end,
            "texts": texts_for(original_id(dialogue.dialogue_id), t.index, t.text),
        }
        for t in dialogue.turns
    ]
    spoken = TTS.read(tts_tables) if tts_tables else TTS.empty()
    variants = []
    for row in spoken.iter_rows(named=True):
        ok = row["status"] == "ok"
        variants.append(
            {
                "variant_id": row["variant_id"],
                "turn_index": row["turn_index"],
                "category": row["category"],
                "severity": row["severity"],
                "emotion": row["emotion"],
                "status": row["status"],
                "generator": row["generator"],
                "model": row["model"],
                "prompt_version": row["prompt_version"],
                "clip": row["clip"] if ok else None,
                "texts": texts_for(row["variant_id"], row["turn_index"], row["text"]) if ok else None,
            }
        )
    control_columns = ("sample_id", "kind", "turn_index", "clip", "text")
    controls = CONTROL_CLIPS.read(control_tables).select(control_columns).to_dicts() if control_tables else []
    manifest = {
        "dialogue_id": dialogue.dialogue_id,
        "status": dialogue.status,
        "skip_reason": dialogue.skip_reason,
        "warnings": list(dialogue.warnings),
        "sample_rate": dialogue.sample_rate,
        "n_turns": len(turns),
        "gaps_s": dialogue.gaps_s(),
        "transcript_sources": [TranscriptSource.GT, *transcripts],
        "turns": turns,
        "variants": variants,
        "controls": controls,
    }
    write_json(out_path, manifest)
    return manifest


def write_shard_index(manifest_paths: Sequence[str], out_path: str, condition_asr: Sequence[str] = ()) -> None:
    """List a shard's manifests and condition ASR tables (`results/asr/<asr>/conditions/<d>.parquet`)
    with content hashes, so the index changes whenever one of them does."""
    write_json(out_path, {"manifests": hashed_paths(manifest_paths), "condition_asr": hashed_paths(condition_asr)})


def read_shard_index(index_path: str) -> list[str]:
    return [entry["path"] for entry in read_json(index_path)["manifests"]]


def read_condition_asr_index(index_path: str) -> dict[tuple[str, str], str]:
    """(ASR model, dialogue) -> condition ASR table (every condition of the model) of a shard index."""
    tables = {}
    for entry in read_json(index_path)["condition_asr"]:
        path = Path(entry["path"])
        tables[(path.parent.parent.name, path.stem)] = entry["path"]
    return tables
