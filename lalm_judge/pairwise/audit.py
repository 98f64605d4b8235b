"""The pairwise audit conditions (`pairwise.conditions`): a pair with one response changed in a surface property
only (`lalm_judge.core.vocabulary.AuditCondition`), judged like the clean items, so that a judge moved by the
recording rather than the response shows it (docs/metrics.md, "Pairwise audit").

Every clean (item, aspect) row gives two audit rows: response 1 changed (`<item>__changed1`) and, separately,
response 2 changed (`<item>__changed2`), so that position and cue are not confounded; the judge stage then asks
each in both orders, as for clean items. The unchanged response is the clean clip itself (its path), the changed
one is written under the condition's audio folder (`<item>/changed<side>/`, float WAV), except for `identical`,
whose changed response is the other response's clip. A `gain_<dB>` clip whose peak would pass full scale lowers
both responses by the same factor (the other one written beside it), so the level difference stays and no judge
that takes 16-bit audio hears clipping. Rows record what was measured on the written clip in `source_extra`
(level difference in dB, added seconds, duration ratio, both lowered by dB), so the transform is on record.
`repeat` and `voice` speak the response again with the TTS engine of the item's voice (items spoken here only).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import soundfile as sf
from tqdm import tqdm

from lalm_judge.audio import surface, waveform
from lalm_judge.audio.tts import SynthesisRequest, Voice, synthesize
from lalm_judge.core.files import atomic_path, stable_hash, with_provenance, write_parquet
from lalm_judge.core.tables import PAIRWISE_ITEMS
from lalm_judge.core.vocabulary import (
    GAIN,
    IDENTICAL,
    PAD,
    RATE,
    REPEAT,
    RESPOKEN_AUDIT_KINDS,
    VOICE,
    AuditCondition,
    audit_item_id,
)
from lalm_judge.pairwise.items import ItemError, read_items, read_jsonl_items, response_paths, with_durations

# The highest sample magnitude a changed pair may reach: 16-bit encodings (API and server judges) clip above it.
FULL_SCALE = 0.99


@dataclass(frozen=True)
class Respeaker:
    """The voices of the project items' responses (item id -> the two voice names) and the voice settings."""

    response_voices: Mapping[str, tuple[str, str]]
    voices: Mapping[str, Mapping[str, Any]]

    @classmethod
    def of(cls, items_path: str | os.PathLike, voices: Mapping[str, Mapping[str, Any]]) -> Respeaker:
        items = read_jsonl_items(items_path)
        return cls({item.item_id: (item.responses[0].voice, item.responses[1].voice) for item in items}, voices)


def other_voice(name: str, voices: Mapping[str, Mapping[str, Any]]) -> str:
    """Another voice of the same engine for the `voice` condition: the first configured voice (in config order) of
    the engine whose own `voice` differs; an error naming the voice and the engine when there is none."""
    spec = voices[name]
    for candidate, settings in voices.items():
        if settings["engine"] == spec["engine"] and settings.get("voice") != spec.get("voice"):
            return candidate
    raise ItemError(
        f"audit condition 'voice': voice {name!r} ({spec['engine']}) has no other voice of its engine in "
        "pairwise.items.voices; add one (e.g. another espeak-ng voice), or drop 'voice' from pairwise.conditions"
    )


def respoken_voice_error(condition: str, response_voices: set[str], voices: Mapping[str, Mapping[str, Any]]) -> str:
    """Why `condition` cannot be built for these voices ('' when it can): the run's check before the first job."""
    if AuditCondition(condition).kind != VOICE:
        return ""
    for name in sorted(response_voices):
        try:
            other_voice(name, voices)
        except ItemError as err:
            return str(err)
    return ""


def write_float_wav(path: str | os.PathLike, audio: np.ndarray, sample_rate: int) -> None:
    """32-bit float mono WAV, atomically (no clipping above full scale)."""
    with atomic_path(path) as tmp:
        sf.write(tmp, np.asarray(audio, np.float32), sample_rate, subtype="FLOAT", format="WAV")


@dataclass(frozen=True)
class ChangedResponse:
    """One changed response: its file (written, or the other response's for `identical`), text and measures, and
    the other response's file when it had to be written too (`gain_<dB>` lowering both to stay below full scale)."""

    path: str
    text: str | None
    measured: Mapping[str, float]
    other_path: str | None = None


def _measures(clean: np.ndarray, changed: np.ndarray, other: np.ndarray, sample_rate: int) -> dict[str, float]:
    """What the changed clip differs by: level against the other response (dB), added seconds, duration ratio."""
    return {
        "level_difference_db": round(surface.rms_db(changed) - surface.rms_db(other), 4),
        "added_s": round((len(changed) - len(clean)) / sample_rate, 6),
        "duration_ratio": round(len(changed) / len(clean), 6),
    }


def _with_headroom(changed: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, float]:
    """A louder clip whose peak passes full scale lowers both responses by the same factor, so that the level
    difference stays and no judge that takes 16-bit audio hears it clipped: (changed, other or None, dB lowered)."""
    peak = float(np.max(np.abs(changed))) if changed.size else 0.0
    if peak <= FULL_SCALE:
        return changed, None, 0.0
    factor = FULL_SCALE / peak
    return (changed * factor).astype(np.float32), (other * factor).astype(np.float32), 20 * float(np.log10(factor))


def change_response(
    condition: AuditCondition,
    clips: tuple[str, str],
    texts: tuple[str | None, str | None],
    side: int,
    out_dir: str,
    sample_rate: int,
    speak=None,
) -> ChangedResponse:
    """Response `side` (1 or 2) of a pair changed by `condition`, written as `<out_dir>/response<side>.wav` (not for
    identical). `speak(text, voice_change)` speaks a text again for `repeat` and `voice`."""
    changed_index, other_index = side - 1, 2 - side
    if condition.kind == IDENTICAL:
        return ChangedResponse(clips[other_index], texts[other_index], {"level_difference_db": 0.0})
    clean, _ = waveform.read_audio(clips[changed_index], sample_rate)
    other, _ = waveform.read_audio(clips[other_index], sample_rate)
    text = texts[changed_index]
    other_path, lowered_db = None, 0.0
    if condition.kind == GAIN:
        audio, lowered, lowered_db = _with_headroom(surface.match_level(clean, other, condition.value), other)
        if lowered is not None:
            other, other_path = lowered, os.path.join(out_dir, f"response{other_index + 1}.wav")
            write_float_wav(other_path, other, sample_rate)
    elif condition.kind == PAD:
        audio = surface.pad_silence(clean, sample_rate, condition.value)
    elif condition.kind == RATE:
        audio = surface.time_stretch(clean, condition.value)
    elif condition.kind in RESPOKEN_AUDIT_KINDS:
        if text is None or speak is None:
            raise ItemError(f"audit condition {condition!r} speaks the response again: it needs items spoken here")
        text = surface.with_last_sentence_repeated(text) if condition.kind == REPEAT else text
        spoken, rate = speak(text, condition.kind == VOICE)
        audio = waveform.resample(spoken, rate, sample_rate)
    else:  # pragma: no cover - AuditCondition admits only the kinds above
        raise ItemError(f"unknown audit condition {condition!r}")
    out_path = os.path.join(out_dir, f"response{side}.wav")
    write_float_wav(out_path, audio, sample_rate)
    measured = {**_measures(clean, audio, other, sample_rate), "both_lowered_db": round(lowered_db, 4)}
    return ChangedResponse(out_path, text, measured, other_path)


def _audit_row(row: Mapping[str, Any], side: int, changed: ChangedResponse, condition: str) -> dict[str, Any]:
    clips = response_paths(row)
    audit = dict(row)
    other = changed.other_path
    audit.update(
        item_id=audit_item_id(row["item_id"], side),
        audio_root=None,
        response1_audio=changed.path if side == 1 else other or clips[0],
        response2_audio=changed.path if side == 2 else other or clips[1],
        source_extra=json.dumps(
            {"condition": condition, "changed_response": side, "clean_item_id": row["item_id"], **changed.measured},
            sort_keys=True,
        ),
    )
    audit[f"response{side}_text"] = changed.text
    return audit


def build_audit_items(
    items: pl.DataFrame,
    condition: str,
    audio_dir: str | os.PathLike,
    sample_rate: int,
    respeaker: Respeaker | None = None,
    *,
    progress: bool = True,
) -> pl.DataFrame:
    """The audit item table of one condition from the clean item table: every row with response 1 changed and
    with response 2 changed (each item's clips made once for all its aspects)."""
    condition = AuditCondition(condition)
    if condition.kind in RESPOKEN_AUDIT_KINDS and respeaker is None:
        raise ItemError(
            f"audit condition {condition!r} speaks responses again with their voices: it needs items spoken here "
            "(pairwise.items.format: jsonl), not imported audio"
        )
    rows: list[dict[str, Any]] = []
    made: dict[tuple[str, int], ChangedResponse] = {}
    for row in tqdm(items.to_dicts(), desc=f"audit {condition}", disable=not progress):
        for side in (1, 2):
            key = (row["item_id"], side)
            if key not in made:
                made[key] = change_response(
                    condition,
                    response_paths(row),
                    (row["response1_text"], row["response2_text"]),
                    side,
                    os.path.join(os.fspath(audio_dir), row["item_id"], f"changed{side}"),
                    sample_rate,
                    _speaker(respeaker, row["item_id"], side),
                )
            rows.append(_audit_row(row, side, made[key], condition))
    return PAIRWISE_ITEMS.frame(with_durations(rows))


def _speaker(respeaker: Respeaker | None, item_id: str, side: int):
    if respeaker is None:
        return None

    def speak(text: str, change_voice: bool):
        name = respeaker.response_voices[item_id][side - 1]
        voice = other_voice(name, respeaker.voices) if change_voice else name
        return synthesize(Voice.from_config(respeaker.voices[voice]), SynthesisRequest(text))

    return speak


def run_audit_items(
    items_path: str | os.PathLike,
    condition: str,
    out_path: str | os.PathLike,
    audio_dir: str | os.PathLike,
    *,
    sample_rate: int,
    item_settings: Mapping[str, Any],
    seed: int = 0,
    progress: bool = True,
) -> pl.DataFrame:
    """Write the audit item table of `condition` (and its changed clips under `audio_dir`); return it."""
    respeaker = None
    if AuditCondition(condition).kind in RESPOKEN_AUDIT_KINDS and item_settings["format"] == "jsonl":
        respeaker = Respeaker.of(item_settings["path"], item_settings["voices"])
    os.makedirs(audio_dir, exist_ok=True)
    frame = build_audit_items(read_items(items_path), condition, audio_dir, sample_rate, respeaker, progress=progress)
    config_hash = stable_hash({"pairwise_audit": condition, "items": item_settings, "sample_rate": sample_rate})
    write_parquet(out_path, with_provenance(frame, config_hash=config_hash, seed=seed))
    return frame
