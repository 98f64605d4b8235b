"""Acoustic preference pairs: two renderings of the same words that differ in one controlled speaking style.

Speech instruction following, as in the SageLM study: the instruction asks for (or, in the implicit format,
calls for) a style, and the response that has it is better. Categories and the styles they control:
- `emotion`: the prosody and voice settings of each emotion (`preference.acoustic.styles.emotion`, e.g. a
  Piper voice spoken faster and higher for `happy`, slower and lower for `sad`);
- `gender`: a man's and a woman's voice (e.g. espeak-ng's `en-us+m3` and `en-us+f3`: one engine, so the
  engine does not give the answer away);
- `character`: character voices (e.g. a pitched-up fast `chipmunk`, a slow low `giant`, a `robot`);
- `gender_emotion` (SageLM's mixed control, aspect `gender_emotion`): a gender and an emotion at once, styles
  named `<male|female>_<emotion>` (e.g. `female_happy`, `male_sad`; neutral ones are only distractors).
A style maps to one voice of the TTS registry or to a list of variants.

Formats, from the texts file (`preference.acoustic.items`, e.g. data/preference_demo/acoustic.yaml):
- `explicit_tts` (all style categories): "Speak the following text with a sad voice: <text>", the response says
  the text;
- `explicit_dialogue` (all style categories): "<question> Answer with a sad tone.", the response says the answer;
- `implicit_dialogue` (emotion only; aspect `implicit_emotion`): the question alone, whose `emotion` a fitting
  answer shows.

Clips are named as SageLM names its test audio (`clip_name`), implicit emotion in its `Implicit-Emotion` folder, so
the exported records keep their task format and the implicit subset through a re-import.

Per text and style category, `pairs_per_text` pairs are drawn (seeded). The requested style is drawn (implicit: the
text's emotion). With probability `tie_share` the pair is a tie: two renderings that both miss the requested
style, or both have it in different variants (a style category with two styles and one variant each has no ties);
otherwise one rendering has the requested style and the other a different one, on a drawn side. The label
follows from the styles used, never from a judge, and the templated rationale says what the instruction asks
and what each response does, then the comparison (it argues for its own label by
`lalm_judge.pairwise.consistency`'s rules). Each distinct (words, style, variant) is spoken once per job.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import yaml
from tqdm import tqdm

from lalm_judge.audio import waveform
from lalm_judge.audio.tts import SynthesisRequest, Voice, synthesize
from lalm_judge.core.files import read_yaml, stable_hash, with_provenance, write_parquet
from lalm_judge.core.tables import PREFERENCE_ACOUSTIC
from lalm_judge.core.taxonomy import slug
from lalm_judge.core.vocabulary import RESPONSE_1, RESPONSE_2, STYLE_CATEGORIES, TIE
from lalm_judge.preference.render import CLIP_LEVEL_DB

MIXED = "gender_emotion"
EXPLICIT_TTS, EXPLICIT_DIALOGUE, IMPLICIT_DIALOGUE = "explicit_tts", "explicit_dialogue", "implicit_dialogue"
FORMATS = {
    "emotion": (EXPLICIT_TTS, EXPLICIT_DIALOGUE, IMPLICIT_DIALOGUE),
    "gender": (EXPLICIT_TTS, EXPLICIT_DIALOGUE),
    "character": (EXPLICIT_TTS, EXPLICIT_DIALOGUE),
    MIXED: (EXPLICIT_TTS, EXPLICIT_DIALOGUE),
}
# SageLM's folder of implicit-emotion clips: its evaluation (and the pairwise importer) tell implicit emotion from
# explicit emotion by it, so an export and re-import keep the subset.
IMPLICIT_FOLDER = "Implicit-Emotion"
GENDER_WORDS = {"male": "a man's voice", "female": "a woman's voice"}
# Emotion styles that are only ever the distractor, never asked for.
UNASKED_EMOTIONS = ("neutral",)
_SHORT = {EXPLICIT_TTS: "tts", EXPLICIT_DIALOGUE: "dia", IMPLICIT_DIALOGUE: "imp"}


class AcousticError(ValueError):
    """An acoustic texts file or style set that cannot be used; the message names the file or key."""


@dataclass(frozen=True)
class AcousticText:
    task_format: str
    index: int
    words: str  # what the response says
    question: str | None = None
    emotion: str | None = None  # implicit: the emotion the question calls for


@dataclass(frozen=True)
class Rendering:
    style: str
    variant: int


def read_texts(path: str | os.PathLike) -> list[AcousticText]:
    """The texts file: `explicit_tts` (strings), `explicit_dialogue` (question, answer) and
    `implicit_dialogue` (question, emotion, answer); every entry checked, errors name the file and entry."""
    path = Path(path)
    try:
        data = read_yaml(path) or {}
    except (OSError, yaml.YAMLError) as err:
        raise AcousticError(f"cannot read the acoustic texts {path}: {err}") from err
    unknown = sorted(set(data) - {EXPLICIT_TTS, EXPLICIT_DIALOGUE, IMPLICIT_DIALOGUE})
    if unknown:
        raise AcousticError(
            f"{path}: unknown sections {unknown}; use {EXPLICIT_TTS}, {EXPLICIT_DIALOGUE}, {IMPLICIT_DIALOGUE}"
        )
    texts = []
    for index, entry in enumerate(data.get(EXPLICIT_TTS) or []):
        if not isinstance(entry, str) or not entry.strip():
            raise AcousticError(f"{path}: {EXPLICIT_TTS}[{index}] must be a non-empty text")
        texts.append(AcousticText(EXPLICIT_TTS, index, entry.strip()))
    for section, needed in (
        (EXPLICIT_DIALOGUE, ("question", "answer")),
        (IMPLICIT_DIALOGUE, ("question", "emotion", "answer")),
    ):
        for index, entry in enumerate(data.get(section) or []):
            if not isinstance(entry, Mapping) or any(not str(entry.get(key) or "").strip() for key in needed):
                raise AcousticError(f"{path}: {section}[{index}] needs {', '.join(needed)}")
            texts.append(
                AcousticText(
                    section, index, str(entry["answer"]).strip(), str(entry["question"]).strip(), entry.get("emotion")
                )
            )
    if not texts:
        raise AcousticError(f"{path} holds no texts")
    return texts


def _variants(styles: Mapping[str, Any]) -> dict[str, list[Mapping[str, Any]]]:
    return {style: list(voices) if isinstance(voices, list) else [voices] for style, voices in styles.items()}


def mixed_parts(style: str) -> tuple[str, str]:
    """(gender, emotion) of a mixed style named `<male|female>_<emotion>`."""
    gender, _, emotion = style.partition("_")
    if gender not in GENDER_WORDS or not emotion:
        raise AcousticError(f"mixed style {style!r} must be named <male|female>_<emotion>, e.g. female_happy")
    return gender, emotion


def style_words(style_category: str, style: str) -> str:
    if style_category == "gender":
        return GENDER_WORDS.get(style, f"a {style} voice")
    if style_category == "character":
        return f"the voice of a {style}"
    if style_category == MIXED:
        gender, emotion = mixed_parts(style)
        return f"{GENDER_WORDS[gender]} and a {emotion} tone"
    return f"a {style} tone"


def unasked(style_category: str, style: str) -> bool:
    """Styles that are only ever the distractor: neutral emotion, alone or with a gender."""
    if style_category == "emotion":
        return style in UNASKED_EMOTIONS
    return style_category == MIXED and mixed_parts(style)[1] in UNASKED_EMOTIONS


def clip_name(style_category: str, text: AcousticText, rendering: Rendering) -> str:
    """`acoustic/<style category>/<style category>_<format>-<text>-<response>-<style>-v<variant>.wav`, in SageLM's
    naming: its evaluation reads `<source>-<instruction id>-<response id>-...` and counts two clips with the same
    response id as explicit TTS (one text spoken twice) and different ones as explicit dialogue; implicit emotion is
    in an `Implicit-Emotion` folder (below the style category's, which is the builder job's output)."""
    style = slug(rendering.style)
    response = "0" if text.task_format == EXPLICIT_TTS else f"{style}v{rendering.variant}"
    folder = f"{style_category}/{IMPLICIT_FOLDER}" if text.task_format == IMPLICIT_DIALOGUE else style_category
    name = f"{style_category}_{_SHORT[text.task_format]}-{text.index}-{response}-{style}-v{rendering.variant}.wav"
    return f"acoustic/{folder}/{name}"


def instruction(style_category: str, text: AcousticText, requested: str) -> str:
    """The query the judge reads: the request for the style, or (implicit) the question alone."""
    if text.task_format == IMPLICIT_DIALOGUE:
        return text.question or ""
    if text.task_format == EXPLICIT_TTS:
        if style_category == "emotion":
            return f"Speak the following text with a {requested} voice: {text.words}"
        return f"Read the following text aloud in {style_words(style_category, requested)}: {text.words}"
    if style_category == "emotion":
        return f"{text.question} Answer with a {requested} tone."
    return f"{text.question} Answer in {style_words(style_category, requested)}."


def rationale(style_category: str, text: AcousticText, requested: str, styles: tuple[str, str], label: str) -> str:
    """What the instruction asks, what each response does, and the comparison the label makes."""
    wanted = style_words(style_category, requested)
    asks = (
        f"The question calls for {wanted}."
        if text.task_format == IMPLICIT_DIALOGUE
        else f"The instruction asks for {wanted}."
    )
    first, second = (style_words(style_category, style) for style in styles)
    does = f"Response 1 uses {first} and Response 2 uses {second}"
    if label == TIE:
        verdict = (
            "both follow it, so the two are equally good"
            if styles[0] == requested
            else "neither follows it, so the two are equally far from it"
        )
        return f"{asks} {does}: {verdict}."
    return f"{asks} {does}, so Response {label} follows the speaking instruction better."


def _draw(
    style_category: str,
    text: AcousticText,
    variants: Mapping[str, Sequence[Any]],
    tie_share: float,
    generator: np.random.Generator,
) -> tuple[str, tuple[Rendering, Rendering], str] | None:
    """(requested style, the two renderings in order, label), or None when no pair can be made."""
    styles = sorted(variants)
    if text.task_format == IMPLICIT_DIALOGUE:
        if text.emotion not in variants:
            raise AcousticError(f"implicit text {text.index} calls for emotion {text.emotion!r}, which has no style")
        requested = text.emotion
    else:
        askable = [s for s in styles if not unasked(style_category, s)]
        requested = askable[int(generator.integers(len(askable)))]
    others = [s for s in styles if s != requested]
    if not others:
        return None
    all_renderings = [Rendering(s, v) for s in styles for v in range(len(variants[s]))]
    wrong = [r for r in all_renderings if r.style != requested]
    right = [r for r in all_renderings if r.style == requested]
    tie_options = [(a, b) for group in (wrong, right) for i, a in enumerate(group) for b in group[i + 1 :]]
    if tie_options and generator.random() < tie_share:
        first, second = tie_options[int(generator.integers(len(tie_options)))]
        label = TIE
    else:
        first = right[int(generator.integers(len(right)))]
        second = wrong[int(generator.integers(len(wrong)))]
        label = RESPONSE_1
    if generator.random() < 0.5:
        first, second = second, first
        label = {RESPONSE_1: RESPONSE_2}.get(label, label)
    return requested, (first, second), label


def acoustic_pairs(
    texts_path: str | os.PathLike,
    style_category: str,
    styles: Mapping[str, Any],
    root: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    pairs_per_text: int = 1,
    tie_share: float = 0.2,
    sample_rate: int = 16000,
    seed: int = 0,
    progress: bool = True,
) -> pl.DataFrame:
    """Draw and speak the acoustic pairs of one style category; write and return their table (clips below `root`)."""
    if style_category not in STYLE_CATEGORIES:
        raise AcousticError(f"unknown acoustic style category {style_category!r}; use one of {STYLE_CATEGORIES}")
    variants = _variants(styles)
    if len(variants) < 2:
        raise AcousticError(
            f"preference.acoustic.styles.{style_category} needs at least two styles, has {sorted(variants)}"
        )
    texts = [text for text in read_texts(texts_path) if text.task_format in FORMATS[style_category]]
    spoken: dict[tuple[str, Rendering], str] = {}

    def clip(text: AcousticText, rendering: Rendering) -> str:
        key = (text.words, rendering)
        if key not in spoken:
            voice = Voice.from_config(variants[rendering.style][rendering.variant])
            emotion = rendering.style if style_category == "emotion" else None
            if style_category == MIXED:
                emotion = mixed_parts(rendering.style)[1]
            audio, rate = synthesize(voice, SynthesisRequest(text.words, emotion=emotion))
            audio, _ = waveform.match_level(waveform.resample(audio, rate, sample_rate), sample_rate, CLIP_LEVEL_DB)
            relative = clip_name(style_category, text, rendering)
            waveform.write_wav(Path(root) / relative, audio, sample_rate)
            spoken[key] = relative
        return spoken[key]

    rows = []
    for text in tqdm(texts, desc=f"acoustic {style_category}", disable=not progress):
        for pair in range(pairs_per_text):
            generator = np.random.default_rng(
                int(stable_hash([seed, style_category, text.task_format, text.index, pair], 12), 16)
            )
            drawn = _draw(style_category, text, variants, tie_share, generator)
            if drawn is None:
                continue
            requested, renderings, label = drawn
            aspect = "implicit_emotion" if text.task_format == IMPLICIT_DIALOGUE else style_category
            rows.append(
                {
                    "item_id": f"ac_{style_category}_{_SHORT[text.task_format]}{text.index}_p{pair}",
                    "aspect": aspect,
                    "style_category": style_category,
                    "task_format": text.task_format,
                    "requested": requested,
                    "style1": renderings[0].style,
                    "style2": renderings[1].style,
                    "query": instruction(style_category, text, requested),
                    "response_text": text.words,
                    "response1_audio": clip(text, renderings[0]),
                    "response2_audio": clip(text, renderings[1]),
                    "label": label,
                    "rationale": rationale(
                        style_category, text, requested, (renderings[0].style, renderings[1].style), label
                    ),
                }
            )
    config_hash = stable_hash(
        {"style_category": style_category, "styles": dict(styles), "pairs": pairs_per_text, "tie_share": tie_share}
    )
    frame = with_provenance(PREFERENCE_ACOUSTIC.frame(rows), config_hash=config_hash, seed=seed)
    write_parquet(out_path, frame)
    return frame
