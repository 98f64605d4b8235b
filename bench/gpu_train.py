"""GPU check of judge training: a few SFT steps on a full-size random-weight backbone, memory and step time.

    python -m bench.gpu_train --steps 6 --precision bf16 --out results/bench/gpu_train.json
    python -m bench.gpu_train --backbone qwen25_omni_7b --steps 6 --seconds 60
    python -m bench.gpu_train --steps 6 --precision bf16 --finetuning lora   # learning rate 1e-4 unless given
    python -m bench.gpu_train --model /path/to/Qwen2.5-Omni-7B --steps 6     # a real checkpoint folder instead
    python -m bench.gpu_train --tiny --steps 3                                # the same path on CPU, in seconds

By default it builds Qwen2-Audio-7B's architecture (or, with `--backbone qwen25_omni_7b`, the Qwen2.5-Omni-7B
thinker's) with random weights on the GPU, from the full-size dimensions of bench/gpu_judges.py, so nothing
is downloaded. The training goes through the library's own path
(`lalm_judge.training.sft.fit_stage`: the collator, the frozen encoder, TRL's SFTTrainer) on synthetic response
pairs of `--seconds` of audio each (30 s = Qwen2-Audio's window, 750 audio tokens per response) with a
SageLM-length rationale. It records the parameters the optimiser updates (with LoRA: the adapters, counted once
they are attached, from the optimiser's parameter groups), the peak GPU memory (allocated and reserved), the seconds
per optimiser step (the first, which includes warm-up, apart), the learning rate and the losses, and writes them as
JSON with the settings and versions. The learning rate is the study's 1e-5 for full fine-tuning and 1e-4 for LoRA
(`--learning-rate` sets another): low-rank adapters start at zero and need a rate about ten times higher to move the
loss in a few steps. Multi-GPU (ZeRO-2) runs: start it with `accelerate launch` and pass `--deepspeed`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import yaml

from bench.gpu_judges import random_model
from lalm_judge.training.backbone import BACKBONES, Backbone, freeze_encoders, load_backbone
from lalm_judge.training.records import read_dataset
from lalm_judge.training.settings import TrainingSettings
from lalm_judge.training.sft import compute_dtypes, fit_stage, package_versions
from lalm_judge.workflow.config import load_training_section

SAMPLE_RATE = 16000
# Peak learning rates: the study's for full fine-tuning (the config schema's default), ten times it for LoRA.
LEARNING_RATES = {"full": 1.0e-5, "lora": 1.0e-4}
# The random backbones (bench/gpu_judges.py) and the model type each is trained as.
MODEL_TYPES = {"qwen2_audio_7b": "qwen2_audio", "qwen25_omni_7b": "qwen2_5_omni_thinker"}
INSTRUCTION = (
    "Below are two responses for a given task. The task is defined by the Instruction. Evaluate in terms of "
    "**helpfulness** and indicate a better response using 1, 2 or Tie.\n### Instruction:\n{query}\n\n"
    "### Response 1:\n<audio>\n\n### Response 2:\n<audio>\n\n"
)
# About the mean length of SageLM's semantic rationales (348 characters).
RATIONALE = (
    "Response {winner} is more helpful as it answers the question directly, gives the steps in order and names "
    "the one precaution that matters. In contrast, Response {loser} stays general, repeats the question and "
    "leaves out the detail the user asked for, so it is less useful even though both are fluent and polite."
)


def write_records(folder: Path, n: int, seconds: float) -> Path:
    rng = np.random.default_rng(0)
    records = []
    for index in range(n):
        clips = []
        for response in (1, 2):
            clip = f"pair{index}-{response}.wav"
            sf.write(
                folder / clip, (0.05 * rng.standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32), SAMPLE_RATE
            )
            clips.append(clip)
        winner = "1" if index % 2 == 0 else "2"
        loser = "2" if winner == "1" else "1"
        records.append(
            {
                "instruction": INSTRUCTION.format(query=f"How do I prepare item {index} safely?"),
                "input": "",
                "output": f"{winner}\n" + RATIONALE.format(winner=winner, loser=loser),
                "audios": clips,
            }
        )
    path = folder / "records.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def random_backbone(name: str, tiny: bool, dtype: torch.dtype, device: str) -> Backbone:
    """A random-weight backbone: full size, or the tiny dimensions of bench/models.py (`tiny`)."""
    model, processor, _ = random_model(name, device, dims={} if tiny else None, dtype=dtype)
    model_type = MODEL_TYPES[name]
    return Backbone(model=model, processor=processor, model_type=model_type, encoder_modules=BACKBONES[model_type][1])


def optimised_parameters(trainer, model) -> dict[str, int]:
    """The parameters the optimiser updated (with LoRA the adapters: the backbone's own are frozen, and after the
    merge no adapter is left to count) and all parameters of the backbone."""
    updated = {id(p): p.numel() for group in trainer.optimizer.param_groups for p in group["params"]}
    return {
        "trainable_parameters": int(sum(updated.values())),
        "parameters": int(sum(p.numel() for p in model.parameters())),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", help="a local backbone folder (Qwen2-Audio or Qwen2.5-Omni) instead of random weights"
    )
    parser.add_argument("--backbone", choices=sorted(MODEL_TYPES), default="qwen2_audio_7b", help="random architecture")
    parser.add_argument("--tiny", action="store_true", help="a tiny random backbone on CPU (checks the script)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=2, help="per-device batch (the study: 2)")
    parser.add_argument("--accumulation", type=int, default=2, help="gradient accumulation (the study: 2)")
    parser.add_argument("--seconds", type=float, default=30.0, help="audio per response")
    parser.add_argument("--precision", choices=("bf16", "pure_bf16", "fp32"), default="bf16")
    parser.add_argument("--finetuning", choices=("full", "lora"), default="full")
    parser.add_argument("--learning-rate", type=float, help="peak learning rate (default: 1e-5 full, 1e-4 LoRA)")
    parser.add_argument("--no-gradient-checkpointing", action="store_true")
    parser.add_argument("--deepspeed", help="a DeepSpeed config (configs/deepspeed/zero2.json) for multi-GPU runs")
    parser.add_argument("--out", default="results/bench/gpu_train.json")
    args = parser.parse_args(argv)

    device = "cpu" if args.tiny else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device: run on a GPU machine, or pass --tiny for the CPU check")
    work = Path(tempfile.mkdtemp(prefix="gpu_train."))
    records_file = write_records(work, args.steps * args.batch * args.accumulation, args.seconds)
    section = {
        "backbone": args.model or "random",
        "output_dir": str(work / "out"),
        "finetuning": args.finetuning,
        "device": device,
        "datasets": {"bench": {"records": [str(records_file)], "audio_root": str(work)}},
        "stages": [{"name": "bench", "mix": {"bench": 1}}],
        "hyperparameters": {
            "max_steps": args.steps,
            "per_device_batch_size": args.batch,
            "gradient_accumulation_steps": args.accumulation,
            "learning_rate": args.learning_rate or LEARNING_RATES[args.finetuning],
            "precision": "fp32" if args.tiny else args.precision,
            "gradient_checkpointing": not args.no_gradient_checkpointing,
            "logging_steps": 1,
            "deepspeed": args.deepspeed,
        },
    }
    config_file = work / "train.yaml"
    config_file.write_text(yaml.safe_dump({"training": section}))
    settings = TrainingSettings.from_config(load_training_section(config_file))
    (stage,) = settings.stages
    load_dtype, _, _ = compute_dtypes(stage.hyperparameters.precision, device)

    started = time.perf_counter()
    if args.model:
        backbone = load_backbone(args.model, "main", load_dtype, device)
    else:
        backbone = random_backbone(args.backbone, args.tiny, load_dtype, device)
    frozen = freeze_encoders(backbone)
    build_s = time.perf_counter() - started
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    result = fit_stage(
        backbone, read_dataset(settings.datasets["bench"]), stage, settings, work / "trainer", device=device
    )
    steps = result.step_seconds
    figures = {
        "backbone": args.model or f"random {args.backbone}{' (tiny dimensions)' if args.tiny else ''}",
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "finetuning": args.finetuning,
        "precision": section["hyperparameters"]["precision"],
        "gradient_checkpointing": not args.no_gradient_checkpointing,
        "per_device_batch": args.batch,
        "accumulation": args.accumulation,
        "seconds_per_response": args.seconds,
        "frozen_modules": frozen,
        **optimised_parameters(result.trainer, backbone.model),
        "learning_rate": section["hyperparameters"]["learning_rate"],
        "build_or_load_s": round(build_s, 1),
        "first_step_s": round(steps[0], 2) if steps else None,
        "seconds_per_step": round(statistics.median(steps[1:] or steps), 2) if steps else None,
        "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1) if device == "cuda" else None,
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 1) if device == "cuda" else None,
        "losses": [round(entry["loss"], 4) for entry in result.losses],
        "versions": package_versions(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps({k: v for k, v in figures.items() if k != "versions"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
