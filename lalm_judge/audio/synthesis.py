"""The TTS stage: speak every ok variant of one (dialogue, turn) in the original speaker's voice.

Each clip is resampled to the dialogue's rate and, if asked, scaled to the mean active level of the
neighbouring original turns, so that loudness alone does not reveal the replaced turn. The stage writes one
wav per ok variant and the TTS table (`lalm_judge.core.tables.TTS`): every variant row of the turn with its
clip, so that the ASR and manifest stages read this table alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl
from tqdm import tqdm

from lalm_judge.audio import waveform
from lalm_judge.audio.tts import SynthesisRequest, get_engine, synthesize, voice_for_speaker
from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.files import stable_hash, with_provenance, write_parquet
from lalm_judge.core.tables import TTS, VARIANTS


def synthesize_turn_variants(
    dialogue_json: str,
    variants_table: str,
    clips_dir: str,
    out_table: str,
    voices: Mapping[str, Any],
    match_loudness: bool,
    *,
    seed: int = 0,
    progress: bool = True,
) -> pl.DataFrame:
    """Write one wav per ok variant into `clips_dir` and the TTS table to `out_table`; return the table."""
    dialogue = Dialogue.load(dialogue_json)
    variants = VARIANTS.read(variants_table)
    rows = []
    if variants.height:
        turn_index = int(variants["turn_index"][0])
        speaker = dialogue.turns[turn_index].speaker
        voice = voice_for_speaker(voices, speaker, dialogue.speakers)
        same_speaker = [t for t in dialogue.turns if t.speaker == speaker]
        neighbours = [t for t in dialogue.turns if abs(t.index - turn_index) == 1] or [dialogue.turns[turn_index]]
        target_db = sum(waveform.active_level_db(*waveform.read_audio(t.clip)) for t in neighbours) / len(neighbours)
        engine_info = get_engine(voice).describe()
        n_ok = variants.filter(pl.col("status") == "ok").height
        bar = tqdm(total=n_ok, desc=f"tts {dialogue.dialogue_id} t{turn_index}", disable=not progress)
        for row in variants.iter_rows(named=True):
            if row["status"] != "ok":
                rows.append(row)
                continue
            request = SynthesisRequest(
                row["text"],
                row["emotion"],
                reference_clips=tuple(t.clip for t in same_speaker),
                reference_emotions=tuple(t.emotion or "" for t in same_speaker),
            )
            raw, sr = synthesize(voice, request)
            clip = waveform.resample(raw, sr, dialogue.sample_rate)
            gain_db = 0.0
            if match_loudness:
                clip, gain_db = waveform.match_level(clip, dialogue.sample_rate, target_db)
            path = f"{clips_dir}/{row['variant_id']}.wav"
            waveform.write_wav(path, clip, dialogue.sample_rate)
            rows.append(
                {
                    **row,
                    "clip": path,
                    "duration_s": len(clip) / dialogue.sample_rate,
                    "gain_db": gain_db,
                    "tts_engine": voice.engine,
                    **engine_info,
                }
            )
            bar.update()
        bar.close()
    Path(clips_dir).mkdir(parents=True, exist_ok=True)
    config_hash = stable_hash({"voices": voices, "match_loudness": match_loudness})
    frame = with_provenance(TTS.frame(rows), config_hash=config_hash, seed=seed)
    write_parquet(out_table, frame)
    return frame
