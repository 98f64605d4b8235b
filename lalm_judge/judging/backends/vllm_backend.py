"""The `vllm` judge backend: offline vLLM engine, every request of a job submitted in one `generate` call.

Prompts are rendered by the model's own Hugging Face chat template from the shared conversation
(`chat.build_conversation`: system, then user with the audio part first and the text prompt), and the
waveform travels beside the prompt as `multi_modal_data={"audio": [(array, sample_rate)]}` (one entry per
audio item, in order, for requests with several); vLLM resamples it to the model's rate. Decoding is
greedy (`temperature=0`). P(safe) comes from the first generated position's top-k logprobs
(`options.top_logprobs`, default 20): for every request when `options.score_tokens` is set, else for each
request that carries `answer_tokens` (the `calibrated` prompt); only those requests ask vLLM for logprobs
(each prompt gets its own `SamplingParams`).

Options: `tensor_parallel_size` (1), `max_model_len` (the model's), `gpu_memory_utilization` (0.9),
`audio_per_prompt` (1; vLLM's `limit_mm_per_prompt`, 2 for the pairwise track), `trust_remote_code`
(false), `merge_system_prompt`, `score_tokens`, `top_logprobs`, and `engine_kwargs` (passed to `vllm.LLM`
as is, e.g. `enforce_eager`).

vLLM runs only in its GPU environment (`envs/judge-vllm.yaml`; vllm 0.32.0 pins torch 2.13.0 and
transformers >=5.16.1,<5.20). MERaLiON-2 (`MERaLiON/MERaLiON-2-10B`, `trust_remote_code: true`) needs the
`vllm-plugin-meralion2` plugin, which registers its architecture through vLLM's plugin entry point at
engine start (no import here). Its 0.3.x line supports only vLLM >=0.12,<0.17 (it refuses newer
versions at start), so MERaLiON-2 runs in a separate environment pinned to vllm 0.16.0 (torch 2.9.1,
transformers 4.57.6) with vllm-plugin-meralion2 0.3.0; the plugin also asks for the FlashInfer
attention backend (`VLLM_ATTENTION_BACKEND=FLASHINFER`).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from lalm_judge.core.registry import MissingDependency
from lalm_judge.judging.backends.base import JudgeOutput, JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.chat import build_conversation, p_safe_from_logprobs, score_token_ids

DEFAULT_MAX_NEW_TOKENS = 256
DEFAULT_TOP_LOGPROBS = 20


class VLLMBackend:
    """One vLLM engine per backend; `generate` hands vLLM the whole job so it schedules the batches."""

    def __init__(self, spec: JudgeSpec):
        try:
            import vllm
        except ImportError as err:
            raise MissingDependency(
                f"judge {spec.name}: backend 'vllm' needs the vllm package ({err}); "
                "run this judge in the vLLM GPU environment (envs/judge-vllm.yaml)"
            ) from err
        from transformers import AutoProcessor, AutoTokenizer

        self.spec = spec
        options = spec.options
        self.uses_audio = any(modality != "text" for modality in spec.modalities)
        trust_remote_code = bool(options.get("trust_remote_code", False))
        hf_kwargs = {"revision": spec.revision, "trust_remote_code": trust_remote_code}
        # Text-only judges need only the tokenizer's template; audio judges need the processor's.
        loader = AutoProcessor if self.uses_audio else AutoTokenizer
        self.template_owner = loader.from_pretrained(spec.model, **hf_kwargs)
        self.tokenizer = getattr(self.template_owner, "tokenizer", self.template_owner)
        engine_kwargs: dict[str, Any] = {
            "model": spec.model,
            "revision": spec.revision,
            "dtype": spec.dtype,
            "tensor_parallel_size": int(options.get("tensor_parallel_size", spec.gpus or 1)),
            "max_model_len": options.get("max_model_len"),
            "gpu_memory_utilization": float(options.get("gpu_memory_utilization", 0.9)),
            "trust_remote_code": trust_remote_code,
            "seed": 0,
        }
        # Audio items one prompt may carry (2 for the pairwise track's two responses).
        self.audio_per_prompt = int(options.get("audio_per_prompt", 1)) if self.uses_audio else 0
        if self.uses_audio:
            engine_kwargs["limit_mm_per_prompt"] = {"audio": self.audio_per_prompt}
        engine_kwargs.update(options.get("engine_kwargs", {}))
        self.llm = vllm.LLM(**engine_kwargs)
        score_tokens = options.get("score_tokens")
        self.score_ids = score_token_ids(self.tokenizer, score_tokens) if score_tokens else None
        max_tokens = int(spec.generation.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
        self.sampling_params = vllm.SamplingParams(temperature=0.0, max_tokens=max_tokens)
        # For requests read for P(safe): the same decoding, plus the top-k logprobs of each position.
        self.scored_sampling_params = vllm.SamplingParams(
            temperature=0.0,
            max_tokens=max_tokens,
            logprobs=int(options.get("top_logprobs", DEFAULT_TOP_LOGPROBS)),
        )

    def describe(self) -> dict[str, str]:
        return {"model": self.spec.model, "model_revision": self.spec.revision}

    def build_prompt(self, request: JudgeRequest) -> dict[str, Any]:
        """The vLLM prompt dict of one request: rendered chat text, plus its waveforms when it has audio."""
        if request.audio_items and not self.uses_audio:
            raise ValueError(
                f"judge {self.spec.name}: request {request.request_id} has audio but the judge's modalities "
                f"{self.spec.modalities} are text only; add an audio modality to the judge"
            )
        if len(request.audio_items) > self.audio_per_prompt:
            raise ValueError(
                f"judge {self.spec.name}: request {request.request_id} has {len(request.audio_items)} audio items, "
                f"over options.audio_per_prompt={self.audio_per_prompt} (vLLM's limit_mm_per_prompt); raise it"
            )
        conversation = build_conversation(
            request, merge_system=bool(self.spec.options.get("merge_system_prompt", False))
        )
        prompt: dict[str, Any] = {
            "prompt": self.template_owner.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        }
        if request.audio_items:
            prompt["multi_modal_data"] = {"audio": list(request.audio_items)}
        return prompt

    def generate(self, requests: list[JudgeRequest]) -> list[JudgeOutput]:
        if not requests:
            return []
        prompts = [self.build_prompt(request) for request in requests]
        score_ids = [self.request_score_ids(request) for request in requests]
        sampling_params = [self.sampling_params if ids is None else self.scored_sampling_params for ids in score_ids]
        started = time.perf_counter()
        results = self.llm.generate(prompts, sampling_params, use_tqdm=False)
        latency_s = (time.perf_counter() - started) / len(requests)
        return [self._output(result, ids, latency_s) for result, ids in zip(results, score_ids)]

    def request_score_ids(self, request: JudgeRequest) -> tuple[list[int], list[int]] | None:
        """(safe, unsafe) first token ids read for P(safe): `options.score_tokens` first, else the request's
        `answer_tokens`; None when the request is not scored."""
        if self.score_ids is not None:
            return self.score_ids
        return self._answer_token_ids(tuple(request.answer_tokens)) if request.answer_tokens else None

    @functools.lru_cache(maxsize=8)  # noqa: B019 - one backend per job; the cache lives as long as the engine
    def _answer_token_ids(self, answer_tokens: tuple[str, str]) -> tuple[list[int], list[int]]:
        safe, unsafe = answer_tokens
        return score_token_ids(self.tokenizer, {"safe": [safe], "unsafe": [unsafe]})

    def _output(self, result: Any, score_ids: tuple[list[int], list[int]] | None, latency_s: float) -> JudgeOutput:
        completion = result.outputs[0]
        answer = None
        if score_ids is not None and completion.logprobs:
            safe, unsafe = score_ids
            first_position = {token: entry.logprob for token, entry in completion.logprobs[0].items()}
            answer = p_safe_from_logprobs(first_position, safe, unsafe, top_k=True)
        return JudgeOutput(
            text=completion.text,
            latency_s=latency_s,
            n_input_tokens=len(result.prompt_token_ids or []),
            n_output_tokens=len(completion.token_ids),
            p_safe=answer.p_safe if answer else None,
            answer_mass=answer.mass if answer else None,
            extra={"finish_reason": completion.finish_reason},
        )
