"""The `vllm` judge backend: offline vLLM engine, a judge job's requests submitted in large `generate` calls.

Prompts are rendered with the model's own Hugging Face chat template and sent as token ids
(`{"prompt_token_ids": ..., "multi_modal_data": {"audio": [(array, sample_rate), ...]}}`, one audio entry per
audio item of the request, in order), tokenized without added special tokens: the template writes the BOS token
itself, and vLLM adds special tokens to text prompts (vLLM 0.32 `renderers/base.py`, `add_special_tokens=True`),
so a text prompt of Llama-3.1 would start with two BOS tokens. Audio goes to the engine at the rate of the model's
processor, resampled by the project's resampler as in the transformers backend (vLLM would resample with torchaudio,
and the two engines would then hear different samples).
Decoding (`judging.backends.decoding`) is greedy (`temperature=0`) by default; sampled, every request is submitted
once per seed of `generation.seeds` with that seed in its `SamplingParams` (SageLM's protocol: temperature 0.95,
top_p 0.7, top_k 50, seeds 42, 123 and 1234).

How a request becomes the prompt is the judge's `capabilities.prompt_format`:
- `chat`: the shared conversation (`chat.build_conversation`: system, then user with the audio parts first, or at
  their `AUDIO_SLOT`s, and the text prompt) through the processor's chat template (Qwen2-Audio, Audio Flamingo 3,
  Qwen2.5-Omni) or the tokenizer's (text models such as Llama-3.1). The templates write the placeholder vLLM's
  processor replaces with the audio's embeddings, one per audio item: `<|AUDIO|>` (Qwen2-Audio, Qwen2.5-Omni),
  `<sound>` (Audio Flamingo 3; vLLM 0.32 `model_executor/models/audioflamingo3.py`). Audio longer than the
  processor's window (`capabilities.processor_audio_limit`) is refused before the engine would cut it.
- `meralion`: one user turn and no system role, the format vllm-plugin-meralion2 documents
  (YingxuH/vllm_plugin `example_scripts/offline_example.py`): `Instruction: <text> \nFollow the text
  instruction based on the following audio: <SpeechHere>`, the system prompt before it; text-only requests
  are the system prompt and the text. A CUDA engine gets `attention_backend="FLASHINFER"`: the plugin needs it for
  Gemma-2's attention logit softcapping (vLLM >= 0.13 reads only this argument; the environment variable
  `VLLM_ATTENTION_BACKEND` is gone). A CPU build of vLLM gets no backend and no FlashInfer: it has one attention
  backend, which it uses whatever is asked (vLLM 0.16 `platforms/cpu.py` `get_attn_backend_cls`), and that one
  applies the softcapping itself (`v1/attention/backends/cpu_attn.py`, `softcap`). Several audio items get one
  `<SpeechHere>` each, at their slots.
- `minicpmo`: string content with the `(<audio>./</audio>)` placeholder before the text, or at each slot
  (vLLM 0.32 `model_executor/models/minicpmo.py` expands it), thinking off (`enable_thinking=False`, so the first
  generated token is the verdict), and generation stops at `<|im_end|>` or `<|endoftext|>`. The engine keeps a
  limit of one image per prompt (`MINICPMO_IMAGE_LIMIT`; no request sends one) so that it has an encoder cache for
  the audio: vLLM sizes that cache, where an item's embeddings wait for the decoder, from the largest item of the
  modalities with a nonzero limit as the model's processing reports it (`multimodal/encoder_budget.py`
  `MultiModalBudget`, `v1/core/encoder_cache_manager.py` `compute_mm_encoder_budget`: `max_num_batched_tokens` or
  more, 0 when no modality counts). MiniCPM-o's processing inherits MiniCPM-V's `get_mm_max_tokens_per_item`, which
  reports image and video only (`minicpmv.py`), so with both at 0 the cache is 0 and vLLM refuses every audio
  request ("... audio item with N embedding tokens, which exceeds the pre-allocated encoder cache size 0"). With
  one image the cache is `max_num_batched_tokens` (8,192 or 16,384 on a GPU), above the 3,000 embeddings of
  300 s of audio (10 per second at MiniCPM-o 4.5's pooling step of 5).
- `phi4mm`: string content with numbered placeholders, `<|audio_1|>`, `<|audio_2|>`, ... before the text or at each
  slot (vLLM 0.32 `model_executor/models/phi4mm.py` `get_placeholder_str`, replaced by 12.5 `<|endoftext11|>` a
  second), rendered with the tokenizer's (the released) chat template. Its speech adapter is a LoRA of the repository
  (`options.audio_lora`: the adapter's folder, `speech-lora`): the engine starts with `enable_lora` and the smallest
  rank vLLM accepts that holds the adapter's (`backends.lora`), and every request with audio carries a `LoRARequest`
  of it (vLLM applies a LoRA only to requests that name it); text-only requests run on the base weights, as the
  released model card's text examples do. The requests with the adapter and those without go to vLLM in separate
  submissions (`VLLMBackend._generate_by_adapter`: vLLM's CPU LoRA kernels would apply the adapter to the others of a
  mixed batch).
- `voxtral`: no chat template: mistral_common's chat encoding writes the prompt tokens, `[BEGIN_AUDIO]` and the audio
  tokens, and pads the audio (`judging.backends.voxtral`, shared with the transformers backend); the engine loads the
  checkpoint's Mistral-format files (`tokenizer_mode`, `config_format`, `load_format` `mistral`: tekken.json,
  params.json, consolidated.safetensors), the only ones vLLM 0.32 serves Voxtral from.
- `granite`: string content with `<|audio|>` right before the text (or at each slot) through the released chat
  template; the engine starts with LoRA on and every prompt with audio names the checkpoint's audio LoRA adapter
  (`LoRARequest` of the checkpoint's folder), which the model applies to audio requests only
  (`judging.backends.granite`).

P(safe) comes from the first generated position's logprobs: for every request when `options.score_tokens` is
set, else for each request that carries `answer_tokens` (the `calibrated` prompt); only those requests ask vLLM
for logprobs (each prompt gets its own `SamplingParams`). Where vLLM has `SamplingParams.logprob_token_ids`
(0.32) exactly the safe and unsafe tokens are asked for; otherwise (0.16, MERaLiON) the top
`options.top_logprobs` (default 20, vLLM's `max_logprobs`), where an absent side counts with the bound of the
smallest listed probability (`chat.p_safe_from_logprobs`).

Options: `tensor_parallel_size` (the job's GPUs), `max_model_len` (a number; `auto` is computed when the workflow is
parsed, `lalm_judge.workflow.context_length`; every request is checked against it after generation, so that the
engine's length never cuts an answer: prompt tokens as the engine counted them plus `max_new_tokens` must fit),
`gpu_memory_utilization` (0.9),
`audio_per_prompt` (1; vLLM's `limit_mm_per_prompt`, 2 for the pairwise track, checked per request),
`trust_remote_code` (false; the code revision is then pinned to `revision` too), `score_tokens`, `top_logprobs`,
and `engine_kwargs` (passed to `vllm.LLM` as is, e.g. `enforce_eager`).
Every modality but audio gets a limit of 0 items per prompt, so vLLM reserves no memory for images or video; a
MiniCPM-o engine keeps one image (above), for which vLLM profiles the vision encoder once at start.

A `generate` call is one submission, which vLLM schedules by continuous batching; the judge job hands it up to
`capabilities.VLLM_REQUESTS_PER_CALL` requests per call and writes the request cache after each. Automatic
prefix caching is on (`enable_prefix_caching`, the V1 engine's default, set so that it does not depend
on the version; `engine_kwargs` may turn it off). The judge job
(`lalm_judge.judging.job`) sends each dialogue's requests together, cell by cell, the original before its
variants in turn order, so neighbours share the prompt and the dialogue up to the replaced turn. That this saves
compute relies on: prompts sent as token ids that are equal up to where they differ (one chat template, no added
special tokens); vLLM's block hashes covering the audio by content (an audio prefix is shared only where the
audio is identical, so in the audio modalities mainly the system prompt and instructions before the audio are
shared); and the shared blocks still being in the KV cache when the neighbour is scheduled, which holds for
requests submitted together and no longer once memory pressure evicts them.

vLLM runs only in its GPU environment (`envs/judge-vllm.yaml`: vllm 0.32.0, torch 2.13.0, transformers 5.19).
MERaLiON-2 needs vllm-plugin-meralion2, whose 0.3.x line supports only vLLM >=0.12,<0.17: it runs in
`envs/judge-vllm-meralion.yaml` (vllm 0.16.0, transformers 4.57.6); the plugin registers its architecture
through vLLM's plugin entry point at engine start (no import here). Before the engine starts, the backend sets the
environment the engine needs (`engine_start_environment`: FlashInfer's sampler off for every judge, so that no engine
needs a CUDA compiler to start; for MERaLiON-2 the plugin's n-gram processor off and FlashInfer's compiler and
libraries), logged in the job's log; the settings that change no answer but are part of how it was computed are in the
judge's `generation` provenance column (`JudgeSpec.generation_settings`).

A Qwen2.5-Omni checkpoint saved as its thinker alone (a fine-tuned judge such as SageLM: its config.json names
`Qwen2_5OmniThinkerForConditionalGeneration`) is served from a copy in the full model's layout, the one vLLM's
registry knows (`checkpoints.full_omni_layout`).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lalm_judge.core.registry import MissingDependency
from lalm_judge.judging.backends import checkpoints
from lalm_judge.judging.backends.base import AUDIO_SLOT, JudgeOutput, JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.capabilities import processor_audio_limit, processor_sampling_rate, resolved_commit
from lalm_judge.judging.backends.chat import (
    PHI4MM_FORMAT,
    build_conversation,
    numbered_audio_conversation,
    p_safe_from_logprobs,
    score_token_ids,
)
from lalm_judge.judging.backends.decoding import SAMPLES, Decoding
from lalm_judge.judging.backends.engine_env import prepare_flashinfer
from lalm_judge.judging.backends.granite import GRANITE_FORMAT, granite_conversation
from lalm_judge.judging.backends.lora import (
    ADAPTER_CONFIG,
    AUDIO_LORA_ID,
    AUDIO_LORA_NAME,
    adapter_folder,
    audio_lora_engine_settings,
)
from lalm_judge.judging.backends.omni import OMNI_MODEL_TYPES, load_audio_omni_processor
from lalm_judge.judging.backends.voxtral import VLLM_MISTRAL_FORMAT, VOXTRAL_FORMAT, audio_sampling_rate, encode

logger = logging.getLogger(__name__)

DEFAULT_TOP_LOGPROBS = 20
MERALION_SPEECH = "<SpeechHere>"
MERALION_FOLLOW = "Follow the text instruction based on the following audio: "
MINICPMO_AUDIO = "(<audio>./</audio>)"
MINICPMO_STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")
OTHER_MODALITIES = ("image", "video")
MINICPMO_IMAGE_LIMIT = {"image": 1}  # its encoder cache is sized from images (module docstring)
# Phi-4-multimodal's audio features are computed at 16 kHz (vLLM 0.32 `phi4mm.py` `get_audio_num_frames`, the
# spectrogram parameters "for 16 kHz"; transformers `feature_extraction_phi4_multimodal.py` `sampling_rate`).
PHI4MM_SAMPLING_RATE = 16000


def engine_context_length(spec: JudgeSpec) -> int | None:
    """The engine's `max_model_len`: a number (the workflow computes `auto` when it parses the config)."""
    value = spec.options.get("max_model_len")
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise ValueError(
        f"judge {spec.name}: options.max_model_len is {value!r}; give a number of tokens (the workflow computes "
        "'auto' when it parses the config: lalm_judge.workflow.context_length)"
    )


def engine_model(spec: JudgeSpec) -> str:
    """What the engine loads: the model, or for a thinker-only Qwen2.5-Omni checkpoint its copy in the full
    model's layout (`checkpoints.full_omni_layout`)."""
    if not checkpoints.is_thinker_only(checkpoints.read_checkpoint_config(spec.model, spec.revision)):
        return spec.model
    cache_root = spec.options.get("cache_dir")
    folder = checkpoints.full_omni_layout(spec.model, spec.revision, None if cache_root is None else Path(cache_root))
    logger.info("judge %s: %s is a Qwen2.5-Omni thinker saved alone; served from %s", spec.name, spec.model, folder)
    return str(folder)


def engine_start_environment(
    spec: JudgeSpec, environ: Mapping[str, str] | None = None, *, flashinfer_attention: bool = False
) -> dict[str, str]:
    """The variables the judge's engine process starts with beyond `environ` (this process's): the judge's engine
    environment (`engine_env.engine_environment`: FlashInfer's sampler off, MERaLiON-2's n-gram size) and, for
    MERaLiON-2 on FlashInfer's attention (`flashinfer_attention`: on a CUDA GPU), what FlashInfer's kernel build needs
    (`engine_env.prepare_flashinfer`: CUDA_HOME, the include and library flags with the `libcuda.so` stubs)."""
    environ = dict(os.environ if environ is None else environ)
    start = dict(spec.engine_environment)
    if spec.capabilities.prompt_format == "meralion" and flashinfer_attention:
        prepared = dict(environ)
        route, where = prepare_flashinfer(prepared)
        logger.info("judge %s: FlashInfer kernels from %s (%s)", spec.name, route, where)
        start.update({name: value for name, value in prepared.items() if environ.get(name) != value})
    return start


def _merged_text(request: JudgeRequest) -> str:
    return f"{request.system}\n\n{request.user}" if request.system else request.user


def meralion_conversation(request: JudgeRequest) -> list[dict[str, Any]]:
    """One user turn in vllm-plugin-meralion2's documented format; the system prompt goes first in it. Several
    audio items take one `<SpeechHere>` each at their `AUDIO_SLOT`s."""
    if not request.audio_items:
        return [{"role": "user", "content": _merged_text(request)}]
    preamble = f"{request.system}\n" if request.system else ""
    if AUDIO_SLOT in request.user:
        content = f"{preamble}Instruction: {request.user.replace(AUDIO_SLOT, MERALION_SPEECH)}"
    else:
        speech = MERALION_SPEECH * len(request.audio_items)
        content = f"{preamble}Instruction: {request.user} \n{MERALION_FOLLOW}{speech}"
    return [{"role": "user", "content": content}]


def minicpmo_conversation(request: JudgeRequest) -> list[dict[str, Any]]:
    """System message, then a user turn whose string content starts with the audio placeholders and a line break
    (vLLM's example), or holds one at each `AUDIO_SLOT`."""
    return numbered_audio_conversation(request, lambda _: MINICPMO_AUDIO, "\n")


def phi4mm_placeholder(index: int) -> str:
    """The placeholder of audio item `index` (from 0) of a Phi-4-multimodal prompt (vLLM `get_placeholder_str`)."""
    return f"<|audio_{index + 1}|>"


def phi4mm_conversation(request: JudgeRequest) -> list[dict[str, Any]]:
    """The numbered audio placeholders before the text or at the slots (the released model card's
    `<|user|><|audio_1|>{prompt}<|end|><|assistant|>`), the system message first."""
    return numbered_audio_conversation(request, phi4mm_placeholder)


def audio_processor(model_path: str, model_type: str, hf_kwargs: dict[str, Any]) -> Any:
    """The processor whose chat template renders an audio chat judge's prompts (and whose window bounds its audio).
    Qwen2.5-Omni's `AutoProcessor` builds a video processor that needs torchvision; where that is absent the
    audio and text processor is built instead (`omni.load_audio_omni_processor`), with the same template."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(model_path, **hf_kwargs)
    except ImportError:
        if model_type not in OMNI_MODEL_TYPES:
            raise
        return load_audio_omni_processor(model_path, hf_kwargs)


def sampling_settings(decoding: Decoding) -> dict[str, Any]:
    """vLLM's `SamplingParams` fields of a judge's decoding (vllm/sampling_params.py: temperature 0 is greedy,
    top_p 1 and top_k 0 consider every token, `seed` is per request)."""
    settings: dict[str, Any] = {"temperature": decoding.temperature, "max_tokens": decoding.max_new_tokens}
    if decoding.sampled:
        settings["top_p"] = decoding.top_p if decoding.top_p is not None else 1.0
        settings["top_k"] = decoding.top_k if decoding.top_k is not None else 0
    return settings


def vllm_finish_reason(raw: str | None) -> str | None:
    """The normalized finish reason of a `CompletionOutput.finish_reason` (vLLM 0.32 `v1/engine/__init__.py`,
    `FINISH_REASON_STRINGS`: stop, length, abort, error, repetition): "stop" (EOS, a stop token or string),
    "length" (max_tokens or max_model_len, and "repetition": a repetitive loop cut before its end), None for an
    aborted or failed request (not an answer: the request cache does not keep it)."""
    return {"stop": "stop", "length": "length", "repetition": "length"}.get(str(raw)) if raw is not None else None


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
        from transformers import AutoTokenizer

        self.spec = spec
        options = spec.options
        self.prompt_format = spec.capabilities.prompt_format
        self.uses_audio = any(modality != "text" for modality in spec.modalities)
        self.max_model_len = engine_context_length(spec)
        self.model_path = engine_model(spec)
        trust_remote_code = bool(options.get("trust_remote_code", False))
        hf_kwargs = {"revision": spec.revision, "trust_remote_code": trust_remote_code}
        # Audio chat templates live on the processor (Granite Speech's too: its rate and window are read there); text
        # models and the other plain-content formats use the tokenizer's.
        model_type = checkpoints.read_checkpoint_config(self.model_path, spec.revision).get("model_type", "")
        if self.uses_audio and self.prompt_format in ("chat", GRANITE_FORMAT):
            self.template_owner = audio_processor(self.model_path, model_type, hf_kwargs)
        else:
            self.template_owner = AutoTokenizer.from_pretrained(self.model_path, **hf_kwargs)
        # Voxtral's tokenizer (transformers' MistralCommonBackend) is the template owner itself.
        voxtral = self.prompt_format == VOXTRAL_FORMAT
        self.tokenizer = (
            self.template_owner if voxtral else getattr(self.template_owner, "tokenizer", self.template_owner)
        )
        # vLLM runs the model's Hugging Face processor, which cuts audio over its window silently: refuse it.
        self.max_audio_s = processor_audio_limit(spec.max_audio_s, model_type, self.template_owner)
        # The rate the processor reads audio at (None where the template owner is a tokenizer: MERaLiON, MiniCPM-o).
        self.sampling_rate = processor_sampling_rate(self.template_owner)
        if voxtral:
            self.sampling_rate = audio_sampling_rate(self.tokenizer)
        if self.prompt_format == PHI4MM_FORMAT:
            self.sampling_rate = PHI4MM_SAMPLING_RATE
        engine_kwargs: dict[str, Any] = {
            "model": self.model_path,
            "revision": spec.revision,
            "dtype": spec.dtype,
            "tensor_parallel_size": int(options.get("tensor_parallel_size", spec.gpus or 1)),
            "max_model_len": self.max_model_len,
            "gpu_memory_utilization": float(options.get("gpu_memory_utilization", 0.9)),
            "trust_remote_code": trust_remote_code,
            "seed": 0,
            # Requests of one dialogue share its prompt and transcript prefix; the judge job sends them together.
            "enable_prefix_caching": True,
            # The engine's statistics (`LLM.get_metrics`: the prefix cache's hits) are logged after each call.
            "disable_log_stats": False,
        }
        if trust_remote_code:  # vLLM does not default the code revision to `revision`
            engine_kwargs["code_revision"] = spec.revision
        # Audio items one prompt may carry (2 for the pairwise track's two responses).
        self.audio_per_prompt = int(options.get("audio_per_prompt", 1)) if self.uses_audio else 0
        if self.uses_audio:
            limits = {"audio": self.audio_per_prompt}
            engine_kwargs["limit_mm_per_prompt"] = {**limits, **dict.fromkeys(OTHER_MODALITIES, 0)}
            if self.prompt_format == "minicpmo":
                engine_kwargs["limit_mm_per_prompt"].update(MINICPMO_IMAGE_LIMIT)
        if voxtral:  # vLLM serves Voxtral from its Mistral-format files only (`backends.voxtral`)
            engine_kwargs.update(VLLM_MISTRAL_FORMAT)
        # The audio LoRA adapter, applied to each request with audio: Granite Speech's, in the checkpoint's own folder
        # (`backends.granite`), or the folder `options.audio_lora` names (Phi-4-multimodal's `speech-lora`).
        adapter = "." if self.prompt_format == GRANITE_FORMAT else options.get("audio_lora")
        self.audio_lora = self._audio_lora_request(adapter)
        if self.audio_lora is not None:
            engine_kwargs.update(audio_lora_engine_settings(self.audio_lora.lora_path))
        if self.prompt_format == "meralion":
            from vllm.platforms import current_platform

            if current_platform.is_cuda():
                engine_kwargs["attention_backend"] = "FLASHINFER"
            else:
                logger.info("judge %s: vLLM's %s attention softcaps Gemma-2's logits", spec.name, current_platform)
        engine_kwargs.update(options.get("engine_kwargs", {}))
        # The engine process (and its workers) inherit the environment as it is when vLLM starts them.
        flashinfer = engine_kwargs.get("attention_backend") == "FLASHINFER"
        self.start_environment = engine_start_environment(spec, flashinfer_attention=flashinfer)
        logger.info("judge %s: the engine starts with %s", spec.name, self.start_environment)
        os.environ.update(self.start_environment)
        self.llm = vllm.LLM(**engine_kwargs)
        score_tokens = options.get("score_tokens")
        self.score_ids = score_token_ids(self.tokenizer, score_tokens) if score_tokens else None
        self.top_logprobs = int(options.get("top_logprobs", DEFAULT_TOP_LOGPROBS))
        self.exact_logprobs = "logprob_token_ids" in getattr(vllm.SamplingParams, "__struct_fields__", ())
        self.sampling_params_class = vllm.SamplingParams
        stop_ids = self._stop_token_ids() if self.prompt_format == "minicpmo" else None
        decoding = Decoding.from_generation(spec.generation, spec.name, "vllm")
        self.sample_seeds = decoding.sample_seeds
        self.decoding = sampling_settings(decoding)
        if stop_ids:
            self.decoding["stop_token_ids"] = stop_ids
        # What answers, recorded with every output: the checkpoint the engine loaded and its resolved commit.
        self.served = {"served_model": spec.model, "served_revision": resolved_commit(spec.model, spec.revision)}

    def _audio_lora_request(self, adapter: str | None) -> Any:
        """The `LoRARequest` of the audio adapter in the checkpoint's folder `adapter` (`.`: the checkpoint's own
        folder), None without one; a hub checkpoint is read from its local snapshot (fetched if needed)."""
        if not adapter:
            return None
        from vllm.lora.request import LoRARequest

        folder = adapter_folder(self.model_path, self.spec.revision, adapter)
        if not (folder / ADAPTER_CONFIG).is_file():
            raise ValueError(
                f"judge {self.spec.name}: the audio LoRA adapter folder {folder} has no {ADAPTER_CONFIG} (download the "
                "whole repository)"
            )
        return LoRARequest(AUDIO_LORA_NAME, AUDIO_LORA_ID, str(folder))

    def _stop_token_ids(self) -> list[int]:
        vocab = self.tokenizer.get_vocab()
        return [vocab[token] for token in MINICPMO_STOP_TOKENS if token in vocab]

    def describe(self) -> dict[str, str]:
        return {"model": self.spec.model, "model_revision": self.spec.revision}

    def conversation(self, request: JudgeRequest) -> list[dict[str, Any]]:
        if self.prompt_format == "meralion":
            return meralion_conversation(request)
        if self.prompt_format == "minicpmo":
            return minicpmo_conversation(request)
        if self.prompt_format == PHI4MM_FORMAT:
            return phi4mm_conversation(request)
        if self.prompt_format == GRANITE_FORMAT:
            return granite_conversation(request)
        return build_conversation(request, merge_system=not self.spec.capabilities.system_role)

    def render(self, request: JudgeRequest) -> str:
        """The prompt text of one request, as the model's chat template writes it (Voxtral: as mistral_common encodes
        it, decoded)."""
        if self.prompt_format == VOXTRAL_FORMAT:
            return self.tokenizer.decode(self._voxtral_encoded(request)[0])
        extra = {"enable_thinking": False} if self.prompt_format == "minicpmo" else {}
        return self.template_owner.apply_chat_template(
            self.conversation(request), add_generation_prompt=True, tokenize=False, **extra
        )

    def build_prompt(self, request: JudgeRequest) -> dict[str, Any]:
        """The vLLM prompt of one request: token ids of the rendered chat text, plus its waveforms when it has audio."""
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
        for waveform, sample_rate in request.audio_items:
            duration_s = len(waveform) / sample_rate
            if self.max_audio_s is not None and duration_s > self.max_audio_s:
                # vLLM would cut it silently (Qwen2-Audio's processor truncates at 30 s).
                raise ValueError(
                    f"judge {self.spec.name}: request {request.request_id} has {duration_s:.1f} s of audio, over "
                    f"max_audio_s={self.max_audio_s:g}; apply the long_audio policy (chunk, truncate or skip) first"
                )
        if self.prompt_format == VOXTRAL_FORMAT:
            tokens, audios = self._voxtral_encoded(request)
            voxtral_prompt: dict[str, Any] = {"prompt_token_ids": tokens}
            if audios:
                voxtral_prompt["multi_modal_data"] = {"audio": [(audio, self.sampling_rate) for audio in audios]}
            return voxtral_prompt
        text = self.render(request)
        prompt: dict[str, Any] = {"prompt_token_ids": self.tokenizer(text, add_special_tokens=False)["input_ids"]}
        if request.audio_items:
            prompt["multi_modal_data"] = {"audio": [self._at_processor_rate(*item) for item in request.audio_items]}
        return prompt

    def _voxtral_encoded(self, request: JudgeRequest) -> tuple[list[int], list[np.ndarray]]:
        """Voxtral's prompt tokens and padded audio (`backends.voxtral.encode`), the audio at the encoder's rate."""
        waveforms = [self._at_processor_rate(*item)[0] for item in request.audio_items]
        return encode(self.tokenizer, request, waveforms, int(self.sampling_rate or 0))

    def _at_processor_rate(self, waveform: np.ndarray, sample_rate: int) -> tuple[np.ndarray, int]:
        """Audio at the rate the model's processor reads, resampled here as the transformers backend does it
        (`audio.waveform.resample`), so that both engines hear the same samples (vLLM resamples with torchaudio)."""
        if self.sampling_rate is None or sample_rate == self.sampling_rate:
            return waveform, sample_rate
        from lalm_judge.audio.waveform import resample

        return resample(np.asarray(waveform, dtype=np.float32), sample_rate, self.sampling_rate), self.sampling_rate

    def generate(self, requests: list[JudgeRequest]) -> list[JudgeOutput]:
        """One submission: every request once per sample seed (one seed per prompt, so a sample does not depend on
        what it is batched with); the first seed's answer is the request's, all are in `extra["samples"]`."""
        if not requests:
            return []
        prompts = [self.build_prompt(request) for request in requests]
        score_ids = [self.request_score_ids(request) for request in requests]
        seeds = self.sample_seeds
        sampling_params = [self._sampling_params(ids, seed) for seed in seeds for ids in score_ids]
        started = time.perf_counter()
        lora_requests = [self.lora_request(request) for request in requests] * len(seeds)
        results = self._generate_by_adapter(prompts * len(seeds), sampling_params, lora_requests)
        latency_s = (time.perf_counter() - started) / len(requests)
        for request, result in zip(requests, results):
            self._check_context(request, result)
        outputs = [self._output(result, ids, latency_s) for result, ids in zip(results, score_ids)]
        if seeds != (None,):
            for index, output in enumerate(outputs):
                answers = results[index :: len(requests)]
                output.extra[SAMPLES] = [
                    {
                        "seed": seed,
                        "text": self.answer_text(answer.outputs[0]),
                        "finish_reason": vllm_finish_reason(answer.outputs[0].finish_reason),
                    }
                    for seed, answer in zip(seeds, answers)
                ]
        self._log_prefix_cache()
        return outputs

    def _generate_by_adapter(self, prompts: list[Any], sampling_params: list[Any], lora_requests: list[Any]) -> list:
        """The engine's results of `prompts` in order, one submission per LoRA adapter (none, or the judge's audio
        adapter): vLLM 0.32's CPU LoRA operations apply the adapter to the prompts without one that share its
        batch. They read "no adapter" (index -1, `lora/punica_wrapper/utils.py` `convert_mapping`) as a Python
        index, the last adapter slot (`lora/ops/torch_ops/lora_ops.py` `bgmv_shrink`, `bgmv_expand`:
        `lora_b_weights[lora_indices_tensor]`), so a text request batched with audio requests answers with the audio
        adapter. Submitted apart, no batch mixes them, on any platform."""
        groups: dict[Any, list[int]] = {}
        for index, lora in enumerate(lora_requests):
            groups.setdefault(None if lora is None else lora.lora_int_id, []).append(index)
        results: list[Any] = [None] * len(prompts)
        for indices in groups.values():
            answered = self.llm.generate(
                [prompts[i] for i in indices],
                [sampling_params[i] for i in indices],
                use_tqdm=False,
                lora_request=[lora_requests[i] for i in indices],
            )
            for index, result in zip(indices, answered):
                results[index] = result
        return results

    def lora_request(self, request: JudgeRequest) -> Any:
        """The LoRA adapter a request runs with: the judge's audio adapter for a request with audio, else none."""
        return self.audio_lora if request.audio_items else None

    def answer_text(self, completion: Any) -> str:
        """The answer as the tokenizer decodes its tokens, special tokens skipped: what the transformers backend
        writes for the same tokens. (vLLM's own `text` is detokenized incrementally and leaves out an incomplete
        UTF-8 character at the end of an answer cut at its token limit, where a full decode writes U+FFFD.)"""
        return self.tokenizer.decode(list(completion.token_ids), skip_special_tokens=True)

    def engine_statistics(self) -> dict[str, int]:
        """vLLM's own counters of this engine so far (`LLM.get_metrics`): prompt tokens looked up in the prefix cache
        and those found there."""
        wanted = {"vllm:prefix_cache_queries": "prefix_cache_queries", "vllm:prefix_cache_hits": "prefix_cache_hits"}
        counts = dict.fromkeys(wanted.values(), 0)
        for metric in self.llm.get_metrics():
            if metric.name in wanted:
                counts[wanted[metric.name]] += int(getattr(metric, "value", 0))
        return counts

    def _log_prefix_cache(self) -> None:
        counts = self.engine_statistics()
        queried, hits = counts["prefix_cache_queries"], counts["prefix_cache_hits"]
        logger.info(
            "judge %s: prefix cache hits %d of %d prompt tokens so far (%.1f %%)",
            self.spec.name,
            hits,
            queried,
            100.0 * hits / queried if queried else 0.0,
        )

    def _check_context(self, request: JudgeRequest, result: Any) -> None:
        """Refuse an answer the engine's context length may have cut (its prompt, audio tokens included, and the
        answer budget do not fit): `max_model_len` then changes no answer, and is not part of the cache key."""
        prompt_tokens = len(result.prompt_token_ids or [])
        if self.max_model_len is not None and prompt_tokens + self.decoding["max_tokens"] > self.max_model_len:
            raise ValueError(
                f"judge {self.spec.name}: request {request.request_id} has {prompt_tokens} prompt tokens and an answer "
                f"budget of {self.decoding['max_tokens']}, over options.max_model_len={self.max_model_len}; raise "
                "max_model_len (auto computes a bound from the run's longest request: docs/cluster.md)"
            )

    def _sampling_params(self, score_ids: tuple[list[int], list[int]] | None, seed: int | None = None) -> Any:
        """The shared decoding with the sample's seed, plus logprobs of the first position for a request read for
        P(safe)."""
        decoding = {**self.decoding, **({"seed": seed} if seed is not None else {})}
        if score_ids is None:
            return self.sampling_params_class(**decoding)
        if self.exact_logprobs:
            return self.sampling_params_class(**decoding, logprob_token_ids=sorted({*score_ids[0], *score_ids[1]}))
        return self.sampling_params_class(**decoding, logprobs=self.top_logprobs)

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
            # logprob_token_ids gives both sides exactly; a top-k list bounds the side it lacks.
            answer = p_safe_from_logprobs(first_position, safe, unsafe, top_k=not self.exact_logprobs)
        return JudgeOutput(
            text=self.answer_text(completion),
            latency_s=latency_s,
            n_input_tokens=len(result.prompt_token_ids or []),
            n_output_tokens=len(completion.token_ids),
            p_safe=answer.p_safe if answer else None,
            answer_mass=answer.mass if answer else None,
            finish_reason=vllm_finish_reason(completion.finish_reason),
            extra={**self.served, "raw_finish_reason": completion.finish_reason},
        )
