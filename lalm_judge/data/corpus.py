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

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lalm_judge.audio import tts
from lalm_judge.audio import waveform as audio_lib
from lalm_judge.core.dialogue import CorpusError, Dialogue, SourceDialogue, Turn
from lalm_judge.core.files import file_sha256, stable_hash, write_json
from lalm_judge.core.taxonomy import InvalidIdentifier, unknown_emotion_warning, validate_dialogue_id
from lalm_judge.data import benchmark, deepdialogue, records

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JsonlRecord:
    """One checked dialogue of `dialogues.jsonl`: the record, its line, its given clips and its speech warnings."""

    record: dict[str, Any]
    file: Path
    line: int
    clips: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def dialogue_id(self) -> str:
        return self.record["id"]

    @property
    def digest(self) -> str:
        """What defines the dialogue, as one hash: its record, whatever the key order and spacing of its line."""
        return stable_hash(self.record, length=64)

    def source_dialogue(self) -> SourceDialogue:
        turns = self.record["turns"]
        return SourceDialogue(
            self.dialogue_id,
            len(turns),
            str(self.file),
            location=f"{self.file}:{self.line}",
            speakers=tuple(t["speaker"] for t in turns),
            emotions=tuple(t.get("emotion") for t in turns),
            spoken_turns=tuple(i for i, t in enumerate(turns) if t.get("audio") is None),
            files=self.clips,
            record_digest=self.digest,
            warnings=self.warnings,
        )


def jsonl_file(path: str | Path) -> Path:
    """`dialogues.jsonl` of a corpus folder (or the file itself); a CorpusError names corpus.path when missing."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.exists():
        raise CorpusError(
            f"corpus.path: {path} does not exist; a jsonl corpus is a folder holding dialogues.jsonl (relative to the "
            "working directory)"
        )
    file = path / "dialogues.jsonl"
    if not file.is_file():
        raise CorpusError(f"corpus.path: {path} has no dialogues.jsonl (a jsonl corpus holds one dialogue a line)")
    return file


def read_jsonl_records(
    path: str | Path, *, allow_external_audio: bool = False, check_audio: bool = False
) -> list[JsonlRecord]:
    """Parse and check `dialogues.jsonl` of the own format (`lalm_judge.data.records`: ids, field types, text
    hygiene, keys given twice, where each clip is and, with `check_audio`, whether it is whole); emotion labels
    are the corpus's own (ingest warns about labels outside `taxonomy.EMOTIONS`)."""
    file = jsonl_file(path)
    found: list[JsonlRecord] = []
    seen: set[str] = set()
    for line_no, line in enumerate(records.decode_utf8(file.read_bytes(), file).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{file}:{line_no}"
        record = records.loads_unique(line, where)
        if not isinstance(record, dict) or "id" not in record:
            raise CorpusError(f"{where}: a dialogue is an object with 'id' and 'turns'")
        try:
            dialogue_id = validate_dialogue_id(record["id"])
        except InvalidIdentifier as err:
            raise InvalidIdentifier(f"{where}: {err}") from None
        if dialogue_id in seen:
            raise CorpusError(f"{where}: duplicate dialogue id {dialogue_id!r}")
        seen.add(dialogue_id)
        clips, warnings = _check_turns(
            record, f"{where}: dialogue {dialogue_id!r}", file.parent, allow_external_audio, check_audio
        )
        found.append(JsonlRecord(record, file, line_no, clips, warnings))
    return found


def _check_turns(
    record: dict[str, Any], where: str, corpus_dir: Path, allow_external_audio: bool, check_audio: bool
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The given clips (as the workflow names them) and the speech warnings of one record, its turns checked."""
    turns = record.get("turns")
    if not isinstance(turns, list):  # an empty list is a dialogue too short to use: ingest skips it
        raise CorpusError(f"{where} needs 'turns', a list of turns")
    records.check_optional_text(record, "domain", where)
    warnings, clips = [], []
    for i, turn in enumerate(turns):
        at = f"{where} turn {i}"
        warnings += records.check_turn_fields(turn, at, allowed=records.JSONL_TURN_FIELDS)
        if turn.get("audio") is not None:
            clips.append(
                records.corpus_audio_path(
                    corpus_dir, turn["audio"], at, allow_external=allow_external_audio, check_file=check_audio
                )
            )
    return tuple(dict.fromkeys(clips)), tuple(warnings)


def read_jsonl_corpus(path: str | Path) -> list[dict[str, Any]]:
    """The checked records of `dialogues.jsonl` (`read_jsonl_records`)."""
    return [found.record for found in read_jsonl_records(path)]


def list_source_dialogues(corpus: Mapping[str, Any], *, check_audio: bool = False) -> list[SourceDialogue]:
    """Dialogues named by the corpus config, in a stable order, each record checked (used at workflow parse time;
    `check_audio` also reads the header of every audio file: `integrity.audio_file_problem`)."""
    fmt, path = corpus["format"], corpus["path"]
    external = corpus.get("allow_external_audio", False)
    if fmt == "jsonl":
        listed = read_jsonl_records(path, allow_external_audio=external, check_audio=check_audio)
        found = [r.source_dialogue() for r in listed]
    elif fmt in ("deepdialogue", "deepdialogue_hub"):
        found = deepdialogue.list_dialogues(
            path, layout=fmt, tts_system=corpus["tts_system"], allow_external_audio=external, check_audio=check_audio
        )
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


def index_dialogue(
    corpus: Mapping[str, Any], dialogue_id: str, files: Sequence[str], record_digest: str, out_path: str | Path
) -> dict[str, Any]:
    """Write what defines one dialogue (`results/corpus/{d}/source.json`): for `jsonl`, its record; for every
    format, the SHA-256 of each of its files. Ingest reads it, so that editing one dialogue of `dialogues.jsonl`
    reruns only that dialogue, and a replaced clip reruns its dialogue by content."""
    source: dict[str, Any] = {"dialogue_id": validate_dialogue_id(dialogue_id), "format": corpus["format"]}
    if corpus["format"] == "jsonl":
        # The listing has checked where its audio is (corpus.allow_external_audio); here the record is only found.
        listed = read_jsonl_records(corpus["path"], allow_external_audio=True)
        found = next((r for r in listed if r.dialogue_id == dialogue_id), None)
        if found is None or found.digest != record_digest:
            raise CorpusError(
                f"dialogue {dialogue_id!r} of {jsonl_file(corpus['path'])} changed (or went) after the run was "
                "planned; start the run again"
            )
        source["record"] = found.record
    source["files"] = {str(path): file_sha256(path) for path in files}
    write_json(out_path, source)
    return source


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
    record: Mapping[str, Any] | None = None,
) -> Dialogue:
    """Bring one dialogue into the canonical form: `dialogue.json` plus one clip per turn at `sample_rate`.

    A `jsonl` dialogue's `record` is given by the workflow (from its `source.json`, `index_dialogue`), so that a job
    does not parse the whole corpus file; without it, it is looked up in the file."""
    validate_dialogue_id(dialogue_id)
    clips_dir = Path(clips_dir)
    clips_dir.mkdir(parents=True, exist_ok=True)
    fmt, path = corpus["format"], Path(corpus["path"])
    if fmt == "jsonl":
        if record is None:
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
        warnings = [unknown_emotion_warning(turn.emotion, where), records.speech_warning(turn.text, where)]
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
