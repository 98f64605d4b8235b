"""The config schema is the one place of the judge registry's defaults; JudgeSpec's defaults (for specs built in
code) must say the same, and a registry entry becomes a spec without its schedule and report texts."""

import dataclasses

import yaml

from lalm_judge.judging.backends.base import Capabilities, JudgeSpec
from lalm_judge.workflow.config import SCHEMA_PATH, validate_judge_entry


def _defaults_match(cls, properties) -> None:
    for field in dataclasses.fields(cls):
        if field.name in properties and "default" in properties[field.name]:
            default = field.default_factory() if field.default is dataclasses.MISSING else field.default
            if dataclasses.is_dataclass(default):  # a nested mapping: its keys' defaults are the schema's
                _defaults_match(type(default), properties[field.name]["properties"])
                continue
            expected = properties[field.name]["default"]
            assert default == (tuple(expected) if isinstance(default, tuple) else expected), field.name


def test_judge_spec_defaults_are_the_schema_defaults():
    entry = yaml.safe_load(SCHEMA_PATH.read_text())["properties"]["judges"]["additionalProperties"]["properties"]
    _defaults_match(JudgeSpec, entry)
    assert set(entry["capabilities"]["properties"]) == {f.name for f in dataclasses.fields(Capabilities)}


def test_a_registry_entry_becomes_a_spec_without_schedule_or_report_texts():
    entry = validate_judge_entry(
        "j",
        {
            "backend": "vllm",
            "model": "m",
            "description": "shown in the report",
            "weak": None,
            "schedule": {"prompts": ["basic"], "resources": {"gpu": 2, "runtime": 30}},
        },
    )
    spec = JudgeSpec.from_config("j", entry)
    assert spec.gpus == 2 and spec.revision == "main" and spec.modalities == ("text",)
    assert not {"schedule", "description", "weak"} & {f.name for f in dataclasses.fields(spec)}
