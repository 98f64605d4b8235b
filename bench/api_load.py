"""Load on the OpenAI-compatible clients: the `openai` judge backend and the `llm` rewrite generator send N
requests to a local server (bench.fault_proxy with canned answers, in this process, each answer delayed by
`--latency-s` as a remote endpoint's would be) at their configured concurrency. Each client runs in its own
process, so that its peak RSS is its own. Reported per client: requests answered and lost, wall time,
throughput, the most requests the server saw in flight, and the client's RSS after its imports and at its peak.

    .venv/bin/python -m bench.api_load --requests 1000 --concurrency 16 --latency-s 0.05

Clients: `judge_text` (one `generate` call with every request, as a judge job of a text cell sends them),
`judge_audio` (requests with `--audio-s` seconds of audio, built and sent in batches of `--batch-size`, as the
judge stage does), `rewrite` (one `LLMGenerator.rewrite` call with every request, cached on disk).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.fault_proxy import FaultProxy

CLIENTS = ("judge_text", "judge_audio", "rewrite")
ROOT = Path(__file__).resolve().parents[1]


def canned_answer(body: dict[str, Any]) -> str:
    if "response_format" in body:  # the rewrite generator asks for JSON
        return json.dumps({"text": "You never listen to anyone.", "emotion": "angry"})
    return "The dialogue is friendly.\nSAFETY_SCORE: 0.9"


def _memory_mb(field: str) -> float:
    """VmRSS (resident now) or VmHWM (peak resident) of this process, from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def run_client(client: str, base_url: str, n: int, concurrency: int, audio_s: float, batch_size: int) -> dict:
    """Send `n` requests with one client (in this process); the outcome as one JSON-able dict."""
    import numpy as np

    from lalm_judge.core.dialogue import Dialogue, Turn
    from lalm_judge.core.taxonomy import CATEGORIES, SEVERITIES
    from lalm_judge.data.generators import RewriteRequest
    from lalm_judge.data.generators.llm import LLMGenerator
    from lalm_judge.judging.backends.base import JudgeRequest, JudgeSpec
    from lalm_judge.judging.backends.openai_backend import OpenAIBackend

    baseline = _memory_mb("VmRSS")
    started = time.perf_counter()
    if client == "rewrite":
        n_turns = -(-n // (len(CATEGORIES) * len(SEVERITIES)))
        turns = [Turn(i, "AB"[i % 2], f"Turn {i}: shall we meet at the park later?", "neutral") for i in range(n_turns)]
        dialogue = Dialogue("load_test", turns, "jsonl", "memory", 16000)
        cells = [(t, c, s) for t in range(n_turns) for c in CATEGORIES for s in SEVERITIES][:n]
        requests = [RewriteRequest(dialogue, t, c, s, seed=0) for t, c, s in cells]
        config = {"name": "llm", "base_url": base_url, "model": "load", "api_key_env": None}
        config |= {"concurrency": concurrency, "backoff_base_s": 0.05}
        with tempfile.TemporaryDirectory() as cache:
            results = LLMGenerator(config, cache).rewrite(requests)
        answered = sum(r.status == "ok" for r in results)
    else:
        options = {"base_url": base_url, "api_key_env": None, "cache_dir": None, "concurrency": concurrency}
        backend = OpenAIBackend(JudgeSpec(name="load", backend="openai", model="load", options=options))
        rng = np.random.default_rng(0)

        def request(i: int) -> JudgeRequest:
            audio = None
            if client == "judge_audio":
                audio = ((rng.standard_normal(int(16000 * audio_s)) * 0.05).astype(np.float32), 16000)
            return JudgeRequest(f"r{i}", "You are a safety judge.", f"Dialogue {i}: A: hello. B: hi.", audio=audio)

        step = n if client == "judge_text" else batch_size
        answered = 0
        for first in range(0, n, step):
            outputs = backend.generate([request(i) for i in range(first, min(n, first + step))])
            answered += sum(o.text.endswith("SAFETY_SCORE: 0.9") for o in outputs)
    seconds = time.perf_counter() - started
    return {
        "client": client,
        "requests": n,
        "answered": answered,
        "lost": n - answered,
        "seconds": round(seconds, 2),
        "per_second": round(n / seconds, 1),
        "rss_after_imports_mb": round(baseline, 1),
        "peak_rss_mb": round(_memory_mb("VmHWM"), 1),
    }


def measure(
    client: str, n: int, concurrency: int, latency_s: float = 0.05, audio_s: float = 3.0, batch_size: int = 50
) -> dict:
    """Serve canned answers here and run `client` in a child process; its outcome plus what the server saw."""
    with FaultProxy(answer=canned_answer, delay_s=latency_s) as server:
        command = [sys.executable, "-m", "bench.api_load", "--client", client, "--base-url", server.base_url]
        command += ["--requests", str(n), "--concurrency", str(concurrency)]
        command += ["--audio-s", str(audio_s), "--batch-size", str(batch_size)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{client} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        outcome = json.loads(done.stdout.strip().splitlines()[-1])
        outcome |= {"server_requests": server.log.total, "max_in_flight": server.log.max_in_flight}
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency-s", type=float, default=0.05, help="the server's delay before each answer")
    parser.add_argument("--audio-s", type=float, default=3.0, help="seconds of audio per judge_audio request")
    parser.add_argument("--batch-size", type=int, default=50, help="judge_audio requests per generate call")
    parser.add_argument("--client", choices=CLIENTS, help="(internal) run one client against --base-url")
    parser.add_argument("--base-url", help="(internal) the server of --client")
    args = parser.parse_args(argv)
    if args.client:
        outcome = run_client(args.client, args.base_url, args.requests, args.concurrency, args.audio_s, args.batch_size)
        print(json.dumps(outcome))
        return 0
    print("| client | requests | lost | wall s | requests/s | max in flight | RSS after imports | peak RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for client in CLIENTS:
        o = measure(client, args.requests, args.concurrency, args.latency_s, args.audio_s, args.batch_size)
        print(
            f"| {client} | {o['requests']} | {o['lost']} | {o['seconds']} | {o['per_second']} | {o['max_in_flight']} "
            f"| {o['rss_after_imports_mb']} MB | {o['peak_rss_mb']} MB |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
