"""The TTS stage: speak every ok variant of one (dialogue, turn) in the original speaker's voice.

Each clip is resampled to the dialogue's rate and, if asked, scaled to the mean active level of the
neighbouring original turns, so that loudness alone does not reveal the replaced turn. Silent neighbours do not
count; when every neighbour and the replaced turn itself are silent, the clip keeps its level (gain 0 dB, in
the table). The stage writes one wav per ok variant and the TTS table (`lalm_judge.core.tables.TTS`): every
variant row of the turn with its clip, so that the ASR and manifest stages read this table alone.

With `tts.emotion_reference` (RAVDESS, `lalm_judge.audio.emotion_reference`) each clip is also cloned from the
clips of an actor of the speaker's gender speaking its emotion, and its row records them (`emotion_references`).

The TTS controls of a dialogue (`synthesize_dialogue_controls`, only for the conditions a config asks for) are
spoken the same way by the same voice: the safe turn re-synthesized (the TTS-bias control) and the sentence
addressed to the evaluator (the injection control), one of each per target turn, in their own table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from tqdm import tqdm

from lalm_judge.audio import waveform
from lalm_judge.audio.emotion_reference import EmotionReferences, EmotionReferenceSettings
from lalm_judge.audio.tts import SynthesisRequest, Voice, get_engine, synthesize, voice_for_speaker
from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.files import canonical_json, stable_hash, with_provenance, write_parquet
from lalm_judge.core.tables import CONTROL_CLIPS, TTS, VARIANTS
from lalm_judge.core.vocabulary import INJECTION, SYNTHESIZED, TTS_CONTROL


def _target_level_db(dialogue: Dialogue, turn_index: int) -> float | None:
    """Mean active level of the audible neighbours of a turn (else of the turn itself); None if all are silent."""
    neighbours = [t for t in dialogue.turns if abs(t.index - turn_index) == 1]
    for turns in (neighbours, [dialogue.turns[turn_index]]):
        clips = [waveform.read_audio(t.clip) for t in turns]
        levels = [waveform.active_level_db(audio, sr) for audio, sr in clips if not waveform.is_silent(audio)]
        if levels:
            return sum(levels) / len(levels)
    return None


@dataclass(frozen=True)
class TurnSpeaker:
    """How new speech for one turn of a dialogue is made: the turn speaker's voice, the clips it clones from,
    and the loudness it is matched to (the mean active level of the neighbouring original turns)."""

    dialogue: Dialogue
    turn_index: int
    voice: Voice
    reference_clips: tuple[str, ...]
    reference_emotions: tuple[str, ...]
    target_db: float | None
    # The RAVDESS clips of each emotion (`tts.emotion_reference`), None when the config sets none.
    emotion_references: EmotionReferences | None = None

    @classmethod
    def of(
        cls,
        dialogue: Dialogue,
        turn_index: int,
        voices: Mapping[str, Any],
        match_loudness: bool,
        emotion_references: EmotionReferences | None = None,
    ) -> TurnSpeaker:
        speaker = dialogue.turns[turn_index].speaker
        same_speaker = [t for t in dialogue.turns if t.speaker == speaker]
        target_db = _target_level_db(dialogue, turn_index) if match_loudness else None
        return cls(
            dialogue,
            turn_index,
            voice_for_speaker(voices, speaker, dialogue.speakers),
            tuple(t.clip for t in same_speaker),
            tuple(t.emotion or "" for t in same_speaker),
            target_db,
            emotion_references,
        )

    def emotion_clips(self, emotion: str | None) -> tuple[str, ...]:
        if self.emotion_references is None:
            return ()
        speaker = self.dialogue.turns[self.turn_index].speaker
        return self.emotion_references.references(self.dialogue.dialogue_id, speaker, emotion)

    def speak(self, text: str, emotion: str | None, path: str) -> dict[str, Any]:
        """Synthesize `text` into a wav at `path` (dialogue rate, matched loudness); the TTS columns of its row,
        the emotion references it was cloned from among them."""
        emotion_clips = self.emotion_clips(emotion)
        request = SynthesisRequest(text, emotion, self.reference_clips, self.reference_emotions, emotion_clips)
        raw, sr = synthesize(self.voice, request)
        rate = self.dialogue.sample_rate
        clip, gain_db = waveform.resample(raw, sr, rate), 0.0
        if self.target_db is not None:
            clip, gain_db = waveform.match_level(clip, rate, self.target_db)
        waveform.write_wav(path, clip, rate)
        return {
            "clip": path,
            "duration_s": len(clip) / rate,
            "gain_db": gain_db,
            "tts_engine": self.voice.engine,
            **get_engine(self.voice).describe(),
            "emotion_references": list(emotion_clips) if self.emotion_references is not None else None,
        }


def synthesize_turn_variants(
    dialogue_json: str,
    variants_table: str,
    clips_dir: str,
    out_table: str,
    voices: Mapping[str, Any],
    match_loudness: bool,
    *,
    emotion_reference: Mapping[str, Any] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> pl.DataFrame:
    """Write one wav per ok variant into `clips_dir` and the TTS table to `out_table`; return the table.
    `emotion_reference`: the config's `tts.emotion_reference` (None: the speaker's own clips only)."""
    dialogue = Dialogue.load(dialogue_json)
    variants = VARIANTS.read(variants_table)
    rows = []
    generation = None  # the voice's settings, once there is a turn to speak
    if variants.height:
        speaker = TurnSpeaker.of(
            dialogue, int(variants["turn_index"][0]), voices, match_loudness, emotion_references(emotion_reference)
        )
        settings = {"voice": dict(speaker.voice.options), "match_loudness": match_loudness}
        generation = canonical_json(settings | {"emotion_reference": emotion_reference})
        n_ok = variants.filter(pl.col("status") == "ok").height
        bar = tqdm(total=n_ok, desc=f"tts {dialogue.dialogue_id} t{speaker.turn_index}", disable=not progress)
        for row in variants.iter_rows(named=True):
            if row["status"] != "ok":
                rows.append(row)
                continue
            rows.append({**row, **speaker.speak(row["text"], row["emotion"], f"{clips_dir}/{row['variant_id']}.wav")})
            bar.update()
        bar.close()
    Path(clips_dir).mkdir(parents=True, exist_ok=True)
    settings = {"voices": voices, "match_loudness": match_loudness, "emotion_reference": emotion_reference}
    config_hash = stable_hash(settings)
    frame = with_provenance(TTS.frame(rows), config_hash=config_hash, seed=seed, generation=generation)
    write_parquet(out_table, frame)
    return frame


def emotion_references(spec: Mapping[str, Any] | None) -> EmotionReferences | None:
    """The RAVDESS reference chooser of `tts.emotion_reference` (the folder indexed once per job), or None."""
    settings = EmotionReferenceSettings.from_config(spec)
    return EmotionReferences(settings) if settings is not None else None


# The emotion the injected sentence is spoken with: an aside to the evaluator, not part of the exchange.
INJECTION_EMOTION = "neutral"


def synthesize_dialogue_controls(
    dialogue_json: str,
    turns: Sequence[int],
    kinds: Sequence[str],
    clips_dir: str,
    out_table: str,
    voices: Mapping[str, Any],
    match_loudness: bool,
    injection_text: str,
    *,
    emotion_reference: Mapping[str, Any] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> pl.DataFrame:
    """The TTS controls of one dialogue (`lalm_judge.core.tables.CONTROL_CLIPS`), per target turn in `turns`:
    'tts_control', the original turn text re-synthesized with its emotion by the voice that speaks the turn's
    variants (loudness-matched the same way), and 'injection', `injection_text` in that voice."""
    unknown = [k for k in kinds if k not in SYNTHESIZED]
    if unknown:
        raise ValueError(f"unknown TTS control(s) {unknown}; the TTS control stage makes {SYNTHESIZED}")
    dialogue = Dialogue.load(dialogue_json)
    rows = []
    usable = dialogue.status == "ok"
    references = emotion_references(emotion_reference) if usable and turns else None
    for turn_index in tqdm(turns if usable else [], desc=f"tts controls {dialogue.dialogue_id}", disable=not progress):
        speaker = TurnSpeaker.of(dialogue, turn_index, voices, match_loudness, references)
        turn = dialogue.turns[turn_index]
        spoken = {TTS_CONTROL: (turn.text, turn.emotion), INJECTION: (injection_text, INJECTION_EMOTION)}
        for kind in kinds:
            text, emotion = spoken[kind]
            sample_id = f"{dialogue.dialogue_id}.t{turn_index}.{kind}"
            row = {
                "dialogue_id": dialogue.dialogue_id,
                "sample_id": sample_id,
                "kind": kind,
                "turn_index": turn_index,
                "speaker": turn.speaker,
                "text": text,
                "emotion": emotion,
            }
            rows.append(row | speaker.speak(text, emotion, f"{clips_dir}/{sample_id}.wav"))
    Path(clips_dir).mkdir(parents=True, exist_ok=True)
    settings = {"voices": voices, "match_loudness": match_loudness, "kinds": list(kinds), "injection": injection_text}
    settings |= {"emotion_reference": emotion_reference}
    frame = with_provenance(CONTROL_CLIPS.frame(rows), config_hash=stable_hash(settings), seed=seed)
    write_parquet(out_table, frame)
    return frame
