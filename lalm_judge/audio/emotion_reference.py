"""Emotion references for voice cloning: clips of RAVDESS actors speaking the emotion a new turn is to carry
(`tts.emotion_reference`, docs/cluster.md "Emotion references"). XTTS-v2 copies the prosody of its reference audio;
DeepDialogue rarely has a clip of the speaker with the rewrite's new emotion, so the study conditions XTTS on the
speaker's own clips and an emotional reference from RAVDESS.

RAVDESS (Livingstone & Russo 2018, CC BY-NC-SA 4.0) names each file `MM-VV-EE-II-SS-RR-AA.wav`: modality (03 =
audio only), vocal channel (01 = speech, 02 = song), emotion (01 neutral, 02 calm, 03 happy, 04 sad, 05 angry,
06 fearful, 07 disgust, 08 surprised), intensity (01 normal, 02 strong), statement (01, 02), repetition (01, 02),
actor (01-24; odd actors are male, even ones female). Only speech files of the audio-only modality are used.

A reference for (dialogue d, speaker s, emotion label e):
1. e maps to one of RAVDESS's eight emotions (EMOTION_TO_RAVDESS for the 20 DeepDialogue labels, extended or
   overridden by the config's `mapping` for corpus labels outside the set; another label is an error);
2. at strong intensity, except neutral, which RAVDESS records at normal intensity only;
3. spoken by the actor chosen for (d, s): among the actors of s's gender who recorded every emotion at its
   intensity (sorted by number), the one at stable_hash(d, s) mod their count, so a speaker keeps one actor in a
   dialogue and the choice does not depend on which turn is synthesized first;
4. the actor's first `clips` files of that emotion in (repetition, statement) order.

The speaker's gender comes from the config (`speaker_genders`): DeepDialogue's JSON records name the speakers
LLM1 and LLM2 and carry no gender, and the voice each recording was cloned from (the `actor` column of the hub
layout's metadata.tsv) is not part of the record this project ingests. A key is a speaker label (every dialogue)
or `<dialogue id>/<speaker>` (one dialogue; it wins); a speaker with neither is an error naming both keys. A turn
without an emotion label gets no emotion reference (recorded as an empty list).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lalm_judge.core.files import stable_hash

RAVDESS = "ravdess"
CORPORA = (RAVDESS,)

RAVDESS_EMOTIONS = {
    "01": "neutral",
    "02": "calm",
    "03": "happy",
    "04": "sad",
    "05": "angry",
    "06": "fearful",
    "07": "disgust",
    "08": "surprised",
}
NORMAL, STRONG = "01", "02"
AUDIO_ONLY, SPEECH = "03", "01"
MALE, FEMALE = "male", "female"
GENDERS = (MALE, FEMALE)

# The DeepDialogue labels (core.taxonomy.EMOTIONS) on RAVDESS's eight, by the nearest of them in valence and
# arousal: the eight basic ones as they are; pleasant high-arousal states as happy, pleasant low-arousal ones as
# calm; interest and puzzlement, whose raised pitch is that of surprise, as surprised; worry as fear; irritation as
# anger; let-down and shame as sadness.
EMOTION_TO_RAVDESS = {
    "neutral": "neutral",
    "happy": "happy",
    "sad": "sad",
    "angry": "angry",
    "fearful": "fearful",
    "surprised": "surprised",
    "disgusted": "disgust",
    "excited": "happy",
    "curious": "surprised",
    "amused": "happy",
    "enthusiastic": "happy",
    "relaxed": "calm",
    "grateful": "calm",
    "hopeful": "calm",
    "proud": "happy",
    "anxious": "fearful",
    "frustrated": "angry",
    "confused": "surprised",
    "disappointed": "sad",
    "embarrassed": "sad",
}

_NAME = re.compile(r"^(\d{2})-(\d{2})-(\d{2})-(\d{2})-(\d{2})-(\d{2})-(\d{2})\.wav$")


class EmotionReferenceError(ValueError):
    """An emotion reference that cannot be chosen; the message names the file, key, speaker or label."""


@dataclass(frozen=True, order=True)
class RavdessClip:
    actor: int
    emotion: str
    intensity: str
    repetition: str
    statement: str
    path: str = field(compare=False)

    @property
    def gender(self) -> str:
        return MALE if self.actor % 2 else FEMALE


def parse_name(path: str | os.PathLike) -> RavdessClip | None:
    """The clip a RAVDESS file name describes; None for a name outside the convention or a file that is not
    audio-only speech (song, audio-visual)."""
    match = _NAME.match(Path(path).name)
    if match is None:
        return None
    modality, channel, emotion, intensity, statement, repetition, actor = match.groups()
    if modality != AUDIO_ONLY or channel != SPEECH or emotion not in RAVDESS_EMOTIONS:
        return None
    return RavdessClip(int(actor), RAVDESS_EMOTIONS[emotion], intensity, repetition, statement, os.fspath(path))


def intensity_of(emotion: str) -> str:
    """Strong intensity, except for neutral (recorded at normal intensity only)."""
    return NORMAL if emotion == "neutral" else STRONG


@dataclass(frozen=True)
class RavdessIndex:
    """The usable clips of a RAVDESS folder (searched recursively: `Actor_NN/` folders as the archive unpacks)."""

    root: str
    clips: tuple[RavdessClip, ...]

    @classmethod
    def scan(cls, root: str | os.PathLike) -> RavdessIndex:
        folder = Path(root)
        if not folder.is_dir():
            raise EmotionReferenceError(
                f"tts.emotion_reference.path: {os.fspath(root)!r} is not a folder; unpack RAVDESS's "
                "Audio_Speech_Actors_01-24.zip there (docs/cluster.md, 'Emotion references')"
            )
        clips = tuple(sorted(c for p in folder.rglob("*.wav") if (c := parse_name(p)) is not None))
        if not clips:
            raise EmotionReferenceError(
                f"tts.emotion_reference.path: {os.fspath(root)!r} holds no RAVDESS speech file "
                "(names like 03-01-05-02-01-01-12.wav, modality 03, vocal channel 01)"
            )
        return cls(os.fspath(root), clips)

    def of(self, actor: int, emotion: str) -> list[RavdessClip]:
        """The actor's clips of an emotion at its intensity, in (repetition, statement) order."""
        intensity = intensity_of(emotion)
        return [c for c in self.clips if c.actor == actor and c.emotion == emotion and c.intensity == intensity]

    def complete_actors(self, gender: str, emotions: Iterable[str], clips: int) -> list[int]:
        """Actors of a gender with at least `clips` clips of every emotion at its intensity, by number."""
        actors = sorted({c.actor for c in self.clips if c.gender == gender})
        wanted = set(emotions)
        return [a for a in actors if all(len(self.of(a, e)) >= clips for e in wanted)]


@dataclass(frozen=True)
class EmotionReferenceSettings:
    """`tts.emotion_reference` (the schema documents each key)."""

    path: str
    speaker_genders: Mapping[str, str]
    corpus: str = RAVDESS
    clips: int = 2
    mapping: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, spec: Mapping[str, Any] | None) -> EmotionReferenceSettings | None:
        if not spec:
            return None
        return cls(
            path=spec["path"],
            speaker_genders=dict(spec.get("speaker_genders", {})),
            corpus=spec.get("corpus", RAVDESS),
            clips=spec.get("clips", 2),
            mapping=dict(spec.get("mapping", {})),
        )

    @property
    def labels(self) -> dict[str, str]:
        """Every label this configuration can render: the DeepDialogue mapping, then the config's own."""
        return {**EMOTION_TO_RAVDESS, **self.mapping}


class EmotionReferences:
    """Chooses the RAVDESS clips of a turn: the settings and the index of the RAVDESS folder."""

    def __init__(self, settings: EmotionReferenceSettings, index: RavdessIndex | None = None):
        if settings.corpus not in CORPORA:
            raise EmotionReferenceError(f"tts.emotion_reference.corpus: {settings.corpus!r}; use one of {CORPORA}")
        unknown = {k: v for k, v in settings.mapping.items() if v not in RAVDESS_EMOTIONS.values()}
        if unknown:
            raise EmotionReferenceError(
                f"tts.emotion_reference.mapping: {unknown} map to no RAVDESS emotion; use one of "
                f"{sorted(RAVDESS_EMOTIONS.values())}"
            )
        self.settings = settings
        self.index = index or RavdessIndex.scan(settings.path)
        self._actors = {
            g: self.index.complete_actors(g, set(settings.labels.values()), settings.clips) for g in GENDERS
        }

    def ravdess_emotion(self, label: str | None, where: str = "") -> str | None:
        if label is None:
            return None
        try:
            return self.settings.labels[label]
        except KeyError:
            raise EmotionReferenceError(
                f"{where}emotion {label!r} has no RAVDESS emotion: add it to tts.emotion_reference.mapping "
                f"(one of {sorted(RAVDESS_EMOTIONS.values())})"
            ) from None

    def gender(self, dialogue_id: str, speaker: str) -> str:
        genders = self.settings.speaker_genders
        gender = genders.get(f"{dialogue_id}/{speaker}", genders.get(speaker))
        if gender is None:
            raise EmotionReferenceError(
                f"dialogue {dialogue_id!r}, speaker {speaker!r}: no gender for the emotion reference; set "
                f"tts.emotion_reference.speaker_genders.{speaker} (every dialogue) or "
                f"'{dialogue_id}/{speaker}' (this dialogue) to one of {GENDERS}"
            )
        return gender

    def actor(self, dialogue_id: str, speaker: str) -> int:
        """The RAVDESS actor of a speaker in a dialogue (see the module docstring)."""
        gender = self.gender(dialogue_id, speaker)
        actors = self._actors[gender]
        if not actors:
            raise EmotionReferenceError(
                f"{self.index.root}: no {gender} actor has {self.settings.clips} clip(s) of every emotion the mapping "
                f"uses ({sorted(set(self.settings.labels.values()))}) at its intensity; is the RAVDESS folder complete?"
            )
        return actors[int(stable_hash({"dialogue": dialogue_id, "speaker": speaker}), 16) % len(actors)]

    def references(self, dialogue_id: str, speaker: str, label: str | None) -> tuple[str, ...]:
        """The RAVDESS files to clone the emotion `label` from for this speaker of this dialogue."""
        emotion = self.ravdess_emotion(label, f"dialogue {dialogue_id!r}, speaker {speaker!r}: ")
        if emotion is None:
            return ()
        clips = self.index.of(self.actor(dialogue_id, speaker), emotion)
        return tuple(c.path for c in clips[: self.settings.clips])

    def problems(self, turns: Sequence[tuple[str, str, str | None]]) -> list[str]:
        """What would stop the TTS jobs, for the (dialogue, speaker, emotion label) of every turn spoken anew
        (an emotion of None: any label the rewrite picks, which is one of the DeepDialogue set)."""
        found = []
        for dialogue_id, speaker, label in dict.fromkeys(turns):
            try:
                self.actor(dialogue_id, speaker)
                self.ravdess_emotion(label, f"dialogue {dialogue_id!r}, speaker {speaker!r}: ")
            except EmotionReferenceError as error:
                found.append(str(error))
        return list(dict.fromkeys(found))
