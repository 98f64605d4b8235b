"""Ingest of the DeepDialogue corpus (Koudounas et al., 2025) into the canonical `corpus.Dialogue`.

Two layouts are read.

`deepdialogue` (the published samples): one folder per dialogue, `<domain>_<id>_<turns>/`, holding
`<name>.json` (`{"domain", "timestamp", "model1", "model2", "conversation": [{"speaker", "text",
"emotion"}]}`) and `<name>_<tts_system>.wav`, the whole dialogue in one recording. Turn boundaries are
found by `lalm_judge.data.segmentation` (ASR word timestamps aligned to the turn texts, cuts snapped to
the pause between turns, silence detection as the fallback). Dialogue id: the slugified folder name.

`deepdialogue_hub` (SALT-Research/DeepDialogue-xtts and -orpheus on the hub): per configuration folder
`dialogues_<model>[_<model>]/`, each dialogue has `<name>.json` (same schema) beside a folder `<name>/`
with `segments/NNN_<speaker>_<emotion>.wav`, one file per utterance (this naming is the one the
corpus authors' own training lists use), and usually `<name>_full.wav` and `metadata.tsv`, which are
not read. Assumptions: NNN is the turn's position (sorted numerically; 1-based in the published
lists, only the order is used); the speaker in the file name must equal the JSON turn's speaker; the
emotion in the file name is an audio label of its own and is kept in `meta["segment_labels"]`, the
turn's emotion is the JSON one. `path` may be the repository root, its `data/` folder or one
configuration folder (dialogue folders are looked for up to three levels down). Dialogue id: the
slugified path of the dialogue folder below `path`, without a `data/` component and without the
`dialogues_` prefix (`data/dialogues_llama3-8B/art_22_4` -> `llama3_8b_art_22_4`), because the same
`<name>` recurs under several configurations. Segments are used as they are (`boundary_method`
'given'); their timeline is rebuilt with `pause_s` of silence between turns.

Corpus config keys read here (besides `format`, which selects the layout):
- `path` (str, required): the corpus folder.
- `tts_system` (str, 'xtts' | 'orpheus', default 'xtts'): which rendering of a published sample to
  ingest (`<name>_<tts_system>.wav`); dialogues without it are not listed. For the hub layout it is
  provenance only (the two renderings are separate hub datasets with the same layout).
- `pause_s` (float >= 0, default 0.4): hub layout only; seconds of silence between consecutive
  segments in the rebuilt timeline (the segments carry no pause information).
- `alignment` (mapping, default {}): published layout only; how turn boundaries are found.
  - `asr_model` (str, default 'bundled:tiny.en'): faster-whisper model for word timestamps.
  - `cpu_threads` (int >= 1, default 2): CTranslate2 threads of that model.
  - `min_confidence` (float in [0, 1], default 0.5): boundaries with a lower alignment confidence
    fall back to silence detection.
  - `context_words` (int >= 1, default 3): reference words on each side of a boundary that its
    confidence is computed from.
  - `search_margin_s` (float >= 0, default 0.25): how far around the recognized words' edges the cut
    may be placed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from lalm_judge.audio import waveform as audio_lib
from lalm_judge.audio.asr import load_asr
from lalm_judge.core.dialogue import CorpusError, Dialogue, SourceDialogue, Turn
from lalm_judge.core.taxonomy import slugify, validate_dialogue_id
from lalm_judge.data import records
from lalm_judge.data.segmentation import SegmentationSettings, TurnSpan, segment_turns

log = logging.getLogger(__name__)

PUBLISHED = "deepdialogue"
HUB = "deepdialogue_hub"
TTS_SYSTEMS = ("xtts", "orpheus")
_SEGMENT = re.compile(r"^(?P<index>\d+)_(?P<speaker>[^_]+)_(?P<label>.+)\.wav$")
_HUB_SEARCH_DEPTH = 3


@dataclass(frozen=True)
class AlignmentSettings:
    asr_model: str = "bundled:tiny.en"
    cpu_threads: int = 2
    min_confidence: float = 0.5
    context_words: int = 3
    search_margin_s: float = 0.25

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> AlignmentSettings:
        config = dict(config or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise CorpusError(f"corpus.alignment has unknown keys {unknown}; known keys: {sorted(known)}")
        settings = cls(**config)
        if not 0.0 <= settings.min_confidence <= 1.0:
            raise CorpusError(f"corpus.alignment.min_confidence={settings.min_confidence} must be in [0, 1]")
        if settings.cpu_threads < 1 or settings.context_words < 1 or settings.search_margin_s < 0:
            raise CorpusError("corpus.alignment: cpu_threads and context_words must be >= 1, search_margin_s >= 0")
        return settings

    def segmentation(self) -> SegmentationSettings:
        return SegmentationSettings(
            min_confidence=self.min_confidence, context_words=self.context_words, search_margin_s=self.search_margin_s
        )


@dataclass(frozen=True)
class _Source:
    """Where one dialogue's files are: its JSON and either the full recording or the segment files."""

    dialogue_id: str
    folder: Path
    json_path: Path
    recording: Path | None = None
    segments: tuple[Path, ...] = ()


def read_conversation(json_path: str | Path) -> dict[str, Any]:
    """The dialogue JSON, with its `conversation` checked: speakers and non-empty texts of the right types, free of
    forbidden characters (`lalm_judge.data.records`; emotion labels are the corpus's own: ingest warns about those
    outside `taxonomy.EMOTIONS`)."""
    return _checked_conversation(json_path)[0]


def _checked_conversation(json_path: str | Path) -> tuple[dict[str, Any], list[str]]:
    """The checked dialogue JSON and the speech warnings of its turns."""
    json_path = Path(json_path)
    try:
        text = records.decode_utf8(json_path.read_bytes(), json_path)
    except OSError as err:
        raise CorpusError(f"cannot read DeepDialogue JSON {json_path}: {err}") from err
    record = records.loads_unique(text, str(json_path))
    turns = record.get("conversation") if isinstance(record, dict) else None
    if not isinstance(turns, list) or not turns:
        raise CorpusError(f"{json_path}: needs a non-empty 'conversation' list of {{speaker, text, emotion}}")
    warnings = []
    for i, turn in enumerate(turns):
        warnings += records.check_turn_fields(turn, f"{json_path}: turn {i}")
    return record, warnings


def _check_layout(path: str | Path, layout: str, tts_system: str) -> Path:
    if layout not in (PUBLISHED, HUB):
        raise CorpusError(f"unknown DeepDialogue layout {layout!r}; use {PUBLISHED!r} or {HUB!r}")
    if tts_system not in TTS_SYSTEMS:
        raise CorpusError(f"unknown corpus.tts_system {tts_system!r}; use one of {TTS_SYSTEMS}")
    root = Path(path)
    if not root.is_dir():
        raise CorpusError(f"DeepDialogue corpus folder {root} does not exist; set corpus.path to it")
    return root


def _published_sources(root: Path, tts_system: str) -> list[_Source]:
    sources = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        json_path = folder / f"{folder.name}.json"
        if not json_path.is_file():
            candidates = sorted(folder.glob("*.json"))
            if len(candidates) != 1:
                continue
            json_path = candidates[0]
        recording = folder / f"{json_path.stem}_{tts_system}.wav"
        if not recording.is_file():
            log.info("DeepDialogue %s has no %s rendering; not listed", folder, tts_system)
            continue
        sources.append(_Source(slugify(folder.name), folder, json_path, recording=recording))
    return sources


def _hub_dialogue_id(root: Path, folder: Path) -> str:
    parts = [p.removeprefix("dialogues_") for p in folder.relative_to(root).parts if p != "data"]
    return slugify("_".join(parts))


def _segment_index(path: Path) -> int:
    return int(_SEGMENT.match(path.name)["index"])


def _hub_sources(root: Path) -> list[_Source]:
    sources = []
    for depth in range(1, _HUB_SEARCH_DEPTH + 1):
        for segments_dir in sorted(root.glob("/".join(["*"] * depth) + "/segments")):
            folder = segments_dir.parent
            json_path = folder.parent / f"{folder.name}.json"
            if not json_path.is_file():
                json_path = folder / f"{folder.name}.json"
            if not json_path.is_file():
                raise CorpusError(f"hub dialogue {folder} has segments but no {folder.name}.json beside or inside it")
            files = [p for p in segments_dir.glob("*.wav") if _SEGMENT.match(p.name)]
            segments = tuple(sorted(files, key=_segment_index))
            sources.append(_Source(_hub_dialogue_id(root, folder), folder, json_path, segments=segments))
    return sources


def _sources(path: str | Path, layout: str, tts_system: str) -> list[_Source]:
    root = _check_layout(path, layout, tts_system)
    sources = _published_sources(root, tts_system) if layout == PUBLISHED else _hub_sources(root)
    if not sources:
        other = HUB if layout == PUBLISHED else PUBLISHED
        raise CorpusError(
            f"no DeepDialogue dialogues of layout {layout!r} (tts_system {tts_system!r}) in {root}; "
            f"check corpus.path, corpus.tts_system, or whether the folder has the {other!r} layout"
        )
    seen: dict[str, Path] = {}
    for source in sources:
        if source.dialogue_id in seen:
            raise CorpusError(
                f"dialogues {seen[source.dialogue_id]} and {source.folder} both map to id "
                f"{source.dialogue_id!r}; rename one of the folders"
            )
        seen[source.dialogue_id] = source.folder
    return sources


def list_dialogues(
    path: str | Path,
    layout: str = PUBLISHED,
    tts_system: str = "xtts",
    *,
    allow_external_audio: bool = False,
    check_audio: bool = False,
) -> list[SourceDialogue]:
    """Dialogues of a DeepDialogue folder in a stable (sorted) order, each JSON checked (`read_conversation`) and
    matched with its audio files; reads the JSON files and, with `check_audio`, the audio files' headers."""
    return [
        _source_dialogue(source, Path(path), allow_external_audio, check_audio)
        for source in _sources(path, layout, tts_system)
    ]


def _source_dialogue(source: _Source, root: Path, allow_external_audio: bool, check_audio: bool) -> SourceDialogue:
    record, warnings = _checked_conversation(source.json_path)
    conversation = record["conversation"]
    audio = (source.recording,) if source.recording is not None else source.segments
    if source.recording is None:
        _check_segments(source, conversation)
    for path in audio:
        records.check_audio_file(
            path, root, f"dialogue {source.dialogue_id}", allow_external=allow_external_audio, check_file=check_audio
        )
    return SourceDialogue(
        source.dialogue_id,
        len(conversation),
        str(source.json_path),
        location=str(source.json_path),
        speakers=tuple(turn["speaker"] for turn in conversation),
        emotions=tuple(turn.get("emotion") for turn in conversation),
        files=(str(source.json_path), *map(str, audio)),
        warnings=tuple(warnings),
    )


def _check_segments(source: _Source, conversation: list[dict]) -> None:
    """A hub dialogue has one segment file per turn, each named after the turn's speaker."""
    if len(source.segments) != len(conversation):
        raise CorpusError(
            f"{source.folder}: {len(source.segments)} segment files for {len(conversation)} turns in "
            f"{source.json_path}; each turn needs one segments/NNN_<speaker>_<emotion>.wav"
        )
    for i, (spec, segment) in enumerate(zip(conversation, source.segments)):
        speaker = _SEGMENT.match(segment.name)["speaker"]
        if speaker != spec["speaker"]:
            raise CorpusError(
                f"{segment}: speaker {speaker!r} in the file name, but turn {i} of "
                f"{source.json_path} is spoken by {spec['speaker']!r}"
            )


def transcribe_and_segment(
    recording: np.ndarray, sample_rate: int, turn_texts: Sequence[str], settings: AlignmentSettings
) -> list[TurnSpan]:
    """Turn spans of a whole-dialogue recording: one Whisper pass with word timestamps, then alignment."""
    asr = load_asr(settings.asr_model, cpu_threads=settings.cpu_threads)
    words = asr.transcribe(recording, sample_rate, word_timestamps=True).words
    return segment_turns(recording, sample_rate, turn_texts, words, settings.segmentation())


def _turns_from_recording(
    source: _Source, conversation: list[dict], clips_dir: Path, sample_rate: int, settings: AlignmentSettings
) -> list[Turn]:
    recording, native_rate = audio_lib.read_audio(source.recording)
    spans = transcribe_and_segment(recording, native_rate, [t["text"] for t in conversation], settings)
    turns = []
    for i, (spec, span) in enumerate(zip(conversation, spans)):
        piece = recording[round(span.start * native_rate) : round(span.end * native_rate)]
        clip = clips_dir / f"t{i}.wav"
        audio_lib.write_wav(clip, audio_lib.resample(piece, native_rate, sample_rate), sample_rate)
        turns.append(
            Turn(
                i,
                spec["speaker"],
                spec["text"],
                spec.get("emotion"),
                span.start,
                span.end,
                str(clip),
                span.method,
                span.confidence,
            )
        )
        if span.confidence < settings.min_confidence:
            log.warning(
                "%s turn %d: boundary confidence %.2f (%s)", source.dialogue_id, i, span.confidence, span.method
            )
    return turns


def _turns_from_segments(
    source: _Source, conversation: list[dict], clips_dir: Path, sample_rate: int, pause_s: float
) -> list[Turn]:
    _check_segments(source, conversation)
    turns, clock = [], 0.0
    for i, (spec, segment) in enumerate(zip(conversation, source.segments)):
        piece, _ = audio_lib.read_audio(segment, sample_rate)
        clip = clips_dir / f"t{i}.wav"
        audio_lib.write_wav(clip, piece, sample_rate)
        duration = len(piece) / sample_rate
        turns.append(
            Turn(
                i,
                spec["speaker"],
                spec["text"],
                spec.get("emotion"),
                round(clock, 3),
                round(clock + duration, 3),
                str(clip),
                "given",
                1.0,
            )
        )
        clock += duration + pause_s
    return turns


def ingest(corpus_cfg: Mapping[str, Any], dialogue_id: str, clips_dir: str | Path, sample_rate: int) -> Dialogue:
    """One DeepDialogue dialogue in canonical form, with one clip per turn (`clips_dir/t{i}.wav`)."""
    validate_dialogue_id(dialogue_id)
    layout, tts_system = corpus_cfg["format"], corpus_cfg["tts_system"]
    by_id = {s.dialogue_id: s for s in _sources(corpus_cfg["path"], layout, tts_system)}
    if dialogue_id not in by_id:
        raise CorpusError(
            f"dialogue {dialogue_id!r} is not in {corpus_cfg['path']} (layout {layout!r}, tts_system {tts_system!r})"
        )
    source = by_id[dialogue_id]
    record = read_conversation(source.json_path)
    conversation = record["conversation"]
    clips_dir = Path(clips_dir)
    clips_dir.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {k: record[k] for k in ("domain", "timestamp", "model1", "model2") if k in record}
    meta.update(layout=layout, tts_system=tts_system, json=str(source.json_path))
    if layout == PUBLISHED:
        settings = AlignmentSettings.from_config(corpus_cfg.get("alignment"))
        turns = _turns_from_recording(source, conversation, clips_dir, sample_rate, settings)
        meta.update(recording=str(source.recording), alignment_asr_model=settings.asr_model)
    else:
        turns = _turns_from_segments(source, conversation, clips_dir, sample_rate, corpus_cfg["pause_s"])
        meta["segment_labels"] = [_SEGMENT.match(p.name)["label"] for p in source.segments]
    return Dialogue(dialogue_id, turns, layout, str(source.folder), sample_rate, meta=meta)
