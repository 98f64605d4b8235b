"""What a judge can serve: the batch limits of each backend, and what the project knows about each model family
it ships a config for, read from that model's upstream code.

Batch limits (`request_batch_size`): the transformers backend runs `batch_size` requests per forward pass; vLLM
schedules its own batches (continuous batching under its memory limits), so it is handed up to
`VLLM_REQUESTS_PER_CALL` requests per call, every request of a cell-sized job at once; the OpenAI-compatible
backend keeps `options.concurrency` requests in flight, so each call gets enough requests to keep them busy
(4 per slot, at least `batch_size`) without holding a whole shard's audio in memory.

A judge's registry entry says what its model can serve (`capabilities`, `modalities`, `max_audio_s`,
`backend`); for the families below those facts are known, and `lalm_judge.workflow.config` rejects an entry
that contradicts them when the config is parsed, naming the judge, the key and the reason, instead of a
job failing (or silently cutting audio) hours later. A hub id is matched by its name, a local folder by the
architecture its config.json names; models that match no family are checked only against their own entry.

The facts and where they come from:
- Qwen2-Audio: its WhisperFeatureExtractor keeps 30 s (transformers `processing_qwen2_audio.py` forces
  `padding="max_length"`, truncation on); vLLM's `model_executor/models/qwen2_audio.py` also truncates at
  30 s. Audio over 30 s would be cut silently, so `max_audio_s` must be at most 30.
- Audio Flamingo 3: the processor windows audio into 30 s pieces up to `max_audio_len` = 600 s and cuts the
  rest with a log line (transformers `processing_audioflamingo3.py`).
  vLLM 0.32 (`model_executor/models/audioflamingo3.py`) calls the same processor, keeps at most
  `max_audio_len // chunk_length` windows, replaces each `<sound>` token of the prompt with the audio's
  embeddings, and takes one audio item per prompt (`get_supported_mm_limits`: {"audio": 1}).
- Qwen2.5-Omni: the thinker's window is its feature extractor's `n_samples` (read at load by both backends,
  `processor_audio_limit`); vLLM 0.32 (`qwen2_5_omni_thinker.py`) runs the same Hugging Face processor and
  replaces each `<|AUDIO|>` token.
- MiniCPM-o (2.6, 4.5): vLLM 0.32 serves it natively (`model_executor/models/minicpmo.py`, audio placeholder
  `(<audio>./</audio>)`); its Hugging Face remote code does not import under transformers 5 (vLLM's
  `tests/models/registry.py`: "Custom processor code is not compatible with Transformers v5").
- MERaLiON-2: served through vllm-plugin-meralion2 (vLLM 0.12-0.16); one user turn ending in
  `<SpeechHere>`, no system role (YingxuH/vllm_plugin `example_scripts/offline_example.py`); the plugin's
  processor clips audio to `time_duration_limit` = 300 s (`transformers_utils/processing_meralion2.py`).
- Llama-3.1-Instruct: a text model; the hub repo is gated (needs an HF_TOKEN with access).
- Gemini through its OpenAI-compatible endpoint and GPT-4o audio models: no logprobs (Gemini returns
  HTTP 400 "Logprobs is not enabled for models/..."; OpenAI's audio-preview models reject the parameter).

The families added for the judges of configs/judges-2026.yaml (docs/judges.md has one row per family, with the test
that proves it):
- Qwen3-Omni (Instruct, Thinking): vLLM 0.32 serves the full checkpoint through its thinker
  (`qwen3_omni_moe_thinker.py`: `talker.` and `code2wav.` weights dropped), transformers through
  `Qwen3OmniMoeThinkerForConditionalGeneration`, which reads the same checkpoint; the chat template writes
  `<|audio_start|><|audio_pad|><|audio_end|>`, which both expand to 13 tokens per 100 mel frames (12.5 a second:
  `_get_feat_extract_output_lengths`); the processor pads to the longest clip and cuts nothing (`truncation: False`).
- Voxtral (Mini 3B, Small 24B): no chat template; mistral_common's chat encoding (`tekken.json`) writes the prompt,
  `[BEGIN_AUDIO]` and 375 `[AUDIO]` tokens per started 30 s, the audio padded to whole 30 s chunks and nothing cut
  (the model card: 30 min for transcription, 40 min for understanding, "System prompts are not yet supported");
  vLLM 0.32 (`voxtral.py`) loads only the Mistral-format files, transformers the Hugging Face ones
  (`VoxtralForConditionalGeneration`); `judging.backends.voxtral`.
- Gemma 3n (E2B, E4B): the feature extractor cuts audio at 480,000 samples, 30 s at 16 kHz (transformers
  `feature_extraction_gemma3n.py`: `max_length`, truncation on; read at load, `processor_audio_limit`), and every clip
  becomes `<start_of_audio>`, 188 `<audio_soft_token>` and `<end_of_audio>` whatever its length (`Gemma3nProcessor`
  `audio_seq_length`, `full_audio_sequence`; vLLM `gemma3n_mm.py` `TOKENS_PER_AUDIO`, the encoder's output padded or cut
  to `audio_soft_tokens_per_image`): its encoder makes 6.25 tokens a second (100 mel frames a second, two stride-2
  convolutions, every fourth conformer frame: `Gemma3nAudioConfig` `sscp_conv_stride_size`, `conf_reduction_factor`),
  so 30 s fill the 188 and shorter clips are padded. The chat template (saved with the instruction-tuned checkpoints
  by transformers' `convert_gemma3n_weights.py`) writes `<audio_soft_token>` per audio item and takes a system message
  as a prefix of the first user turn. Both engines build the vision tower, timm's MobileNetV5 (`TimmWrapperModel`;
  vLLM builds it even with no image allowed), so the environment needs timm (and torchvision, which timm imports).
  vLLM embeds `<end_of_audio>` with the text table (only the soft tokens take the audio tower's output), transformers
  with the audio embedder's row for it (`modeling_gemma3n.py`): the two engines' answers to audio requests differ.
- Granite Speech 3.3 (8B, 2B): 16 kHz audio as 80 log-mel bins every 10 ms, two frames stacked into one encoder frame
  (transformers `feature_extraction_granite_speech.py`), 15-frame windows pooled by 5 into 3 tokens
  (`projector_window_size`, `projector_downsample_rate`): 10 audio tokens a second, the processor cutting nothing;
  `<|audio|>` in the user text, one audio item per prompt (vLLM 0.32 `granite_speech.py`: `get_supported_mm_limits`,
  `get_placeholder_str`); the released chat template has a system role (it writes its own dated one when none is
  given). Its LoRA adapter (in the checkpoint's folder) applies to audio requests only: transformers' `generate`
  enables it when audio features are given (`modeling_granite_speech.py`), vLLM applies it to the prompts that
  name it in a `LoRARequest` (`judging.backends.granite`). Both processors need torchaudio (`MelSpectrogram`).
- Phi-4-multimodal: vLLM 0.32 serves only the hub-code layout (`Phi4MMForCausalLM`, `model_executor/models/phi4mm.py`;
  the transformers-format `Phi4MultimodalForCausalLM` left vLLM in 0.12, `registry.py` `_PREVIOUSLY_SUPPORTED_MODELS`),
  whose configuration and processor are hub code (`trust_remote_code`); transformers serves transformers' layout
  (`Phi4MultimodalForCausalLM`, the weights renamed by its `convert_phi4_multimodal_weights_to_hf.py`), whose
  processor expands `<|endoftext11|>` (the tokenizer's `audio_token`) per audio item. Audio: 80 log-mel bins at 16 kHz,
  100 frames a second (`get_audio_num_frames`: 400-sample window, 160-sample hop), pooled by `compression_rate` 8
  (`embd_layer.audio_embd_layer`) and a qformer rate of 1 (`_compute_audio_embed_size`): 12.5 audio tokens a second,
  rounded up per clip (transformers `feature_extraction_phi4_multimodal.py` `_compute_audio_embed_size`, the same
  rates). The prompt is string content with `<|audio_1|>`, `<|audio_2|>`, ... (`get_placeholder_str`), each replaced by
  that many `<|endoftext11|>` (id 200011); the released chat template writes `<|system|>...<|end|>` (a system role),
  `<|user|>...<|end|><|assistant|>`. Nothing cuts long audio: the conformer runs it in pieces of 500 positions, 40 s
  (`phi4mm_audio.py` `max_seq_len`). Speech goes through the `speech-lora` adapter of the repository (PEFT layout, the
  same for both layouts): vLLM applies it only to a request sent with a `LoRARequest` (`enable_lora`), which the vllm
  backend sends for each request with audio (`options.audio_lora`); the transformers backend loads it with PEFT and
  turns it on for its audio batches.
- GPT-Audio 1.5, the successor OpenAI names for gpt-4o-audio-preview (shut down 2026-05-07), and Gemini 2.5
  Flash-Lite: audio input through Chat Completions (`input_audio`, base64 wav), no logprobs; their retirement as the
  providers' deprecation pages state it is `retires`.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lalm_judge.judging.backends.base import JudgeSpec

REQUESTS_PER_SLOT = 4
# One vLLM submission. A judge job scores every cell of its judge for a shard (at paper scale about 100,000
# requests, 60,000 of them with 35 s of audio: over 100 GB as float32), so the job cannot hand vLLM everything
# at once; 4096 requests (about 9 GB of such audio) keep its continuous batching full, and the request cache is
# written after each submission, so a killed job loses at most the one in flight.
VLLM_REQUESTS_PER_CALL = 4096


# Model types whose feature extractor pads or cuts every clip to its `n_samples` window (transformers
# `processing_qwen2_audio.py`, `processing_qwen2_5_omni.py`: `padding="max_length"`, truncation on).
WINDOWED_AUDIO_MODEL_TYPES = frozenset({"qwen2_audio", "qwen2_5_omni", "qwen2_5_omni_thinker"})
# Model types whose feature extractor cuts every clip at the `max_length` samples its `__call__` defaults to, truncation
# on (Gemma 3n: 480,000 samples, 30 s at 16 kHz, transformers `feature_extraction_gemma3n.py`; vLLM's `gemma3n_mm.py`
# reads the same default, `_get_num_audio_frames_alone`).
CALL_DEFAULT_WINDOW_MODEL_TYPES = frozenset({"gemma3n"})


def processor_sampling_rate(processor: Any) -> int | None:
    """The rate a model's processor reads audio at: its feature extractor's (`feature_extractor`, or
    `audio_processor` for Granite Speech's, transformers `processing_granite_speech.py`); None for a tokenizer."""
    for attribute in ("feature_extractor", "audio_processor"):
        rate = getattr(getattr(processor, attribute, None), "sampling_rate", None)
        if rate is not None:
            return int(rate)
    return None


def processor_audio_limit(configured: float | None, model_type: str, processor: Any) -> float | None:
    """The longest audio a model reads whole: the judge's max_audio_s, lowered to the processor's own window where
    the processor would cut longer audio silently (the transformers and vLLM backends run the same processor)."""
    limits = [] if configured is None else [float(configured)]
    feature_extractor = getattr(processor, "feature_extractor", None)
    if model_type in WINDOWED_AUDIO_MODEL_TYPES and getattr(feature_extractor, "n_samples", None):
        limits.append(feature_extractor.n_samples / feature_extractor.sampling_rate)
    if model_type in CALL_DEFAULT_WINDOW_MODEL_TYPES and feature_extractor is not None:
        call = inspect.signature(type(feature_extractor).__call__).parameters
        if call["truncation"].default and call["max_length"].default:
            limits.append(call["max_length"].default / feature_extractor.sampling_rate)
    # Audio Flamingo 3 windows audio itself and keeps only the first `max_audio_len` seconds
    # (transformers `processing_audioflamingo3.py`).
    if getattr(processor, "max_audio_len", None):
        limits.append(float(processor.max_audio_len))
    return min(limits) if limits else None


def request_batch_size(spec: JudgeSpec) -> int:
    """Requests per backend call for this judge (`batch_size` is not used by vLLM, which batches itself)."""
    if spec.backend == "vllm":
        return VLLM_REQUESTS_PER_CALL
    if spec.backend == "openai":
        # Imported here: the local backends (and bench/gpu_judges.py, which runs with torch and transformers only)
        # import this module without the table and endpoint code.
        from lalm_judge.core.endpoints import endpoint_defaults

        concurrency = int(spec.options.get("concurrency", endpoint_defaults()["concurrency"]))
        return max(int(spec.batch_size), REQUESTS_PER_SLOT * concurrency)
    return max(1, int(spec.batch_size))


@dataclass(frozen=True)
class ModelFamily:
    """Known facts of one model family; None = not known (the entry decides)."""

    name: str
    pattern: str  # regular expression matched against the start of the model id
    backends: tuple[str, ...]  # backends that can run it
    why_backends: str = ""
    audio: bool = True  # takes audio input
    max_audio_s: float | None = None  # longest audio the model reads before cutting silently
    system_role: bool | None = None
    prompt_format: str | None = None
    logprobs: bool | None = None
    gated: bool = False
    # The `architectures` of its checkpoints' config.json: a local copy (a folder) is matched by them.
    architectures: tuple[str, ...] = ()
    # What a judge of the family is told and assumes, for `lalm-judge judges` and docs/judges.md.
    placeholder: str | None = None  # the audio placeholder its prompt carries, one per audio item
    assumes: str = ""  # what is switched off or relied on (thinking, talker, LoRA)
    limits: str = ""  # known limits of serving it here
    verified_by: tuple[str, ...] = ()  # the tests that run it on its engines
    retires: str | None = None  # API models: the shutdown date the provider states, or that none is announced

    def matches(self, model: str) -> bool:
        return re.match(self.pattern, model, flags=re.IGNORECASE) is not None


FAMILIES: tuple[ModelFamily, ...] = (
    ModelFamily(
        "Qwen2-Audio",
        r"Qwen/Qwen2-Audio",
        ("transformers", "vllm"),
        max_audio_s=30.0,
        prompt_format="chat",
        architectures=("Qwen2AudioForConditionalGeneration",),
        placeholder="<|audio_bos|><|AUDIO|><|audio_eos|>",
        verified_by=("tests/engine/test_qwen2_audio.py",),
    ),
    ModelFamily(
        "Audio Flamingo 3",
        r"nvidia/audio-flamingo-3",
        ("transformers", "vllm"),
        max_audio_s=600.0,
        prompt_format="chat",
        architectures=("AudioFlamingo3ForConditionalGeneration",),
        placeholder="<sound>",
        verified_by=("tests/engine/test_audio_flamingo3.py",),
    ),
    ModelFamily(
        "Qwen2.5-Omni",
        r"Qwen/Qwen2\.5-Omni",
        ("transformers", "vllm"),
        prompt_format="chat",
        architectures=("Qwen2_5OmniForConditionalGeneration", "Qwen2_5OmniThinkerForConditionalGeneration"),
        placeholder="<|audio_bos|><|AUDIO|><|audio_eos|>",
        assumes="its thinker answers; a checkpoint saved as its thinker alone (SageLM) is served by vLLM from a copy "
        "in the full model's layout",
        verified_by=("tests/engine/test_qwen25_omni.py", "tests/engine/test_sagelm.py"),
    ),
    ModelFamily(
        "MiniCPM-o",
        r"openbmb/MiniCPM-o",
        ("vllm",),
        why_backends="its remote modeling code does not import under transformers 5; vLLM serves it natively",
        prompt_format="minicpmo",
        architectures=("MiniCPMO",),
        placeholder="(<audio>./</audio>)",
        assumes="thinking off, so that the verdict is the first token; one image allowed per prompt so that vLLM "
        "sizes an encoder cache for the audio",
        verified_by=("tests/engine/test_minicpmo.py",),
    ),
    ModelFamily(
        "MERaLiON-2",
        r"MERaLiON/MERaLiON-2",
        ("vllm",),
        why_backends="it runs through vllm-plugin-meralion2 (envs/judge-vllm-meralion.yaml)",
        max_audio_s=300.0,
        system_role=False,
        prompt_format="meralion",
        architectures=("MERaLiON2ForConditionalGeneration",),
        placeholder="<SpeechHere>",
        assumes="the plugin's no-repeat-n-gram processor off",
        verified_by=("tests/engine/test_meralion.py",),
    ),
    ModelFamily(
        "Llama-3.1-Instruct",
        r"meta-llama/(Meta-)?Llama-3\.1-\d+B-Instruct",
        ("transformers", "vllm"),
        audio=False,
        prompt_format="chat",
        gated=True,
        verified_by=("tests/engine/test_llama31.py",),
    ),
    ModelFamily(
        "Qwen3-Omni",
        r"Qwen/Qwen3-Omni-30B-A3B-(Instruct|Thinking)",
        ("transformers", "vllm"),
        prompt_format="chat",
        placeholder="<|audio_start|><|audio_pad|><|audio_end|>",
        assumes="its thinker answers (vLLM drops the talker and code2wav weights; transformers loads the thinker "
        "class from the full checkpoint); the Thinking checkpoint reasons before its verdict",
        limits="a 30B mixture of experts: two 80 GB GPUs for bfloat16 weights and a long context",
        verified_by=("tests/engine/test_qwen3_omni.py",),
        architectures=("Qwen3OmniMoeForConditionalGeneration",),
    ),
    ModelFamily(
        "Voxtral",
        r"mistralai/Voxtral-(Mini-3B|Small-24B)-2507",
        ("transformers", "vllm"),
        system_role=False,
        prompt_format="voxtral",
        placeholder="[BEGIN_AUDIO] and 375 [AUDIO] tokens per started 30 s",
        assumes="mistral_common's chat encoding writes the prompt (no chat template); vLLM loads the Mistral-format "
        "files (tekken.json, params.json, consolidated.safetensors)",
        limits="no system role: the system prompt goes before the user text",
        verified_by=("tests/engine/test_voxtral.py",),
        architectures=("VoxtralForConditionalGeneration",),
    ),
    ModelFamily(
        "Gemma 3n",
        r"google/gemma-3n-E[24]B",
        ("transformers", "vllm"),
        max_audio_s=30.0,
        system_role=True,
        prompt_format="chat",
        placeholder="<audio_soft_token>",
        assumes="each audio item is 188 tokens whatever its length; the chat template writes the system prompt before "
        "the first user turn's text",
        limits="both engines build its timm vision tower (MobileNetV5): the environment needs timm; vLLM and "
        "transformers embed <end_of_audio> differently (the text table's row, the audio embedder's), so their answers "
        "to audio requests differ",
        gated=True,
        verified_by=("tests/engine/test_gemma3n.py",),
        architectures=("Gemma3nForConditionalGeneration",),
    ),
    ModelFamily(
        "Granite Speech 3.3",
        r"ibm-granite/granite-speech-3\.3-",
        ("transformers", "vllm"),
        system_role=True,
        prompt_format="granite",
        placeholder="<|audio|>",
        assumes="its LoRA adapter applies to requests with audio only: transformers enables it itself, vLLM gets a "
        "LoRARequest of the checkpoint's folder with every audio prompt (enable_lora, max_lora_rank from "
        "adapter_config.json)",
        limits="one audio item per prompt; its feature extractor needs torchaudio (MelSpectrogram) in both engines; "
        "transformers 5.24 cannot switch its adapter with a released peft (it needs >= 0.22): the transformers backend "
        "runs it with transformers 5.19",
        verified_by=("tests/engine/test_granite_speech.py",),
        architectures=("GraniteSpeechForConditionalGeneration",),
    ),
    ModelFamily(
        "Phi-4-multimodal",
        r"microsoft/Phi-4-multimodal-instruct",
        ("vllm", "transformers"),
        prompt_format="phi4mm",
        system_role=True,
        architectures=("Phi4MMForCausalLM", "Phi4MultimodalForCausalLM"),
        placeholder="<|audio_1|>, <|audio_2|>, ... numbered by item (vLLM); <|endoftext11|> per item (transformers)",
        assumes="the speech LoRA adapter (options.audio_lora: speech-lora) is applied to every request with audio (a "
        "LoRARequest per prompt, submitted apart from the text requests), text-only requests run on the base weights; "
        "trust_remote_code for its hub configuration and processor (vLLM)",
        limits="the two engines read different layouts of the weights (the hub's for vLLM, transformers' for "
        "transformers); the tests run stand-ins of the hub configuration and processor classes, and the released "
        "repository's own hub code has not been run under transformers 5 here",
        verified_by=("tests/engine/test_phi4mm.py",),
    ),
    ModelFamily(
        "GPT-Audio 1.5",
        r"gpt-audio-1\.5",
        ("openai",),
        logprobs=False,
        limits="no token probabilities: the calibrated prompt is scored from its parsed SAFETY_SCORE",
        verified_by=("tests/judging/test_api_judges_2026.py",),
        retires="no shutdown announced (https://developers.openai.com/api/docs/deprecations, read 2026-12-01); it "
        "succeeds gpt-4o-audio-preview, shut down 2026-05-07",
    ),
    ModelFamily(
        "Gemini 2.5 Flash-Lite",
        r"(models/)?gemini-2\.5-flash-lite",
        ("openai",),
        logprobs=False,
        assumes="thinking off (reasoning_effort: none), so that its thinking tokens do not use up max_tokens",
        limits="no token probabilities: the calibrated prompt is scored from its parsed SAFETY_SCORE",
        verified_by=("tests/judging/test_api_judges_2026.py", "tests/judging/test_backend_openai.py"),
        retires="served until further notice (https://ai.google.dev/gemini-api/docs/deprecations, read 2026-12-01); "
        "Google names gemini-3.5-flash-lite as its replacement, which accepts no sampling parameters",
    ),
    ModelFamily(
        "Gemini (OpenAI-compatible endpoint)",
        r"(models/)?gemini-",
        ("openai",),
        logprobs=False,
        verified_by=("tests/judging/test_backend_openai.py",),
    ),
    ModelFamily("GPT-4o audio", r"gpt-(4o-(mini-)?audio|audio)", ("openai",), logprobs=False),
)


def family_of(model: str) -> ModelFamily | None:
    """The known family of a model: a hub id by its name, a local folder (a copy of a checkpoint on a cluster's file
    system, a fine-tune) by the architecture its config.json names; None for models this project has no facts about.
    (Llama-3.1's architecture is every Llama's, so a local Llama is not taken for it.)"""
    named = next((family for family in FAMILIES if family.matches(model)), None)
    if named is not None:
        return named
    architectures = set(local_architectures(model))
    return next((family for family in FAMILIES if architectures & set(family.architectures)), None)


def local_architectures(model: str) -> list[str]:
    """The architectures a local checkpoint folder's config.json names (none for a hub id)."""
    config = Path(model) / "config.json"
    if not config.is_file():
        return []
    try:
        return list(json.loads(config.read_text(encoding="utf-8")).get("architectures") or [])
    except (OSError, ValueError):
        return []  # an unreadable config is the loader's to report, naming the file


def resolved_commit(model: str, revision: str) -> str | None:
    """The hub commit a checkpoint `model` at `revision` was loaded from, read from the local hub cache (its
    snapshot folder is named by the commit); None for a local folder or a checkpoint not in the cache."""
    if Path(model).is_dir():
        return None
    from huggingface_hub import try_to_load_from_cache  # present wherever transformers is

    found = try_to_load_from_cache(model, "config.json", revision=revision)
    return Path(found).parent.name if isinstance(found, str) else None
