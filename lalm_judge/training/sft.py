"""Two-stage (or k-stage) rationale-augmented SFT with TRL's SFTTrainer, and the checkpoints it writes.

`run_training(settings)` trains the stages in order. Stage k starts from stage k-1's checkpoint (the first
from the backbone) and trains on its mix of datasets (SageLM: the semantic aspects first, then the acoustic
data with part of the semantic data replayed). Each stage writes `<output_dir>/<stage>/`: the model and its
processor, loadable as a `transformers` judge of the pairwise track, and `stage.json` (what it was trained on,
every logged loss, seconds per step, the clips cut). `<output_dir>/training_report.json` gathers the stages.

A stage whose `stage.json` records the same inputs (its settings, its starting checkpoint and its records) is
not trained again: changing stage two retrains stage two only. Checkpoints are written to a staging folder and
renamed into place, so a killed run never leaves a half-written one.

TRL has no audio support: the dataset is passed untouched (`skip_prepare_dataset`, `remove_unused_columns`
off) to `collator.PairwiseSFTCollator`, which builds the model inputs and masks the prompt.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from lalm_judge.core.files import read_json, stable_hash, write_json
from lalm_judge.judging.backends.hf import resolve_device
from lalm_judge.training.backbone import (
    Backbone,
    freeze_encoders,
    load_backbone,
    lora_config,
    trainable_summary,
)
from lalm_judge.training.collator import PairwiseSFTCollator, response_limit_s
from lalm_judge.training.grpo import REWARD_FUNCTIONS, grpo_rows, make_trainer_class
from lalm_judge.training.lengths import CACHE_DIR, prompt_lengths
from lalm_judge.training.records import (
    TrainingRecord,
    audio_cut,
    describe_counts,
    read_dataset,
    stage_records,
)
from lalm_judge.training.settings import (
    GRPO,
    LORA,
    GRPOSettings,
    Hyperparameters,
    StageSettings,
    TrainingError,
    TrainingSettings,
)
from lalm_judge.training.validation import CutoffReport, ValidationCallback, apply_cutoff, split_validation

STAGE_FILE = "stage.json"
REPORT_FILE = "training_report.json"
TRAINER_DIR = ".trainer"
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets")


@dataclass
class StageLog:
    """What a stage trained on and how its loss went."""

    name: str
    init_from: str
    fingerprint: str
    n_records: int
    records: dict[str, dict[str, int]]
    audio_cut: dict[str, float | int]
    trainable: dict[str, int]
    frozen_modules: list[str]
    steps: int
    losses: list[dict[str, float]]
    seconds_per_step: float
    runtime_s: float
    reused: bool = False
    versions: dict[str, str] = field(default_factory=dict)
    # The held-out validation split and its evaluations during training: [{step, loss, verdict_accuracy}].
    n_validation: int = 0
    evaluations: list[dict[str, float]] = field(default_factory=list)
    # What cutoff_len did: records left out (prompt too long) and answers cut.
    cutoff: dict[str, Any] = field(default_factory=dict)

    @property
    def first_loss(self) -> float:
        return self.losses[0]["loss"]

    @property
    def last_loss(self) -> float:
        return self.losses[-1]["loss"]


def package_versions() -> dict[str, str]:
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "absent"
    return versions


def compute_dtypes(precision: str, device: str) -> tuple[torch.dtype, torch.dtype, bool]:
    """(dtype the weights load in, dtype the trained weights are kept in, autocast to bf16?) for a precision."""
    if precision == "auto":
        precision = "fp32" if device == "cpu" else "bf16"
    if precision == "fp32":
        return torch.float32, torch.float32, False
    if device != "cpu" and not torch.cuda.is_bf16_supported():
        raise TrainingError(f"precision {precision!r} needs a GPU with bf16 support; use fp32")
    if precision == "pure_bf16":
        return torch.bfloat16, torch.bfloat16, True
    return torch.bfloat16, torch.float32, True  # bf16: the study's mixed precision


def trainer_arguments(hyper: Hyperparameters, trainer_dir: Path, device: str, bf16: bool) -> dict[str, Any]:
    """The arguments of every method's trainer config (transformers TrainingArguments)."""
    return {
        "output_dir": str(trainer_dir),
        "per_device_train_batch_size": hyper.per_device_batch_size,
        "gradient_accumulation_steps": hyper.gradient_accumulation_steps,
        "learning_rate": hyper.learning_rate,
        "num_train_epochs": hyper.epochs,
        "max_steps": hyper.max_steps if hyper.max_steps is not None else -1,
        "lr_scheduler_type": hyper.lr_scheduler,
        # transformers 5 reads a float below 1 as a share of the steps (there is no warmup_ratio any more).
        "warmup_steps": hyper.warmup_ratio,
        "weight_decay": hyper.weight_decay,
        "logging_steps": hyper.logging_steps,
        "save_strategy": "steps" if hyper.save_steps else "no",
        "save_steps": hyper.save_steps or 500,
        "seed": hyper.seed,
        "data_seed": hyper.seed,
        "bf16": bf16,
        "use_cpu": device == "cpu",
        "deepspeed": hyper.deepspeed,
        "report_to": "none",
        # The rows are read back by the collator (SFT) or the trainer's prompt rendering (GRPO), whole.
        "remove_unused_columns": False,
        "dataloader_num_workers": 0,
    }


def sft_config(hyper: Hyperparameters, trainer_dir: Path, device: str, bf16: bool, validate: bool = False) -> Any:
    from trl import SFTConfig

    return SFTConfig(
        **trainer_arguments(hyper, trainer_dir, device, bf16),
        eval_strategy="steps" if validate else "no",
        eval_steps=hyper.eval_steps,
        per_device_eval_batch_size=hyper.per_device_eval_batch_size,
        activation_checkpointing=hyper.gradient_checkpointing,
        # The collator builds every model input itself.
        dataset_kwargs={"skip_prepare_dataset": True},
        max_length=None,
    )


def grpo_config(hyper: Hyperparameters, grpo: GRPOSettings, trainer_dir: Path, device: str, bf16: bool) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(
        **trainer_arguments(hyper, trainer_dir, device, bf16),
        activation_checkpointing=hyper.gradient_checkpointing,
        num_generations=grpo.num_generations,
        max_completion_length=grpo.max_completion_length,
        temperature=grpo.temperature,
        beta=grpo.beta,
        num_iterations=1,
        reward_weights=[grpo.reward_weights["accuracy"], grpo.reward_weights["format"]],
    )


class _StepTimer:
    """Seconds of each optimiser step (a TrainerCallback; the class is made when transformers is loaded)."""

    @staticmethod
    def make() -> Any:
        from transformers import TrainerCallback

        class StepTimer(TrainerCallback):
            def __init__(self) -> None:
                self.seconds: list[float] = []
                self._started = 0.0

            def on_step_begin(self, args, state, control, **kwargs):
                self._started = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                self.seconds.append(time.perf_counter() - self._started)

        return StepTimer()


@dataclass
class FitResult:
    model: Any
    losses: list[dict[str, float]]
    step_seconds: list[float]
    runtime_s: float
    trainer: Any
    evaluations: list[dict[str, float]] = field(default_factory=list)


def fit_stage(
    backbone: Backbone,
    records: Sequence[TrainingRecord],
    stage: StageSettings,
    settings: TrainingSettings,
    trainer_dir: str | os.PathLike,
    *,
    device: str,
    resume: bool = False,
    validation: Sequence[TrainingRecord] = (),
    collator: PairwiseSFTCollator | None = None,
) -> FitResult:
    """Train `backbone` on `records` with the stage's hyperparameters and the run's method (SFT or GRPO),
    evaluating `validation` every eval_steps and at the end; return the trained model (LoRA merged)."""
    hyper = stage.hyperparameters
    _, trained_dtype, autocast = compute_dtypes(hyper.precision, device)
    if trained_dtype != backbone.model.dtype:
        # Mixed precision keeps fp32 master copies of what trains; the fixed encoders stay in bf16.
        for parameter in backbone.model.parameters():
            if parameter.requires_grad:
                parameter.data = parameter.data.to(trained_dtype)
    peft_config = lora_config(settings.lora, backbone) if settings.finetuning == LORA else None
    collator = collator or stage_collator(backbone, settings, hyper)
    grpo = settings.method == GRPO
    timer = _StepTimer.make()
    callbacks = [timer]
    if validation:
        steps = hyper.eval_steps if grpo else None
        callbacks.append(ValidationCallback.make(collator, validation, hyper.per_device_eval_batch_size, steps))
    build = _grpo_trainer if grpo else _sft_trainer
    trainer = build(
        backbone, records, validation, settings, hyper, Path(trainer_dir), device, autocast, collator, peft_config
    )
    for callback in callbacks:
        trainer.add_callback(callback)
    started = time.perf_counter()
    checkpoints = sorted(Path(trainer_dir).glob("checkpoint-*")) if resume else []
    trainer.train(resume_from_checkpoint=str(checkpoints[-1]) if checkpoints else None)
    evaluations = callbacks[1].evaluations if validation else []
    if validation and (not evaluations or evaluations[-1]["step"] != trainer.state.global_step):
        if grpo:
            callbacks[1].evaluate(trainer.model, int(trainer.state.global_step), None)
        else:
            trainer.evaluate()  # the stage's final model is always evaluated
    runtime = time.perf_counter() - started
    model = trainer.accelerator.unwrap_model(trainer.model)
    if peft_config is not None:
        model = model.merge_and_unload()
    return FitResult(
        model=model,
        losses=logged_losses(trainer.state.log_history),
        step_seconds=timer.seconds,
        runtime_s=runtime,
        trainer=trainer,
        evaluations=evaluations,
    )


def logged_losses(log_history: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
    """Every logged training loss with its step and learning rate (and, for GRPO, the mean reward)."""
    losses = []
    for entry in log_history:
        if "loss" not in entry:
            continue
        logged = {
            "step": int(entry["step"]),
            "loss": float(entry["loss"]),
            "learning_rate": float(entry["learning_rate"]),
        }
        losses.append({**logged, **({"reward": float(entry["reward"])} if "reward" in entry else {})})
    return losses


def _sft_trainer(backbone, records, validation, settings, hyper, trainer_dir, device, autocast, collator, peft) -> Any:
    from datasets import Dataset
    from trl import SFTTrainer

    return SFTTrainer(
        model=backbone.model,
        args=sft_config(hyper, trainer_dir, device, autocast, validate=bool(validation)),
        train_dataset=Dataset.from_list([record.as_row() for record in records]),
        eval_dataset=Dataset.from_list([record.as_row() for record in validation]) if validation else None,
        data_collator=collator,
        processing_class=backbone.processor,
        peft_config=peft,
    )


def _grpo_trainer(backbone, records, validation, settings, hyper, trainer_dir, device, autocast, collator, peft) -> Any:
    from datasets import Dataset

    return make_trainer_class()(
        model=backbone.model,
        reward_funcs=list(REWARD_FUNCTIONS),
        args=grpo_config(hyper, settings.grpo, trainer_dir, device, autocast),
        train_dataset=Dataset.from_list(grpo_rows(records)),
        processing_class=backbone.processor,
        peft_config=peft,
        collator=collator,
    )


def stage_collator(backbone: Backbone, settings: TrainingSettings, hyper: Hyperparameters) -> PairwiseSFTCollator:
    return PairwiseSFTCollator(backbone.processor, settings.system_prompt, settings.max_response_s, hyper.cutoff_len)


def prepare_records(
    records: Sequence[TrainingRecord],
    collator: PairwiseSFTCollator,
    hyper: Hyperparameters,
    cache_dir: str | os.PathLike,
    workers: int | None = None,
) -> tuple[list[TrainingRecord], list[TrainingRecord], CutoffReport]:
    """(training, validation) records of a stage: those whose prompt fits under cutoff_len (lengths measured once
    per record, in parallel, on one rank: `training.lengths`), split by response pair."""
    if hyper.cutoff_len:
        lengths, _ = prompt_lengths(records, collator, cache_dir, workers=workers)
    else:
        lengths = [0] * len(records)
    kept, cutoff = apply_cutoff(records, lengths, hyper.cutoff_len)
    train, validation = split_validation(kept, hyper.val_size, hyper.seed)
    return train, validation, cutoff


def save_checkpoint(model: Any, processor: Any, target: Path, dtype: torch.dtype, stage_log: dict[str, Any]) -> None:
    """Model, processor and stage log in `target`, written to a staging folder first and renamed into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.to(dtype).save_pretrained(staging)
        processor.save_pretrained(staging)
        write_json(staging / STAGE_FILE, stage_log)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _records_fingerprint(records: Sequence[TrainingRecord]) -> str:
    return stable_hash([[r.user, r.output, [[a, os.path.getsize(a)] for a in r.audios]] for r in records])


def stage_fingerprint(
    settings: TrainingSettings, stage: StageSettings, init_from: str, init_fingerprint: str, records_hash: str
) -> str:
    shared = {
        key: value
        for key, value in settings.as_dict().items()
        if key not in ("output_dir", "datasets", "stages", "device", "num_threads", "preparation_workers")
    }
    return stable_hash(
        {"settings": shared, "stage": asdict(stage), "init": [init_from, init_fingerprint], "records": records_hash}
    )


def _previous_log(checkpoint: Path, fingerprint: str) -> dict[str, Any] | None:
    stage_file = checkpoint / STAGE_FILE
    if not stage_file.is_file():
        return None
    log = read_json(stage_file)
    return log if log.get("fingerprint") == fingerprint else None


# What a distributed launcher (accelerate launch, torchrun, deepspeed) sets for every process.
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


def single_process_launch(
    settings: TrainingSettings, environ: MutableMapping[str, str] | None = None
) -> dict[str, str]:
    """The distributed environment of one process, set when a stage uses DeepSpeed and no launcher started the
    command: DeepSpeed initializes its process group from RANK, LOCAL_RANK, WORLD_SIZE and the rendezvous address,
    which only a launcher sets, so `lalm-judge pairwise train` on one GPU would not start without them (transformers'
    own one-GPU DeepSpeed tests set the same). Returns what was set (nothing under a launcher or without DeepSpeed)."""
    environ = os.environ if environ is None else environ
    uses_deepspeed = any(stage.hyperparameters.deepspeed for stage in settings.stages)
    if not uses_deepspeed or any(name in environ for name in LAUNCHER_VARIABLES):
        return {}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    values = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    environ.update(values)
    return values


def run_training(
    settings: TrainingSettings, *, resume: bool = False, echo: Callable[[str], None] = print
) -> dict[str, Any]:
    """Train every stage (reusing those already trained on the same inputs); return and write the report."""
    if settings.num_threads:
        torch.set_num_threads(settings.num_threads)
    single_process_launch(settings)
    device = resolve_device(settings.device)
    output_dir = Path(settings.output_dir) / GRPO if settings.method == GRPO else Path(settings.output_dir)
    used = sorted({name for stage in settings.stages for name in stage.mix})
    datasets = {name: read_dataset(settings.datasets[name]) for name in used}
    init_from, init_fingerprint = settings.backbone, settings.revision
    logs = []
    for index, stage in enumerate(settings.stages, 1):
        records = stage_records(stage, datasets, stage.hyperparameters.seed)
        fingerprint = stage_fingerprint(settings, stage, init_from, init_fingerprint, _records_fingerprint(records))
        checkpoint = output_dir / stage.name
        previous = _previous_log(checkpoint, fingerprint)
        if previous is not None:
            echo(f"stage {index}/{len(settings.stages)} {stage.name}: unchanged, reusing {checkpoint}")
            logs.append({**previous, "reused": True})
        else:
            echo(f"stage {index}/{len(settings.stages)} {stage.name}: {len(records)} records from {init_from}")
            logs.append(
                asdict(_train_stage(settings, stage, records, init_from, checkpoint, fingerprint, device, resume))
            )
        init_from, init_fingerprint = str(checkpoint), fingerprint
    report = {
        "judge_model": str(output_dir / settings.stages[-1].name),
        "settings": settings.as_dict(),
        "device": device,
        "stages": logs,
    }
    write_json(output_dir / REPORT_FILE, report)
    return report


def _train_stage(
    settings: TrainingSettings,
    stage: StageSettings,
    records: Sequence[TrainingRecord],
    init_from: str,
    checkpoint: Path,
    fingerprint: str,
    device: str,
    resume: bool,
) -> StageLog:
    load_dtype, _, _ = compute_dtypes(stage.hyperparameters.precision, device)
    revision = settings.revision if init_from == settings.backbone else "main"
    backbone = load_backbone(init_from, revision, load_dtype, device)
    frozen = freeze_encoders(backbone) if settings.freeze_encoders else []
    trainable = trainable_summary(backbone.model)
    cut = audio_cut(records, response_limit_s(backbone.processor, settings.max_response_s))
    collator = stage_collator(backbone, settings, stage.hyperparameters)
    cache_dir = Path(settings.output_dir) / CACHE_DIR
    records, validation, cutoff = prepare_records(
        records, collator, stage.hyperparameters, cache_dir, settings.preparation_workers
    )
    result = fit_stage(
        backbone,
        records,
        stage,
        settings,
        checkpoint.parent / TRAINER_DIR / stage.name,
        device=device,
        resume=resume,
        validation=validation,
        collator=collator,
    )
    if not result.losses:
        raise TrainingError(
            f"stage {stage.name}: no loss was logged (logging_steps {stage.hyperparameters.logging_steps} is more "
            f"than the {result.trainer.state.global_step} steps of the stage)"
        )
    log = StageLog(
        name=stage.name,
        init_from=init_from,
        fingerprint=fingerprint,
        n_records=len(records),
        records=describe_counts(records),
        audio_cut=asdict(cut),
        trainable=trainable,
        frozen_modules=frozen,
        steps=int(result.trainer.state.global_step),
        losses=result.losses,
        seconds_per_step=sum(result.step_seconds) / max(1, len(result.step_seconds)),
        runtime_s=result.runtime_s,
        versions=package_versions(),
        n_validation=len(validation),
        evaluations=result.evaluations,
        cutoff={**asdict(cutoff), "n_answers_cut": len(collator.answers_cut)},
    )
    if result.trainer.is_world_process_zero():
        save_checkpoint(result.model, backbone.processor, checkpoint, load_dtype, asdict(log))
    result.trainer.accelerator.wait_for_everyone()
    return log


def read_stage_log(checkpoint: str | os.PathLike) -> dict[str, Any]:
    path = Path(checkpoint) / STAGE_FILE
    if not path.is_file():
        raise TrainingError(f"{checkpoint} is not a training stage's checkpoint (no {STAGE_FILE})")
    return json.loads(path.read_text(encoding="utf-8"))
