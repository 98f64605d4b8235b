"""The safety track's sample viewer, `results/report/samples/` (`lalm_judge.report.viewer` has the layout): every
sample of the run with every judge cell's raw answer, parsed score and status, its full-dialogue audio and its
control versions, read from the score tables, the manifests and the ASR tables.

Data files (each loaded only when the page needs it, so the page stays fast at paper scale):

- `catalog`: the judge cells (their keys, and the columns whose value is one per cell and shard: model,
  revision, provenance, ...), the statuses found, and every scored sample (dialogue, category, severity, unsafe
  or target turn, the clean sample it belongs to); per condition, the order of its samples.
- `cells/<n>`: one cell's scores and statuses, in its condition's sample order (what the list filters and sorts).
- `dialogues/<d>`: the dialogue's turns (speaker, emotion, clip, duration, text per transcript source with its
  WER), each variant's replaced turn, and per clean sample its versions under the control conditions: which turn
  each changes, the audio of that turn as segments (a clip on disk, silence, or a clip this module writes), and
  its transcripts under the condition.
- `rows/<d>/<clean sample>`: every score row of the sample and of its control versions, with every column the
  score tables have that varies within a table (raw answer, score, status, latency, token counts, ...), whatever
  columns a run's tables carry.

Audio is assembled on demand from the clips on disk (the page plays a dialogue's turn clips in order, with its
pauses). The viewer writes only the changed turn of the control versions whose audio exists nowhere else (masked,
noise, babble), made by the function the judge jobs use with the same settings and seed, as MP3 listening copies at
the rate the judges hear; the score tables are read twice (scores first, then the rows shard by shard), so memory
follows a shard, not the run.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import soundfile as sf
from tqdm import tqdm

from lalm_judge.analysis.engine import CELL_KEYS
from lalm_judge.audio import waveform
from lalm_judge.audio.controls import ControlSettings
from lalm_judge.core.files import atomic_path
from lalm_judge.core.tables import ASR, CONDITION_ASR, METRIC_INPUT
from lalm_judge.core.taxonomy import clean_reference_id, original_id
from lalm_judge.core.vocabulary import BABBLE, INJECTION, SILENCE, TTS_CONTROL
from lalm_judge.manifest.conditions import (
    ConditionSample,
    babble_pool,
    condition_samples,
    target_turn_audio,
)
from lalm_judge.manifest.samples import Manifest
from lalm_judge.report.viewer import (
    DECIMALS,
    PER_ROW,
    CellFile,
    cell_constants,
    cell_id,
    columnar,
    copy_assets,
    file_url,
    rounded,
    split_columns,
    to_json,
    write_data,
    write_json_text,
)

# What a score row says about its sample; the catalog holds it once per sample.
SAMPLE_KEYS = ("dialogue_id", "variant_id", "category", "severity", "turn_index", "n_turns")
# Columns every row of the viewer carries, whether or not they vary within a table.
ROW_COLUMNS = ("score", "parse_status", "raw_output")
# A score table lies in its judge job's folder: results/scores/<judge>/shard<k>/<cell>.parquet (`workflow.plan`).
_SHARD_FOLDER = re.compile(r"(?:^|/)shard(\d+)/")


@dataclass
class ScoreSummary:
    """What the first pass over the score tables found: their cells, the samples (in the order first seen), the
    statuses, the columns that vary within a table, each dialogue's shard, and per table its rows as
    (sample number, score, status number)."""

    files: list[CellFile] = field(default_factory=list)
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    sample_index: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    varying: set[str] = field(default_factory=set)
    dialogue_shards: dict[str, int] = field(default_factory=dict)
    arrays: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)

    def add_samples(self, frame: pl.DataFrame) -> np.ndarray:
        """The sample numbers of a table's rows (new samples added)."""
        ids = frame["variant_id"].to_list()
        for i, sample in enumerate(ids):
            if sample not in self.sample_index:
                self.sample_index[sample] = len(self.samples)
                self.samples.append(dict(zip(SAMPLE_KEYS, frame.row(i)[: len(SAMPLE_KEYS)])))
        return np.fromiter((self.sample_index[s] for s in ids), dtype=np.int32, count=len(ids))

    def status_codes(self, statuses: pl.Series) -> np.ndarray:
        for status in statuses.drop_nulls().unique().sort().to_list():
            self.statuses.setdefault(status, len(self.statuses))
        return statuses.replace_strict(self.statuses, default=-1, return_dtype=pl.Int16).to_numpy()


def read_scores(path: str, exclude: Sequence[str] = ()) -> pl.DataFrame:
    """A score table (checked against the metric stage's input schema), without the columns `exclude`."""
    names = [name for name in pl.read_parquet_schema(path) if name not in exclude]
    frame = METRIC_INPUT.conform(pl.read_parquet(path, columns=names), f"score table {path!r}", keep_extra=True)
    return frame.collect()


def _file_shard(path: str) -> int:
    matches = _SHARD_FOLDER.findall(Path(path).as_posix())
    if not matches:
        raise ValueError(
            f"score table {os.fspath(path)!r} is not in a shard folder (results/scores/<judge>/shard<k>/<cell>.parquet)"
        )
    return int(matches[-1])


def summarize_scores(paths: Sequence[str | os.PathLike], progress: bool = True) -> ScoreSummary:
    """First pass (without the raw answers): per score table its cell, the columns constant within it and its
    scores; the samples and statuses."""
    summary = ScoreSummary()
    for path in tqdm(sorted(map(os.fspath, paths)), desc="viewer: score tables", disable=not progress):
        frame = read_scores(path, exclude=["raw_output"]).select(*SAMPLE_KEYS, pl.exclude(SAMPLE_KEYS))
        if frame.height == 0:
            continue
        keys = frame.row(0, named=True)
        cell, shard = cell_id(keys), _file_shard(path)
        extra = [n for n in frame.columns if n not in (*CELL_KEYS, *SAMPLE_KEYS, *ROW_COLUMNS)]
        constant, varying = split_columns(frame, extra)
        summary.varying |= varying | {c for c in PER_ROW if c in frame.columns}
        summary.files.append(CellFile(path, cell, shard, constant))
        summary.cells.setdefault(cell, {key: keys[key] for key in CELL_KEYS})
        score = frame["score"].cast(pl.Float32).fill_null(np.nan).to_numpy()
        summary.arrays.append((summary.add_samples(frame), score, summary.status_codes(frame["parse_status"])))
        for dialogue in frame["dialogue_id"].unique().to_list():
            summary.dialogue_shards.setdefault(dialogue, shard)
    return summary


def _sample_order(samples: Iterable[str]) -> list[str]:
    return sorted(samples, key=lambda s: (s.split(".", 1)[0], s))


@dataclass
class CellTable:
    """The scores of one cell: the files it is read from, its condition, its rows."""

    files: list[int] = field(default_factory=list)
    n: int = 0


def _cell_tables(summary: ScoreSummary) -> dict[str, CellTable]:
    tables: dict[str, CellTable] = defaultdict(CellTable)
    for number, (item, (samples, _, _)) in enumerate(zip(summary.files, summary.arrays)):
        tables[item.cell].files.append(number)
        tables[item.cell].n += len(samples)
    return tables


def build_catalog(summary: ScoreSummary) -> dict[str, Any]:
    """The catalog: cells, statuses, samples and, per condition, the order of its samples (by sample index)."""
    sample_ids = _sample_order(summary.sample_index)
    index = {sample: i for i, sample in enumerate(sample_ids)}
    rows = [summary.samples[summary.sample_index[s]] for s in sample_ids]
    samples = columnar(rows, SAMPLE_KEYS[2:])
    samples["dialogue_id"] = [row["dialogue_id"] for row in rows]
    samples["id"] = sample_ids
    samples["clean"] = [index.get(clean_reference_id(s), index[s]) for s in sample_ids]
    constants = cell_constants(summary.files, summary.varying)
    tables = _cell_tables(summary)
    cells = [
        {"id": cell, **summary.cells[cell], "n": tables[cell].n, "fixed": constants.get(cell, {})}
        for cell in sorted(summary.cells, key=lambda c: (summary.cells[c]["condition"] != "clean", c))
    ]
    # Samples are numbered in the order first seen while reading, and in the catalog by id.
    renumber = np.array([index[s] for s in summary.sample_index], dtype=np.int32)
    scored: dict[str, set[int]] = defaultdict(set)
    for item, (numbers, _, _) in zip(summary.files, summary.arrays):
        scored[summary.cells[item.cell]["condition"]].update(renumber[np.unique(numbers)].tolist())
    conditions = sorted(scored, key=lambda c: (c != "clean", c))
    return {
        "track": "safety",
        "cells": cells,
        "statuses": sorted(summary.statuses),
        "conditions": conditions,
        "samples": samples,
        "orders": {c: sorted(scored[c]) for c in conditions},
    }


def write_cells(viewer_dir: Path, summary: ScoreSummary, catalog: Mapping[str, Any], progress: bool = True) -> None:
    """`cells/<n>`: each cell's scores and status codes (index into the catalog's statuses, -1: not scored) in
    its condition's sample order."""
    index = {sample: i for i, sample in enumerate(catalog["samples"]["id"])}
    renumber = np.array([index[s] for s in summary.sample_index], dtype=np.int64)
    recode = np.array([catalog["statuses"].index(s) for s in summary.statuses] + [-1], dtype=np.int16)
    position = {}
    for condition, order in catalog["orders"].items():
        position[condition] = np.full(len(index), -1, dtype=np.int64)
        position[condition][order] = np.arange(len(order))
    tables = _cell_tables(summary)
    for number, cell in enumerate(tqdm(catalog["cells"], desc="viewer: cells", disable=not progress)):
        size = len(catalog["orders"][cell["condition"]])
        score, status = np.full(size, np.nan), np.full(size, -1, dtype=np.int16)
        for file in tables[cell["id"]].files:
            samples, scores, statuses = summary.arrays[file]
            where = position[cell["condition"]][renumber[samples]]
            score[where], status[where] = scores, recode[statuses]
        shown = pl.Series(score).round(DECIMALS).fill_nan(None).to_list()
        write_data(viewer_dir, f"cells/{number}", {"score": shown, "status": status.tolist()})


# ---- dialogues: turns, variants and control versions -------------------------------------------------------


DURATION_DECIMALS = 3
# The control versions' changed turns are listening copies: MP3 (libsndfile's LAME encoder), variable bit rate
# at this quality (0 best, 1 smallest; about 35 kbit/s for speech at 16 kHz).
MP3_COMPRESSION = 0.75


def _durations(paths: Iterable[str]) -> dict[str, float]:
    """Each clip's duration, from its header."""
    return {path: round(sf.info(path).duration, DURATION_DECIMALS) for path in sorted(set(paths))}


def _wer_tables(paths: Sequence[str | os.PathLike]) -> dict[str, dict[str, dict[tuple[str, int], tuple]]]:
    """dialogue -> transcript source -> (sample, turn) -> (text, WER), from results/asr/<model>/<d>.parquet."""
    out: dict[str, dict[str, dict[tuple[str, int], tuple]]] = defaultdict(dict)
    for path in paths:
        frame = ASR.read(path)
        source = f"asr:{Path(path).parent.name}"
        for row in frame.iter_rows(named=True):
            table = out[row["dialogue_id"]].setdefault(source, {})
            table[(row["sample_id"], row["turn_index"])] = (row["text"], rounded(row["wer"]))
    return out


def _condition_tables(paths: Sequence[str | os.PathLike]) -> dict[tuple[str, str], dict[str, dict[str, tuple]]]:
    """(dialogue, condition) -> source -> sample -> (text, WER), from results/asr/<m>/conditions/<d>.parquet."""
    out: dict[tuple[str, str], dict[str, dict[str, tuple]]] = defaultdict(dict)
    for path in paths:
        frame = CONDITION_ASR.read(path)
        source = f"asr:{Path(path).parents[1].name}"
        for row in frame.iter_rows(named=True):
            table = out[(row["dialogue_id"], row["condition"])].setdefault(source, {})
            table[row["sample_id"]] = (row["text"], rounded(row["wer"]))
    return out


@dataclass
class DialogueInputs:
    """What the dialogue files are made of, beyond the manifests."""

    viewer_dir: Path
    asr: Mapping[str, Mapping[str, Mapping[tuple[str, int], tuple]]]
    condition_asr: Mapping[tuple[str, str], Mapping[str, Mapping[str, tuple]]]
    settings: ControlSettings
    seed: int
    # dialogue -> condition -> the sample ids scored under it
    scored: Mapping[str, Mapping[str, set[str]]]
    # dialogue -> the manifests whose turns make its babble (its shard's)
    babble: Mapping[str, Sequence[Manifest]]
    # dialogue -> its shard (the score tables' `shard` column)
    shards: Mapping[str, int]
    control_audio: bool = True
    listening_rate: int | None = None


def _texts(texts: Mapping[str, str], wer: Mapping[str, tuple], key: tuple[str, int]) -> dict[str, Any]:
    return {
        "texts": dict(texts),
        "wer": {source: table[key][1] for source, table in wer.items() if key in table},
    }


def _turns(manifest: Manifest, inputs: DialogueInputs, durations: Mapping[str, float]) -> list[dict[str, Any]]:
    wer = inputs.asr.get(manifest.dialogue_id, {})
    original = original_id(manifest.dialogue_id)
    return [
        {
            "speaker": turn["speaker"],
            "emotion": turn["emotion"],
            "clip": file_url(turn["clip"], inputs.viewer_dir),
            "duration": durations[turn["clip"]],
            **_texts(turn["texts"], wer, (original, turn["index"])),
        }
        for turn in manifest.data["turns"]
    ]


def _variants(manifest: Manifest, inputs: DialogueInputs, durations: Mapping[str, float]) -> dict[str, Any]:
    wer = inputs.asr.get(manifest.dialogue_id, {})
    return {
        v["variant_id"]: {
            "turn": v["turn_index"],
            "category": v["category"],
            "severity": v["severity"],
            "emotion": v["emotion"],
            "clip": file_url(v["clip"], inputs.viewer_dir),
            "duration": durations[v["clip"]],
            **_texts(v["texts"], wer, (v["variant_id"], v["turn_index"])),
        }
        for v in manifest.data["variants"]
        if v["status"] == "ok"
    }


def _clip_segment(path: str, inputs: DialogueInputs, durations: Mapping[str, float]) -> dict[str, Any]:
    return {"clip": file_url(path, inputs.viewer_dir), "duration": durations[path]}


def rendered_turn_path(viewer_dir: Path, condition: str, dialogue_id: str, sample_id: str) -> Path:
    return viewer_dir / "audio" / condition / dialogue_id / f"{sample_id}.mp3"


def write_listening_copy(path: Path, audio: np.ndarray, sample_rate: int) -> None:
    """An MP3 of a changed turn (deterministic bytes for equal input; libsndfile's LAME encoder)."""
    with atomic_path(path) as tmp:
        sf.write(
            tmp,
            np.clip(audio, -1.0, 1.0),
            sample_rate,
            format="MP3",
            subtype="MPEG_LAYER_III",
            compression_level=MP3_COMPRESSION,
        )


def _target_segments(
    item: ConditionSample, inputs: DialogueInputs, durations: Mapping[str, float], renders: list
) -> list[dict[str, Any]] | None:
    """The changed turn's audio as the page plays it: clips on disk, silence, or a clip to write here (added to
    `renders`; None when the control audio is not written)."""
    sample, condition, manifest_id = item.sample, item.condition, item.sample.dialogue_id
    clip = sample.clips[item.target_turn]
    if condition.kind == SILENCE:
        return [{"silence": durations[clip]}]
    if condition.kind == INJECTION:
        pause = {"silence": round(inputs.settings.injection_pause_s, DURATION_DECIMALS)}
        return [_clip_segment(clip, inputs, durations), pause, _clip_segment(item.injection_clip, inputs, durations)]
    if condition.kind == TTS_CONTROL:
        return [_clip_segment(clip, inputs, durations)]
    path = rendered_turn_path(inputs.viewer_dir, str(condition), manifest_id, sample.sample_id)
    if not inputs.control_audio:
        return None
    renders.append((item, path))
    # Masking and noise keep the turn's length.
    return [{"clip": file_url(path, inputs.viewer_dir), "duration": durations[clip]}]


def _version(
    item: ConditionSample, inputs: DialogueInputs, durations: Mapping[str, float], renders: list
) -> dict[str, Any]:
    version: dict[str, Any] = {"condition": str(item.condition), "id": item.sample.sample_id, "target": None}
    if item.target_turn is None:
        return version
    target = item.target_turn
    transcripts = inputs.condition_asr.get((item.sample.dialogue_id, str(item.condition)), {})
    version["target"] = target
    version["segments"] = _target_segments(item, inputs, durations, renders)
    version["texts"] = {source: texts[target] for source, texts in item.sample.texts.items()}
    sample_id = item.sample.sample_id
    version["wer"] = {source: table[sample_id][1] for source, table in transcripts.items() if sample_id in table}
    return version


def _versions(
    manifest: Manifest, inputs: DialogueInputs, durations: Mapping[str, float], renders: list
) -> dict[str, list]:
    """Per clean sample, its versions under every condition that scored the dialogue (clean first)."""
    scored = inputs.scored.get(manifest.dialogue_id, {})
    versions: dict[str, list] = defaultdict(list)
    for condition in sorted(scored, key=lambda c: (c != "clean", c)):
        transcripts = {
            source: {sample: text for sample, (text, _) in table.items()}
            for source, table in inputs.condition_asr.get((manifest.dialogue_id, condition), {}).items()
        }
        for item in condition_samples(manifest, condition, transcripts):
            if item.sample.sample_id in scored[condition]:
                clean = clean_reference_id(item.sample.sample_id)
                versions[clean].append(_version(item, inputs, durations, renders))
    return dict(versions)


def _clips_used(manifest: Manifest) -> list[str]:
    clips = [t["clip"] for t in manifest.data["turns"]]
    clips += [v["clip"] for v in manifest.data["variants"] if v["status"] == "ok"]
    clips += [row["clip"] for row in manifest.data.get("controls", [])]
    return clips


def _render(item: ConditionSample, path: Path, inputs: DialogueInputs) -> None:
    """Write the changed turn of a control version as the judge jobs make it (same function, settings, seed)."""
    dialogue = item.sample.dialogue_id
    pool = babble_pool(inputs.babble[dialogue], dialogue) if item.condition.kind == BABBLE else ()
    audio = target_turn_audio(item, inputs.settings, inputs.seed, pool)[item.target_turn]
    rate = item.sample.sample_rate
    if inputs.listening_rate and inputs.listening_rate < rate:
        audio, rate = waveform.resample(audio, rate, inputs.listening_rate), inputs.listening_rate
    write_listening_copy(path, audio, rate)


def dialogue_payload(manifest: Manifest, inputs: DialogueInputs, encoder: Executor) -> dict[str, Any]:
    """The dialogue's file; the control versions' changed turns are written by `encoder` meanwhile."""
    durations = _durations(_clips_used(manifest))
    renders: list[tuple[ConditionSample, Path]] = []
    versions = _versions(manifest, inputs, durations, renders)
    for done in [encoder.submit(_render, item, path, inputs) for item, path in renders]:
        done.result()
    return {
        "id": manifest.dialogue_id,
        "shard": inputs.shards.get(manifest.dialogue_id),
        "sample_rate": manifest.data["sample_rate"],
        "gaps": [rounded(g) for g in manifest.data["gaps_s"]],
        "sources": manifest.data.get("transcript_sources", []),
        "warnings": manifest.data.get("warnings", []),
        "turns": _turns(manifest, inputs, durations),
        "variants": _variants(manifest, inputs, durations),
        "versions": versions,
    }


# ---- rows: every score row of a sample and its versions ------------------------------------------------------


def _rounded_floats(frame: pl.DataFrame) -> pl.DataFrame:
    floats = [name for name, dtype in frame.schema.items() if dtype.is_float()]
    return frame.with_columns(pl.col(floats).round(DECIMALS).fill_nan(None)) if floats else frame


def _shard_rows(files: Sequence[CellFile], columns: Sequence[str], cell_index: Mapping[str, int]) -> pl.DataFrame:
    frames = []
    for item in files:
        frame = read_scores(item.path)
        present = [c for c in columns if c in frame.columns]
        frames.append(
            frame.select("dialogue_id", pl.col("variant_id").alias("sample"), *present).with_columns(
                cell=pl.lit(cell_index[item.cell], pl.Int32)
            )
        )
    rows = pl.concat(frames, how="diagonal_relaxed")
    return rows.with_columns(pl.lit(None).alias(c) for c in columns if c not in rows.columns)


# Rows files are grouped for this many dialogues at a time (a shard's rows are read at once) and serialized this
# many at a time (polars writes their JSON): bounds the memory of a paper-scale build (docs/benchmarks.md).
ROWS_DIALOGUES = 2
ROWS_CHUNK = 256


def _grouped_rows(rows: pl.DataFrame, columns: Sequence[str]) -> pl.DataFrame:
    """One row per clean sample: its dialogue, the ids of the samples of its rows, and per column the rows' values."""
    return (
        rows.sort("clean", "sample", "cell")
        .group_by("clean", maintain_order=True)
        .agg(
            pl.col("dialogue_id").first(),
            pl.col("sample").unique(maintain_order=True).alias("samples"),
            (pl.col("sample").rank("dense") - 1).cast(pl.Int32).alias("sample"),
            pl.col("cell"),
            *(pl.col(c) for c in columns),
        )
    )


def write_rows(
    viewer_dir: Path, summary: ScoreSummary, cell_index: Mapping[str, int], writer: Executor, progress: bool = True
) -> int:
    """Second pass, shard by shard: `rows/<d>/<clean sample>`, every score row of the sample and of its control
    versions, written (packed) by `writer`; return the files written."""
    columns = [*ROW_COLUMNS, *sorted(summary.varying)]
    clean = pl.DataFrame(
        {"sample": list(summary.sample_index), "clean": [clean_reference_id(s) for s in summary.sample_index]}
    )
    by_shard: dict[int, list[CellFile]] = defaultdict(list)
    for item in summary.files:
        by_shard[item.part].append(item)
    prefix = '{"columns":' + to_json(columns) + ","
    written = 0
    for shard in tqdm(sorted(by_shard), desc="viewer: rows by shard", disable=not progress):
        rows = _rounded_floats(_shard_rows(by_shard[shard], columns, cell_index).join(clean, on="sample", how="left"))
        dialogues = sorted(rows["dialogue_id"].unique().to_list())
        for start in range(0, len(dialogues), ROWS_DIALOGUES):
            part = rows.filter(pl.col("dialogue_id").is_in(dialogues[start : start + ROWS_DIALOGUES]))
            for chunk in _grouped_rows(part, columns).iter_slices(ROWS_CHUNK):
                bodies = chunk.select(pl.exclude("clean", "dialogue_id")).write_ndjson().split("\n")
                keys = [f"rows/{d}/{sample}" for d, sample in chunk.select("dialogue_id", "clean").iter_rows()]
                done = [writer.submit(write_json_text, viewer_dir, k, prefix + b[1:]) for k, b in zip(keys, bodies)]
                for future in done:
                    future.result()
                written += len(keys)
        del rows
    return written


# ---- the whole viewer ----------------------------------------------------------------------------------------


def _scored_by_dialogue(catalog: Mapping[str, Any]) -> dict[str, dict[str, set[str]]]:
    """dialogue -> condition -> the sample ids scored under it."""
    samples = catalog["samples"]
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for condition, order in catalog["orders"].items():
        for s in order:
            out[samples["dialogue_id"][s]][condition].add(samples["id"][s])
    return out


def _babble_manifests(manifests: Mapping[str, Manifest], shards: Mapping[str, int]) -> dict[str, list[Manifest]]:
    by_shard: dict[int | None, list[Manifest]] = defaultdict(list)
    for dialogue, manifest in manifests.items():
        by_shard[shards.get(dialogue)].append(manifest)
    return {dialogue: by_shard[shards.get(dialogue)] for dialogue in manifests}


@dataclass(frozen=True)
class SampleViewerInputs:
    """The tables the sample viewer reads, and what makes the control versions' audio (`controls`, `seed`)."""

    score_paths: Sequence[str | os.PathLike]
    manifest_paths: Sequence[str | os.PathLike]
    asr_paths: Sequence[str | os.PathLike]
    condition_asr_paths: Sequence[str | os.PathLike]
    # The config's `controls` section (its audio settings: mask window, babble talkers, injection pause).
    controls: Mapping[str, Any]
    seed: int
    # Threads that encode the control versions' audio and compress the data files.
    threads: int = 1
    # Write the changed turns of the masked, noise and babble versions (without, their pages show transcripts and
    # scores but no audio; the encoding is most of the build's time at paper scale, docs/benchmarks.md).
    control_audio: bool = True
    # The rate the judges hear (`evaluation.audio_sample_rate`): those turns are written at it where the manifest
    # rate is higher (what the judges heard, at two thirds of the encoding time from 24 kHz).
    listening_rate: int | None = None
    progress: bool = True


def write_dialogues(
    viewer_dir: Path,
    inputs: SampleViewerInputs,
    summary: ScoreSummary,
    catalog: Mapping[str, Any],
    workers: Executor,
    only: Collection[str] | None = None,
) -> list[str]:
    """`dialogues/<d>` of every usable dialogue (of `only`, when given) and their control versions' audio;
    return the dialogues written."""
    manifests = {m.dialogue_id: m for m in map(Manifest.load, inputs.manifest_paths) if m.usable}
    dialogue_inputs = DialogueInputs(
        viewer_dir,
        _wer_tables(inputs.asr_paths),
        _condition_tables(inputs.condition_asr_paths),
        ControlSettings.from_config(inputs.controls),
        inputs.seed,
        _scored_by_dialogue(catalog),
        _babble_manifests(manifests, summary.dialogue_shards),
        summary.dialogue_shards,
        inputs.control_audio,
        inputs.listening_rate,
    )
    chosen = sorted(d for d in manifests if only is None or d in only)
    for dialogue in tqdm(chosen, desc="viewer: dialogues", disable=not inputs.progress):
        payload = dialogue_payload(manifests[dialogue], dialogue_inputs, workers)
        write_data(viewer_dir, f"dialogues/{dialogue}", payload)
    return chosen


def write_sample_viewer(inputs: SampleViewerInputs, out_dir: str | os.PathLike) -> Path:
    """Write the safety track's sample viewer into out_dir (module docstring); return its index.html."""
    viewer_dir, progress = Path(out_dir), inputs.progress
    summary = summarize_scores(inputs.score_paths, progress)
    catalog = build_catalog(summary)
    write_cells(viewer_dir, summary, catalog, progress)
    cell_index = {cell["id"]: i for i, cell in enumerate(catalog["cells"])}
    # Encoding audio and compressing data release the GIL: threads share that work.
    with ThreadPoolExecutor(max(1, inputs.threads)) as workers:
        catalog["dialogues"] = write_dialogues(viewer_dir, inputs, summary, catalog, workers)
        write_rows(viewer_dir, summary, cell_index, workers, progress)
    write_data(viewer_dir, "catalog", catalog)
    return copy_assets(viewer_dir, "safety")
