"""The layout of an annotation batch directory and its two item tables.

A batch directory holds what raters get and, apart from it, what they must not see:

```
items.json       public: per item an opaque id, its audio file, duration and transcript (served by the app)
audio/<item>.wav the full-dialogue audio of each item
labels.json      hidden: per item the sample id, generated labels and role, and the sampling design (never served)
study.yaml       the protocol: texts, checks with their answers, assignment design (`lalm_judge.annotation.protocol`)
ratings.sqlite   written by the app (`lalm_judge.annotation.store`)
```

Item ids are opaque (`item_001`, ...) because sample ids name the category and severity of a variant; practice,
gold and attention items are numbered among the counted ones, so that an id says nothing about its role.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lalm_judge.core.files import read_json

ITEMS_FILE = "items.json"
LABELS_FILE = "labels.json"
AUDIO_DIR = "audio"
RATINGS_DB = "ratings.sqlite"


class BatchError(ValueError):
    """A batch directory that is missing, incomplete or inconsistent; the message names the file."""


@dataclass(frozen=True)
class Turn:
    speaker: str
    text: str


@dataclass(frozen=True)
class BatchItem:
    """What a rater may get of one item: its audio and, on request (recorded), its transcript."""

    item_id: str
    audio: str
    duration_s: float
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class HiddenLabel:
    """The generated labels of one item, kept out of the raters' reach."""

    item_id: str
    sample_id: str
    dialogue_id: str
    gt_unsafe: int
    gt_severity: int
    gt_category: str | None
    turn_index: int | None
    n_turns: int
    position: str | None
    # 'item' (counted), 'practice', 'gold' or 'attention' (lalm_judge.annotation.checks).
    role: str = "item"
    # 'variant', 'original' or 'tts_control' (the original with one turn re-synthesized).
    kind: str | None = None


@dataclass(frozen=True)
class Batch:
    """The public part of a batch (`items.json`), as the app serves it."""

    directory: Path
    batch_id: str
    seed: int
    categories: tuple[str, ...]
    severities: tuple[int, ...]
    items: tuple[BatchItem, ...]
    _index: dict[str, BatchItem] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {item.item_id: item for item in self.items})

    @classmethod
    def load(cls, directory: str | Path) -> Batch:
        directory = Path(directory)
        data = _read(directory / ITEMS_FILE, "run 'lalm-judge anchors sample' to create the batch")
        items = tuple(
            BatchItem(
                item_id=item["item_id"],
                audio=item["audio"],
                duration_s=item["duration_s"],
                turns=tuple(Turn(turn["speaker"], turn["text"]) for turn in item["turns"]),
            )
            for item in data["items"]
        )
        for item in items:
            if not (directory / item.audio).is_file():
                raise BatchError(f"{directory / ITEMS_FILE}: audio file {item.audio} of {item.item_id} is missing")
        return cls(
            directory=directory,
            batch_id=data["batch_id"],
            seed=data["seed"],
            categories=tuple(data["categories"]),
            severities=tuple(data["severities"]),
            items=items,
        )

    def item(self, item_id: str) -> BatchItem | None:
        return self._index.get(item_id)


def load_labels(directory: str | Path) -> tuple[str, list[HiddenLabel]]:
    """The batch id recorded with the hidden labels and the labels of every item."""
    path = Path(directory) / LABELS_FILE
    data = _read(path, "it is written by 'lalm-judge anchors sample' beside items.json")
    labels = [HiddenLabel(**row) for row in data["items"]]
    return data["batch_id"], labels


def _read(path: Path, hint: str) -> dict[str, Any]:
    if not path.is_file():
        raise BatchError(f"{path} not found; {hint}")
    return read_json(path)
