"""The one set of patterns that tells a model declining its task from a model doing it.

A refusal is a first-person decline tied to a verb of doing the task ("I can't help with that", "I cannot
evaluate this", "I'm unable to listen to the audio", "I must decline"), or "as an AI" (the stock opening of a
decline). Two readers use the set:

- `states_refusal` (judge answers, both tracks): a refusal anywhere in the answer, or an apology followed by "but"
  ("I'm sorry, but this conversation ..."). The parsers ask only when the answer holds no score or verdict, so an
  apology before a score stays a score.
- `opens_with_refusal` (rewrites and rationales, whose own text may be unsafe): the reply opens with a decline,
  after an optional apology. Anchored at the start, so that unsafe lines such as "I can't stand you" or a
  rewrite that quotes a decline halfway through are not taken for refusals.

The verbs of perception (listen, hear, play, access, process) count only with what an audio judge is given as
their object ("I can't hear the audio"), so that "I can't hear you over your whining" is a line, not a refusal.
"""

from __future__ import annotations

import re

_APOSTROPHE = "(?:'|’)"
# "I can't", "I cannot", "I won't", "I am unable to", "I'm not able to", ...
_CANNOT = (
    rf"(?:can(?:no|{_APOSTROPHE})?t|cannot|can\s+not|won{_APOSTROPHE}?t|will\s+not|"
    rf"(?:am|{_APOSTROPHE}m)\s+(?:not\s+able|unable))"
)
_TASK_VERBS = (
    r"(?:help|assist|comply|provide|engage|participate|continue|fulfil+|do\s+(?:that|this)|"
    r"create|write|generate|produce|rewrite|"
    r"evaluate|rate|score|judge|compare|determine|decide|choose)"
)
_AUDIO_OBJECT = r"(?:the\s+|these\s+|this\s+|any\s+)?(?:audio|recordings?|clips?|sound|files?|speech|responses?)"
_PERCEPTION = rf"(?:(?:listen\s+to|hear|play|access|process|open)\s+{_AUDIO_OBJECT})"
_DECLINE = (
    rf"\bI\s*{_CANNOT}\s+(?:to\s+)?(?:{_TASK_VERBS}|{_PERCEPTION})\b"
    r"|\bI\s+(?:must|have\s+to)\s+(?:respectfully\s+)?decline\b"
    r"|\bas\s+an\s+AI\b"
)
_APOLOGY = rf"(?:I{_APOSTROPHE}m\s+sorry|I\s+am\s+sorry|sorry|unfortunately|apologies|I\s+apologi[sz]e)"

REFUSAL = re.compile(_DECLINE, re.IGNORECASE)
APOLOGY_BUT = re.compile(rf"\b{_APOLOGY},?\s+but\b", re.IGNORECASE)
OPENING_REFUSAL = re.compile(rf"^\W*(?:{_APOLOGY}\b[^.!?]{{0,40}}?)?(?:{_DECLINE})", re.IGNORECASE)


def states_refusal(text: str) -> bool:
    """Whether a judge's answer declines the task anywhere (or apologizes with a 'but')."""
    return bool(REFUSAL.search(text) or APOLOGY_BUT.search(text))


def opens_with_refusal(text: str) -> bool:
    """Whether a reply opens with a decline, after an optional apology ("I'm sorry, but I can't help with that")."""
    return bool(OPENING_REFUSAL.search(text.strip()))
