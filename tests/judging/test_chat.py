"""The conversation builders with one and several audio items (their rendering through real chat templates is
in the backend tests)."""

import numpy as np
import pytest

from lalm_judge.judging.backends.base import AUDIO_SLOT, JudgeRequest
from lalm_judge.judging.backends.chat import AUDIO_PLACEHOLDER, build_conversation, build_openai_messages

AUDIO = (np.zeros(160, dtype=np.float32), 16000)
AUDIO_PART = {"type": "audio", "audio": AUDIO_PLACEHOLDER}


def test_one_audio_comes_first_as_before():
    request = JudgeRequest("r", "sys", "Is it safe?", audio=AUDIO)
    assert build_conversation(request) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [AUDIO_PART, {"type": "text", "text": "Is it safe?"}]},
    ]
    assert build_conversation(JudgeRequest("t", "", "Hi")) == [{"role": "user", "content": "Hi"}]


def test_several_audios_go_to_their_slots_between_the_text():
    request = JudgeRequest("p", "", f"Q\nResponse 1:\n{AUDIO_SLOT}\nResponse 2:\n{AUDIO_SLOT}", audios=(AUDIO, AUDIO))
    assert build_conversation(request)[0]["content"] == [
        {"type": "text", "text": "Q\nResponse 1:\n"},
        AUDIO_PART,
        {"type": "text", "text": "\nResponse 2:\n"},
        AUDIO_PART,
    ]
    unslotted = JudgeRequest("u", "", "Which is better?", audios=(AUDIO, AUDIO))
    assert build_conversation(unslotted)[0]["content"] == [
        AUDIO_PART,
        AUDIO_PART,
        {"type": "text", "text": "Which is better?"},
    ]
    merged = build_conversation(
        JudgeRequest("m", "Judge.", f"A {AUDIO_SLOT} B {AUDIO_SLOT}", audios=(AUDIO, AUDIO)), merge_system=True
    )
    assert merged[0]["content"][0] == {"type": "text", "text": "Judge.\n\nA "}


def test_openai_messages_carry_one_input_audio_per_item():
    request = JudgeRequest("p", "sys", f"1: {AUDIO_SLOT} 2: {AUDIO_SLOT}", audios=(AUDIO, AUDIO))
    content = build_openai_messages(request, audio_b64=["x", "y"])[1]["content"]
    assert [p.get("input_audio", {}).get("data") for p in content] == [None, "x", None, "y"]
    single = JudgeRequest("s", "", "Safe?", audio=AUDIO)
    assert build_openai_messages(single, audio_b64="z")[0]["content"][0]["input_audio"]["data"] == "z"
    with pytest.raises(ValueError, match="has 2 audio items but 1 encoded wavs"):
        build_openai_messages(request, audio_b64=["x"])


def test_requests_are_checked():
    with pytest.raises(ValueError, match="not both"):
        JudgeRequest("b", "", "x", audio=AUDIO, audios=(AUDIO,))
    with pytest.raises(ValueError, match="2 audio slots for 1 audio items"):
        JudgeRequest("s", "", f"{AUDIO_SLOT}{AUDIO_SLOT}", audios=(AUDIO,))
    assert JudgeRequest("a", "", "x", audio=AUDIO).audio_items == (AUDIO,)
