"""The settings of a training run, typed: the validated `training` section of a config (schemas/config.schema.yaml
holds every default and what each key means)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

FULL = "full"
LORA = "lora"
SFT = "sft"
GRPO = "grpo"
METHODS = (SFT, GRPO)


class TrainingError(ValueError):
    """A training run that cannot start or go on; the message names the key, file or record."""


@dataclass(frozen=True)
class Hyperparameters:
    learning_rate: float
    epochs: float
    max_steps: int | None
    lr_scheduler: str
    warmup_ratio: float
    weight_decay: float
    per_device_batch_size: int
    gradient_accumulation_steps: int
    precision: str
    gradient_checkpointing: bool
    logging_steps: int
    save_steps: int | None
    deepspeed: str | None
    seed: int
    cutoff_len: int | None = None
    val_size: float = 0.0
    eval_steps: int = 100
    per_device_eval_batch_size: int = 1


@dataclass(frozen=True)
class LoraSettings:
    r: int
    alpha: float
    dropout: float
    target_modules: tuple[str, ...]


@dataclass(frozen=True)
class DatasetSource:
    """Record files (SageLM/LLaMA-Factory alpaca layout) and the folder their audio paths are relative to."""

    name: str
    records: tuple[str, ...]
    audio_root: str


@dataclass(frozen=True)
class StageSettings:
    name: str
    # dataset name -> share of its records drawn for this stage
    mix: Mapping[str, float]
    hyperparameters: Hyperparameters


@dataclass(frozen=True)
class GRPOSettings:
    """GRPO's own settings (`training.grpo`; used with method grpo)."""

    num_generations: int = 4
    max_completion_length: int = 512
    temperature: float = 1.0
    beta: float = 0.0
    reward_weights: Mapping[str, float] = field(default_factory=lambda: {"accuracy": 1.0, "format": 1.0})


@dataclass(frozen=True)
class TrainingSettings:
    backbone: str
    revision: str
    output_dir: str
    finetuning: str
    lora: LoraSettings
    freeze_encoders: bool
    system_prompt: str
    max_response_s: float
    device: str
    num_threads: int | None
    datasets: Mapping[str, DatasetSource]
    stages: tuple[StageSettings, ...]
    method: str = SFT
    grpo: GRPOSettings = field(default_factory=GRPOSettings)
    preparation_workers: int | None = None

    @classmethod
    def from_config(
        cls, section: Mapping[str, Any], method: str | None = None, processes: int | None = None
    ) -> TrainingSettings:
        """Settings of a validated `training` section (`workflow.config.load_training_section`); with method grpo,
        its batch arithmetic is checked for `processes` (default: the launcher's WORLD_SIZE, else 1)."""
        hyper = Hyperparameters(**section["hyperparameters"])
        datasets = {
            name: DatasetSource(name=name, records=tuple(entry["records"]), audio_root=entry["audio_root"])
            for name, entry in section["datasets"].items()
        }
        stages = []
        for index, stage in enumerate(section["stages"]):
            unknown = sorted(set(stage["mix"]) - set(datasets))
            if unknown:
                raise TrainingError(
                    f"training.stages[{index}] ({stage['name']}).mix names unknown dataset(s) {unknown}; "
                    f"training.datasets has {sorted(datasets)}"
                )
            overrides = {key: stage[key] for key in ("learning_rate", "epochs", "max_steps") if stage[key] is not None}
            stages.append(StageSettings(stage["name"], dict(stage["mix"]), replace(hyper, **overrides)))
        names = [stage.name for stage in stages]
        if len(set(names)) != len(names):
            raise TrainingError(f"training.stages: stage names must differ (their checkpoint folders), got {names}")
        lora = section["lora"]
        method = method or section["method"]
        if method not in METHODS:
            raise TrainingError(f"training method {method!r} is not one of {METHODS}")
        grpo = GRPOSettings(**section["grpo"])
        if method == GRPO:
            problem = grpo_batch_problem(hyper, grpo, launched_processes() if processes is None else processes)
            if problem:
                raise TrainingError(problem)
        return cls(
            method=method,
            grpo=grpo,
            backbone=section["backbone"],
            revision=section["revision"],
            output_dir=section["output_dir"],
            finetuning=section["finetuning"],
            lora=LoraSettings(lora["r"], lora["alpha"], lora["dropout"], tuple(lora["target_modules"])),
            freeze_encoders=section["freeze_encoders"],
            system_prompt=section["system_prompt"],
            max_response_s=float(section["max_response_s"]),
            device=section["device"],
            num_threads=section["num_threads"],
            preparation_workers=section["preparation_workers"],
            datasets=datasets,
            stages=tuple(stages),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def launched_processes(environ: Mapping[str, str] | None = None) -> int:
    """The training processes a launcher started (`accelerate launch`, `torchrun`, `deepspeed` set WORLD_SIZE); 1
    for a plain command."""
    return int((os.environ if environ is None else environ).get("WORLD_SIZE") or 1)


def grpo_batch_problem(hyper: Hyperparameters, grpo: GRPOSettings, processes: int = 1) -> str | None:
    """Why TRL's GRPO cannot start with these numbers, saying which to change, or None. Each optimiser step samples
    `num_generations` completions per prompt from a generation batch of per_device_batch_size x
    gradient_accumulation_steps x processes completions (TRL's generation_batch_size), which must hold whole groups.
    A batch that holds them on one GPU holds them on any number."""
    per_device, accumulation = hyper.per_device_batch_size, hyper.gradient_accumulation_steps
    groups = grpo.num_generations
    batch = per_device * accumulation * processes
    if batch % groups == 0:
        return None
    divisors = [n for n in range(2, batch + 1) if batch % n == 0]
    steps = next(
        a for a in range(accumulation + 1, accumulation + groups + 1) if per_device * a * processes % groups == 0
    )
    sizes = next(
        b for b in range(per_device + 1, per_device + groups + 1) if b * accumulation * processes % groups == 0
    )
    fixes = [f"training.grpo.num_generations to {' or '.join(map(str, divisors))} (a divisor of {batch})"]
    fixes = fixes if divisors else []
    fixes += [
        f"training.hyperparameters.gradient_accumulation_steps to {steps}",
        f"training.hyperparameters.per_device_batch_size to {sizes}",
    ]
    plural = "es" if processes > 1 else ""
    return (
        f"training.grpo.num_generations is {groups}, but GRPO samples a generation batch of per_device_batch_size "
        f"{per_device} x gradient_accumulation_steps {accumulation} x {processes} process{plural} = {batch} "
        f"completions per optimiser step, which must hold whole groups of {groups} (TRL's generation_batch_size must "
        f"be divisible by num_generations): set {', or '.join(fixes)}"
    )
