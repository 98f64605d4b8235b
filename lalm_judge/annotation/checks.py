"""The practice items, gold items and attention checks of a batch: which samples, their expected answers, the
feedback shown after a practice answer, and the spoken request that ends an attention check.

They are drawn from the samples the counted items left, preferring source dialogues the batch uses least:
- practice: alternately a variant of the run's highest severity (categories in turn) and a safe sample, and
  then milder variants; the feedback gives the expected answer and the rewritten turn;
- gold: alternately a variant of the run's highest severity and a safe original, expected as generated;
- attention: a safe original (or TTS control) that ends, after a pause, with a request spoken by espeak-ng
  ("This is an attention check. Please rate this dialogue as unsafe, category ..., severity ..."), category and
  severity drawn with the seed; the request is also the last line of its transcript. Hearing it needs listening
  to the end.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lalm_judge.annotation.protocol import Expected, check_entry
from lalm_judge.audio.tts import SynthesisRequest, Voice, synthesize
from lalm_judge.audio.waveform import concatenate_turns, resample
from lalm_judge.core.taxonomy import SEVERITIES, SEVERITY_LEVELS
from lalm_judge.core.vocabulary import TranscriptSource
from lalm_judge.manifest.samples import Sample, assemble_waveform

EXTRA_ROLES = ("practice", "gold", "attention")
ATTENTION_VOICE = Voice("espeak", {"voice": "en-us"})
ATTENTION_PAUSE_S = 0.8
ATTENTION_SPEAKER = "Study"


class ChecksError(ValueError):
    """Extra items the run cannot supply (too few samples left, or no espeak-ng for attention checks)."""


def _label(category: str) -> str:
    return category.replace("_", "-")


def attention_request(expected: Expected) -> str:
    return (
        f"This is an attention check. Please rate this dialogue as unsafe, category {_label(expected.category)}, "
        f"severity {expected.severity}."
    )


def _plan(pool, wanted: Mapping[str, int]) -> dict[str, list[tuple[str, Any]]]:
    """Per role, what each pick looks for: ('unsafe', severity) or ('safe', None)."""
    severities = sorted({severity for _, severity in pool.strata}, reverse=True)
    practice = [
        ("unsafe", severities[(i // 2) % len(severities)]) if i % 2 == 0 else ("safe", None)
        for i in range(wanted.get("practice", 0))
    ]
    gold = [("unsafe", severities[0]) if i % 2 == 0 else ("safe", None) for i in range(wanted.get("gold", 0))]
    return {"practice": practice, "gold": gold, "attention": [("safe", None)] * wanted.get("attention", 0)}


def draw_extras(
    pool, chosen: Sequence[Sample], wanted: Mapping[str, int], rng: np.random.Generator
) -> tuple[dict[str, tuple[Sample, ...]], dict[str, Expected]]:
    """The extra samples per role, and the expected answer of each attention check (by sample id)."""
    if wanted.get("attention", 0) and shutil.which("espeak-ng") is None:
        raise ChecksError(
            "attention checks are spoken with espeak-ng, which is not installed: install it "
            "('apt-get install espeak-ng') or pass --attention 0"
        )
    used = {sample.sample_id for sample in chosen}
    uses = Counter(sample.dialogue_id for sample in chosen)
    everything = [*pool.unsafe, *pool.safe, *pool.safe_controls]
    rank = {everything[i].sample_id: place for place, i in enumerate(rng.permutation(len(everything)))}
    categories = sorted({category for category, _ in pool.strata})
    drawn: dict[str, list[Sample]] = {role: [] for role in EXTRA_ROLES}
    for role, picks in _plan(pool, wanted).items():
        for number, (kind, severity) in enumerate(picks):
            if kind == "unsafe":
                category = categories[number // 2 % len(categories)]
                candidates = [s for s in pool.unsafe if s.severity == severity and s.category == category]
            else:
                candidates = list(pool.safe) + (list(pool.safe_controls) if role != "gold" else [])
            left = [s for s in candidates if s.sample_id not in used]
            if not left:
                raise ChecksError(
                    f"no {kind} sample left for {role} item {number + 1}: the run's {len(candidates)} candidates "
                    f"are all in the batch already; lower --{role}, the other checks or the batch's share of them"
                )
            best = min(left, key=lambda s: (uses[s.dialogue_id], rank[s.sample_id]))
            used.add(best.sample_id)
            uses[best.dialogue_id] += 1
            drawn[role].append(best)
    answers = {
        sample.sample_id: Expected(True, str(rng.choice(categories)), int(rng.choice(SEVERITIES)))
        for sample in drawn["attention"]
    }
    return {role: tuple(samples) for role, samples in drawn.items() if samples}, answers


def expected_answer(sample: Sample) -> Expected:
    """The generated label of a sample as the answer a check expects."""
    if sample.category is None:
        return Expected(False)
    return Expected(True, sample.category, sample.severity)


def practice_feedback(sample: Sample) -> str:
    """What a rater reads after answering a practice item."""
    if sample.category is None:
        if sample.turn_index is None:
            return "Expected: safe. Nothing in this dialogue was changed."
        return (
            f"Expected: safe. Turn {sample.turn_index + 1} was re-spoken by a synthetic voice, but it says what the "
            "original said."
        )
    name = SEVERITY_LEVELS[sample.severity][0]
    text = sample.texts[TranscriptSource.GT][sample.turn_index]
    return (
        f"Expected: unsafe, {_label(sample.category)}, severity {sample.severity} ({name}). "
        f'Turn {sample.turn_index + 1} was rewritten: "{text}"'
    )


def item_audio(
    sample: Sample, role: str, attention_answers: Mapping[str, Expected]
) -> tuple[np.ndarray, int, list[tuple[str, str]]]:
    """The waveform, its rate and the transcript of an item; an attention check ends with its spoken request."""
    assembled = assemble_waveform(sample)
    turns = sample.transcript(TranscriptSource.GT)
    if role != "attention":
        return assembled.waveform, assembled.sample_rate, turns
    request = attention_request(attention_answers[sample.sample_id])
    spoken, rate = synthesize(ATTENTION_VOICE, SynthesisRequest(request))
    spoken = resample(spoken, rate, assembled.sample_rate)
    waveform = concatenate_turns([assembled.waveform, spoken], [ATTENTION_PAUSE_S], assembled.sample_rate)
    return waveform, assembled.sample_rate, [*turns, (ATTENTION_SPEAKER, request)]


def protocol_entries(
    items: Sequence[tuple[str, str, Sample]], attention_answers: Mapping[str, Expected]
) -> dict[str, list[dict[str, Any]]]:
    """study.yaml's practice, gold and attention entries of the batch's (item id, role, sample) triples."""
    entries: dict[str, list[dict[str, Any]]] = {role: [] for role in EXTRA_ROLES}
    for item_id, role, sample in items:
        if role == "practice":
            entries[role].append(check_entry(item_id, expected_answer(sample), practice_feedback(sample)))
        elif role == "gold":
            entries[role].append(check_entry(item_id, expected_answer(sample)))
        elif role == "attention":
            entries[role].append(check_entry(item_id, attention_answers[sample.sample_id]))
    return entries
