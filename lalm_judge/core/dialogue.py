"""The dialogue data model every stage reads: `Turn`, `Dialogue` (the canonical `dialogue.json`) and
`SourceDialogue` (what the workflow plan knows of a corpus dialogue at parse time, without reading audio)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lalm_judge.core.files import write_json


class CorpusError(ValueError):
    """A corpus entry that cannot be used; the message names the file and dialogue."""


@dataclass
class Turn:
    index: int
    speaker: str
    text: str
    emotion: str | None
    start: float = 0.0
    end: float = 0.0
    clip: str | None = None
    boundary_method: str = "given"
    boundary_confidence: float = 1.0


@dataclass
class Dialogue:
    dialogue_id: str
    turns: list[Turn]
    source_format: str
    source_path: str
    sample_rate: int
    status: str = "ok"
    skip_reason: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # What ingest kept but a reader should know (e.g. an emotion label outside the project's set).
    warnings: list[str] = field(default_factory=list)

    @property
    def speakers(self) -> list[str]:
        return list(dict.fromkeys(t.speaker for t in self.turns))

    def gaps_s(self) -> list[float]:
        """Silence between consecutive turns, from the original timing."""
        return [max(0.0, b.start - a.end) for a, b in zip(self.turns, self.turns[1:])]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Dialogue:
        fields = dict(data)
        fields["turns"] = [Turn(**t) for t in data["turns"]]
        return cls(**fields)

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> Dialogue:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


@dataclass(frozen=True)
class SourceDialogue:
    """What the workflow needs to know about a dialogue at parse time (no audio is read)."""

    dialogue_id: str
    n_turns: int
    source_path: str
    # Where messages point: 'file:line' of its record, or its JSON file.
    location: str = ""
    # The speaker and emotion label of each turn, when the listing reads them (the imported benchmark's index does
    # not); checked at parse time against the emotion references (their genders and labels).
    speakers: tuple[str, ...] = ()
    emotions: tuple[str | None, ...] = ()
    # Turns without audio of their own, spoken at ingest by their speaker's voice (the `jsonl` format).
    spoken_turns: tuple[int, ...] = ()
    # The files besides its record that define it (its JSON, clips or recording), as the workflow names them.
    files: tuple[str, ...] = ()
    # A digest of its record where several dialogues share one file (`dialogues.jsonl`), else empty.
    record_digest: str = ""
    # What the listing noticed but kept (e.g. a turn a voice cannot speak as written).
    warnings: tuple[str, ...] = ()
    # The turns the corpus holds variants of, where it brings its own (an imported benchmark); None: any turn.
    variant_turns: tuple[int, ...] | None = None
