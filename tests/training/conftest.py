"""A tiny SageLM-style training set: records in LLaMA-Factory's alpaca layout with two short response clips."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

SAMPLE_RATE = 16000
INSTRUCTION = (
    "Below are two responses for a given task. The task is defined by the Instruction. Evaluate in terms of "
    "**{aspect}** and indicate a better response using 1, 2 or Tie.\n### Instruction:\n{query}\n\n"
    "### Response 1:\n<audio>\n\n### Response 2:\n<audio>\n\n"
)
LABELS = ("1", "2", "Tie")


def tone(seconds: float, frequency: float) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.2 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)


def write_records(folder: Path, name: str, aspects: tuple[str, ...], n: int, seconds: float = 1.0) -> Path:
    """`n` records `<name>.json` with their clips under `folder/audio/`; labels cycle through 1, 2, Tie."""
    audio = folder / "audio"
    audio.mkdir(parents=True, exist_ok=True)
    records = []
    for index in range(n):
        clips = []
        for response in (1, 2):
            clip = f"{name}-{index}-{response}.wav"
            sf.write(audio / clip, tone(seconds, 180.0 + 40 * index + 90 * response), SAMPLE_RATE)
            clips.append(clip)
        label = LABELS[index % 3]
        records.append(
            {
                "instruction": INSTRUCTION.format(aspect=aspects[index % len(aspects)], query=f"What is item {index}?"),
                "input": "",
                "output": f"{label}\nResponse {label} is more helpful in item {index}.",
                "audios": clips,
            }
        )
    path = folder / f"{name}.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


@pytest.fixture
def training_data(tmp_path) -> dict[str, Path]:
    """A semantic set of 4 records and an acoustic set of 2, sharing one audio folder."""
    return {
        "semantic": write_records(tmp_path, "semantic", ("helpfulness", "honesty"), 4),
        "acoustic": write_records(tmp_path, "acoustic", ("emotion instruction following",), 2),
        "audio_root": tmp_path / "audio",
    }


def training_section(model: Path, data: dict[str, Path], output_dir: Path, **hyperparameters) -> dict:
    """A `training` section for the tiny backbone: two stages, stage two replaying half the semantic data."""
    return {
        "backbone": str(model),
        "output_dir": str(output_dir),
        "device": "cpu",
        "num_threads": 1,
        "datasets": {
            name: {"records": [str(data[name])], "audio_root": str(data["audio_root"])}
            for name in ("semantic", "acoustic")
        },
        "stages": [
            {"name": "semantic", "mix": {"semantic": 1}},
            {"name": "acoustic", "mix": {"acoustic": 1, "semantic": 0.5}},
        ],
        "hyperparameters": {
            "learning_rate": 1e-3,
            "max_steps": 4,
            "per_device_batch_size": 2,
            "gradient_accumulation_steps": 1,
            "logging_steps": 1,
            "warmup_ratio": 0,
            "lr_scheduler": "constant",
            "gradient_checkpointing": False,
            **hyperparameters,
        },
    }
