"""What the clients of OpenAI-compatible endpoints share (the `llm` rewrite generator, the `openai` judge backend):
reading a chat completion that may be malformed, and keeping the API key out of every message.

An endpoint under load can answer 200 with a body that is not a usable chat completion: cut short, not JSON, or
JSON without choices. The `openai` client then raises `json.JSONDecodeError` (the body does not parse), returns
the body as a string (a non-JSON content type) or returns a completion with an empty `choices` list. None of
these says anything about the request, so the clients retry them like a 5xx (`MALFORMED_RESPONSE`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from lalm_judge.core.files import stable_hash


class MalformedCompletion(ValueError):
    """A 200 answer that is not a usable chat completion (no choices, no message)."""


# Exceptions of one attempt that mean "the answer was unusable, ask again" (besides transport errors).
MALFORMED_RESPONSE: tuple[type[Exception], ...] = (MalformedCompletion, json.JSONDecodeError)


def first_choice(completion: Any) -> Any:
    """The first choice of a chat completion; MalformedCompletion if there is none or it has no message."""
    choices = None if isinstance(completion, str | bytes) else getattr(completion, "choices", None)
    if not choices:
        shown = completion[:80] if isinstance(completion, str | bytes) else "a completion without choices"
        raise MalformedCompletion(f"the endpoint answered {shown!r} instead of a chat completion")
    choice = choices[0]
    if getattr(choice, "message", None) is None:
        raise MalformedCompletion("the endpoint answered a choice without a message")
    return choice


def redact(text: str, secret: str | None) -> str:
    """`text` with every occurrence of `secret` replaced (error bodies of some servers quote the key back)."""
    return text.replace(secret, "***") if secret else text


def chat_request_key(fields: dict[str, Any], messages: list[dict[str, str]]) -> tuple[str, dict[str, Any]]:
    """Stable cache key of one chat request: its identifying fields plus a hash of the exact messages (which cover
    the prompt text and the content); returns the key and the fields it was computed from."""
    keyed = {**fields, "messages_sha256": hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()}
    return stable_hash(keyed, length=32), keyed
