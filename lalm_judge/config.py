"""Loading and checking a run configuration: JSON-Schema validation with defaults, then the
cross-references a schema cannot express (judge names, transcript sources, modalities)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "config.schema.yaml"


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


def load_config(path: str | Path) -> dict[str, Any]:
    return validate_config(yaml.safe_load(Path(path).read_text()))


def check_config(config: dict[str, Any]) -> None:
    """Cross-reference checks run at parse time, before any job is scheduled."""
    judges = config["judges"]
    evaluation = config["evaluation"]
    unknown = [j for j in evaluation["judges"] if j not in judges]
    if unknown:
        raise ConfigError(f"evaluation.judges: unknown judge(s) {unknown}; known judges: {sorted(judges)}")
    asr_models = config["asr"]["models"]
    judge_sources = [s for j in evaluation["judges"] for s in judges[j].get("transcript_sources", [])]
    for source in [*evaluation.get("transcript_sources", ["gt"]), *judge_sources]:
        if source.startswith("asr:") and source[4:] not in asr_models:
            raise ConfigError(
                f"evaluation.transcript_sources: {source!r} names no model in asr.models ({sorted(asr_models)})"
            )
    for name in evaluation["judges"]:
        spec = judges[name]
        supported = set(spec.get("modalities", ["text"]))
        wanted = set(evaluation.get("modalities", ["text", "audio", "audio_text"]))
        if not supported & wanted:
            raise ConfigError(
                f"judges.{name}.modalities: {sorted(supported)} shares no modality with "
                f"evaluation.modalities {sorted(wanted)}"
            )
        cascade = spec.get("options", {}).get("cascade_asr")
        if cascade is not None and cascade not in asr_models:
            raise ConfigError(f"judges.{name}.options.cascade_asr: {cascade!r} is not in asr.models")


def validate_main(argv: list[str]) -> int:
    """`lalm-judge validate-config FILE`: print the errors, or 'ok' and the number of judge cells."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="lalm-judge validate-config", description=validate_main.__doc__)
    parser.add_argument("config", help="YAML configuration file")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except (ConfigError, OSError, yaml.YAMLError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"ok: {args.config} ({len(config['judges'])} judges, seed {config['seed']})")
    return 0
