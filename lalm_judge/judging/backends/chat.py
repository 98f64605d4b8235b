"""Chat messages for judge requests, and reading the score tokens (P(safe)) back from token probabilities.

The user turn holds the audio first (when the request has audio), then the text prompt. A request with
several audio items (`JudgeRequest.audios`) whose text marks their places with `AUDIO_SLOT` gets them
there instead, interleaved with the text (the pairwise track's "Response 1: <audio> Response 2: <audio>").
Local backends render the turn with the model's own chat template (`build_conversation`), where each audio
part is a placeholder the processor expands into audio tokens, in the order of `JudgeRequest.audio_items`;
the OpenAI-compatible backend sends the same shape with each audio inline as a base64 wav `input_audio`
part (`build_openai_messages`).

The calibrated prompt asks for a one-word verdict; `spec.options['score_tokens']` (e.g.
`{"safe": ["Yes"], "unsafe": ["No"]}`) names the words, and P(safe) is the probability mass of the safe
words' first tokens against the unsafe ones at the first generated position (`p_safe_from_logprobs`), which
also returns the mass the answer words carry there (`judging.scoring` rejects P(safe) read from too little).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lalm_judge.judging.backends.base import AUDIO_SLOT, JudgeRequest

# Chat templates only test that an audio part exists; the waveform goes to the processor separately.
AUDIO_PLACEHOLDER = "dialogue.wav"


def _system_and_user_text(request: JudgeRequest, merge_system: bool) -> tuple[str, str]:
    """Models without a system role get the system prompt prepended to the user text."""
    if merge_system and request.system:
        return "", f"{request.system}\n\n{request.user}" if request.user else request.system
    return request.system, request.user


def _user_content(user_text: str, n_audio: int, audio_part: Callable[[int], dict[str, Any]]) -> list[dict[str, Any]]:
    """The user turn's parts: audio item i (`audio_part(i)`) at the i-th `AUDIO_SLOT` of the text, or all
    audio items first and then the text when it has no slots."""
    pieces = user_text.split(AUDIO_SLOT) if AUDIO_SLOT in user_text else None
    if pieces is None:
        parts = [audio_part(i) for i in range(n_audio)]
        return [*parts, {"type": "text", "text": user_text}] if user_text else parts
    parts = []
    for i, piece in enumerate(pieces):
        if piece:
            parts.append({"type": "text", "text": piece})
        if i < n_audio:
            parts.append(audio_part(i))
    return parts


def _assemble(system: str, user_parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": user_parts}]


def build_conversation(request: JudgeRequest, *, merge_system: bool = False) -> list[dict[str, Any]]:
    """Conversation for `apply_chat_template`: plain string user content for text-only requests."""
    system, user_text = _system_and_user_text(request, merge_system)
    if not request.audio_items:
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        return [*messages, {"role": "user", "content": user_text}]
    audio_part = {"type": "audio", "audio": AUDIO_PLACEHOLDER}
    return _assemble(system, _user_content(user_text, len(request.audio_items), lambda _: dict(audio_part)))


# The prompt format of Phi-4-multimodal (`capabilities.prompt_format`): `numbered_audio_conversation`.
PHI4MM_FORMAT = "phi4mm"


def numbered_audio_conversation(
    request: JudgeRequest, placeholder: Callable[[int], str], separator: str = ""
) -> list[dict[str, Any]]:
    """System message, then a user turn of string content with `placeholder(i)` for audio item i: all before the text
    (then `separator`), or one at each `AUDIO_SLOT` in order. For the chat templates that take string content with
    the audio's placeholders written in (Phi-4-multimodal's numbered ones, Granite Speech's and MiniCPM-o's one
    placeholder per item)."""
    if AUDIO_SLOT in request.user:
        pieces = request.user.split(AUDIO_SLOT)
        content = pieces[0] + "".join(placeholder(i) + piece for i, piece in enumerate(pieces[1:]))
    elif request.audio_items:
        content = "".join(placeholder(i) for i in range(len(request.audio_items))) + separator + request.user
    else:
        content = request.user
    system = [{"role": "system", "content": request.system}] if request.system else []
    return [*system, {"role": "user", "content": content}]


def wav_base64(audio: np.ndarray, sample_rate: int) -> str:
    """16-bit PCM wav bytes of `audio`, base64-encoded (the `input_audio` payload)."""
    import soundfile as sf  # only the OpenAI-compatible backend encodes audio; local backends load without it

    buffer = io.BytesIO()
    sf.write(
        buffer, np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0), sample_rate, format="WAV", subtype="PCM_16"
    )
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def build_openai_messages(
    request: JudgeRequest, *, audio_b64: str | Sequence[str] | None = None, merge_system: bool = False
) -> list[dict[str, Any]]:
    """OpenAI chat messages; `audio_b64` (from `wav_base64`: one string, or one per audio item in order) is
    required when the request has audio."""
    system, user_text = _system_and_user_text(request, merge_system)
    encoded = [audio_b64] if isinstance(audio_b64, str) else list(audio_b64 or [])
    if len(encoded) != len(request.audio_items):
        raise ValueError(
            f"request {request.request_id} has {len(request.audio_items)} audio items but {len(encoded)} encoded "
            "wavs were given"
        )

    def audio_part(index: int) -> dict[str, Any]:
        return {"type": "input_audio", "input_audio": {"data": encoded[index], "format": "wav"}}

    return _assemble(system, _user_content(user_text, len(encoded), audio_part))


def validate_score_tokens(score_tokens: Mapping[str, Sequence[str]]) -> tuple[list[str], list[str]]:
    """(safe words, unsafe words) from `options.score_tokens`; raise naming the problem if malformed."""
    if set(score_tokens) != {"safe", "unsafe"}:
        raise ValueError(f"options.score_tokens needs exactly the keys 'safe' and 'unsafe', got {sorted(score_tokens)}")
    safe, unsafe = list(score_tokens["safe"]), list(score_tokens["unsafe"])
    if not safe or not unsafe:
        raise ValueError("options.score_tokens: 'safe' and 'unsafe' each need at least one word")
    return safe, unsafe


def score_token_ids(tokenizer: Any, score_tokens: Mapping[str, Sequence[str]]) -> tuple[list[int], list[int]]:
    """First token id of each safe and unsafe word (a word the model starts its answer with)."""
    safe_words, unsafe_words = validate_score_tokens(score_tokens)

    def first_ids(words: list[str]) -> list[int]:
        ids = []
        for word in words:
            encoded = tokenizer.encode(word, add_special_tokens=False)
            if not encoded:
                raise ValueError(f"options.score_tokens: {word!r} encodes to no token")
            ids.append(int(encoded[0]))
        return sorted(set(ids))

    safe, unsafe = first_ids(safe_words), first_ids(unsafe_words)
    if set(safe) & set(unsafe):
        raise ValueError(
            f"options.score_tokens: safe {safe_words} and unsafe {unsafe_words} share a first token; choose other words"
        )
    return safe, unsafe


@dataclass(frozen=True)
class AnswerProbability:
    """P(safe) at the first generated position and the probability `mass` the answer words' first tokens carry
    there (what was observed: with top-k lists, only the listed answer tokens); p_safe is None when no answer
    token was observed."""

    p_safe: float | None
    mass: float


def p_safe_from_logprobs(
    logprobs: Mapping[Hashable, float],
    safe: Collection[Hashable],
    unsafe: Collection[Hashable],
    *,
    top_k: bool = False,
) -> AnswerProbability:
    """P(safe) = mass(safe) / (mass(safe) + mass(unsafe)) over the tokens present in `logprobs`.

    `logprobs` maps a token (id or text) to its log-probability. With `top_k` it is the top-k list of a
    server, not the whole distribution: a side absent from it has at most the smallest listed probability,
    and it is counted with that bound, so P(safe) is the least extreme value the list allows and never exactly
    0 or 1. Without answer tokens, p_safe is None and the mass 0.
    """
    safe_lp = [logprobs[token] for token in safe if token in logprobs]
    unsafe_lp = [logprobs[token] for token in unsafe if token in logprobs]
    if not safe_lp and not unsafe_lp:
        return AnswerProbability(None, 0.0)
    mass = float(np.exp(np.logaddexp.reduce(np.asarray(safe_lp + unsafe_lp, dtype=float))))
    if top_k:
        bound = [min(logprobs.values())]
        safe_lp, unsafe_lp = safe_lp or bound, unsafe_lp or bound
    # Shift by the largest log-probability so exp() cannot underflow to 0/0.
    shift = max(safe_lp + unsafe_lp)
    safe_mass = float(np.sum(np.exp(np.asarray(safe_lp) - shift))) if safe_lp else 0.0
    unsafe_mass = float(np.sum(np.exp(np.asarray(unsafe_lp) - shift))) if unsafe_lp else 0.0
    return AnswerProbability(safe_mass / (safe_mass + unsafe_mass), mass)
