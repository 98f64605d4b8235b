"""The benchmark as a Hugging Face dataset: `export_hf` writes a run's samples as parquet shards in the
layout of a Hub dataset repository, with a dataset card; `import_hf` turns such a folder back into an
`hf_benchmark` corpus (`lalm_judge.data.benchmark`) that the workflow judges without regenerating it.

    DIR/README.md                               dataset card (YAML header: license, features, splits, ...)
    DIR/data/<split>-00000-of-0000N.parquet     shards of at most `max_shard_mb`, row groups of `row_group_size`
    DIR/lalm_judge_export.json                  what was exported from where (counts, shards, versions)

The shards are written with pyarrow alone (no `datasets`, whose audio encoding needs torchcodec): the
`audio` column has the arrow type `datasets` gives an `Audio` feature and the shards carry its feature
metadata, so `datasets.load_dataset("parquet", data_dir=DIR)` reads it as audio. As `datasets` does, the
audio bytes are stored uncompressed with plain encoding and the other columns with snappy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from lalm_judge.audio.waveform import read_wav_bytes
from lalm_judge.core.dialogue import Dialogue, Turn
from lalm_judge.core.files import atomic_directory, package_versions, stable_hash, write_json
from lalm_judge.core.taxonomy import (
    SAFE_SEVERITY,
    InvalidIdentifier,
    VariantKey,
    original_id,
    validate_category,
    validate_dialogue_id,
)
from lalm_judge.data import benchmark, benchmark_tables
from lalm_judge.export.card import CardFacts, SplitInfo, dataset_card
from lalm_judge.export.features import (
    AudioColumn,
    Feature,
    arrow_schema,
    benchmark_features,
    decode_row,
    encode_row,
    leaf_columns,
)
from lalm_judge.export.rows import ExportError, RunResults, iter_rows, release_samples
from lalm_judge.export.terms import corpus_terms

log = logging.getLogger(__name__)

EXPORT_RECORD = "lalm_judge_export.json"
DATA_DIR = "data"
# datasets' own defaults: shards of at most 500 MB (`config.MAX_SHARD_SIZE`), and 100 rows per row group
# for audio, which keeps a row group of 30 s dialogues near 100 MB (the Hub viewer refuses ~300 MB).
DEFAULT_MAX_SHARD_MB = 500.0
DEFAULT_ROW_GROUP_SIZE = 100


@dataclass(frozen=True)
class ShardSettings:
    max_shard_mb: float = DEFAULT_MAX_SHARD_MB
    row_group_size: int = DEFAULT_ROW_GROUP_SIZE

    def __post_init__(self) -> None:
        if self.max_shard_mb <= 0 or self.row_group_size < 1:
            raise ValueError(f"shards need max_shard_mb > 0 and row_group_size >= 1, got {self}")


def _writer_options(features: Mapping[str, Feature]) -> dict[str, Any]:
    leaves = [path for name, f in features.items() for path in leaf_columns(name, f)]
    audio = {f"{name}.bytes" for name, f in features.items() if isinstance(f, AudioColumn)}
    return {
        "compression": {path: "none" if path in audio else "snappy" for path in leaves},
        "use_dictionary": [path for path in leaves if path not in audio],
        "column_encoding": dict.fromkeys(sorted(audio), "PLAIN"),
        "write_page_index": True,
    }


def _is_audio(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("bytes"), bytes)


def _row_bytes(row: Mapping[str, Any]) -> int:
    """About what a row adds to a shard: its audio bytes (stored as they are, in every audio column) and its
    other fields."""
    fields = {k: v for k, v in row.items() if not _is_audio(v)}
    audio = sum(len(v["bytes"]) for v in row.values() if _is_audio(v))
    return audio + len(json.dumps(fields, ensure_ascii=False))


def write_split(
    rows: Iterable[Mapping[str, Any]],
    features: Mapping[str, Feature],
    out_dir: Path,
    split: str,
    settings: ShardSettings,
) -> SplitInfo:
    """Write rows as `data/<split>-NNNNN-of-NNNNN.parquet` shards below `out_dir`, opening a new shard before
    a row would take the current one past `max_shard_mb` (a single larger row gets a shard of its own)."""
    schema = arrow_schema(features)
    options = _writer_options(features)
    limit = settings.max_shard_mb * 1e6
    data_dir = out_dir / DATA_DIR
    data_dir.mkdir(parents=True, exist_ok=True)
    partial: list[Path] = []
    batch: list[Mapping[str, Any]] = []
    writer: pq.ParquetWriter | None = None
    shard_bytes = num_bytes = num_examples = 0

    def flush() -> None:
        nonlocal num_bytes
        if batch:
            table = pa.Table.from_pylist(batch, schema=schema)
            writer.write_table(table, row_group_size=settings.row_group_size)
            num_bytes += table.nbytes
            batch.clear()

    for row in rows:
        size = _row_bytes(row)
        if writer is not None and shard_bytes + size > limit:
            flush()
            writer.close()
            writer = None
        if writer is None:
            partial.append(data_dir / f".{split}-{len(partial):05d}.partial")
            writer = pq.ParquetWriter(partial[-1], schema, **options)
            shard_bytes = 0
        batch.append(encode_row(row, features))
        shard_bytes += size
        num_examples += 1
        if len(batch) >= settings.row_group_size:
            flush()
    if writer is None:
        raise ExportError(f"split {split!r} has no rows")
    flush()
    writer.close()
    files = []
    for i, path in enumerate(partial):
        final = data_dir / f"{split}-{i:05d}-of-{len(partial):05d}.parquet"
        os.replace(path, final)
        files.append(f"{DATA_DIR}/{final.name}")
    return SplitInfo(split, num_examples, num_bytes, tuple(files))


def export_hf(
    results: str | Path,
    out_dir: str | Path,
    *,
    dialogue_ids: Sequence[str] | None = None,
    settings: ShardSettings = ShardSettings(),
    split: str = "test",
    run_config: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> SplitInfo:
    """Write the usable samples of a run's results (all its manifests, or those of `dialogue_ids`) to
    `out_dir` as a Hugging Face dataset with its card; `run_config` (the validated config of the run) adds
    the generation settings to the card. `out_dir` is replaced only if an earlier export wrote it."""
    run = RunResults(Path(results))
    ids = list(dialogue_ids) if dialogue_ids is not None else run.dialogue_ids()
    sample_rate, released = release_samples(run, ids)
    features = benchmark_features(sample_rate)
    n_samples = sum(len(d.rows) for d in released)
    with atomic_directory(out_dir, marker=EXPORT_RECORD) as tmp:
        rows = tqdm(iter_rows(released), total=n_samples, desc="export samples", unit="sample", disable=not progress)
        info = write_split(rows, features, tmp, split, settings)
        facts = CardFacts.from_rows([fields for d in released for fields, _ in d.rows], sample_rate)
        terms = corpus_terms((run_config or {}).get("corpus"), facts.corpus_formats)
        if not terms.known:
            log.warning(
                "the corpus states no licence or source (corpus.license, corpus.source): the dataset card says "
                "'%s' / '%s'; set them in the config and export again before releasing",
                terms.license,
                terms.source,
            )
        (tmp / "README.md").write_text(dataset_card(facts, features, info, run_config), encoding="utf-8")
        write_json(
            tmp / EXPORT_RECORD,
            {
                "results": str(run.results),
                "dialogues": [d.dialogue_id for d in released],
                "split": info.name,
                "num_examples": info.num_examples,
                "files": list(info.files),
                "max_shard_mb": settings.max_shard_mb,
                "row_group_size": settings.row_group_size,
                "package_versions": package_versions(),
            },
        )
    return info


def dataset_files(dataset_dir: str | Path) -> list[Path]:
    """The parquet shards of a dataset folder (a Hub repository layout or a folder of shards)."""
    files = sorted(p for p in Path(dataset_dir).rglob("*.parquet") if not p.name.startswith("."))
    if not files:
        raise ExportError(f"{dataset_dir} holds no parquet files; export one with 'lalm-judge export --format hf'")
    return files


def parquet_shard(path: Path) -> pq.ParquetFile:
    """One shard of a dataset folder, opened; ExportError naming it when it is not a parquet file."""
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise ExportError(f"{path} is not a readable parquet file ({' '.join(str(err).split())})") from None


def read_rows(files: Sequence[Path], features: Mapping[str, Feature]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every row of the shards (class labels as their names) with where it is ('<shard> row <n>', 0-based), checking
    that each shard has the benchmark's columns."""
    for path in files:
        shard = parquet_shard(path)
        missing = [name for name in features if name not in shard.schema_arrow.names]
        if missing:
            raise ExportError(f"{path} lacks the benchmark column(s) {missing}; it is not a lalm-judge benchmark")
        number = 0
        for batch in shard.iter_batches(batch_size=DEFAULT_ROW_GROUP_SIZE):
            for row in batch.to_pylist():
                try:
                    decoded = decode_row(row, features)
                except ValueError as err:
                    raise ExportError(f"{path} row {number} sample {row.get('sample_id')!r}: {err}") from None
                yield f"{path} row {number}", decoded
                number += 1


class UniqueSamples:
    """The rows' sample ids seen so far, each with where it was and a digest of each of its fields: a second row with
    an id is refused naming both rows and the fields in which they disagree. Two rows with one id would both be
    judged under its labels (a benign text under a severity-5 label, say), so an exact copy is refused too."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, dict[str, str]]] = {}

    def add(self, where: str, row: Mapping[str, Any]) -> None:
        digests = {name: stable_hash(_hashable(value)) for name, value in row.items()}
        first = self.seen.setdefault(row["sample_id"], (where, digests))
        if first[0] == where:
            return
        differ = [name for name in digests if digests[name] != first[1].get(name)]
        how = f"they differ in {', '.join(differ)}" if differ else "an exact copy"
        raise ExportError(
            f"{where}: sample id {row['sample_id']!r} is also {first[0]} ({how}); a benchmark holds each sample "
            "once: remove one of the two rows (a row whose content changed under a released id is not the release)"
        )


def _hashable(value: Any) -> Any:
    """A row field as JSON-able data for its digest (audio and other bytes by their sha256)."""
    if isinstance(value, bytes):
        return hashlib.sha256(value).hexdigest()
    if isinstance(value, Mapping):
        return {str(key): _hashable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_hashable(item) for item in value]
    return value


def _turn_bounds(row: Mapping[str, Any], n_samples: int, sample_rate: int, where: str) -> list[tuple[int, int]]:
    bounds = [
        (round(start * sample_rate), round(end * sample_rate))
        for start, end in zip(row["turn_start_s"], row["turn_end_s"], strict=True)
    ]
    if len(bounds) != row["n_turns"] or any(not 0 <= a <= b <= n_samples for a, b in bounds):
        raise ExportError(f"{where}: turn times {bounds} do not fit {row['n_turns']} turns in {n_samples} samples")
    return bounds


def _check_sample_id(row: Mapping[str, Any], where: str) -> None:
    validate_dialogue_id(row["dialogue_id"])
    if row["severity"] == SAFE_SEVERITY:
        expected = original_id(row["dialogue_id"])
    else:
        try:
            validate_category(row["category"], where)
        except InvalidIdentifier as err:
            raise ExportError(str(err)) from None
        expected = VariantKey(row["dialogue_id"], row["unsafe_turn_index"], row["category"], row["severity"]).variant_id
    if row["sample_id"] != expected:
        raise ExportError(f"{where}: sample id {row['sample_id']!r} does not match its labels ({expected!r})")


def _released_original(row: Mapping[str, Any], bounds: Sequence[tuple[int, int]], rate: int, source: str) -> Dialogue:
    turns = [
        Turn(
            index=i,
            speaker=row["speakers"][i],
            text=row["texts"][i],
            emotion=row["emotions"][i],
            start=a / rate,
            end=b / rate,
            boundary_method=row["turn_boundary_method"][i],
            boundary_confidence=row["turn_boundary_confidence"][i],
        )
        for i, (a, b) in enumerate(bounds)
    ]
    return Dialogue(row["dialogue_id"], turns, row["corpus_format"], source, rate)


def _released_variant(row: Mapping[str, Any], duration_s: float) -> dict[str, Any]:
    """The TTS-table row of a variant (its clip is set by the writer)."""
    t = row["unsafe_turn_index"]
    generation, speech = row["generation"], row["speech"]
    return {
        "dialogue_id": row["dialogue_id"],
        "variant_id": row["sample_id"],
        "turn_index": t,
        "n_turns": row["n_turns"],
        "speaker": row["speakers"][t],
        "original_text": row["original_text"],
        "original_emotion": row["original_emotion"],
        "category": row["category"],
        "severity": row["severity"],
        "text": row["texts"][t],
        "emotion": row["emotions"][t],
        "generator": generation["generator"],
        "model": generation["model"],
        "prompt_version": generation["prompt_version"],
        "seed": generation["seed"],
        "status": "ok",
        "attempts": generation["attempts"],
        "error": None,
        "duration_s": duration_s,
        "gain_db": speech["gain_db"],
        "tts_engine": speech["tts_engine"],
        "tts_model": speech["tts_model"],
        "tts_revision": speech["tts_revision"],
    }


def import_hf(dataset_dir: str | Path, out_dir: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Turn an exported dataset folder into an `hf_benchmark` corpus at `out_dir` (replaced only if an earlier
    import wrote it); return the corpus index. Rows may come in any order and from any number of shards."""
    files = dataset_files(dataset_dir)
    features = benchmark_features(0)
    total = sum(parquet_shard(p).metadata.num_rows for p in files)
    with atomic_directory(out_dir, marker=benchmark.INDEX) as tmp:
        writer: benchmark_tables.BenchmarkWriter | None = None
        rows = tqdm(read_rows(files, features), total=total, desc="import samples", unit="sample", disable=not progress)
        samples = UniqueSamples()
        for place, row in rows:
            where = f"{place} sample {row['sample_id']!r}"
            _check_sample_id(row, where)
            samples.add(place, row)
            audio, rate = read_wav_bytes(row["audio"]["bytes"], where)
            writer = writer or benchmark_tables.BenchmarkWriter(tmp, rate)
            if rate != writer.sample_rate:
                raise ExportError(f"{where}: audio at {rate} Hz, the dataset's earlier rows at {writer.sample_rate} Hz")
            bounds = _turn_bounds(row, len(audio), rate, where)
            original = row["severity"] == SAFE_SEVERITY
            turns = range(row["n_turns"]) if original else [row["unsafe_turn_index"]]
            writer.add_transcripts(
                row["dialogue_id"],
                [
                    {
                        "sample_id": row["sample_id"],
                        "turn_index": t,
                        "source": entry["source"],
                        "text": entry["texts"][t],
                    }
                    for entry in row["asr_transcripts"]
                    for t in turns
                ],
            )
            if original:
                writer.add_original(
                    _released_original(row, bounds, rate, str(dataset_dir)), [audio[a:b] for a, b in bounds]
                )
            else:
                a, b = bounds[row["unsafe_turn_index"]]
                writer.add_variant(_released_variant(row, (b - a) / rate), audio[a:b])
        if writer is None:
            raise ExportError(f"the parquet files of {dataset_dir} hold no rows")
        return writer.close(source=str(dataset_dir))
