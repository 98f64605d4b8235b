"""The training preparation at SpeechFeedback's size: the `cutoff_len` length pass (`lalm_judge.training.lengths`)
measured on a reduced number of synthetic SageLM records and extrapolated to the 324,774 records of SpeechFeedback.

    python -m bench.training_preparation --records 64 --seconds 20 --workers 2
    python -m bench.training_preparation --model /models/Qwen2-Audio-7B-Instruct --records 256 --workers 16

Each record has two responses of `--seconds` of audio (at `--sample-rate`: 16 kHz as the preference builder writes
them by default; 24 kHz as many TTS engines speak, which the pass resamples) and SageLM's instruction and a
SageLM-length rationale (bench/gpu_train.py's). The processor is the tiny random-weight Qwen2-Audio's of
bench/models.py unless `--model` names a backbone folder: its feature extractor (Whisper's, 128 mel bins, 30 s
windows) and chat template are Qwen2-Audio's, so the work per record is the real one; only its small tokenizer
differs. Three passes over the same records, each timed in wall-clock and CPU seconds (the pool's workers
included): one process (cold cache), a pool of `--workers` processes (cold cache, the pool's start included), and
a pass on the warm cache (every record a hit: a rerun, a later stage). The extrapolation scales the CPU seconds per
record, which do not depend on how busy the machine is, to SpeechFeedback's size, divided by the number of workers
(each record is measured on its own, so a pool on an otherwise idle node scales with its CPUs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import transformers

from bench.gpu_train import INSTRUCTION, RATIONALE
from bench.models import build_tiny_qwen2audio
from lalm_judge.core.files import package_versions, write_json
from lalm_judge.training.collator import PairwiseSFTCollator
from lalm_judge.training.lengths import available_cpus, prompt_lengths
from lalm_judge.training.records import read_dataset
from lalm_judge.training.settings import DatasetSource

SPEECHFEEDBACK_RECORDS = 324_774
SYSTEM_PROMPT = "You are a helpful assistant."


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (a pool's workers, once the pool is shut down)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed_pass(records, collator, cache_dir: Path, workers: int) -> dict[str, float]:
    """One length pass: wall and CPU seconds (its pool's included), and how many records it measured."""
    wall, cpu = time.perf_counter(), _cpu_seconds()
    _, measured = prompt_lengths(records, collator, cache_dir, workers=workers, pool_from=0)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": _cpu_seconds() - cpu, "measured": measured}


def write_bench_records(folder: Path, n: int, seconds: float, sample_rate: int) -> Path:
    """`n` SageLM records, each with two responses of `seconds` of noise at `sample_rate`."""
    rng = np.random.default_rng(0)
    records = []
    for index in range(n):
        clips = [f"pair{index}-{response}.wav" for response in (1, 2)]
        for clip in clips:
            sf.write(
                folder / clip, (0.05 * rng.standard_normal(int(seconds * sample_rate))).astype(np.float32), sample_rate
            )
        winner, loser = ("1", "2") if index % 2 == 0 else ("2", "1")
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


def extrapolate(cpu_s_per_record: float, workers: int) -> float:
    """Hours of the length pass over SpeechFeedback's records with `workers` processes."""
    return SPEECHFEEDBACK_RECORDS * cpu_s_per_record / workers / 3600


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a backbone folder whose processor measures (default: the tiny Qwen2-Audio)")
    parser.add_argument("--records", type=int, default=64, help="synthetic records measured (default 64)")
    parser.add_argument("--seconds", type=float, default=20.0, help="audio per response (default 20)")
    parser.add_argument("--sample-rate", type=int, default=16000, help="of the responses' audio (default 16000)")
    parser.add_argument("--workers", type=int, default=available_cpus(), help="processes of the pooled pass")
    parser.add_argument("--out", default="results/bench/training_preparation.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="training_preparation."))
    model = args.model or str(build_tiny_qwen2audio(work / "model"))
    processor = transformers.AutoProcessor.from_pretrained(model)
    collator = PairwiseSFTCollator(processor, SYSTEM_PROMPT, 60.0)
    records_file = write_bench_records(work, args.records, args.seconds, args.sample_rate)
    records = read_dataset(DatasetSource("bench", (str(records_file),), str(work)))

    alone = timed_pass(records, collator, work / "one", workers=1)
    pooled = timed_pass(records, collator, work / "pool", workers=args.workers) if args.workers > 1 else None
    warm = timed_pass(records, collator, work / "one", workers=1)
    per_record = alone["cpu_s"] / len(records)
    result = {
        "records": len(records),
        "seconds_per_response": args.seconds,
        "sample_rate": args.sample_rate,
        "processor": type(processor).__name__,
        "model": args.model or "tiny random-weight Qwen2-Audio (bench/models.py)",
        "workers": args.workers,
        "cpus_available": available_cpus(),
        "load_average": os.getloadavg()[0],
        "one_process": alone,
        "pool": pooled,
        "warm_cache": warm,
        "cpu_s_per_record": per_record,
        "wall_s_per_record_one_process": alone["wall_s"] / len(records),
        "records_per_s_pool": len(records) / pooled["wall_s"] if pooled else None,
        "speechfeedback_records": SPEECHFEEDBACK_RECORDS,
        "speechfeedback_hours": {str(n): extrapolate(per_record, n) for n in (1, args.workers, 16, 64)},
        "speechfeedback_warm_s": SPEECHFEEDBACK_RECORDS * warm["wall_s"] / len(records),
        "versions": package_versions(),
    }
    write_json(args.out, result)
    print(
        f"{len(records)} records x 2 x {args.seconds:g} s at {args.sample_rate} Hz: {per_record:.3f} CPU s/record "
        f"({result['wall_s_per_record_one_process']:.3f} s wall, load {result['load_average']:.1f}); "
        + (f"pool of {args.workers}: {result['records_per_s_pool']:.1f} records/s; " if pooled else "")
        + f"warm cache: {warm['wall_s'] * 1000 / len(records):.2f} ms/record"
    )
    hours = ", ".join(f"{n} worker(s) {h:.1f} h" for n, h in result["speechfeedback_hours"].items())
    print(f"SpeechFeedback ({SPEECHFEEDBACK_RECORDS:,} records): {hours}; warm {result['speechfeedback_warm_s']:.0f} s")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
