"""Voxtral's prompts (`capabilities.prompt_format: voxtral`), the same for the vllm and transformers backends.

Voxtral has no chat template: mistral_common's chat encoding (`MistralTokenizer.encode_chat_completion`, with the
checkpoint's `tekken.json`) writes the prompt's tokens, each audio item as `[BEGIN_AUDIO]` and one `[AUDIO]` token per
audio token (375 per started 30 s: 12.5 a second, the audio padded to whole 30 s chunks), and returns the padded audio
(vLLM 0.32 `model_executor/models/voxtral.py` takes these tokens and checks the `[AUDIO]` tokens are there;
transformers' `VoxtralProcessor.apply_chat_template` calls the same encoding). Both backends build the request here:
one user message whose chunks are the audio items first (or each at its `AUDIO_SLOT`) and the text, with the system
prompt before the text (the released model card: "System prompts are not yet supported"). The audio goes in as float
arrays (`Audio(..., format="wav")`, lossless), and both engines get the padded arrays mistral_common returns: vLLM as
the request's audio, transformers as Whisper features of 30 s windows (`input_features`, `VoxtralProcessor`'s
`_retrieve_input_features`).

mistral_common is imported on use: it is a dependency of vLLM (and of transformers' Voxtral tokenizer).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lalm_judge.judging.backends.base import AUDIO_SLOT, JudgeRequest

VOXTRAL_FORMAT = "voxtral"
VOXTRAL_MODEL_TYPE = "voxtral"
# The engine settings vLLM serves Voxtral with: its Tekken tokenizer, params.json and consolidated.safetensors.
VLLM_MISTRAL_FORMAT = {"tokenizer_mode": "mistral", "config_format": "mistral", "load_format": "mistral"}
BEGIN_AUDIO = "[BEGIN_AUDIO]"
WINDOW_FRAMES = 3000  # mel frames of one 30 s window (the encoder's max_source_positions x 2)


def voxtral_text(request: JudgeRequest) -> str:
    """The user text with the system prompt before it (Voxtral takes no system message)."""
    return f"{request.system}\n\n{request.user}" if request.system else request.user


def chat_request(request: JudgeRequest, waveforms: list[np.ndarray], sampling_rate: int) -> Any:
    """mistral_common's chat request of a judge request whose audio items are `waveforms` at `sampling_rate`: one user
    message, the audio items first or each at its slot."""
    from mistral_common.protocol.instruct.chunk import AudioChunk, TextChunk
    from mistral_common.protocol.instruct.messages import UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.audio import Audio

    audios = [
        AudioChunk.from_audio(Audio(np.asarray(waveform, dtype=np.float32), sampling_rate, format="wav"))
        for waveform in waveforms
    ]
    text = voxtral_text(request)
    if AUDIO_SLOT in text:
        chunks: list[Any] = []
        for index, piece in enumerate(text.split(AUDIO_SLOT)):
            if piece:
                chunks.append(TextChunk(text=piece))
            if index < len(audios):
                chunks.append(audios[index])
    else:
        chunks = [*audios, TextChunk(text=text)] if text else list(audios)
    return ChatCompletionRequest(messages=[UserMessage(content=chunks if audios else text)])


def encode(
    tokenizer: Any, request: JudgeRequest, waveforms: list[np.ndarray], sampling_rate: int
) -> tuple[list[int], list[np.ndarray]]:
    """(prompt tokens, padded audio arrays) of a request with its audio items as `waveforms` at `sampling_rate`, the
    rate of the checkpoint's audio encoder; `tokenizer` is transformers' `MistralCommonBackend`."""
    tokenized = mistral_tokenizer(tokenizer).encode_chat_completion(chat_request(request, waveforms, sampling_rate))
    return list(tokenized.tokens), [np.asarray(audio.audio_array, dtype=np.float32) for audio in tokenized.audios]


def mistral_tokenizer(tokenizer: Any) -> Any:
    """mistral_common's tokenizer inside transformers' `MistralCommonBackend` (what AutoTokenizer loads for Voxtral)."""
    inner = getattr(tokenizer, "tokenizer", None)
    if inner is None or not hasattr(inner, "encode_chat_completion"):
        raise ValueError(
            f"a Voxtral checkpoint's tokenizer is mistral_common's (tekken.json, transformers' MistralCommonBackend); "
            f"got {type(tokenizer).__name__}"
        )
    return inner


def audio_sampling_rate(tokenizer: Any) -> int:
    """The rate the checkpoint's audio encoder reads (tekken.json `audio.sampling_rate`)."""
    return int(mistral_tokenizer(tokenizer).instruct_tokenizer.audio_encoder.audio_config.sampling_rate)


def input_features(feature_extractor: Any, audios: list[np.ndarray], sampling_rate: int) -> Any:
    """Whisper features of padded audio items, one 30 s window per row, in order (VoxtralProcessor's)."""
    import torch

    windows = []
    for audio in audios:
        # VoxtralProcessor's audio settings: nothing cut, padded to whole windows (mistral_common padded it already).
        features = feature_extractor(
            audio,
            sampling_rate=sampling_rate,
            padding=True,
            truncation=False,
            pad_to_multiple_of=feature_extractor.n_samples,
            return_tensors="pt",
        )["input_features"]
        windows.append(features.reshape(feature_extractor.feature_size, -1, WINDOW_FRAMES).transpose(0, 1))
    return torch.cat(windows)
