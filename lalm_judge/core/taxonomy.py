"""Identifiers and label sets shared by every stage: categories, severities, emotions, variant ids."""

from __future__ import annotations

import re
from dataclasses import dataclass

CATEGORIES = (
    "overall",
    "dangerous",
    "harassment",
    "hate",
    "sexual",
    "violence",
    "self_harm",
    "deception",
)
SEVERITIES = (1, 2, 3, 4, 5)
SAFE_SEVERITY = 0

# The DeepDialogue emotion label set (20 labels); rewrites must pick their new emotion from it. Corpus turns
# keep the label their corpus gives (published DeepDialogue dialogues use others too, e.g. 'worried').
EMOTIONS = (
    "neutral",
    "happy",
    "sad",
    "angry",
    "fearful",
    "surprised",
    "disgusted",
    "excited",
    "curious",
    "amused",
    "enthusiastic",
    "relaxed",
    "grateful",
    "hopeful",
    "proud",
    "anxious",
    "frustrated",
    "confused",
    "disappointed",
    "embarrassed",
)

# The id grammar, unanchored (the workflow's wildcard constraints are built from these, `vocabulary.wildcard_patterns`).
SLUG = "[a-z0-9_]+"
_SEVERITY = f"[{SEVERITIES[0]}-{SEVERITIES[-1]}]"
VARIANT_PATTERN = rf"{SLUG}\.t\d+\.[a-z_]+\.s{_SEVERITY}"
# A safe original or a variant: the samples a dialogue's manifest lists.
SAMPLE_PATTERN = rf"{SLUG}\.(original|t\d+\.[a-z_]+\.s{_SEVERITY})"
_SLUG = re.compile(rf"^{SLUG}$")
_VARIANT = re.compile(rf"^(?P<d>{SLUG})\.t(?P<t>\d+)\.(?P<c>[a-z_]+)\.s(?P<s>{_SEVERITY})$")


class InvalidIdentifier(ValueError):
    """An identifier that would be unsafe as a path component or does not follow the id grammar."""


def validate_dialogue_id(dialogue_id: str) -> str:
    """Return the id if it is a slug `[a-z0-9_]+`; reject `/`, `..`, spaces and anything else."""
    if not isinstance(dialogue_id, str) or not _SLUG.match(dialogue_id):
        raise InvalidIdentifier(
            f"invalid dialogue id {dialogue_id!r}: ids must match [a-z0-9_]+ "
            "(no '/', '..', spaces, dots or upper case); rename the dialogue"
        )
    return dialogue_id


def slug(text: str) -> str:
    """The lowercase letters and digits of `text`, each run of anything else one underscore, none at the ends
    ('' when nothing is left): the readable part of a file name or an item id."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def slugify(name: str) -> str:
    """Turn a free-form name (e.g. a DeepDialogue folder 'art_22_4') into a valid dialogue id."""
    slug = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
    return validate_dialogue_id(slug)


@dataclass(frozen=True)
class VariantKey:
    """Which turn of which dialogue is replaced, by what category and severity."""

    dialogue_id: str
    turn_index: int
    category: str
    severity: int

    @property
    def variant_id(self) -> str:
        return f"{self.dialogue_id}.t{self.turn_index}.{self.category}.s{self.severity}"

    @classmethod
    def parse(cls, variant_id: str) -> VariantKey:
        match = _VARIANT.match(variant_id)
        if not match or match["c"] not in CATEGORIES:
            raise InvalidIdentifier(
                f"invalid variant id {variant_id!r}; expected '<dialogue>.t<turn>.<category>.s<1-5>'"
            )
        return cls(match["d"], int(match["t"]), match["c"], int(match["s"]))


def original_id(dialogue_id: str) -> str:
    """Sample id of the safe original dialogue (severity 0)."""
    return f"{dialogue_id}.original"


def unknown_emotion_warning(emotion: str | None, where: str) -> str | None:
    """The warning for a corpus label outside EMOTIONS (kept as it is), or None for a known or missing label."""
    if emotion is None or emotion in EMOTIONS:
        return None
    return (
        f"{where}: emotion {emotion!r} is not one of the {len(EMOTIONS)} DeepDialogue labels of the project's set; "
        "kept as the corpus gives it (rewrites choose their emotion from the set)"
    )


# Safe samples of one target turn, scored under conditions (lalm_judge.manifest.conditions):
# '<d>.t<t>.original' is the original dialogue whose turn t is transformed (masked, noisy, silent), and
# '<d>.t<t>.tts_control' the original with turn t re-synthesized by the variants' TTS voice.
TURN_ORIGINAL = "original"
TTS_CONTROL_SAMPLE = "tts_control"
_TURN_SAFE = re.compile(rf"^(?P<d>{SLUG})\.t(?P<t>\d+)\.(?P<kind>{TURN_ORIGINAL}|{TTS_CONTROL_SAMPLE})$")


def turn_safe_id(dialogue_id: str, turn_index: int, kind: str = TURN_ORIGINAL) -> str:
    """Sample id of a safe (severity 0) sample whose target turn is `turn_index`."""
    if kind not in (TURN_ORIGINAL, TTS_CONTROL_SAMPLE):
        raise InvalidIdentifier(f"unknown safe sample kind {kind!r}; use {TURN_ORIGINAL!r} or {TTS_CONTROL_SAMPLE!r}")
    return f"{validate_dialogue_id(dialogue_id)}.t{turn_index}.{kind}"


def clean_reference_id(sample_id: str) -> str:
    """The clean sample a sample scored under a condition is compared with: a variant with itself, every safe
    sample of a dialogue (the original, or one of its target-turn samples) with the dialogue's original."""
    match = _TURN_SAFE.match(sample_id)
    if match:
        return original_id(match["d"])
    if sample_id.endswith(".original"):
        return sample_id
    VariantKey.parse(sample_id)
    return sample_id
