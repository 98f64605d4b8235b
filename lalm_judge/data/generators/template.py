"""The offline rewrite generator: lines from a project-written bank, adapted to the dialogue.

Every choice (bank line, new emotion, topic word) comes from a stable hash of
(seed, dialogue id, turn, category, severity), so equal inputs give equal rows on every machine.
The bank (`template_bank.yaml`) is versioned; its version is the rows' `prompt_version`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.files import stable_hash
from lalm_judge.core.taxonomy import CATEGORIES, EMOTIONS, SEVERITIES
from lalm_judge.data.generators import GeneratorConfigError, RewriteRequest, RewriteResult, check_config_keys

BANK_PATH = Path(__file__).with_name("template_bank.yaml")
MIN_LINES_PER_CELL = 3

_PLACEHOLDER = re.compile(r"\{(\w*)\}")
# {other} is written only as a vocative, so that it can be dropped when the addressee has no name.
_VOCATIVE_START = re.compile(r"^\{other\},\s*")
_VOCATIVE_INNER = re.compile(r",\s*\{other\}")
_WORD = re.compile(r"[a-z]+")
# Speaker labels that are roles, not names ("LLM1", "A", "Speaker 2", "user"): never spoken as a name.
_PERSONAL_NAME = re.compile(r"^[A-Z][a-z]+$")
_ROLE_LABELS = frozenset({"speaker", "user", "assistant", "agent", "system", "host", "guest", "bot"})


def _choice(options: Sequence[Any], *parts: Any) -> Any:
    """Pick one option from a stable hash of `parts` (never Python's per-session `hash()`)."""
    return options[int(stable_hash(list(parts)), 16) % len(options)]


@dataclass(frozen=True)
class TemplateBank:
    version: str
    lines: Mapping[tuple[str, int], tuple[str, ...]]
    emotions: Mapping[tuple[str, int], tuple[str, ...]]
    marker_weights: Mapping[str, float]
    markers: Mapping[str, tuple[str, ...]]
    topic_stopwords: frozenset[str]
    topic_fallback: str

    @classmethod
    def load(cls, path: str | Path = BANK_PATH) -> TemplateBank:
        """Read and validate a bank: every category x severity cell, placeholders, emotion labels."""
        path = Path(path)
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or "version" not in data:
            raise GeneratorConfigError(f"{path}: a template bank is a mapping with a 'version'")
        lines, emotions = {}, {}
        for category in CATEGORIES:
            for severity in SEVERITIES:
                where = f"{path}: categories.{category}.{severity}"
                cell = data.get("categories", {}).get(category, {}).get(severity)
                if not cell:
                    raise GeneratorConfigError(f"{where} is missing; the bank must cover every category x severity")
                cell_lines = tuple(cell.get("lines") or ())
                if len(cell_lines) < MIN_LINES_PER_CELL:
                    raise GeneratorConfigError(f"{where} has {len(cell_lines)} line(s); write >= {MIN_LINES_PER_CELL}")
                for line in cell_lines:
                    _check_line(line, where)
                cell_emotions = tuple(cell.get("emotions") or ())
                wrong = [e for e in cell_emotions if e not in EMOTIONS]
                if not cell_emotions or wrong:
                    raise GeneratorConfigError(f"{where}: emotions {wrong or '(none)'} are not DeepDialogue labels")
                lines[category, severity] = cell_lines
                emotions[category, severity] = cell_emotions
        markers = data.get("intensity_markers", {})
        weights = dict(markers.get("weights", {}))
        return cls(
            version=str(data["version"]),
            lines=lines,
            emotions=emotions,
            marker_weights=weights,
            markers={kind: tuple(m.lower() for m in markers.get(kind, ())) for kind in weights},
            topic_stopwords=frozenset(data.get("topic_stopwords", ())),
            topic_fallback=str(data.get("topic_fallback", "conversation")),
        )

    def intensity(self, text: str) -> float:
        """Lexical intensity of a line: the weighted count of the bank's marker phrases (whole words)."""
        words = re.findall(r"[a-z']+", text.lower())
        padded = " " + " ".join(words) + " "
        return sum(
            self.marker_weights[kind] * padded.count(f" {phrase} ")
            for kind, phrases in self.markers.items()
            for phrase in phrases
        )


def _check_line(line: str, where: str) -> None:
    unknown = set(_PLACEHOLDER.findall(line)) - {"topic", "other"}
    if unknown:
        raise GeneratorConfigError(f"{where}: unknown placeholder(s) {sorted(unknown)} in {line!r}")
    stray = _VOCATIVE_INNER.sub("", _VOCATIVE_START.sub("", line))
    if "{other}" in stray:
        raise GeneratorConfigError(f"{where}: write {{other}} only as a vocative (', {{other}}') in {line!r}")


def addressee_name(dialogue: Dialogue, turn_index: int) -> str | None:
    """The personal name of the speaker addressed by the turn (nearest other speaker), if it is a name."""
    speaker = dialogue.turns[turn_index].speaker
    ordered = [*reversed(dialogue.turns[:turn_index]), *dialogue.turns[turn_index + 1 :]]
    other = next((t.speaker for t in ordered if t.speaker != speaker), None)
    if other is None or not _PERSONAL_NAME.match(other) or other.lower() in _ROLE_LABELS:
        return None
    return other


def choose_topic(dialogue: Dialogue, turn_index: int, seed: int, bank: TemplateBank) -> str:
    """A content word of the previous turn (the dialogue for turn 0), preferring words that recur."""

    def content_words(text: str) -> list[str]:
        words = _WORD.findall(text.lower())
        return [w for w in words if len(w) >= 4 and w not in bank.topic_stopwords and not w.endswith("ly")]

    source = dialogue.turns[turn_index - 1].text if turn_index > 0 else " ".join(t.text for t in dialogue.turns)
    candidates = sorted(set(content_words(source)))
    if not candidates:
        return bank.topic_fallback
    turn_words = [set(content_words(t.text)) for t in dialogue.turns]
    recurrence = {w: sum(w in words for words in turn_words) for w in candidates}
    most = max(recurrence.values())
    return _choice([w for w in candidates if recurrence[w] == most], seed, dialogue.dialogue_id, turn_index, "topic")


def fill_line(line: str, topic: str, other: str | None) -> str:
    """Fill the placeholders; without a name the vocative and its comma are dropped."""
    if other is None:
        line = _VOCATIVE_INNER.sub("", _VOCATIVE_START.sub("", line))
        line = line[:1].upper() + line[1:]
    return line.replace("{other}", other or "").replace("{topic}", topic)


class TemplateGenerator:
    """Rewrites from the bank; config keys: `name: template`, optional `bank` (path to another bank)."""

    name = "template"
    model = "template_bank"

    def __init__(self, config: Mapping[str, Any] | None = None, cache_dir: Path | None = None):
        config = dict(config or {})
        check_config_keys(config, ["bank"], self.name)
        self.bank = TemplateBank.load(config.get("bank") or BANK_PATH)
        self.prompt_version = self.bank.version
        self.generation: dict[str, Any] = {}  # deterministic: the bank (its version) and the seed decide

    def rewrite(self, requests: Sequence[RewriteRequest]) -> list[RewriteResult]:
        return [self.rewrite_one(request) for request in requests]

    def rewrite_one(self, request: RewriteRequest) -> RewriteResult:
        cell = (request.category, request.severity)
        parts = (request.seed, request.dialogue.dialogue_id, request.turn_index, *cell)
        topic = choose_topic(request.dialogue, request.turn_index, request.seed, self.bank)
        other = addressee_name(request.dialogue, request.turn_index)
        text = fill_line(_choice(self.bank.lines[cell], *parts, "line"), topic, other)
        return RewriteResult("ok", text=text, emotion=_choice(self.bank.emotions[cell], *parts, "emotion"))
