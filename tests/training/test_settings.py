from pathlib import Path

import pytest
import yaml

from lalm_judge.training.settings import TrainingError, TrainingSettings
from lalm_judge.workflow.config import ConfigError, load_training_section
from tests.training.conftest import training_section

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path, section):
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump({"training": section}))
    return path


def test_the_shipped_recipe_is_the_studys():
    settings = TrainingSettings.from_config(load_training_section(ROOT / "configs/pairwise.yaml"))
    hyper = settings.stages[0].hyperparameters
    assert (hyper.learning_rate, hyper.epochs, hyper.lr_scheduler, hyper.warmup_ratio) == (1e-5, 3, "cosine", 0.1)
    assert (settings.finetuning, settings.freeze_encoders, hyper.precision) == ("full", True, "bf16")
    assert (ROOT / hyper.deepspeed).is_file()
    assert [stage.name for stage in settings.stages] == ["semantic", "acoustic"]


def test_defaults_come_from_the_schema(tmp_path):
    section = {"backbone": "m", "output_dir": "o", "datasets": {"d": {"records": ["r.json"], "audio_root": "a"}}}
    settings = TrainingSettings.from_config(
        load_training_section(
            write(
                tmp_path,
                {
                    **section,
                    "stages": [
                        {"name": "one", "mix": {"d": 1}},
                        {"name": "two", "mix": {"d": 1}, "learning_rate": 2e-6},
                    ],
                },
            )
        )
    )
    first, second = (stage.hyperparameters for stage in settings.stages)
    assert (first.learning_rate, first.epochs, first.per_device_batch_size, first.precision) == (1e-5, 3, 2, "auto")
    assert (second.learning_rate, second.epochs) == (2e-6, 3)  # a stage changes only what it names
    assert settings.lora.target_modules[0] == "q_proj" and settings.system_prompt == "You are a helpful assistant."


def test_a_stage_mixing_an_unknown_dataset_is_named(tmp_path, training_data):
    section = training_section(Path("m"), training_data, tmp_path / "out")
    section["stages"][1]["mix"] = {"acoustics": 1}
    with pytest.raises(TrainingError, match=r"stages\[1\] \(acoustic\).mix names unknown dataset\(s\) \['acoustics'\]"):
        TrainingSettings.from_config(load_training_section(write(tmp_path, section)))


def test_stage_names_must_differ(tmp_path, training_data):
    section = training_section(Path("m"), training_data, tmp_path / "out")
    section["stages"][1]["name"] = "semantic"
    with pytest.raises(TrainingError, match="stage names must differ"):
        TrainingSettings.from_config(load_training_section(write(tmp_path, section)))


def test_invalid_values_name_their_key(tmp_path, training_data):
    section = training_section(Path("m"), training_data, tmp_path / "out", warmup_ratio=1.5)
    with pytest.raises(ConfigError, match="training.hyperparameters.warmup_ratio"):
        load_training_section(write(tmp_path, section))


def test_a_file_without_a_training_section_is_refused(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("judges: {}\n")
    with pytest.raises(ConfigError, match="has no 'training' section"):
        load_training_section(path)


@pytest.mark.parametrize("path", ["configs/pairwise_demo.yaml", "configs/pairwise.yaml"])
def test_the_configs_train_on_what_their_builder_exports(path):
    from lalm_judge.workflow.preference import ROOT as BUILT

    settings = TrainingSettings.from_config(load_training_section(ROOT / path))
    for dataset in settings.datasets.values():
        assert dataset.audio_root == BUILT
        assert all(record.startswith(f"{BUILT}/export/sagelm/") for record in dataset.records)
