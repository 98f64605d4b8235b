"""The pairwise item table and the project's own items.

An item is one text query with two spoken responses; each aspect it is judged on is one row of the item
table (`lalm_judge.core.tables.PAIRWISE_ITEMS`), so an item's aspects share its audio and travel together
in the metrics' bootstrap. Items come from SageLM's records (`lalm_judge.pairwise.sagelm`) or from the
project's JSONL format, spoken here with the TTS engines (`synthesize_items`):

    {"id": "pw_boiling", "query": "At what temperature does water boil at sea level?",
     "responses": [{"text": "...", "voice": "joe"}, {"text": "...", "voice": "f3"}],
     "aspects": {"truthfulness": {"label": "1", "rationale": "Response 1 gives ..."}}}

one item per line; `voice` names an entry of the config's `pairwise.items.voices`; an aspect outside
`ASPECTS` needs an `aspect_text` (the words the judge reads). An item with acoustic aspects may say its
`"task_format"` (`explicit_tts`, `explicit_dialogue`, `implicit`; implicit emotion is always `implicit`).
Items whose audio is missing stay in the table with `audio_ok` false; `apply_missing_audio_policy` then keeps,
excludes (reporting count and first ids) or refuses them; excluding every item is an error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import soundfile as sf
from tqdm import tqdm

from lalm_judge.audio import waveform
from lalm_judge.audio.tts import SynthesisRequest, Voice, synthesize
from lalm_judge.core.files import jsonl_records, stable_hash, with_provenance, write_json, write_parquet
from lalm_judge.core.tables import PAIRWISE_ITEMS
from lalm_judge.core.vocabulary import ACOUSTIC_STYLES, IMPLICIT, TASK_FORMATS
from lalm_judge.pairwise.parsing import normalize_label

# The aspects of the SageLM study (slug -> the words its instruction uses): four semantic ones and the
# acoustic "speech instruction following" ones. Implicit emotion shares the words of explicit emotion.
ASPECTS = {
    "helpfulness": "helpfulness",
    "honesty": "honesty",
    "instruction_following": "instruction_following",
    "truthfulness": "truthfulness",
    "emotion": "emotion instruction following",
    "implicit_emotion": "emotion instruction following",
    "gender": "gender instruction following",
    "character": "character instruction following",
    "gender_emotion": "gender instruction following and emotion instruction following",
}
MISSING_AUDIO_POLICIES = ("keep", "exclude", "fail")
# The default of the CLI and of the workflow (`pairwise.items.missing_audio`) alike.
DEFAULT_MISSING_AUDIO = "fail"
FIRST_IDS = 10
JSONL_FORMAT = "jsonl"
# Item ids are slugs: they name folders of synthesized audio and travel in file names.
ITEM_ID = re.compile(r"^[a-z0-9_]+$")


class ItemError(ValueError):
    """Items that cannot be used; the message names the file, the line or the items."""


def resolve_audio(audio_root: str | None, path: str) -> str:
    """A response audio path as stored (relative to the item's audio root unless absolute) made usable."""
    return path if os.path.isabs(path) or not audio_root else os.path.join(audio_root, path)


def response_paths(row: Mapping[str, Any]) -> tuple[str, str]:
    """The two response files of an item-table row, resolved."""
    return (
        resolve_audio(row["audio_root"], row["response1_audio"]),
        resolve_audio(row["audio_root"], row["response2_audio"]),
    )


def audio_duration_s(path: str) -> float | None:
    """Duration of an audio file from its header; None when it is missing or unreadable."""
    try:
        info = sf.info(path)
    except (sf.LibsndfileError, RuntimeError, OSError):
        return None
    return float(info.frames) / info.samplerate if info.frames > 0 else None


def with_durations(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fill the response durations and `audio_ok` of item rows (each distinct file is read once)."""
    durations: dict[str, float | None] = {}
    for row in rows:
        for index, path in enumerate(response_paths(row), 1):
            if path not in durations:
                durations[path] = audio_duration_s(path)
            row[f"response{index}_duration_s"] = durations[path]
        row["audio_ok"] = row["response1_duration_s"] is not None and row["response2_duration_s"] is not None
    return rows


@dataclass(frozen=True)
class ItemSummary:
    """What an item table holds, and which items lack audio (count and first ids)."""

    n_items: int
    n_rows: int
    n_missing_audio_items: int
    n_missing_audio_rows: int
    first_missing_items: tuple[str, ...]
    first_missing_files: tuple[str, ...]
    aspects: Mapping[str, int]

    @classmethod
    def of(cls, items: pl.DataFrame) -> ItemSummary:
        missing = items.filter(~pl.col("audio_ok"))
        missing_files: list[str] = []
        for row in missing.iter_rows(named=True):
            for path, duration in zip(response_paths(row), (row["response1_duration_s"], row["response2_duration_s"])):
                if duration is None and path not in missing_files:
                    missing_files.append(path)
        missing_ids = missing["item_id"].unique(maintain_order=True).to_list()
        return cls(
            n_items=items["item_id"].n_unique(),
            n_rows=items.height,
            n_missing_audio_items=len(missing_ids),
            n_missing_audio_rows=missing.height,
            first_missing_items=tuple(missing_ids[:FIRST_IDS]),
            first_missing_files=tuple(missing_files[:FIRST_IDS]),
            aspects=dict(sorted(items.group_by("aspect").len().iter_rows())),
        )

    def missing_message(self) -> str:
        return (
            f"{self.n_missing_audio_items} of {self.n_items} items ({self.n_missing_audio_rows} rows) have missing or "
            f"unreadable audio; first ids: {', '.join(self.first_missing_items)}; first files: "
            f"{', '.join(self.first_missing_files)}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "n_items": self.n_items,
            "n_rows": self.n_rows,
            "n_missing_audio_items": self.n_missing_audio_items,
            "n_missing_audio_rows": self.n_missing_audio_rows,
            "first_missing_items": list(self.first_missing_items),
            "first_missing_files": list(self.first_missing_files),
            "aspects": dict(self.aspects),
        }


# Where each caller of `apply_missing_audio_policy` sets the policy, for its messages.
POLICY_SETTINGS = "lalm-judge pairwise import --missing-audio, or pairwise.items.missing_audio in a run config"


def apply_missing_audio_policy(
    items: pl.DataFrame, policy: str, setting: str = POLICY_SETTINGS
) -> tuple[pl.DataFrame, ItemSummary]:
    """`keep` the rows without audio (flagged, `audio_ok` false), `exclude` them, or `fail` naming them (`setting`:
    where the user sets the policy, for the message). The summary describes the table before the policy, so an
    exclusion is always on record; the caller reports it once. Excluding every item is an error, not an empty run."""
    if policy not in MISSING_AUDIO_POLICIES:
        raise ValueError(f"unknown missing-audio policy {policy!r}; use one of {MISSING_AUDIO_POLICIES}")
    summary = ItemSummary.of(items)
    if not summary.n_missing_audio_rows:
        return items, summary
    if policy == "fail":
        raise ItemError(
            f"{summary.missing_message()}. Fix the audio root, or set the missing-audio policy to 'exclude' ({setting})"
        )
    if policy == "exclude":
        items = items.filter(pl.col("audio_ok"))
        if items.height == 0:
            raise ItemError(
                f"{summary.missing_message()}: excluding them leaves no item to judge. Check the audio root (the "
                "folder the records' audio paths are relative to) and that the audio is in place"
            )
    return items, summary


def missing_audio_warning(summary: ItemSummary, policy: str) -> str:
    """The one line that reports rows without audio under a `keep` or `exclude` policy."""
    return f"{summary.missing_message()} ({'excluded' if policy == 'exclude' else 'kept, flagged'})"


def read_items(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> pl.DataFrame:
    return PAIRWISE_ITEMS.read(paths)


def write_items(
    items: pl.DataFrame,
    out_path: str | os.PathLike,
    summary_path: str | os.PathLike | None,
    summary: ItemSummary,
    *,
    config_hash: str,
    seed: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """The item table with provenance columns, and its summary JSON (with `extra`, e.g. the source files)."""
    write_parquet(out_path, with_provenance(PAIRWISE_ITEMS.frame(items.to_dicts()), config_hash=config_hash, seed=seed))
    if summary_path is not None:
        write_json(summary_path, {**(extra or {}), **summary.as_dict()})


def check_unique_rows(rows: Sequence[Mapping[str, Any]]) -> None:
    """Each (item, aspect) once; raise naming both sources of a duplicate."""
    seen: dict[tuple[str, str], str] = {}
    for row in rows:
        key = (row["item_id"], row["aspect"])
        where = f"{row['source_file']}:{row['source_row']}"
        if key in seen:
            raise ItemError(f"item {key[0]!r} has aspect {key[1]!r} twice ({seen[key]} and {where})")
        seen[key] = where


# --- the project's JSONL items -------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpokenResponse:
    text: str
    voice: str


@dataclass(frozen=True)
class ProjectItem:
    item_id: str
    query: str
    responses: tuple[SpokenResponse, SpokenResponse]
    # aspect -> (aspect text, label, rationale)
    aspects: Mapping[str, tuple[str, str, str | None]]
    line: int
    # The acoustic aspects' task format (core.vocabulary.TASK_FORMATS), where the item gives it.
    task_format: str | None = None


def read_jsonl_items(path: str | os.PathLike) -> list[ProjectItem]:
    """Parse and validate a JSONL of project items (format in the module docstring)."""
    path = Path(path)
    file = path / "items.jsonl" if path.is_dir() else path
    items, seen = [], set()
    for line_no, record in jsonl_records(file, ItemError):
        where = f"{file}:{line_no}"
        if not isinstance(record, Mapping):
            raise ItemError(f"{where}: an item is a JSON object")
        item_id = record.get("id")
        if not isinstance(item_id, str) or not ITEM_ID.match(item_id):
            raise ItemError(f"{where}: item id {item_id!r} must match [a-z0-9_]+")
        if item_id in seen:
            raise ItemError(f"{where}: duplicate item id {item_id!r}")
        seen.add(item_id)
        query, responses, aspects = record.get("query"), record.get("responses"), record.get("aspects")
        if not isinstance(query, str) or not query.strip():
            raise ItemError(f"{where}: item {item_id!r} needs a non-empty 'query'")
        if not isinstance(responses, list) or len(responses) != 2:
            raise ItemError(f"{where}: item {item_id!r} needs exactly two 'responses'")
        spoken = []
        for index, response in enumerate(responses, 1):
            if (
                not isinstance(response, Mapping)
                or not str(response.get("text", "")).strip()
                or not response.get("voice")
            ):
                raise ItemError(f"{where}: response {index} of {item_id!r} needs a 'text' and a 'voice'")
            spoken.append(SpokenResponse(str(response["text"]), str(response["voice"])))
        if not isinstance(aspects, Mapping) or not aspects:
            raise ItemError(f"{where}: item {item_id!r} needs 'aspects' (aspect -> label and rationale)")
        task_format = record.get("task_format")
        if task_format is not None and task_format not in TASK_FORMATS:
            raise ItemError(f"{where}: item {item_id!r} has task_format {task_format!r}; use one of {TASK_FORMATS}")
        judged = {}
        for aspect, entry in aspects.items():
            at = f"{where}: aspect {aspect!r} of {item_id!r}"
            if not isinstance(entry, Mapping) or "label" not in entry:
                raise ItemError(f"{at} needs a 'label'")
            text = entry.get("aspect_text", ASPECTS.get(aspect))
            if not text:
                raise ItemError(f"{at} is not one of {sorted(ASPECTS)}; give its 'aspect_text'")
            try:
                label = normalize_label(entry["label"], at)
            except ValueError as err:
                raise ItemError(str(err)) from err
            judged[aspect] = (str(text), label, entry.get("rationale"))
        if "implicit_emotion" in judged:
            task_format = IMPLICIT
        items.append(
            ProjectItem(item_id, query, (spoken[0], spoken[1]), judged, int(where.rsplit(":", 1)[1]), task_format)
        )
    if not items:
        raise ItemError(f"{file} holds no items")
    return items


def synthesize_items(
    items_path: str | os.PathLike,
    voices: Mapping[str, Mapping[str, Any]],
    audio_dir: str | os.PathLike,
    sample_rate: int,
    *,
    max_items: int | None = None,
    progress: bool = True,
) -> pl.DataFrame:
    """Speak both responses of every project item with their voices; return the item rows.

    Clips go to `<audio_dir>/<item>/response{1,2}.wav` at `sample_rate`; the table's paths are relative to
    `audio_dir` (its `audio_root`), as in LLaMA-Factory records.
    """
    items = read_jsonl_items(items_path)[:max_items]
    unknown = sorted({r.voice for item in items for r in item.responses} - set(voices))
    if unknown:
        raise ItemError(f"{items_path}: responses name voices {unknown} that pairwise.items.voices does not define")
    audio_root = os.fspath(audio_dir)
    rows = []
    for item in tqdm(items, desc="speak pairwise items", disable=not progress):
        paths = []
        for index, response in enumerate(item.responses, 1):
            audio, rate = synthesize(Voice.from_config(voices[response.voice]), SynthesisRequest(response.text))
            relative = f"{item.item_id}/response{index}.wav"
            waveform.write_wav(
                os.path.join(audio_root, relative), waveform.resample(audio, rate, sample_rate), sample_rate
            )
            paths.append(relative)
        for aspect, (aspect_text, label, rationale) in item.aspects.items():
            rows.append(
                {
                    "item_id": item.item_id,
                    "aspect": aspect,
                    "aspect_text": aspect_text,
                    "query": item.query,
                    "response1_audio": paths[0],
                    "response2_audio": paths[1],
                    "audio_root": audio_root,
                    "label": label,
                    "rationale": rationale,
                    "response1_text": item.responses[0].text,
                    "response2_text": item.responses[1].text,
                    "task_format": item.task_format if aspect in ACOUSTIC_STYLES else None,
                    "style": ACOUSTIC_STYLES.get(aspect),
                    "source_format": JSONL_FORMAT,
                    "source_file": os.fspath(items_path),
                    "source_row": item.line,
                    "source_extra": "{}",
                }
            )
    check_unique_rows(rows)
    return PAIRWISE_ITEMS.frame(with_durations(rows))


def items_config_hash(settings: Mapping[str, Any]) -> str:
    return stable_hash({"pairwise_items": settings})
