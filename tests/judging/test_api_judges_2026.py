"""Today's audio APIs as judges by name (configs/judges-2026.yaml: `gpt_audio_15`, `gemini_25_flash_lite`), against
local stand-in servers: the paid APIs cannot be called here.

Each stand-in is a stdlib HTTP server on 127.0.0.1 (`bench.servers.start_stand_in`) that answers in the shape its
provider documents for Chat Completions with audio input, and checks the request in the shape the provider documents:
- OpenAI, for gpt-audio-1.5 (https://developers.openai.com/api/docs/guides/audio): `POST /v1/chat/completions`, a
  user message whose content parts are `text` and `input_audio` (`{"data": <base64>, "format": "wav"}`), no
  `logprobs`; the answer names the dated snapshot that served it (`"model": "gpt-audio-1.5-<date>"`) and counts the
  audio in `usage.prompt_tokens_details.audio_tokens`.
- Gemini's OpenAI-compatible endpoint, for gemini-2.5-flash-lite (https://ai.google.dev/gemini-api/docs/openai):
  `POST /v1beta/openai/chat/completions` with the same content parts and `reasoning_effort`; HTTP 400
  INVALID_ARGUMENT to a request with `logprobs`; the answer names the model asked for.
What runs for real: the judges' registry entries as shipped (only the base URL and key replaced), the judge job's
request building from two spoken turns, the openai backend, the served-model check and the score parser.
"""

from __future__ import annotations

import base64
import io
import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from bench.servers import reply_json, start_stand_in
from lalm_judge.audio.waveform import write_wav
from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.judging.backends.capabilities import family_of
from lalm_judge.judging.backends.openai_backend import OpenAIBackend
from lalm_judge.judging.cell import cell_settings
from lalm_judge.judging.job import score_samples
from lalm_judge.judging.runner import ServedModelMismatch
from lalm_judge.manifest.samples import Sample
from lalm_judge.workflow.config import validate_judge_entry

pytestmark = pytest.mark.server
ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "configs" / "judges-2026.yaml").read_text())
ANSWER = "Yes\nSAFETY_SCORE: 0.9"
GEMINI_LOGPROBS_400 = {
    "error": {
        "code": 400,
        "message": "Logprobs is not enabled for models/gemini-2.5-flash-lite",
        "status": "INVALID_ARGUMENT",
    }
}


class ProviderStandIn:
    """A stand-in for one provider's Chat Completions route: records each body, refuses what the provider refuses, and
    answers `ANSWER` from `served_model` (None: the model asked for)."""

    def __init__(self, route: str, served_model: str | None = None, refuse_logprobs: bool = False) -> None:
        self.bodies: list[dict] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                if self.path != route:
                    return reply_json(self, 404, {"error": {"message": f"no route {self.path}"}})
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.bodies.append(body)
                if refuse_logprobs and body.get("logprobs"):
                    return reply_json(self, 400, [GEMINI_LOGPROBS_400])
                audio_parts = [
                    part for message in body["messages"] if isinstance(message["content"], list)
                    for part in message["content"] if part["type"] == "input_audio"
                ]  # fmt: skip
                seconds = sum(len(decoded_wav(part)[0]) / decoded_wav(part)[1] for part in audio_parts)
                reply_json(self, 200, completion(served_model or body["model"], round(10 * seconds)))

        self.http, address = start_stand_in(Handler)
        self.base_url = address + route.removesuffix("/chat/completions")

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def decoded_wav(part: dict) -> tuple[np.ndarray, int]:
    """The waveform and rate of an `input_audio` part (a base64 wav, as the providers document)."""
    assert part["input_audio"]["format"] == "wav"
    audio, rate = sf.read(io.BytesIO(base64.b64decode(part["input_audio"]["data"])), dtype="float32")
    return audio, rate


def completion(model: str, audio_tokens: int) -> dict:
    """A chat completion in the shape OpenAI documents (Gemini's compatible endpoint answers the same fields)."""
    return {
        "id": "chatcmpl-stand-in",
        "object": "chat.completion",
        "created": 1764547200,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": ANSWER, "refusal": None, "annotations": []},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 40 + audio_tokens,
            "completion_tokens": 8,
            "total_tokens": 48 + audio_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": audio_tokens},
        },
    }


def shipped_spec(name: str, base_url: str) -> JudgeSpec:
    """The judge's entry of configs/judges-2026.yaml with the stand-in's URL and no key."""
    entry = CONFIG["judges"][name]
    entry = {**entry, "options": {**entry["options"], "base_url": base_url, "api_key_env": None}}
    return JudgeSpec.from_config(name, validate_judge_entry(name, entry))


@pytest.fixture
def spoken_sample(tmp_path) -> Sample:
    """A two-turn dialogue with a clip per turn (16 kHz, 1 s and 1.5 s)."""
    clips = []
    for index, seconds in enumerate((1.0, 1.5)):
        clip = tmp_path / f"t{index}.wav"
        tone = 0.2 * np.sin(2 * np.pi * 220 * np.arange(int(16000 * seconds)) / 16000)
        write_wav(clip, tone.astype(np.float32), 16000)
        clips.append(str(clip))
    return Sample(
        sample_id="d.original",
        dialogue_id="d",
        category=None,
        severity=0,
        turn_index=None,
        speakers=("A", "B"),
        clips=tuple(clips),
        gaps_s=(0.4,),
        sample_rate=16000,
        texts={"gt": ("Hi, how was the trip?", "Long, but worth it.")},
    )


def scored(spec: JudgeSpec, sample: Sample, modality: str = "audio") -> dict:
    cell = cell_settings(spec, modality, "none" if modality == "audio" else "gt", "calibrated")
    return score_samples([sample], cell, OpenAIBackend(spec))[0]


@pytest.mark.parametrize(
    ("name", "route", "served"),
    [
        ("gpt_audio_15", "/v1/chat/completions", "gpt-audio-1.5-2026-02-23"),
        ("gemini_25_flash_lite", "/v1beta/openai/chat/completions", None),
    ],
)
def test_the_judge_hears_the_dialogue_and_is_scored_from_its_answer(name, route, served, spoken_sample):
    """The shipped entry sends the dialogue as one wav in an `input_audio` part beside the prompt, asks for no token
    probabilities, and its parsed SAFETY_SCORE is the score; the model that answered is recorded."""
    server = ProviderStandIn(route, served_model=served, refuse_logprobs=name.startswith("gemini"))
    try:
        row = scored(shipped_spec(name, server.base_url), spoken_sample)
    finally:
        server.close()
    ((body),) = server.bodies
    assert body["model"] == CONFIG["judges"][name]["model"]
    assert "logprobs" not in body and "top_logprobs" not in body
    user = body["messages"][-1]["content"]
    assert [part["type"] for part in user] == ["input_audio", "text"]
    audio, rate = decoded_wav(user[0])
    assert rate == 16000 and len(audio) / rate == pytest.approx(1.0 + 0.4 + 1.5, abs=0.01)
    if name.startswith("gemini"):
        assert body["reasoning_effort"] == "none"
    assert (row["score"], row["score_source"], row["parse_status"]) == (0.9, "parsed", "ok")
    assert row["served_model"] == (served or CONFIG["judges"][name]["model"])


def test_an_answer_from_another_model_fails_naming_both(spoken_sample):
    """The provider routes the request to another model: the job fails naming the configured and the served one, and
    how to accept it (a dated snapshot of the configured model passes: the test above)."""
    server = ProviderStandIn("/v1/chat/completions", served_model="gpt-audio-mini-2025-10-06")
    try:
        with pytest.raises(ServedModelMismatch, match=r"'gpt-audio-mini-2025-10-06'.*'gpt-audio-1.5'.*accept_served"):
            scored(shipped_spec("gpt_audio_15", server.base_url), spoken_sample)
    finally:
        server.close()


def test_the_api_judges_record_their_retirement():
    """Each API judge of the config is a known family whose retirement, as its provider states it, is recorded."""
    for name in ("gpt_audio_15", "gemini_25_flash_lite"):
        family = family_of(CONFIG["judges"][name]["model"])
        assert family is not None and family.retires, name
        assert family.backends == ("openai",) and family.logprobs is False
        assert "tests/judging/test_api_judges_2026.py" in family.verified_by
