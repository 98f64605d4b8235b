"""The offline rewrite generator: lines from a project-written bank, adapted to the dialogue.

Each line names what the dialogue is about (`choose_topic`: the corpus's domain of the dialogue, else a noun of
the turns from the bank's curated noun lists) and, where the speakers have personal names, the addressee.
Every choice (bank line, new emotion, topic noun among equals) comes from a stable hash of
(seed, dialogue id, turn, category, severity), so equal inputs give equal rows on every machine.
The bank (`template_bank.yaml`) is versioned; its version is the rows' `prompt_version`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.files import read_yaml, stable_hash
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
class TopicNouns:
    """The bank's `topic` section: what a line may name as its {topic} (see the bank's comments)."""

    fallback: str
    with_article: frozenset[str]
    mass: frozenset[str]
    count: frozenset[str]

    @classmethod
    def from_bank(cls, section: Any, where: str) -> TopicNouns:
        if not isinstance(section, dict) or not section.get("fallback"):
            raise GeneratorConfigError(f"{where} must be a mapping with a 'fallback' and the noun lists")
        mass, count = (
            frozenset(str(w).lower() for w in section.get(key) or ()) for key in ("mass_nouns", "count_nouns")
        )
        if not mass or not count:
            raise GeneratorConfigError(f"{where}: 'mass_nouns' and 'count_nouns' must both list nouns")
        if mass & count:
            raise GeneratorConfigError(f"{where}: {sorted(mass & count)} listed as both mass and count nouns")
        bad = sorted(w for w in mass | count if not _WORD.fullmatch(w))
        if bad:
            raise GeneratorConfigError(f"{where}: nouns must be single lower-case words, got {bad}")
        return cls(
            fallback=str(section["fallback"]),
            with_article=frozenset(str(w).lower() for w in section.get("with_article") or ()),
            mass=mass,
            count=count,
        )

    def lemma(self, word: str) -> str | None:
        """The listed noun that `word` is (itself or its regular plural), if any."""
        for candidate in _singulars(word):
            if candidate in self.mass or candidate in self.count:
                return candidate
        return None

    def phrase(self, word: str) -> str:
        """How a listed noun found in a turn is named: mass nouns and plurals bare, singular count nouns with 'the'."""
        lemma = self.lemma(word)
        if lemma is None:
            raise ValueError(f"{word!r} is not a listed topic noun")
        return word if lemma in self.mass or word != lemma else f"the {word}"

    def domain_phrase(self, domain: str) -> str:
        """How a corpus domain label is named: as written, with 'the' where the bank says so."""
        words = " ".join(domain.replace("_", " ").lower().split())
        return f"the {words}" if words in self.with_article else words


def _singulars(word: str) -> tuple[str, ...]:
    """`word` and the singulars a regular English plural of it could come from (tomatoes, berries; not chess)."""
    forms = [word]
    if word.endswith("ies") and len(word) > 4:
        forms.append(word[:-3] + "y")
    if word.endswith("es"):
        forms.append(word[:-2])
    if word.endswith("s") and not word.endswith("ss"):
        forms.append(word[:-1])
    return tuple(forms)


@dataclass(frozen=True)
class TemplateBank:
    version: str
    lines: Mapping[tuple[str, int], tuple[str, ...]]
    emotions: Mapping[tuple[str, int], tuple[str, ...]]
    marker_weights: Mapping[str, float]
    markers: Mapping[str, tuple[str, ...]]
    topics: TopicNouns

    @classmethod
    def load(cls, path: str | Path = BANK_PATH) -> TemplateBank:
        """Read and validate a bank: every category x severity cell, placeholders, emotion labels."""
        path = Path(path)
        data = read_yaml(path)
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
            topics=TopicNouns.from_bank(data.get("topic"), f"{path}: topic"),
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
    # Naming the topic ties a line to its dialogue; a topic is a lower-case noun phrase, so never the first word.
    if "{topic}" not in line or line.startswith("{topic}"):
        raise GeneratorConfigError(f"{where}: name {{topic}} inside the line, not first, in {line!r}")


def addressee_name(dialogue: Dialogue, turn_index: int) -> str | None:
    """The personal name of the speaker addressed by the turn (nearest other speaker), if it is a name."""
    speaker = dialogue.turns[turn_index].speaker
    ordered = [*reversed(dialogue.turns[:turn_index]), *dialogue.turns[turn_index + 1 :]]
    other = next((t.speaker for t in ordered if t.speaker != speaker), None)
    if other is None or not _PERSONAL_NAME.match(other) or other.lower() in _ROLE_LABELS:
        return None
    return other


def choose_topic(dialogue: Dialogue, turn_index: int, seed: int, bank: TemplateBank) -> str:
    """What the rewritten turn talks about, as a noun phrase that reads after 'about'.

    The dialogue's domain when the corpus gives one (`meta["domain"]`), else a listed noun of the previous turn
    (for the first turn, or a previous turn without one: of the whole dialogue), preferring nouns that occur in
    more turns; else the fallback.
    """
    topics = bank.topics
    domain = dialogue.meta.get("domain")
    if domain is not None:
        if not isinstance(domain, str) or not domain.strip():
            raise GeneratorConfigError(
                f"dialogue {dialogue.dialogue_id!r} ({dialogue.source_path}): its domain {domain!r} is not a "
                "non-empty string; fix the corpus entry or drop the key"
            )
        return topics.domain_phrase(domain)

    def nouns(text: str) -> set[str]:
        return {w for w in _WORD.findall(text.lower()) if topics.lemma(w) is not None}

    previous = nouns(dialogue.turns[turn_index - 1].text) if turn_index > 0 else set()
    candidates = sorted(previous or nouns(" ".join(t.text for t in dialogue.turns)))
    if not candidates:
        return topics.fallback
    turn_lemmas = [{topics.lemma(w) for w in nouns(t.text)} for t in dialogue.turns]
    recurrence = {w: sum(topics.lemma(w) in lemmas for lemmas in turn_lemmas) for w in candidates}
    most = max(recurrence.values())
    chosen = _choice([w for w in candidates if recurrence[w] == most], seed, dialogue.dialogue_id, turn_index, "topic")
    return topics.phrase(chosen)


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
