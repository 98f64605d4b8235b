"""Checks of corpus records when a corpus is listed, before any job: the type of every field, text hygiene, keys
repeated inside one JSON object, where audio files are and whether they are whole, and the turns a voice cannot
speak (warnings, not errors). Every message names the file (and line, for `dialogues.jsonl`), the dialogue, the
turn and the field.

Refused: a NUL character, a lone surrogate (half of a UTF-16 pair: not a character), a control character other
than tab and line breaks, a bidirectional embedding, override or isolate (it reorders how the text reads, so the
text a judge reads is not what was said), and a turn longer than MAX_TURN_CHARACTERS. Warned about: a turn with no
letters or digits (emoji or symbols only) and one holding emoji or symbols, which voices read out by name or skip.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lalm_judge.audio.integrity import audio_file_problem
from lalm_judge.core.dialogue import CorpusError

# About five minutes of speech: longer turns are not turns of a dialogue (and make prompts of tens of thousands of
# tokens); split them.
MAX_TURN_CHARACTERS = 4000
# The fields of a turn of the project's `jsonl` format; any other key would be dropped at ingest without a word.
JSONL_TURN_FIELDS = ("speaker", "text", "emotion", "audio")

_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_LETTER_OR_DIGIT = re.compile(r"[^\W_]")
# Emoji and other symbols (Unicode categories So, Sk) and private-use characters (Co).
_SYMBOL_CATEGORIES = ("So", "Sk", "Co")


def _character_problem(char: str) -> str:
    code = ord(char)
    if code == 0:
        return "a NUL character (U+0000)"
    if 0xD800 <= code <= 0xDFFF:
        return f"a lone surrogate (U+{code:04X}: half of a UTF-16 pair, not a character; was the text cut?)"
    if unicodedata.category(char) == "Cc":
        return f"the control character U+{code:04X}"
    return (
        f"the bidirectional control U+{code:04X} ({unicodedata.name(char)}), which reorders how the text reads, so "
        "that what a judge reads is not what was said"
    )


def check_text(value: Any, where: str, *, field: str, limit: int | None = None) -> str:
    """`value` if it is a non-empty string free of forbidden characters (and at most `limit` characters long);
    else a CorpusError naming `where`, the field and the problem."""
    if not isinstance(value, str):
        raise CorpusError(f"{where} field {field!r}: {json.dumps(value)} is {_kind(value)}; it must be a string")
    if not value.strip():
        raise CorpusError(f"{where} field {field!r}: the {field} is empty")
    bad = _FORBIDDEN.search(value)
    if bad:
        raise CorpusError(
            f"{where} field {field!r}: the {field} holds {_character_problem(bad.group())} at character "
            f"{bad.start()}; remove it"
        )
    if limit is not None and len(value) > limit:
        raise CorpusError(
            f"{where} field {field!r}: the {field} has {len(value)} characters, more than the {limit} a turn may have "
            "(about five minutes of speech); split it into several turns"
        )
    return value


def _kind(value: Any) -> str:
    kinds = {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def check_optional_text(record: Mapping[str, Any], key: str, where: str) -> None:
    """An optional string field (an emotion, a domain): absent, null or a clean non-empty string."""
    if record.get(key) is not None:
        check_text(record[key], where, field=key)


def speech_warning(text: str, where: str) -> str | None:
    """Why a voice cannot speak `text` as written (no letters or digits; emoji or symbols), or None."""
    if not _LETTER_OR_DIGIT.search(text):
        return (
            f"{where}: the text {text!r} has no letters or digits; a voice reads such symbols out by name or not at "
            "all, so its speech and its WER against the text say nothing about the dialogue"
        )
    if text.isascii():
        return None
    symbols = [char for char in text if unicodedata.category(char) in _SYMBOL_CATEGORIES]
    if not symbols:
        return None
    shown = "".join(dict.fromkeys(symbols))[:8]
    return (
        f"{where}: the text holds {len(symbols)} emoji or symbol character(s) ({shown}), which a voice reads out by "
        "name or skips and no transcript of the speech contains (its WER counts them as errors)"
    )


def loads_unique(text: str, where: str) -> Any:
    """JSON text as data; a key given twice in one object is a CorpusError (json keeps the last one silently)."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise CorpusError(
                    f"{where}: key {key!r} appears twice in one JSON object (a reader keeps only the last one): "
                    "remove one of them"
                )
            seen[key] = value
        return seen

    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as err:
        raise CorpusError(f"{where}: invalid JSON ({err})") from err


def decode_utf8(data: bytes, file: Path) -> str:
    """The file's bytes as text; invalid UTF-8 is a CorpusError naming the line and byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise CorpusError(
            f"{file}:{line}: byte {data[err.start]:#04x} is not UTF-8 ({err.reason}); save the file as UTF-8"
        ) from None


def check_turn_fields(turn: Any, where: str, *, allowed: tuple[str, ...] | None = None) -> list[str]:
    """Types and text hygiene of one turn (speaker, text, emotion); keys outside `allowed` are refused when given.
    Returns the speech warnings of its text."""
    if not isinstance(turn, dict):
        raise CorpusError(f"{where}: a turn is an object with 'speaker' and 'text', not {_kind(turn)}")
    unknown = sorted(set(turn) - set(allowed)) if allowed is not None else []
    if unknown:
        raise CorpusError(f"{where}: unknown field(s) {unknown}; a turn has the fields {list(allowed)}")
    for field in ("speaker", "text"):
        if field not in turn:
            raise CorpusError(f"{where}: the turn needs a speaker and a text (no field {field!r})")
    check_text(turn["speaker"], where, field="speaker")
    check_text(turn["text"], where, field="text", limit=MAX_TURN_CHARACTERS)
    check_optional_text(turn, "emotion", where)
    warning = speech_warning(turn["text"], where)
    return [warning] if warning else []


def corpus_audio_path(corpus_dir: Path, given: Any, where: str, *, allow_external: bool, check_file: bool) -> str:
    """The path (relative to the working directory, as the workflow names it) of a turn's `audio`, which is
    relative to the corpus folder. Audio outside that folder (an absolute path, '..', a symbolic link out of it) is
    refused unless `corpus.allow_external_audio` is true; with `check_file`, so is a file that is missing, cut short
    or too short (`integrity.audio_file_problem`)."""
    if not isinstance(given, str) or not given.strip():
        raise CorpusError(
            f"{where} field 'audio': {json.dumps(given)} is not a path; give the clip's path relative to {corpus_dir} "
            "or leave the field out (the turn is then spoken by its speaker's voice)"
        )
    path = corpus_dir / given
    check_audio_file(path, corpus_dir, f"{where} field 'audio'", allow_external=allow_external, check_file=check_file)
    return str(path)


def check_audio_file(path: Path, corpus_dir: Path, where: str, *, allow_external: bool, check_file: bool) -> None:
    """Refuse an audio file outside the corpus folder (unless allowed) and, with `check_file`, an unusable one."""
    if not allow_external and not path.resolve().is_relative_to(corpus_dir.resolve()):
        raise CorpusError(
            f"{where}: {path} is {path.resolve()}, outside the corpus folder {corpus_dir}; copy it into the folder, "
            "or set corpus.allow_external_audio: true to read audio from elsewhere (it is then tracked by its content "
            "like the corpus's own files)"
        )
    problem = audio_file_problem(path) if check_file else None
    if problem:
        raise CorpusError(f"{where}: {path} {problem}")
