"""Classes of bad input, generated from the config schema itself: every key of a class is found by walking
schemas/config.schema.yaml, must declare the class's check, and is then given a bad value in a shipped config that
`validate_config` must refuse naming the key. A key added later inherits its class's checks without a test of its
own.

- Lists whose entries are ids (every list of strings or numbers: judges, prompts, conditions, files, dialogues,
  seeds, bin edges): `uniqueItems`; a repeated entry is refused naming the list and the entry.
- Durations, rates and sizes (keys named `*_s`, `*_mb`, `*_len`, `*_length`, `*size`, `*rate`, `*_per_hour`,
  `*tokens`, `runtime`, `speed`, `*_scale`, `*_shift`): a positive lower bound, or a non-negative one where zero
  has a meaning (`ZERO_MEANS`, each with what it means); zero (or -1) is refused naming the key.
- Devices (keys named `device`): an `enum` or `pattern` of the names the backends accept; `gpu0` is refused.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lalm_judge.core.files import read_schema
from lalm_judge.workflow.config import SCHEMA_PATH, ConfigError, read_config_file, validate_config

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = read_schema(SCHEMA_PATH)
# The configs a bad value is written into: every shipped one (they validate: tests.support.lint_configs).
BASES = sorted([ROOT / "config.yaml", *(ROOT / "configs").glob("*.yaml"), *(ROOT / "tests" / "config").glob("*.yaml")])

SIZE_OR_TIME = re.compile(
    r"(?:_s|_mb|_len|_length|size|rate|_per_hour|tokens|^runtime|^speed|_scale|_shift)$",
)
# Durations, rates and sizes where zero has a meaning (so only a negative value is refused), with that meaning.
ZERO_MEANS = {
    "corpus.pause_s": "no silence between turns",
    "corpus.alignment.search_margin_s": "boundaries at the recognized word edges",
    "controls.injection.pause_s": "the injected sentence right after the turn",
    "preference.filters.min_duration_s": "no duration filter",
    "backoff_base_s": "retry at once",
    "backoff_max_s": "never wait between retries",
    "training.hyperparameters.val_size": "no validation split",
}


@dataclass(frozen=True)
class Key:
    """One key of the schema: its path (`*` a mapping's entries, `[]` a list's items), its schema, and the `if`
    schemas that must hold on the objects along the path for it to apply (a backend's options, say)."""

    path: tuple[str, ...]
    schema: Mapping[str, Any]
    conditions: tuple[tuple[int, Mapping[str, Any]], ...] = ()

    @property
    def name(self) -> str:
        return ".".join(self.path)


def _target(reference: str) -> Mapping[str, Any]:
    target: Any = SCHEMA
    for part in reference[2:].split("/"):
        target = target[part]
    return target


def _resolved(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """A schema with its `$ref` (a local one) merged in, its own keywords winning."""
    reference = node.get("$ref", "")
    if not reference.startswith("#/"):
        return node
    return {**_resolved(_target(reference)), **{k: v for k, v in node.items() if k != "$ref"}}


def _keys(node: Mapping[str, Any], path: tuple[str, ...] = (), conditions=()) -> Iterator[Key]:
    """Every key the schema declares, through `$ref`s (a `$ref` beside keywords of its own, as openai_options on the
    endpoint: both apply), combinators and `if`-`then` branches."""
    reference = node.get("$ref", "")
    if reference.startswith("#/"):
        yield from _keys(_target(reference), path, conditions)
        node = {keyword: value for keyword, value in node.items() if keyword != "$ref"}
        if "type" in node:
            yield Key(path, _resolved({"$ref": reference, **node}), conditions)
    elif "type" in node or not path:
        yield Key(path, node, conditions)
    for name, sub in node.get("properties", {}).items():
        yield from _keys(sub, (*path, name), conditions)
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from _keys(node["additionalProperties"], (*path, "*"), conditions)
    if isinstance(node.get("items"), Mapping):
        yield from _keys(node["items"], (*path, "[]"), conditions)
    for combinator in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(combinator, []):
            yield from _keys(sub, path, conditions)
    if isinstance(node.get("then"), Mapping):
        yield from _keys(node["then"], path, (*conditions, (len(path), node.get("if", {}))))


def _types(schema: Mapping[str, Any]) -> set[str]:
    declared = schema.get("type", [])
    return set([declared] if isinstance(declared, str) else declared)


def _merged(keys: list[Key]) -> dict[str, Key]:
    """One key per path (a path the schema reaches by several branches, e.g. an `if`-`then`, keeps each branch's
    key under its own name: the checks must hold in every branch)."""
    merged: dict[str, Key] = {}
    for key in keys:
        merged.setdefault(f"{key.name}#{len(merged)}" if key.name in merged else key.name, key)
    return merged


ALL_KEYS = list(_keys(SCHEMA))
ID_LISTS = _merged(
    [
        key
        for key in ALL_KEYS
        if "array" in _types(key.schema)
        and _types(_resolved(key.schema.get("items", {}))) & {"string", "integer", "number"}
    ]
)
SIZES = _merged(
    [
        key
        for key in ALL_KEYS
        if key.path and SIZE_OR_TIME.search(key.path[-1]) and _types(key.schema) & {"integer", "number"}
    ]
)
DEVICES = _merged([key for key in ALL_KEYS if key.path and key.path[-1] == "device" and "string" in _types(key.schema)])


def _zero_means(key: Key) -> str | None:
    return ZERO_MEANS.get(key.name) or ZERO_MEANS.get(key.path[-1])


# --- finding a place for a bad value in a shipped config ----------------------------------------------------------
def _places(document: Any, key: Key, depth: int = 0) -> Iterator[tuple[Any, Any]]:
    """(container, key or index) of every place in `document` the key's path reaches (a missing last key is a
    place too, where its parent exists), skipping objects that fail the key's `if` conditions."""
    for level, condition in key.conditions:
        if level == depth and not jsonschema.Draft202012Validator(condition).is_valid(document):
            return
    if depth == len(key.path) - 1:
        step = key.path[-1]
        if step == "*" and isinstance(document, Mapping):
            yield from ((document, name) for name in document)
        elif step == "[]" and isinstance(document, list):
            yield from ((document, index) for index in range(len(document)))
        elif isinstance(document, dict) and step not in ("*", "[]"):
            yield document, step
        return
    step = key.path[depth]
    if step == "*" and isinstance(document, Mapping):
        children = list(document.values())
    elif step == "[]" and isinstance(document, list):
        children = document
    elif isinstance(document, Mapping) and step in document:
        children = [document[step]]
    else:
        children = []
    for child in children:
        yield from _places(child, key, depth + 1)


def _written(document: Any, key: Key, bad: Any) -> tuple[dict, str] | None:
    """A copy of `document` with the first place of `key` set to `bad` (a function of the value there, or of the
    key's default where it is not given), and the dotted path of that place; None when the document has no place
    for the key."""
    copied = copy.deepcopy(document)
    for container, slot in _places(copied, key):
        given = container.get(slot) if isinstance(container, Mapping) else container[slot]
        value = bad(given if given is not None else key.schema.get("default"))
        if value is None:
            continue
        container[slot] = value
        return copied, _place_name(copied, container, slot)
    return None


def _place_name(document: Any, container: Any, slot: Any, trail: tuple[str, ...] = ()) -> str:
    if document is container:
        return ".".join([*trail, str(slot)])
    children = (
        document.items() if isinstance(document, Mapping) else enumerate(document) if isinstance(document, list) else ()
    )
    for name, child in children:
        if isinstance(child, dict | list):
            found = _place_name(child, container, slot, (*trail, str(name)))
            if found:
                return found
    return ""


@pytest.fixture(scope="module")
def bases() -> list[dict]:
    return [read_config_file(path) for path in BASES]


EXERCISED: dict[str, str] = {}  # key -> how its bad value was given: in a shipped config, or to its own schema


def refused(bases: list[dict], key: Key, bad, message: str, schema_message: str) -> str | None:
    """Write the bad value at the key's first place in a shipped config and validate: None when the config is
    refused naming the place and `message`; otherwise what went wrong. A key that no shipped config has a place for
    (a voice variant of a list of them, say) is given to its own schema, which must refuse it (`schema_message`:
    jsonschema's own words)."""
    for base in bases:
        written = _written(base, key, bad)
        if written is None:
            continue
        config, place = written
        EXERCISED[key.name] = f"config: {place}"
        try:
            validate_config(config)
        except ConfigError as err:
            pattern = rf"(^|\n  ){re.escape(place)}(\.\d+)?: .*{message}"
            return None if re.search(pattern, str(err)) else f"{key.name}: refused without naming {place}: {err}"
        return f"{key.name}: a bad value at {place} was accepted"
    value = bad(key.schema.get("default") or _example(key.schema))
    EXERCISED[key.name] = "schema"
    validator = jsonschema.Draft202012Validator({"$defs": SCHEMA["$defs"], **key.schema})
    errors = [error.message for error in validator.iter_errors(value)]
    return None if any(re.search(schema_message, error) for error in errors) else f"{key.name}: {value!r}: {errors}"


def _example(schema: Mapping[str, Any]) -> Any:
    """A value of a list schema for a repeated entry: its items' first enum value, or a word."""
    items = _resolved(schema.get("items", {}))
    return [items["enum"][0]] if items.get("enum") else [1] if _types(items) & {"integer", "number"} else ["x"]


# --- lists of ids -------------------------------------------------------------------------------------------------
def test_every_list_of_ids_declares_unique_entries():
    assert ID_LISTS, "the walk found no list"
    missing = sorted(name for name, key in ID_LISTS.items() if not key.schema.get("uniqueItems"))
    assert missing == [], f"lists of ids without uniqueItems: {missing}"


def test_a_repeated_entry_is_refused_in_every_list_of_ids(bases):
    def repeated(value):
        return [value[0], value[0], *value[1:]] if isinstance(value, list) and value else None

    problems = [
        problem
        for key in ID_LISTS.values()
        if (problem := refused(bases, key, repeated, "is listed twice", "has non-unique elements"))
    ]
    assert problems == []


# --- durations, rates and sizes ------------------------------------------------------------------------------------
def _lower_bound(schema: Mapping[str, Any]) -> tuple[float, bool] | None:
    """(bound, strict) of a numeric schema, an enum counting as bounded by its smallest value."""
    if "exclusiveMinimum" in schema:
        return schema["exclusiveMinimum"], True
    if "minimum" in schema:
        return schema["minimum"], False
    if schema.get("enum"):
        return min(schema["enum"]), False
    return None


def test_every_duration_rate_and_size_has_a_positive_lower_bound():
    assert len(SIZES) > 30, sorted(SIZES)
    problems = []
    for name, key in sorted(SIZES.items()):
        bound = _lower_bound(key.schema)
        zero = _zero_means(key)
        if bound is None:
            problems.append(f"{name}: no lower bound")
        elif zero is not None and bound != (0, False):
            problems.append(f"{name}: zero means {zero!r}, so its bound is minimum: 0, not {bound}")
        elif zero is None and not (bound[0] > 0 or (bound[0] == 0 and bound[1])):
            problems.append(f"{name}: {bound} lets a non-positive value through (if zero has a meaning: ZERO_MEANS)")
    assert problems == []


def test_a_non_positive_duration_rate_or_size_is_refused_naming_the_key(bases):
    problems = []
    for key in SIZES.values():
        bad = -1 if _zero_means(key) else 0
        message = "is less than" if bad == -1 or "minimum" in key.schema else "(is less than|is not one of)"
        problem = refused(bases, key, lambda value, bad=bad: bad, message, message)
        problems += [problem] if problem else []
    assert problems == []


# --- devices ------------------------------------------------------------------------------------------------------
def test_every_device_key_names_the_devices_its_backend_accepts():
    assert len(DEVICES) >= 4, sorted(DEVICES)
    assert [name for name, key in DEVICES.items() if not ({"enum", "pattern"} & set(key.schema))] == []


def test_an_unknown_device_is_refused_naming_the_key(bases):
    message = "(is not one of|does not match)"
    problems = [
        problem for key in DEVICES.values() if (problem := refused(bases, key, lambda value: "gpu0", message, message))
    ]
    assert problems == []
