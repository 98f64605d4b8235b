"""Speech synthesis: engines behind one interface, registered by name and imported lazily.

An engine turns (text, voice, emotion, reference clips) into a mono waveform. Voices are plain
config mappings (`{engine: piper, ...}`) so that a speaker's voice is data, not code.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from lalm_judge.registry import LazyRegistry


@dataclass(frozen=True)
class SynthesisRequest:
    text: str
    emotion: str | None = None
    # Original clips of the same speaker: voice-cloning engines (XTTS) clone from them.
    reference_clips: tuple[str, ...] = ()
    reference_emotions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Voice:
    engine: str
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, spec: Mapping[str, Any]) -> Voice:
        options = {k: v for k, v in spec.items() if k != "engine"}
        return cls(engine=spec["engine"], options=options)

    @property
    def key(self) -> tuple:
        return (self.engine, tuple(sorted(self.options.items())))


class TTSEngine(Protocol):
    def synthesize(self, request: SynthesisRequest) -> tuple[np.ndarray, int]: ...

    def describe(self) -> dict[str, str]:
        """Model id and revision for provenance columns."""
        ...


ENGINES = LazyRegistry(
    "TTS engine",
    {
        "piper": "lalm_judge.tts_engines.piper:PiperEngine",
        "espeak": "lalm_judge.tts_engines.espeak:EspeakEngine",
        "xtts": "lalm_judge.tts_engines.xtts:XTTSEngine",
    },
    extras={"xtts": "the XTTS environment (envs/tts-xtts.yaml: coqui-tts, torchaudio on a GPU node)"},
)


@functools.cache
def _engine(engine: str, options: tuple) -> TTSEngine:
    return ENGINES.get(engine)(**dict(options))


def get_engine(voice: Voice) -> TTSEngine:
    """One engine instance per distinct voice per process (models load once per job)."""
    return _engine(*voice.key)


def synthesize(voice: Voice, request: SynthesisRequest) -> tuple[np.ndarray, int]:
    if not request.text.strip():
        raise ValueError("cannot synthesize an empty text")
    audio, sr = get_engine(voice).synthesize(request)
    if len(audio) == 0:
        raise RuntimeError(f"{voice.engine} produced no audio for {request.text[:60]!r}")
    return audio.astype(np.float32), sr


def voice_for_speaker(voices: Mapping[str, Mapping[str, Any]], speaker: str, speakers: Sequence[str]) -> Voice:
    """The configured voice of `speaker`; unknown speakers take the voices in order of first appearance."""
    if speaker in voices:
        return Voice.from_config(voices[speaker])
    defaults = [spec for name, spec in voices.items() if name.startswith("default")]
    if not defaults:
        raise KeyError(f"no voice configured for speaker {speaker!r} and no 'default*' voices in tts.voices")
    return Voice.from_config(defaults[list(speakers).index(speaker) % len(defaults)])


def synthesize_turn_variants(
    dialogue_json: str,
    variants_table: str,
    clips_dir: str,
    out_table: str,
    voices: Mapping[str, Any],
    match_loudness: bool = True,
    *,
    seed: int = 0,
    progress: bool = True,
):
    """Speak every ok variant of one (dialogue, turn) in the original speaker's voice.

    Each clip is resampled to the dialogue's rate and, if asked, scaled to the mean active level of the
    neighbouring original turns, so that loudness alone does not reveal the replaced turn.
    Writes one wav per variant into `clips_dir` and a table of clips to `out_table`.
    """
    import polars as pl
    from tqdm import tqdm

    from lalm_judge import audio as audio_lib
    from lalm_judge.corpus import Dialogue
    from lalm_judge.io import stable_hash, with_provenance, write_parquet

    dialogue = Dialogue.load(dialogue_json)
    variants = pl.read_parquet(variants_table)
    rows = []
    if variants.height:
        turn_index = int(variants["turn_index"][0])
        speaker = dialogue.turns[turn_index].speaker
        voice = voice_for_speaker(voices, speaker, dialogue.speakers)
        same_speaker = [t for t in dialogue.turns if t.speaker == speaker]
        neighbours = [t for t in dialogue.turns if abs(t.index - turn_index) == 1] or [dialogue.turns[turn_index]]
        target_db = sum(audio_lib.active_level_db(*audio_lib.read_audio(t.clip)) for t in neighbours) / len(neighbours)
        engine_info = get_engine(voice).describe()
        ok = variants.filter(pl.col("status") == "ok")
        for row in tqdm(
            ok.iter_rows(named=True),
            total=ok.height,
            desc=f"tts {dialogue.dialogue_id} t{turn_index}",
            disable=not progress,
        ):
            request = SynthesisRequest(
                row["text"],
                row["emotion"],
                reference_clips=tuple(t.clip for t in same_speaker),
                reference_emotions=tuple(t.emotion or "" for t in same_speaker),
            )
            raw, sr = synthesize(voice, request)
            clip = audio_lib.resample(raw, sr, dialogue.sample_rate)
            gain_db = 0.0
            if match_loudness:
                clip, gain_db = audio_lib.match_level(clip, dialogue.sample_rate, target_db)
            path = f"{clips_dir}/{row['variant_id']}.wav"
            audio_lib.write_wav(path, clip, dialogue.sample_rate)
            rows.append(
                {
                    "dialogue_id": dialogue.dialogue_id,
                    "variant_id": row["variant_id"],
                    "turn_index": turn_index,
                    "speaker": speaker,
                    "clip": path,
                    "duration_s": len(clip) / dialogue.sample_rate,
                    "gain_db": gain_db,
                    "tts_engine": voice.engine,
                    **engine_info,
                }
            )
    schema = {
        "dialogue_id": pl.String,
        "variant_id": pl.String,
        "turn_index": pl.Int64,
        "speaker": pl.String,
        "clip": pl.String,
        "duration_s": pl.Float64,
        "gain_db": pl.Float64,
        "tts_engine": pl.String,
        "tts_model": pl.String,
        "tts_revision": pl.String,
    }
    Path(clips_dir).mkdir(parents=True, exist_ok=True)
    config_hash = stable_hash({"voices": voices, "match_loudness": match_loudness})
    frame = with_provenance(pl.DataFrame(rows, schema=schema), config_hash=config_hash, seed=seed)
    write_parquet(out_table, frame)
    return frame
