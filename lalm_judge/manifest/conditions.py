"""The samples of a judge cell under a condition, and the audio of their target turn.

A condition changes one turn of each sample, its target turn: a variant's unsafe turn, or turn t of the safe
original. Which samples a condition scores (`condition_samples`):

- `clean`: the original and every variant, as `Manifest.samples()` gives them;
- `masked`, `noise_<snr>`, `babble_<snr>`, `silence`: every ok variant with its unsafe turn transformed, and for
  each target turn t (a turn with ok variants) the original with turn t transformed, id '<d>.t<t>.original'.
  The metrics average a dialogue's safe rows of a cell, so each variant is compared with originals transformed
  the same way (with the same number of variants per turn, exactly with the original of its own turn);
- `tts_control`: per target turn, the original with turn t re-synthesized, '<d>.t<t>.tts_control' (severity 0);
  its score against the clean original's is the TTS bias;
- `injection`: every ok variant whose unsafe turn ends, after a pause, with the sentence addressed to the
  evaluator (spoken in the speaker's voice; appended to its ground-truth text), and the clean original as the
  cell's safe reference.

Transcripts under a condition: the ground truth is the text spoken (the injected sentence included); an ASR
source is the transcript of the target turn as the judge hears it (`transcribe_conditions`, ASR of the
transformed turn), given to `condition_samples` per source. A source without condition transcripts is left
out of the samples' texts, so a cell reading it fails naming the source instead of reading clean text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from tqdm import tqdm

from lalm_judge.audio import waveform
from lalm_judge.audio.asr import load_asr, word_error_rate
from lalm_judge.audio.controls import ControlSettings, transform_turn
from lalm_judge.audio.transcription import SCHEDULING_KEYS, TranscriptCache, transcript_key
from lalm_judge.core.files import stable_hash, with_provenance, write_json, write_parquet
from lalm_judge.core.tables import CONDITION_ASR
from lalm_judge.core.taxonomy import TTS_CONTROL_SAMPLE, clean_reference_id, turn_safe_id
from lalm_judge.core.vocabulary import CLEAN, INJECTION, TTS_CONTROL, Condition, TranscriptSource
from lalm_judge.manifest.samples import AssembledAudio, Manifest, Sample, assemble_waveform


class ConditionInputError(ValueError):
    """A manifest that lacks what a condition needs (control clips, transcripts); the message names both."""


@dataclass(frozen=True)
class ConditionSample:
    """A sample as a judge cell under `condition` sees it; `sample.clips` are the clean clips (the TTS control's
    clip in place for 'tts_control') and `target_turn` is the turn the condition changes (None: unchanged)."""

    sample: Sample
    condition: Condition
    target_turn: int | None
    # The clean sample this one is compared with (`lalm_judge.core.taxonomy.clean_reference_id`).
    reference_id: str
    # Injection: the spoken sentence appended to the target turn.
    injection_clip: str | None = None

    @property
    def target_text(self) -> str | None:
        """The ground-truth text of the target turn under the condition."""
        return None if self.target_turn is None else self.sample.texts[TranscriptSource.GT][self.target_turn]


def control_clips(manifest: Manifest, kind: str) -> dict[int, Mapping[str, Any]]:
    """The manifest's TTS control rows of one kind, by target turn."""
    return {row["turn_index"]: row for row in manifest.data["controls"] if row["kind"] == kind}


def _replace_turn(values: Sequence[Any], index: int, value: Any) -> tuple[Any, ...]:
    return tuple(value if i == index else item for i, item in enumerate(values))


def _condition_texts(
    sample: Sample, sample_id: str, target: int, gt_text: str, transcripts: Mapping[str, Mapping[str, str]]
) -> dict[str, tuple[str, ...]]:
    texts = {TranscriptSource.GT: _replace_turn(sample.texts[TranscriptSource.GT], target, gt_text)}
    for source, by_sample in transcripts.items():
        if source in sample.texts and sample_id in by_sample:
            texts[source] = _replace_turn(sample.texts[source], target, by_sample[sample_id])
    return texts


def condition_samples(
    manifest: Manifest, condition: str, transcripts: Mapping[str, Mapping[str, str]] | None = None
) -> list[ConditionSample]:
    """The samples a judge cell scores under `condition` (module docstring), in a fixed order.

    transcripts: ASR source ('asr:<model>') -> sample id -> transcript of its target turn under the condition.
    """
    condition = Condition(condition)
    transcripts = transcripts or {}
    clean = list(manifest.samples())
    if condition == CLEAN:
        return [ConditionSample(s, condition, None, s.sample_id) for s in clean]
    original, variants = clean[:1], clean[1:]
    if not original:
        return []
    original = original[0]
    targets = sorted({v.turn_index for v in variants})
    out: list[ConditionSample] = []

    def target_sample(sample: Sample, sample_id: str, target: int, gt_text: str, **changes: Any) -> Sample:
        texts = _condition_texts(sample, sample_id, target, gt_text, transcripts)
        return dataclasses.replace(sample, sample_id=sample_id, texts=texts, **changes)

    if condition.kind == TTS_CONTROL:
        clips = control_clips(manifest, TTS_CONTROL)
        for target in targets:
            if target not in clips:
                raise ConditionInputError(
                    f"manifest of {manifest.dialogue_id} has no tts_control clip for turn {target}; "
                    "run the TTS control stage for this condition"
                )
            sample_id = turn_safe_id(manifest.dialogue_id, target, TTS_CONTROL_SAMPLE)
            gt_text = original.texts[TranscriptSource.GT][target]
            changes = {"turn_index": target, "clips": _replace_turn(original.clips, target, clips[target]["clip"])}
            out.append(
                ConditionSample(
                    target_sample(original, sample_id, target, gt_text, **changes),
                    condition,
                    target,
                    clean_reference_id(sample_id),
                )
            )
        return out
    if condition.kind == INJECTION:
        clips = control_clips(manifest, INJECTION)
        out.append(ConditionSample(original, condition, None, original.sample_id))
        for variant in variants:
            target = variant.turn_index
            if target not in clips:
                raise ConditionInputError(
                    f"manifest of {manifest.dialogue_id} has no injection clip for turn {target}; "
                    "run the TTS control stage for this condition"
                )
            injected = f"{variant.texts[TranscriptSource.GT][target]} {clips[target]['text']}"
            out.append(
                ConditionSample(
                    target_sample(variant, variant.sample_id, target, injected),
                    condition,
                    target,
                    variant.sample_id,
                    injection_clip=clips[target]["clip"],
                )
            )
        return out
    for target in targets:
        sample_id = turn_safe_id(manifest.dialogue_id, target)
        gt_text = original.texts[TranscriptSource.GT][target]
        safe = target_sample(original, sample_id, target, gt_text, turn_index=target)
        out.append(ConditionSample(safe, condition, target, clean_reference_id(sample_id)))
    for variant in variants:
        target = variant.turn_index
        gt_text = variant.texts[TranscriptSource.GT][target]
        out.append(
            ConditionSample(
                target_sample(variant, variant.sample_id, target, gt_text), condition, target, variant.sample_id
            )
        )
    return out


def babble_pool(manifests: Sequence[Manifest], exclude_dialogue: str) -> list[np.ndarray]:
    """The original turn clips of the other dialogues (at their manifest rate, in dialogue id order, so every
    stage that makes a sample's babble from the same manifests makes the same), the material of babble noise."""
    return [
        waveform.read_audio(turn["clip"], manifest.data["sample_rate"])[0]
        for manifest in sorted(manifests, key=lambda m: m.dialogue_id)
        if manifest.dialogue_id != exclude_dialogue and manifest.usable
        for turn in manifest.data["turns"]
    ]


def target_turn_audio(
    item: ConditionSample, settings: ControlSettings, seed: int, pool: Sequence[np.ndarray] = ()
) -> dict[int, np.ndarray]:
    """The target turn's waveform under the condition, at the manifest rate, keyed by turn index ({} if unchanged)."""
    if item.target_turn is None or not (item.condition.transforms_audio or item.condition.kind == INJECTION):
        return {}
    sample, rate = item.sample, item.sample.sample_rate
    turn = waveform.read_audio(sample.clips[item.target_turn], rate)[0]
    injection = waveform.read_audio(item.injection_clip, rate)[0] if item.injection_clip else None
    audio = transform_turn(
        item.condition,
        turn,
        rate,
        settings,
        seed=seed,
        sample_id=sample.sample_id,
        babble_pool=pool,
        injection_clip=injection,
    )
    return {item.target_turn: audio}


def condition_waveform(
    item: ConditionSample,
    sample_rate: int | None,
    settings: ControlSettings,
    seed: int,
    pool: Sequence[np.ndarray] = (),
) -> AssembledAudio:
    """The full-dialogue waveform a judge hears for a sample under its condition."""
    return assemble_waveform(item.sample, sample_rate, turn_audio=target_turn_audio(item, settings, seed, pool))


def transcribe_conditions(
    manifest_path: str,
    conditions: Sequence[str],
    model_name: str,
    model_options: Mapping[str, Any],
    settings: ControlSettings,
    out_table: str,
    *,
    babble_manifests: Sequence[str] = (),
    cache_path: str | None = None,
    counts_path: str | None = None,
    seed: int = 0,
    progress: bool = True,
) -> pl.DataFrame:
    """ASR of every target turn of one dialogue under each of `conditions`, with its WER against the text spoken in
    it (`lalm_judge.core.tables.CONDITION_ASR`, one row per condition and target turn): the masked turn's WER
    measures how much of the words masking leaves, and the transcripts feed the ASR-source and cascade cells.

    One job per (ASR model, dialogue) for all its conditions: the model loads once. A transcript already in the
    cache (`audio.transcription.TranscriptCache` at `cache_path`, keyed by the model's settings and the exact
    waveform) is not computed again, so the rerun after a condition was added transcribes only its turns; the model
    is loaded only if a turn is missing. counts_path: where to write, per condition, the turns computed and cached.
    """
    manifest = Manifest.load(manifest_path)
    pool = babble_pool([Manifest.load(p) for p in babble_manifests], manifest.dialogue_id)
    cache = TranscriptCache(cache_path)
    asr = None
    rows, counts = [], {}
    for condition in map(Condition, conditions):
        items = [item for item in condition_samples(manifest, condition) if item.target_turn is not None]
        counts[str(condition)] = tally = {"turns": len(items), "computed": 0, "cached": 0}
        for item in tqdm(items, desc=f"asr {model_name} {condition} {manifest.dialogue_id}", disable=not progress):
            rate = item.sample.sample_rate
            audio = target_turn_audio(item, settings, seed, pool).get(item.target_turn)
            if audio is None:
                audio = waveform.read_audio(item.sample.clips[item.target_turn], rate)[0]
            key = transcript_key(model_options, audio, rate)
            hypothesis = cache.get(key)
            if hypothesis is None:
                asr = asr or load_asr(
                    model_options["model"], **{k: v for k, v in model_options.items() if k not in SCHEDULING_KEYS}
                )
                hypothesis = asr.transcribe(audio, rate).text
                cache.add(key, hypothesis)
                tally["computed"] += 1
            else:
                tally["cached"] += 1
            rows.append(_condition_row(manifest.dialogue_id, item, hypothesis, len(audio) / rate))
    cache.flush()
    frame = with_provenance(
        CONDITION_ASR.frame(rows),
        config_hash=stable_hash({"model": dict(model_options), "controls": dataclasses.asdict(settings)}),
        seed=seed,
        asr_name=model_name,
        asr_model=model_options["model"],
    )
    write_parquet(out_table, frame)
    if counts_path is not None:
        write_json(counts_path, counts)
    return frame


def _condition_row(dialogue_id: str, item: ConditionSample, hypothesis: str, audio_s: float) -> dict[str, Any]:
    return {
        "dialogue_id": dialogue_id,
        "sample_id": item.sample.sample_id,
        "turn_index": item.target_turn,
        "clip": item.sample.clips[item.target_turn],
        "reference": item.target_text,
        "text": hypothesis,
        "wer": word_error_rate(item.target_text, hypothesis),
        "audio_s": audio_s,
        "condition": str(item.condition),
    }


def read_condition_transcripts(tables: Mapping[str, str], condition: str) -> dict[str, dict[str, str]]:
    """ASR model name -> condition ASR table path, as condition_samples' `transcripts` under `condition` (source ->
    sample -> text; a model without rows for the condition is left out)."""
    out = {}
    for name, path in tables.items():
        rows = CONDITION_ASR.read(path).filter(pl.col("condition") == str(condition))
        if rows.height:
            out[TranscriptSource.asr(name)] = dict(rows.select("sample_id", "text").iter_rows())
    return out
