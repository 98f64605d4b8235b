import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from lalm_judge.cli import pairwise as pairwise_cli
from lalm_judge.training.settings import (
    GRPOSettings,
    Hyperparameters,
    TrainingError,
    TrainingSettings,
    grpo_batch_problem,
)
from lalm_judge.training.sft import single_process_launch
from lalm_judge.workflow.config import ConfigError, load_training_section, validate_config
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


def documented_commands() -> list[list[str]]:
    """Every `lalm-judge pairwise train` and `accelerate launch ... pairwise train` line of docs/training.md's shell
    blocks, as argument lists."""
    text = (ROOT / "docs" / "training.md").read_text()
    lines = [
        line.split("#")[0].strip()
        for block in re.findall(r"```bash\n(.*?)```", text, re.S)
        for line in block.splitlines()
    ]
    return [shlex.split(line) for line in lines if "pairwise train" in line]


def test_the_documented_one_gpu_and_multi_gpu_commands_are_valid_as_shipped():
    """Each command of docs/training.md parses (accelerate's own launcher parser for `accelerate launch`, then the
    project's), and its config trains with its method on its number of processes: SFT and GRPO, one GPU and 8."""
    from accelerate.commands.launch import launch_command_parser

    seen = set()
    for argv in documented_commands():
        processes = 1
        if argv[:2] == ["accelerate", "launch"]:
            launch = launch_command_parser().parse_args(argv[2:])
            assert launch.module and launch.training_script == "lalm_judge.cli", argv
            processes, argv = launch.num_processes, ["lalm-judge", *launch.training_script_args]
        assert argv[:3] == ["lalm-judge", "pairwise", "train"], argv
        args = pairwise_cli._parser().parse_args(argv[2:])
        settings = TrainingSettings.from_config(load_training_section(ROOT / args.config), args.method, processes)
        assert all(
            (ROOT / s.hyperparameters.deepspeed).is_file() for s in settings.stages if s.hyperparameters.deepspeed
        )
        seen.add((settings.method, processes))
    assert seen == {("sft", 1), ("sft", 8), ("grpo", 1), ("grpo", 8)}


def test_grpo_batch_arithmetic_is_checked_when_the_config_is_validated(tmp_path, training_data):
    """TRL refuses a generation batch (per_device_batch_size x gradient_accumulation_steps x GPUs) that does not
    hold whole groups of num_generations only after loading the model; the config check refuses it first, for
    `validate-config`, `pairwise train`, and `--method grpo` on a section without grpo settings."""
    section = training_section(Path("m"), training_data, tmp_path / "out", gradient_accumulation_steps=2)
    section["grpo"] = {"num_generations": 8}
    expected = (
        "training.grpo.num_generations is 8, but GRPO samples a generation batch of per_device_batch_size 2 x "
        "gradient_accumulation_steps 2 x 1 process = 4 completions per optimiser step, which must hold whole groups "
        "of 8 (TRL's generation_batch_size must be divisible by num_generations): set training.grpo.num_generations "
        "to 2 or 4 (a divisor of 4), or training.hyperparameters.gradient_accumulation_steps to 4, or "
        "training.hyperparameters.per_device_batch_size to 4"
    )
    with pytest.raises(ConfigError) as raised:
        load_training_section(write(tmp_path, section))
    assert expected in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        validate_config({**yaml.safe_load((ROOT / "configs/pairwise.yaml").read_text()), "training": section})
    assert expected in str(raised.value)
    del section["grpo"]  # an SFT section: checked when --method grpo asks for GRPO
    settings = load_training_section(write(tmp_path, section))
    assert TrainingSettings.from_config(settings).method == "sft"
    section["hyperparameters"]["gradient_accumulation_steps"] = 1
    settings = load_training_section(write(tmp_path, section))
    message = r"steps 1 x 1 process = 2 .* groups of 4 .*: set training\.grpo\.num_generations to 2 "
    with pytest.raises(TrainingError, match=message):
        TrainingSettings.from_config(settings, method="grpo")
    assert TrainingSettings.from_config(settings, method="grpo", processes=2).method == "grpo"
    assert grpo_batch_problem(replace(settings_hyper(settings), per_device_batch_size=4), GRPOSettings()) is None


def settings_hyper(section) -> Hyperparameters:
    return Hyperparameters(**section["hyperparameters"])


def test_deepspeed_without_a_launcher_gets_the_one_process_environment():
    settings = TrainingSettings.from_config(load_training_section(ROOT / "configs/pairwise.yaml"))
    environ: dict[str, str] = {}
    values = single_process_launch(settings, environ)
    assert environ == values and (values["RANK"], values["LOCAL_RANK"], values["WORLD_SIZE"]) == ("0", "0", "1")
    assert int(values["MASTER_PORT"]) > 0 and values["MASTER_ADDR"] == "127.0.0.1"
    launched = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3"}
    assert single_process_launch(settings, launched) == {} and launched == {
        "RANK": "3",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "3",
    }
