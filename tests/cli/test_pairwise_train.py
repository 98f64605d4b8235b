"""`lalm-judge pairwise train` refuses a bad config before loading any model (the training itself:
tests/training/test_sft.py)."""

import pytest
import yaml

from lalm_judge.cli import main as cli


def test_a_config_error_is_reported_with_its_key(tmp_path, capsys):
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump({"training": {"backbone": "m", "output_dir": "o", "datasets": {}, "stages": []}}))
    assert cli(["pairwise", "train", "--config", str(path)]) == 2
    error = capsys.readouterr().err
    assert "training.datasets" in error and "training.stages" in error


def test_a_missing_record_file_is_named(tmp_path, capsys):
    section = {
        "backbone": "m",
        "output_dir": str(tmp_path / "out"),
        "datasets": {"semantic": {"records": [str(tmp_path / "none.json")], "audio_root": str(tmp_path)}},
        "stages": [{"name": "semantic", "mix": {"semantic": 1}}],
    }
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump({"training": section}))
    assert cli(["pairwise", "train", "--config", str(path)]) == 2
    assert f"cannot read SageLM records from {tmp_path / 'none.json'}" in capsys.readouterr().err


def test_the_command_is_listed(capsys):
    with pytest.raises(SystemExit):
        cli(["pairwise", "--help"])
    assert "train" in capsys.readouterr().out
