"""The judge-cell stage: score every sample of a shard's manifests with one judge cell and write the scores.

A judge cell is (judge, modality, transcript source, prompt, condition). `score_cell` loads the backend
once, builds one request per sample (or per long-audio window), sends them in batches of
`spec.batch_size`, parses every output (`lalm_judge.scoring`) and writes one long-format parquet row per
sample with provenance columns. Failures to parse are rows with their status, never crashes.

Long audio (`spec.max_audio_s`, `spec.long_audio`), recorded in `long_audio_action` of every row:
- `chunk`: the dialogue is split at turn boundaries into windows of at most `max_audio_s` (a single turn
  longer than that is cut into pieces); each window is scored (with the transcript of its turns in the
  audio_text modality) and the sample's score is the minimum over windows with status ok; if none is ok,
  the status of the first window -> 'chunked:<n windows>';
- `truncate`: only the first `max_audio_s` seconds are sent (the transcript stays whole) -> 'truncated';
- `skip`: nothing is sent; the row has parse_status 'skipped_long_audio' and no score -> 'skipped'.
Audio within the limit, or the text modality, -> 'none'.

`score_one` and `score_main` (the `lalm-judge score` command) judge one canonical dialogue ad hoc.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import yaml

from lalm_judge.io import stable_hash, with_provenance, write_parquet
from lalm_judge.judges import BACKENDS
from lalm_judge.judges.base import LONG_AUDIO_POLICIES, JudgeBackend, JudgeOutput, JudgeRequest, JudgeSpec
from lalm_judge.manifest import GROUND_TRUTH, Manifest, Sample, asr_source, assemble_waveform
from lalm_judge.prompts import NO_TRANSCRIPT, Prompt, build_request, load_prompt, normalize_transcript_source
from lalm_judge.scoring import OK, ParsedScore, resolve_score
from lalm_judge.taxonomy import original_id

CONDITIONS = ("clean",)
SKIPPED_LONG_AUDIO = "skipped_long_audio"
RAW_OUTPUT_MAX_CHARS = 2000
WINDOW_SEPARATOR = "\n--- next window ---\n"

SCORE_SCHEMA: dict[str, Any] = {
    "dialogue_id": pl.Utf8,
    "variant_id": pl.Utf8,
    "category": pl.Utf8,
    "severity": pl.Int64,
    "turn_index": pl.Int64,
    "n_turns": pl.Int64,
    "judge": pl.Utf8,
    "modality": pl.Utf8,
    "transcript_source": pl.Utf8,
    "prompt": pl.Utf8,
    "prompt_version": pl.Utf8,
    "condition": pl.Utf8,
    "score": pl.Float64,
    "parse_status": pl.Utf8,
    # 'p_safe' (answer-token probabilities, calibrated prompt) or 'parsed' (the output text); null if skipped.
    "score_source": pl.Utf8,
    "raw_output": pl.Utf8,
    "latency_s": pl.Float64,
    "n_input_tokens": pl.Int64,
    "n_output_tokens": pl.Int64,
    "long_audio_action": pl.Utf8,
    "model": pl.Utf8,
    "model_revision": pl.Utf8,
    "shard": pl.Int64,
}


@dataclass(frozen=True)
class Window:
    """A span [start, end) of a waveform (in samples) and the turns it covers."""

    turn_indices: tuple[int, ...]
    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class AudioPlan:
    """What the long-audio policy does with one sample: its action label and the windows to score."""

    action: str
    windows: tuple[Window, ...]


@dataclass(frozen=True)
class CellSettings:
    """Everything that is the same for every request of a judge cell."""

    spec: JudgeSpec
    modality: str
    transcript_source: str | None
    prompt: Prompt
    condition: str
    audio_sample_rate: int
    cascade_source: str | None


@dataclass
class _SampleWork:
    sample: Sample
    plan: AudioPlan
    outputs: list[JudgeOutput] = field(default_factory=list)


def chunk_windows(segments: Sequence[Window], max_samples: int) -> tuple[Window, ...]:
    """Group consecutive segments (turns) into windows spanning at most `max_samples`; cut longer segments."""
    windows: list[Window] = []
    group: list[Window] = []

    def close_group() -> None:
        if group:
            turns = tuple(i for segment in group for i in segment.turn_indices)
            windows.append(Window(turns, group[0].start, group[-1].end))
            group.clear()

    for segment in segments:
        if segment.length > max_samples:
            close_group()
            windows.extend(
                Window(segment.turn_indices, start, min(start + max_samples, segment.end))
                for start in range(segment.start, segment.end, max_samples)
            )
            continue
        if group and segment.end - group[0].start > max_samples:
            close_group()
        group.append(segment)
    close_group()
    return tuple(windows)


def plan_long_audio(
    segments: Sequence[Window], n_samples: int, sample_rate: int, max_audio_s: float | None, policy: str
) -> AudioPlan:
    """Apply a long-audio policy to a waveform of `n_samples` whose turns are `segments`."""
    if policy not in LONG_AUDIO_POLICIES:
        raise ValueError(f"unknown long_audio policy {policy!r}; use one of {LONG_AUDIO_POLICIES}")
    everything = Window(tuple(i for s in segments for i in s.turn_indices), 0, n_samples)
    max_samples = None if max_audio_s is None else int(round(max_audio_s * sample_rate))
    if max_samples is None or n_samples <= max_samples:
        return AudioPlan("none", (everything,))
    if policy == "chunk":
        windows = chunk_windows(segments, max_samples)
        return AudioPlan(f"chunked:{len(windows)}", windows)
    if policy == "truncate":
        return AudioPlan("truncated", (Window(everything.turn_indices, 0, max_samples),))
    return AudioPlan("skipped", ())


def turn_segments(sample: Sample, sample_rate: int, n_samples: int) -> list[Window]:
    """Each turn's span in the sample's waveform assembled at `sample_rate` (clamped to `n_samples`)."""
    ratio = sample_rate / sample.sample_rate
    return [
        Window((i,), min(round(start * ratio), n_samples), min(round(end * ratio), n_samples))
        for i, (start, end) in enumerate(sample.turn_bounds())
    ]


def dialogue_audio(sample: Sample, sample_rate: int) -> tuple[np.ndarray, list[Window]]:
    """The assembled waveform of a sample and its turn segments."""
    waveform, _ = assemble_waveform(sample, sample_rate)
    return waveform, turn_segments(sample, sample_rate, len(waveform))


AudioLoader = Callable[[Sample, int], tuple[np.ndarray, list[Window]]]


def _requests_for(sample: Sample, cell: CellSettings, load_audio: AudioLoader) -> tuple[AudioPlan, list[JudgeRequest]]:
    if cell.modality == "text":
        plan = AudioPlan("none", (Window(tuple(range(sample.n_turns)), 0, 0),))
        waveform = None
    else:
        waveform, segments = load_audio(sample, cell.audio_sample_rate)
        plan = plan_long_audio(
            segments, len(waveform), cell.audio_sample_rate, cell.spec.max_audio_s, cell.spec.long_audio
        )
    requests = []
    for k, window in enumerate(plan.windows):
        audio = None if waveform is None else (waveform[window.start : window.end], cell.audio_sample_rate)
        # Only chunk windows restrict the transcript; truncation keeps the whole text.
        turns = window.turn_indices if plan.action.startswith("chunked") else None
        request_id = sample.sample_id if len(plan.windows) == 1 else f"{sample.sample_id}#w{k}"
        requests.append(
            build_request(
                cell.prompt,
                sample,
                cell.modality,
                cell.transcript_source,
                audio,
                request_id,
                turn_indices=turns,
                cascade_source=cell.cascade_source,
            )
        )
    return plan, requests


def combine_windows(parsed: Sequence[ParsedScore]) -> ParsedScore:
    """The minimum score over windows with status ok; if none is ok, the first window's failure."""
    scores = [p.score for p in parsed if p.status == OK and p.score is not None]
    return ParsedScore(min(scores), OK) if scores else parsed[0]


def _sum_or_none(values: Iterable[int | None]) -> int | None:
    values = list(values)
    return None if not values or any(v is None for v in values) else int(sum(values))


def _row(work: _SampleWork, cell: CellSettings, described: dict[str, str], shard: int) -> dict[str, Any]:
    sample, outputs = work.sample, work.outputs
    if work.plan.action == "skipped":
        parsed, raw, source = ParsedScore(None, SKIPPED_LONG_AUDIO), None, None
    else:
        parsed = combine_windows([resolve_score(o) for o in outputs])
        raw = WINDOW_SEPARATOR.join(o.text for o in outputs)[:RAW_OUTPUT_MAX_CHARS]
        source = "p_safe" if any(o.p_safe is not None for o in outputs) else "parsed"
    return {
        "dialogue_id": sample.dialogue_id,
        "variant_id": sample.sample_id,
        "category": sample.category,
        "severity": sample.severity,
        "turn_index": sample.turn_index,
        "n_turns": sample.n_turns,
        "judge": cell.spec.name,
        "modality": cell.modality,
        "transcript_source": cell.transcript_source or NO_TRANSCRIPT,
        "prompt": cell.prompt.name,
        "prompt_version": cell.prompt.version,
        "condition": cell.condition,
        "score": parsed.score,
        "parse_status": parsed.status,
        "score_source": source,
        "raw_output": raw,
        "latency_s": float(sum(o.latency_s for o in outputs)) if outputs else None,
        "n_input_tokens": _sum_or_none(o.n_input_tokens for o in outputs),
        "n_output_tokens": _sum_or_none(o.n_output_tokens for o in outputs),
        "long_audio_action": work.plan.action,
        "model": described.get("model", cell.spec.model),
        "model_revision": described.get("model_revision", cell.spec.revision),
        "shard": shard,
    }


def cell_settings(
    spec: JudgeSpec,
    modality: str,
    transcript_source: str | None,
    prompt: Prompt | str | Path,
    condition: str = "clean",
    audio_sample_rate: int = 16000,
) -> CellSettings:
    """Validate a judge cell: known condition, a modality the judge supports, a fitting transcript source."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r} for judge {spec.name!r}; this stage scores {CONDITIONS}")
    if modality not in spec.modalities:
        raise ValueError(f"judge {spec.name!r} does not support modality {modality!r}; it supports {spec.modalities}")
    if spec.long_audio not in LONG_AUDIO_POLICIES:
        raise ValueError(
            f"judge {spec.name!r}: unknown long_audio policy {spec.long_audio!r}; use {LONG_AUDIO_POLICIES}"
        )
    source = normalize_transcript_source(transcript_source)
    if modality == "audio" and source is not None:
        raise ValueError(f"modality 'audio' has no transcript source; got {source!r} for judge {spec.name!r}")
    if modality != "audio" and source is None:
        raise ValueError(
            f"modality {modality!r} of judge {spec.name!r} needs a transcript source ('gt', 'asr:<model>')"
        )
    cascade = spec.options.get("cascade_asr") if modality == "audio" else None
    if cascade and not str(cascade).startswith("asr:"):
        cascade = asr_source(str(cascade))
    return CellSettings(
        spec,
        modality,
        source,
        prompt if isinstance(prompt, Prompt) else load_prompt(prompt),
        condition,
        audio_sample_rate,
        cascade,
    )


def config_hash(cell: CellSettings, seed: int) -> str:
    """Hash of everything that determines a cell's scores (judge spec, prompt text, modality, source, ...)."""
    return stable_hash(
        {
            "judge": dataclasses.asdict(cell.spec),
            "prompt": cell.prompt.name,
            "prompt_version": cell.prompt.version,
            "prompt_content": cell.prompt.content_hash,
            "modality": cell.modality,
            "transcript_source": cell.transcript_source,
            "cascade_source": cell.cascade_source,
            "condition": cell.condition,
            "audio_sample_rate": cell.audio_sample_rate,
            "seed": seed,
        }
    )


def score_samples(
    samples: Iterable[Sample],
    cell: CellSettings,
    backend: JudgeBackend,
    shard: int = 0,
    progress: bool = False,
    total: int | None = None,
    load_audio: AudioLoader = dialogue_audio,
) -> list[dict[str, Any]]:
    """Score samples in batches of `spec.batch_size` requests; one row per sample, in input order."""
    from tqdm import tqdm

    batch_size = max(1, int(cell.spec.batch_size))
    works: list[_SampleWork] = []
    pending: list[tuple[_SampleWork, JudgeRequest]] = []

    def flush() -> None:
        outputs = backend.generate([request for _, request in pending])
        if len(outputs) != len(pending):
            raise RuntimeError(f"judge {cell.spec.name!r} returned {len(outputs)} outputs for {len(pending)} requests")
        for (work, _), output in zip(pending, outputs):
            work.outputs.append(output)
        pending.clear()

    for sample in tqdm(samples, total=total, disable=not progress, desc=f"{cell.spec.name} {cell.modality}"):
        plan, requests = _requests_for(sample, cell, load_audio)
        work = _SampleWork(sample, plan)
        works.append(work)
        for request in requests:
            pending.append((work, request))
            if len(pending) >= batch_size:
                flush()
    if pending:
        flush()
    described = backend.describe()
    return [_row(work, cell, described, shard) for work in works]


def scores_frame(rows: list[dict[str, Any]], cell: CellSettings, seed: int) -> pl.DataFrame:
    frame = pl.DataFrame(rows, schema=SCORE_SCHEMA)
    return with_provenance(frame, config_hash=config_hash(cell, seed), seed=seed)


def score_cell(
    manifest_paths: Sequence[str | Path],
    spec: JudgeSpec,
    modality: str,
    transcript_source: str | None,
    prompt_path: str | Path,
    condition: str,
    out_path: str | Path,
    shard: int,
    backend: JudgeBackend | None = None,
    audio_sample_rate: int = 16000,
    progress: bool = True,
    seed: int = 0,
) -> pl.DataFrame:
    """Score all samples of the manifests with one judge cell; write and return the scores table."""
    cell = cell_settings(spec, modality, transcript_source, prompt_path, condition, audio_sample_rate)
    backend = backend if backend is not None else BACKENDS.get(spec.backend)(spec)
    samples = [sample for path in manifest_paths for sample in Manifest.load(path).samples()]
    rows = score_samples(samples, cell, backend, shard=shard, progress=progress, total=len(samples))
    frame = scores_frame(rows, cell, seed)
    write_parquet(out_path, frame)
    return frame


def _resolve_clip(clip: str | None, base: Path) -> str:
    if clip is None:
        return ""
    path = Path(clip)
    return str(path if path.is_absolute() or path.exists() else base / path)


def sample_from_dialogue(dialogue_path: str | Path) -> Sample:
    """The safe original of a canonical `dialogue.json` as a Sample (ground-truth transcript, its clips)."""
    from lalm_judge.corpus import Dialogue

    dialogue_path = Path(dialogue_path)
    dialogue = Dialogue.load(dialogue_path)
    if dialogue.status != "ok":
        raise ValueError(f"dialogue {dialogue.dialogue_id} ({dialogue_path}) was not ingested: {dialogue.skip_reason}")
    return Sample(
        sample_id=original_id(dialogue.dialogue_id),
        dialogue_id=dialogue.dialogue_id,
        category=None,
        severity=0,
        turn_index=None,
        speakers=tuple(t.speaker for t in dialogue.turns),
        clips=tuple(_resolve_clip(t.clip, dialogue_path.parent) for t in dialogue.turns),
        gaps_s=tuple(dialogue.gaps_s()),
        sample_rate=dialogue.sample_rate,
        texts={GROUND_TRUTH: tuple(t.text for t in dialogue.turns)},
    )


def whole_file_audio(path: str | Path) -> AudioLoader:
    """An audio loader that uses one full-dialogue file, without turn boundaries, for every sample."""
    from lalm_judge.audio import read_audio

    def load(sample: Sample, sample_rate: int) -> tuple[np.ndarray, list[Window]]:
        waveform, _ = read_audio(path, sample_rate)
        return waveform, [Window(tuple(range(sample.n_turns)), 0, len(waveform))]

    return load


def score_one(
    spec: JudgeSpec,
    sample: Sample,
    modality: str = "text",
    prompt: Prompt | str | Path = "basic",
    transcript_source: str | None = GROUND_TRUTH,
    *,
    audio_path: str | Path | None = None,
    backend: JudgeBackend | None = None,
    audio_sample_rate: int = 16000,
) -> dict[str, Any]:
    """Score one sample ad hoc; `audio_path` replaces its assembled audio by one full-dialogue file."""
    if modality == "audio":
        transcript_source = None
    cell = cell_settings(spec, modality, transcript_source, prompt, "clean", audio_sample_rate)
    backend = backend if backend is not None else BACKENDS.get(spec.backend)(spec)
    loader = whole_file_audio(audio_path) if audio_path is not None else dialogue_audio
    return score_samples([sample], cell, backend, load_audio=loader)[0]


def load_judge_spec(config_path: str | Path, name: str) -> JudgeSpec:
    """The judge `name` from the `judges:` registry of a config YAML."""
    config_path = Path(config_path)
    if not config_path.is_file():
        raise FileNotFoundError(f"config file {config_path} does not exist; pass --config")
    judges = (yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}).get("judges") or {}
    if name not in judges:
        raise KeyError(f"judge {name!r} is not in the 'judges' registry of {config_path}; known: {sorted(judges)}")
    return JudgeSpec.from_config(name, judges[name])


def score_main(argv: Sequence[str] | None = None, config_path: str | Path = "config.yaml") -> int:
    """`lalm-judge score`: judge one canonical dialogue.json and print its score and parse status."""
    parser = argparse.ArgumentParser(prog="lalm-judge score", description=score_main.__doc__)
    parser.add_argument("--judge", required=True, help="judge name from the config's `judges:` registry")
    parser.add_argument("--dialogue", required=True, help="a canonical dialogue.json (results/corpus/<d>/)")
    parser.add_argument("--audio", help="a full-dialogue wav to use instead of the dialogue's turn clips")
    parser.add_argument("--modality", help="text, audio or audio_text (default: text, or audio_text with --audio)")
    parser.add_argument("--prompt", default="basic", help="prompt name in prompts/ or a prompt YAML path")
    parser.add_argument("--transcript-source", default=GROUND_TRUTH, help="transcript source for text modalities")
    parser.add_argument("--config", default=str(config_path), help="config YAML with the judge registry")
    args = parser.parse_args(argv)
    try:
        spec = load_judge_spec(args.config, args.judge)
    except (FileNotFoundError, KeyError) as err:
        print(f"error: {err.args[0]}", file=sys.stderr)
        return 2
    modality = args.modality or ("audio_text" if args.audio else "text")
    row = score_one(
        spec, sample_from_dialogue(args.dialogue), modality, args.prompt, args.transcript_source, audio_path=args.audio
    )
    score = "none" if row["score"] is None else f"{row['score']:.4f}"
    print(
        f"judge={row['judge']} modality={row['modality']} prompt={row['prompt_version']} "
        f"long_audio={row['long_audio_action']}"
    )
    print(f"score={score} status={row['parse_status']}")
    return 0
