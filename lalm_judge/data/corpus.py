"""Dialogue corpora: the canonical `dialogue.json` and the loaders of every supported source format.

Formats
- `jsonl`: the project's own format. `dialogues.jsonl` holds one dialogue per line:
  `{"id": "slug", "turns": [{"speaker": "A", "text": "...", "emotion": "happy", "audio": "clips/x.wav"}]}`.
  `audio` is relative to the corpus folder; without it the turn is spoken at ingest by the voice the
  config gives its speaker (this is how the demo corpus in `data/demo/` is voiced).
- `deepdialogue`: the published DeepDialogue samples (one JSON and one full-dialogue wav per folder)
  and the hub layout with per-utterance segments; see `lalm_judge.data.deepdialogue`.
- `hf_benchmark`: a released benchmark brought back by `lalm-judge import` (its safe originals here, its
  variants in the variant stage); see `lalm_judge.data.benchmark`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lalm_judge.audio import tts
from lalm_judge.audio import waveform as audio_lib
from lalm_judge.core.dialogue import CorpusError, Dialogue, SourceDialogue, Turn
from lalm_judge.core.taxonomy import InvalidIdentifier, unknown_emotion_warning, validate_dialogue_id
from lalm_judge.data import benchmark, deepdialogue

log = logging.getLogger(__name__)


def read_jsonl_corpus(path: str | Path) -> list[dict[str, Any]]:
    """Parse and validate `dialogues.jsonl` of the own format (ids, speakers, texts); emotion labels are the
    corpus's own (ingest warns about labels outside `taxonomy.EMOTIONS`)."""
    path = Path(path)
    file = path / "dialogues.jsonl" if path.is_dir() else path
    records, seen = [], set()
    for line_no, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{file}:{line_no}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise CorpusError(f"{where}: invalid JSON ({err})") from err
        if not isinstance(record, dict) or "id" not in record:
            raise CorpusError(f"{where}: a dialogue is an object with 'id' and 'turns'")
        try:
            dialogue_id = validate_dialogue_id(record["id"])
        except InvalidIdentifier as err:
            raise InvalidIdentifier(f"{where}: {err}") from None
        if dialogue_id in seen:
            raise CorpusError(f"{where}: duplicate dialogue id {dialogue_id!r}")
        seen.add(dialogue_id)
        turns = record.get("turns")
        if not isinstance(turns, list):  # an empty list is a dialogue too short to use: ingest skips it
            raise CorpusError(f"{where}: dialogue {dialogue_id!r} needs 'turns', a list of turns")
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict):
                raise CorpusError(f"{where}: turn {i} of {dialogue_id!r} is not an object")
            speaker, text = turn.get("speaker"), turn.get("text")
            if not isinstance(speaker, str) or not speaker or not isinstance(text, str) or not text.strip():
                raise CorpusError(f"{where}: turn {i} of {dialogue_id!r} needs a speaker and a text")
            if not isinstance(turn.get("audio", ""), str):
                raise CorpusError(f"{where}: turn {i} of {dialogue_id!r}: 'audio' is a path relative to {file.parent}")
        records.append(record)
    return records


def list_source_dialogues(corpus: Mapping[str, Any]) -> list[SourceDialogue]:
    """Dialogues named by the corpus config, in a stable order (used at workflow parse time)."""
    fmt, path = corpus["format"], corpus["path"]
    if fmt == "jsonl":
        file = Path(path) / "dialogues.jsonl"
        found = [
            SourceDialogue(
                r["id"],
                len(r["turns"]),
                str(file),
                tuple(t["speaker"] for t in r["turns"]),
                tuple(t.get("emotion") for t in r["turns"]),
            )
            for r in read_jsonl_corpus(path)
        ]
    elif fmt in ("deepdialogue", "deepdialogue_hub"):
        found = deepdialogue.list_dialogues(path, layout=fmt, tts_system=corpus["tts_system"])
    elif fmt == benchmark.FORMAT:
        found = benchmark.list_dialogues(path)
    else:
        raise CorpusError(f"unknown corpus format {fmt!r}")
    wanted = corpus.get("dialogues") or []
    if wanted:
        by_id = {d.dialogue_id: d for d in found}
        missing = [d for d in wanted if d not in by_id]
        if missing:
            raise CorpusError(f"corpus.dialogues names dialogues not in {path}: {missing}")
        found = [by_id[d] for d in wanted]
    limit = corpus.get("max_dialogues")
    return found[:limit] if limit else found


def _speak_jsonl_dialogue(
    record: Mapping[str, Any],
    corpus_dir: Path,
    clips_dir: Path,
    sample_rate: int,
    voices: Mapping[str, Any],
    pause_s: float,
) -> list[Turn]:
    speakers = list(dict.fromkeys(t["speaker"] for t in record["turns"]))
    turns, clock = [], 0.0
    for i, spec in enumerate(record["turns"]):
        if spec.get("audio"):
            audio, _ = audio_lib.read_audio(corpus_dir / spec["audio"], sample_rate)
            method = "given"
        else:
            voice = tts.voice_for_speaker(voices, spec["speaker"], speakers)
            raw, sr = tts.synthesize(voice, tts.SynthesisRequest(spec["text"], spec.get("emotion")))
            audio, method = audio_lib.resample(raw, sr, sample_rate), f"synthesized:{voice.engine}"
        clip = clips_dir / f"t{i}.wav"
        audio_lib.write_wav(clip, audio, sample_rate)
        duration = len(audio) / sample_rate
        turns.append(
            Turn(i, spec["speaker"], spec["text"], spec.get("emotion"), clock, clock + duration, str(clip), method, 1.0)
        )
        clock += duration + pause_s
    return turns


def ingest(
    corpus: Mapping[str, Any],
    dialogue_id: str,
    out_json: str | Path,
    clips_dir: str | Path,
    sample_rate: int,
    voices: Mapping[str, Any],
    min_turns: int = 2,
) -> Dialogue:
    """Bring one dialogue into the canonical form: `dialogue.json` plus one clip per turn at `sample_rate`."""
    validate_dialogue_id(dialogue_id)
    clips_dir = Path(clips_dir)
    clips_dir.mkdir(parents=True, exist_ok=True)
    fmt, path = corpus["format"], Path(corpus["path"])
    if fmt == "jsonl":
        record = next((r for r in read_jsonl_corpus(path) if r["id"] == dialogue_id), None)
        if record is None:
            raise CorpusError(f"dialogue {dialogue_id!r} is not in {path / 'dialogues.jsonl'}")
        turns = _speak_jsonl_dialogue(record, path, clips_dir, sample_rate, voices, corpus["pause_s"])
        dialogue = Dialogue(
            dialogue_id,
            turns,
            fmt,
            str(path / "dialogues.jsonl"),
            sample_rate,
            meta={k: v for k, v in record.items() if k not in ("id", "turns")},
        )
    elif fmt == benchmark.FORMAT:
        dialogue = benchmark.ingest(corpus, dialogue_id, clips_dir, sample_rate)
    else:
        dialogue = deepdialogue.ingest(corpus, dialogue_id, clips_dir, sample_rate)
    for turn in dialogue.turns:
        where = f"dialogue {dialogue_id} turn {turn.index}"
        warnings = [unknown_emotion_warning(turn.emotion, where)]
        if turn.clip:
            problems = audio_lib.quality_problems(audio_lib.read_audio(turn.clip)[0])
            warnings += [f"{where}: the audio is {problem}" for problem in problems]
        for warning in filter(None, warnings):
            log.warning("%s", warning)
            dialogue.warnings.append(warning)
    if len(dialogue.turns) < min_turns:
        dialogue.status = "skipped"
        dialogue.skip_reason = f"{len(dialogue.turns)} turn(s) < corpus.min_turns={min_turns}"
        log.warning("dialogue %s skipped: %s", dialogue_id, dialogue.skip_reason)
    dialogue.save(out_json)
    return dialogue
