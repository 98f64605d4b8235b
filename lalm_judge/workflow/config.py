"""Loading and checking a run configuration: JSON-Schema validation with defaults, then the
cross-references a schema cannot express (judge names, transcript sources, modalities).

A config holds the safety track (`evaluation` and its data sections), the pairwise track (`pairwise`) or
both; `tracks` says which, and each track's checks run only when it is present."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from lalm_judge.core.vocabulary import TranscriptSource
from lalm_judge.data.benchmark import FORMAT as BENCHMARK_FORMAT
from lalm_judge.data.benchmark import IMPORTED

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"
SAFETY = "safety"
PAIRWISE = "pairwise"
# Backends whose answers are safety scores only (no pairwise verdicts).
SAFETY_ONLY_BACKENDS = ("embedding",)


class ConfigError(ValueError):
    """A configuration that is invalid; the message names the key."""


def _with_defaults(validator_class):
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def validate_config(config: dict[str, Any], schema_path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """Fill defaults and validate against the JSON schema; errors name the offending key path."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    config = copy.deepcopy(config)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))
    check_config(config)
    return config


def validate_judge_entry(name: str, entry: dict[str, Any], schema_path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """One judge registry entry validated (defaults filled) on its own, for ad-hoc use outside a run config."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    entry_schema = {"$defs": schema.get("$defs", {}), **schema["properties"]["judges"]["additionalProperties"]}
    validator = _with_defaults(jsonschema.Draft202012Validator)(entry_schema)
    entry = copy.deepcopy(entry)
    errors = sorted(validator.iter_errors(entry), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"judges.{name}.{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]
        raise ConfigError("invalid judge entry:\n  " + "\n  ".join(lines))
    return entry


def load_config(path: str | Path) -> dict[str, Any]:
    return validate_config(yaml.safe_load(Path(path).read_text()))


def tracks(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The tracks a validated config runs: 'safety' (it has `evaluation`), 'pairwise' (it has `pairwise`)."""
    return tuple(track for track, key in ((SAFETY, "evaluation"), (PAIRWISE, "pairwise")) if key in config)


def check_config(config: dict[str, Any]) -> None:
    """Cross-reference checks of a validated config, run at parse time before any job is scheduled."""
    if SAFETY in tracks(config):
        _check_safety(config)
    if PAIRWISE in tracks(config):
        _check_pairwise(config)
    _check_imported(config)


def _check_asr_source(key: str, source: str, config: Mapping[str, Any]) -> None:
    model = TranscriptSource(source).asr_model
    asr_models = config["asr"]["models"] if "asr" in config else {}
    if model is not None and model not in asr_models:
        raise ConfigError(f"{key}: {source!r} names no model in asr.models ({sorted(asr_models)})")


def _check_pairwise(config: dict[str, Any]) -> None:
    pairwise, judges = config["pairwise"], config["judges"]
    items = pairwise["items"]
    required = {"sagelm": ("files", "audio_root"), "jsonl": ("path", "voices")}[items["format"]]
    for key in required:
        if not items.get(key):
            raise ConfigError(f"pairwise.items.{key} is required for format {items['format']!r}")
    unknown = [j for j in pairwise["judges"] if j not in judges]
    if unknown:
        raise ConfigError(f"pairwise.judges: unknown judge(s) {unknown}; known judges: {sorted(judges)}")
    for source in pairwise["transcript_sources"]:
        _check_asr_source("pairwise.transcript_sources", source, config)
    wanted = set(pairwise["modalities"])
    for name in pairwise["judges"]:
        entry = judges[name]
        if entry["backend"] in SAFETY_ONLY_BACKENDS:
            raise ConfigError(
                f"pairwise.judges: judge {name!r} (backend {entry['backend']!r}) gives no pairwise verdicts"
            )
        usable = set(entry["modalities"]) & wanted
        if not usable:
            raise ConfigError(
                f"judges.{name}.modalities: {sorted(entry['modalities'])} shares no modality with "
                f"pairwise.modalities {sorted(wanted)}"
            )
        if usable == {"text"} and not pairwise["transcript_sources"]:
            raise ConfigError(
                f"pairwise.judges: judge {name!r} reads text only, so it needs pairwise.transcript_sources "
                "(e.g. 'asr:<asr model>' for the cascade)"
            )


def _check_safety(config: dict[str, Any]) -> None:
    judges = config["judges"]
    evaluation = config["evaluation"]
    unknown = [j for j in evaluation["judges"] if j not in judges]
    if unknown:
        raise ConfigError(f"evaluation.judges: unknown judge(s) {unknown}; known judges: {sorted(judges)}")
    asr_models = config["asr"]["models"]
    sources = [("evaluation.transcript_sources", s) for s in evaluation["transcript_sources"]]
    sources += [
        (f"judges.{j}.schedule.transcript_sources", s)
        for j in evaluation["judges"]
        for s in judges[j]["schedule"].get("transcript_sources", [])
    ]
    for key, source in sources:
        _check_asr_source(key, source, config)
    for name in evaluation["judges"]:
        entry = judges[name]
        supported, wanted = set(entry["modalities"]), set(evaluation["modalities"])
        if not supported & wanted:
            raise ConfigError(
                f"judges.{name}.modalities: {sorted(supported)} shares no modality with "
                f"evaluation.modalities {sorted(wanted)}"
            )
        cascade = entry["options"].get("cascade_asr")
        if cascade is not None and cascade not in asr_models:
            raise ConfigError(f"judges.{name}.options.cascade_asr: {cascade!r} is not in asr.models")


def _check_imported(config: dict[str, Any]) -> None:
    """An imported benchmark (safety track) comes from its own corpus format, and nothing of it is generated
    again; released transcripts exist only for it."""
    imported = SAFETY in tracks(config) and config["variants"]["source"] == IMPORTED
    if imported and config["corpus"]["format"] != BENCHMARK_FORMAT:
        raise ConfigError(
            f"variants.source: {IMPORTED!r} reads the variants of a released benchmark and needs corpus.format "
            f"{BENCHMARK_FORMAT!r} (a folder written by 'lalm-judge import --format hf'), not "
            f"{config['corpus']['format']!r}"
        )
    if imported and "generator" in config["variants"]:
        raise ConfigError(
            f"variants.generator: unused when variants.source is {IMPORTED!r} (the benchmark's variants are "
            "judged as released); remove it"
        )
    for name, entry in (config["asr"]["models"] if "asr" in config else {}).items():
        if entry["model"] == IMPORTED and not imported:
            raise ConfigError(
                f"asr.models.{name}.model: {IMPORTED!r} takes released transcripts, which exist only for an "
                f"imported benchmark (variants.source: {IMPORTED!r})"
            )
    pairwise_sources = config["pairwise"]["transcript_sources"] if PAIRWISE in tracks(config) else []
    for model in filter(None, (TranscriptSource(source).asr_model for source in pairwise_sources)):
        if config["asr"]["models"][model]["model"] == IMPORTED:
            raise ConfigError(
                f"pairwise.transcript_sources: asr:{model} has released transcripts of the safety benchmark only; "
                "the pairwise track needs a model that recognizes its audio"
            )


def canonical(value: Any) -> Any:
    """`value` with every mapping's keys sorted, recursively (lists keep their order).

    Snakemake compares a job's params by their repr, in which a dict shows its keys in insertion order: a
    config written back with sorted keys (or any other order) would rerun every job. Every `params:` value
    taken from the config goes through this, so key order, comments, quoting and YAML style never rerun a job.
    """
    if isinstance(value, Mapping):
        return {str(key): canonical(value[key]) for key in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [canonical(item) for item in value]
    return value
