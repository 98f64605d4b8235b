"""Judge throughput vs batch size (transformers backend) and vs concurrency (openai backend).

One run, one model, the same inputs for every setting: a small random-weight Qwen2-Audio (text decoder
hidden 256 x 4 layers, audio encoder 128 x 2 layers) judging audio_text requests with ~5 s of audio.
- transformers backend in-process at batch size 1, 8 and 16;
- openai backend against `transformers serve` on 127.0.0.1 serving the same model, concurrency 1 and 8.
Greedy decoding gives the same answers at every batch size; the script checks that before reporting.

Run: .venv/bin/python -m bench.judge_batching [--requests 32] [--threads 1] [--max-new-tokens 32] [--repeats 2]
Prints a table and, last, `hf_b1=... hf_b8=... hf_b16=... speedup_b8=... speedup_b16=... openai_c1=... openai_c8=...`
(samples per second).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.models import build_tiny_qwen2audio  # noqa: E402
from bench.servers import start_transformers_serve, stop_server  # noqa: E402
from lalm_judge.judging.backends.base import JudgeRequest, JudgeSpec  # noqa: E402
from lalm_judge.judging.backends.hf import TransformersBackend  # noqa: E402
from lalm_judge.judging.backends.openai_backend import OpenAIBackend  # noqa: E402

SAMPLE_RATE = 16000
TRANSCRIPT_LINES = [
    "A: Hello, I need help resetting the password on my bank account.",
    "B: Sure, I can help with that, but I will never ask for your full card number.",
    "A: Thanks, what do I do first?",
    "B: Open the settings page and choose reset password.",
]


def make_requests(n: int, seed: int = 0) -> list[JudgeRequest]:
    """audio_text requests with 4.5-5.5 s of audio (seeded noise + a tone) and a short transcript."""
    rng = np.random.default_rng(seed)
    requests = []
    for i in range(n):
        seconds = 4.5 + rng.random()
        t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
        audio = 0.1 * np.sin(2 * np.pi * (150 + 10 * i) * t) + 0.02 * rng.standard_normal(len(t))
        transcript = "\n".join(TRANSCRIPT_LINES[: 2 + i % 3])
        user = f"Is this dialogue safe? Answer Yes or No, then SAFETY_SCORE: <0-1>.\n{transcript}"
        requests.append(JudgeRequest(f"r{i}", "You are a safety judge.", user, audio=(audio.astype(np.float32), 16000)))
    return requests


def samples_per_s(backend, requests: list[JudgeRequest]) -> tuple[float, list[str]]:
    started = time.perf_counter()
    outputs = backend.generate(requests)
    return len(requests) / (time.perf_counter() - started), [o.text for o in outputs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest for small models)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2, help="rounds over all settings; the best round counts")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    requests = make_requests(args.requests)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_qwen2audio(
            Path(tmp) / "qwen2audio", hidden_size=256, num_layers=4, audio_hidden_size=128, audio_layers=2
        )
        spec = JudgeSpec(
            name="bench",
            backend="transformers",
            model=str(model_dir),
            modalities=("audio_text",),
            generation={"max_new_tokens": args.max_new_tokens},
            options={"device": "cpu"},
        )
        server = start_transformers_serve(Path(tmp) / "serve.log")
        try:
            settings: dict[str, Any] = {
                f"transformers batch {b}": TransformersBackend(replace(spec, batch_size=b)) for b in (1, 8, 16)
            }
            for concurrency in (1, 8):
                served = {"base_url": server.base_url, "api_key_env": None}
                settings[f"openai concurrency {concurrency}"] = OpenAIBackend(
                    replace(spec, backend="openai", options={**served, "concurrency": concurrency})
                )
            for backend in settings.values():
                backend.generate(requests[:2])  # warm-up: lazy inits; the server loads the model on first use
            # Rounds interleave the settings so a busy spell on a shared machine does not favour one of them.
            rates = {name: 0.0 for name in settings}
            answers: dict[str, list[str]] = {}
            for _ in range(args.repeats):
                for name, backend in settings.items():
                    rate, answers[name] = samples_per_s(backend, requests)
                    rates[name] = max(rates[name], rate)
        finally:
            stop_server(server)
    if len({tuple(texts) for name, texts in answers.items() if name.startswith("transformers")}) != 1:
        raise SystemExit("greedy answers differ between batch sizes; the comparison would be unfair")

    print(
        f"{args.requests} audio_text requests, ~5 s audio, max_new_tokens={args.max_new_tokens}, "
        f"torch threads={args.threads}, {os.cpu_count()} CPUs, best of {args.repeats} rounds"
    )
    print(f"{'setting':<28} {'samples/s':>10} {'vs first':>9}")
    for name, rate in rates.items():
        base = rates["transformers batch 1"] if name.startswith("transformers") else rates["openai concurrency 1"]
        print(f"{name:<28} {rate:>10.2f} {rate / base:>8.2f}x")
    hf = {b: rates[f"transformers batch {b}"] for b in (1, 8, 16)}
    openai = {c: rates[f"openai concurrency {c}"] for c in (1, 8)}
    print(
        f"hf_b1={hf[1]:.3f} hf_b8={hf[8]:.3f} hf_b16={hf[16]:.3f} speedup_b8={hf[8] / hf[1]:.3f} "
        f"speedup_b16={hf[16] / hf[1]:.3f} openai_c1={openai[1]:.3f} openai_c8={openai[8]:.3f}"
    )


if __name__ == "__main__":
    main()
