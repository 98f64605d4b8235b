import copy
from pathlib import Path

import pytest
import yaml

from lalm_judge.workflow.config import ConfigError, load_config, validate_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo_config():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.mark.parametrize("path", ["config.yaml", "configs/paper.yaml", "tests/config/test.yaml"])
def test_shipped_configs_are_valid(path):
    config = load_config(ROOT / path)
    assert config["seed"] == 0


def test_defaults_are_filled(demo_config):
    config = validate_config(demo_config)
    assert config["metrics"]["bootstrap"] == 1000
    assert config["judges"]["minilm"]["long_audio"] == "chunk"
    assert config["evaluation"]["modalities"] == ["text", "audio", "audio_text"]


def test_unknown_category_names_the_key(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["variants"]["categories"] = ["harassment", "weapons"]
    with pytest.raises(ConfigError, match=r"variants\.categories\.1: 'weapons' is not one of"):
        validate_config(bad)


@pytest.mark.parametrize("severity", [0, 6])
def test_severity_outside_one_to_five_names_the_key(demo_config, severity):
    bad = copy.deepcopy(demo_config)
    bad["variants"]["severities"] = [1, severity]
    with pytest.raises(ConfigError, match=r"variants\.severities\.1"):
        validate_config(bad)


def test_unknown_judge_lists_the_known_ones(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["evaluation"]["judges"] = ["minilm", "gpt5_audio"]
    with pytest.raises(
        ConfigError, match=r"unknown judge\(s\) \['gpt5_audio'\]; known judges: \['minilm', 'smollm2'\]"
    ):
        validate_config(bad)


def test_transcript_source_must_name_an_asr_model(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["evaluation"]["transcript_sources"] = ["gt", "asr:whisper_huge"]
    with pytest.raises(ConfigError, match="asr:whisper_huge"):
        validate_config(bad)


def test_unknown_keys_are_rejected(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["variants"]["severity"] = 3
    with pytest.raises(ConfigError, match="Additional properties are not allowed"):
        validate_config(bad)


def test_judge_without_a_shared_modality_is_rejected(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["evaluation"]["modalities"] = ["audio_text"]
    with pytest.raises(ConfigError, match=r"judges\.minilm\.modalities"):
        validate_config(bad)
