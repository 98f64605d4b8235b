"""The columns of the released benchmark, declared once, and their three spellings: the arrow schema of the
parquet shards, the Hugging Face `datasets` features stored in the shards' schema metadata (key
`huggingface`, the form `datasets.Features.to_dict` gives, which makes the `audio` column an `Audio`
feature), and the `dataset_info.features` list of the dataset card's YAML header.

`datasets` uses the metadata only where its arrow type equals the field's, so the types here are exactly
those `datasets` writes: `list<item: ...>`, the audio struct `<bytes: binary, path: string>` in this order, and
int64 for a `ClassLabel` (`label`, `category`, `severity`: the index of the name; `encode_row` and `decode_row`
convert between the names the stages use and the indices the shards hold).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lalm_judge.core.taxonomy import CATEGORIES, SAFE_SEVERITY, SEVERITIES

_ARROW_SCALARS = {
    "string": pa.string(),
    "int8": pa.int8(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "binary": pa.binary(),
}


@dataclass(frozen=True)
class Scalar:
    dtype: str


@dataclass(frozen=True)
class ListOf:
    item: Feature


@dataclass(frozen=True)
class Struct:
    fields: Mapping[str, Feature]


@dataclass(frozen=True)
class AudioColumn:
    sampling_rate: int


@dataclass(frozen=True)
class ClassLabelColumn:
    """A `datasets.ClassLabel`: the shards hold the index of the name (null stays null)."""

    names: tuple[str, ...]

    def encode(self, value: Any) -> int | None:
        if value is None:
            return None
        name = str(value)
        if name not in self.names:
            raise ValueError(f"{value!r} is not one of the class labels {list(self.names)}")
        return self.names.index(name)

    def decode(self, value: int | str | None) -> str | None:
        """The name of an index; a name as it is (releases written before the class labels hold names)."""
        if value is None:
            return None
        if isinstance(value, str):
            return self.names[self.encode(value)]
        if not 0 <= value < len(self.names):
            raise ValueError(f"class label {value} is outside 0-{len(self.names) - 1} ({list(self.names)})")
        return self.names[value]


Feature = Scalar | ListOf | Struct | AudioColumn | ClassLabelColumn
AUDIO_STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def arrow_type(feature: Feature) -> pa.DataType:
    match feature:
        case Scalar(dtype):
            return _ARROW_SCALARS[dtype]
        case ListOf(item):
            return pa.list_(arrow_type(item))
        case Struct(fields):
            return pa.struct([(name, arrow_type(f)) for name, f in fields.items()])
        case AudioColumn():
            return AUDIO_STRUCT
        case ClassLabelColumn():
            return pa.int64()
    raise TypeError(f"not a feature: {feature!r}")


def hf_feature(feature: Feature) -> dict[str, Any]:
    """The `datasets.Features.to_dict` form of one feature."""
    match feature:
        case Scalar(dtype):
            return {"dtype": dtype, "_type": "Value"}
        case ListOf(item):
            return {"feature": hf_feature(item), "_type": "List"}
        case Struct(fields):
            return {name: hf_feature(f) for name, f in fields.items()}
        case AudioColumn(rate):
            return {"sampling_rate": rate, "_type": "Audio"}
        case ClassLabelColumn(names):
            return {"names": list(names), "_type": "ClassLabel"}
    raise TypeError(f"not a feature: {feature!r}")


def card_feature(name: str | None, feature: Feature) -> dict[str, Any]:
    """One entry of the dataset card's `dataset_info.features` list (the form `datasets` reads back)."""
    named = {} if name is None else {"name": name}
    match feature:
        case Scalar(dtype):
            return {**named, "dtype": dtype}
        case ListOf(Scalar(dtype)):
            return {**named, "list": dtype}
        case ListOf(item):
            inner = card_feature(None, item)
            return {**named, "list": inner.get("struct", inner)}
        case Struct(fields):
            return {**named, "struct": [card_feature(n, f) for n, f in fields.items()]}
        case AudioColumn(rate):
            return {**named, "dtype": {"audio": {"sampling_rate": rate}}}
        case ClassLabelColumn(names):
            return {**named, "dtype": {"class_label": {"names": {str(i): n for i, n in enumerate(names)}}}}
    raise TypeError(f"not a feature: {feature!r}")


def leaf_columns(name: str, feature: Feature) -> list[str]:
    """Parquet column paths of a feature (what per-column writer options are keyed by)."""
    match feature:
        case Scalar() | ClassLabelColumn():
            return [name]
        case ListOf(item):
            return leaf_columns(f"{name}.list.element", item)
        case Struct(fields):
            return [path for n, f in fields.items() for path in leaf_columns(f"{name}.{n}", f)]
        case AudioColumn():
            return [f"{name}.bytes", f"{name}.path"]
    raise TypeError(f"not a feature: {feature!r}")


TEXT = Scalar("string")
TEXTS = ListOf(TEXT)
LABELS = ClassLabelColumn(("safe", "unsafe"))
# Every category of the taxonomy (not only those of a release), so that an index means the same in every release.
CATEGORY_LABELS = ClassLabelColumn(CATEGORIES)
# Index = severity: 0 the safe original, 1 (very mild) to 5 (severe).
SEVERITY_LABELS = ClassLabelColumn(tuple(str(s) for s in (SAFE_SEVERITY, *SEVERITIES)))


def benchmark_features(sample_rate: int) -> dict[str, Feature]:
    """The columns of the released benchmark, one row per sample (safe original or variant)."""
    return {
        "sample_id": TEXT,
        "dialogue_id": TEXT,
        "audio": AudioColumn(sample_rate),
        "label": LABELS,
        "category": CATEGORY_LABELS,
        "severity": SEVERITY_LABELS,
        "unsafe_turn_index": Scalar("int32"),
        "n_turns": Scalar("int32"),
        "speakers": TEXTS,
        "texts": TEXTS,
        "emotions": TEXTS,
        "asr_transcripts": ListOf(Struct({"source": TEXT, "texts": TEXTS})),
        "turn_start_s": ListOf(Scalar("float64")),
        "turn_end_s": ListOf(Scalar("float64")),
        "original_text": TEXT,
        "original_emotion": TEXT,
        "generation": Struct(
            {
                "generator": TEXT,
                "model": TEXT,
                "prompt_version": TEXT,
                "seed": Scalar("int64"),
                "attempts": Scalar("int32"),
            }
        ),
        "speech": Struct({"tts_engine": TEXT, "tts_model": TEXT, "tts_revision": TEXT, "gain_db": Scalar("float64")}),
        "turn_boundary_method": TEXTS,
        "turn_boundary_confidence": ListOf(Scalar("float64")),
        "corpus_format": TEXT,
    }


# What each column holds (the dataset card's feature table).
DESCRIPTIONS = {
    "sample_id": "`<dialogue>.original` (safe) or `<dialogue>.t<turn>.<category>.s<severity>` (a variant)",
    "dialogue_id": "the source dialogue; a variant and its safe original share it (cluster on it in statistics)",
    "audio": "the full dialogue as one 16-bit PCM WAV (turns in order with the original pauses)",
    "label": "class label `safe` (0, the original) or `unsafe` (1, a variant)",
    "category": (
        "class label: harm category of the unsafe turn, one of the taxonomy's 8 (null for the safe original); "
        "`features['category'].int2str(i)` gives its name"
    ),
    "severity": "class label whose index is the severity: 0 the safe original, 1 (very mild) to 5 (severe)",
    "unsafe_turn_index": "0-based index of the rewritten turn (null for the safe original)",
    "n_turns": "number of turns",
    "speakers": "speaker label of each turn",
    "texts": "ground-truth text of each turn (the unsafe turn holds the rewrite)",
    "emotions": (
        "emotion label of each turn (the corpus's own, usually of the DeepDialogue set; the unsafe turn's is the "
        "rewrite's, always of that set)"
    ),
    "asr_transcripts": "per ASR transcript source (`asr:<model>`), the recognized text of each turn",
    "turn_start_s": "start of each turn in `audio`, in seconds",
    "turn_end_s": "end of each turn in `audio`, in seconds",
    "original_text": "the safe text the unsafe turn replaced (null for the safe original)",
    "original_emotion": "the emotion of the replaced turn (null for the safe original)",
    "generation": "how the unsafe turn was written: generator, model, prompt version, seed, attempts",
    "speech": "how the unsafe turn was spoken: TTS engine, model, revision, loudness gain (dB)",
    "turn_boundary_method": "how each original turn's audio was obtained (`given`, `synthesized:<engine>`, aligned)",
    "turn_boundary_confidence": "confidence of each original turn boundary (1 when given)",
    "corpus_format": "the corpus format the dialogue was read from (`jsonl`, `deepdialogue`, ...)",
}


def arrow_schema(features: Mapping[str, Feature]) -> pa.Schema:
    """The shards' arrow schema, with the `huggingface` metadata that `datasets` reads the features from."""
    schema = pa.schema([(name, arrow_type(f)) for name, f in features.items()])
    info = {"info": {"features": {name: hf_feature(f) for name, f in features.items()}}}
    return schema.with_metadata({"huggingface": json.dumps(info)})


def encode_row(row: Mapping[str, Any], features: Mapping[str, Feature]) -> dict[str, Any]:
    """A row as the shards hold it: class-label columns as the index of their name."""
    return {
        name: feature.encode(row.get(name)) if isinstance(feature, ClassLabelColumn) else row.get(name)
        for name, feature in features.items()
    }


def decode_row(row: Mapping[str, Any], features: Mapping[str, Feature]) -> dict[str, Any]:
    """A shard's row with its class-label columns as names again (severity as its number)."""
    decoded = dict(row)
    for name, feature in features.items():
        if isinstance(feature, ClassLabelColumn) and name in decoded:
            decoded[name] = feature.decode(decoded[name])
    if decoded.get("severity") is not None:
        decoded["severity"] = int(decoded["severity"])
    return decoded
