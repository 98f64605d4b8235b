"""Text preference data in the UltraFeedback layout, read and filtered to what speech can carry.

The layout (the UltraFeedback dataset's, one item per JSON object):

    {"source": "evol_instruct", "instruction": "...",
     "completions": [{"model": "...", "response": "...",
                      "annotations": {"helpfulness": {"Rating": "4", "Rationale": "...",
                                                      "Rationale For Rating": "..."},
                                      "honesty": {"Rating": "5", "Rationale": "..."},
                                      "instruction_following": {...}, "truthfulness": {...}}}, ...]}

read from a JSONL or JSON file, a parquet file, or a folder of those (`read_items`). Per aspect a completion
has a rating (1-5; "N/A" or a missing one leaves that aspect unrated) and a rationale: "Rationale For Rating"
where the aspect has one (helpfulness and truthfulness explain the rating there), else "Rationale".

Filters (`drop_reason`, rules in docs/preference.md), applied to the instruction and every response, first
match wins:
- `math`: LaTeX markup (`\\frac`, `\\sqrt`, `$...$`, ...), an equation or arithmetic between numbers
  ("3x + 7 = 22", "12 * 4", "5^2", "2 + 2"; not "2-3 days" or "1/2 cup"), or a math task word ("solve for",
  "simplify", "integral", "derivative", "equation", "polynomial", "theorem", ...).
- `code`: a code fence, a line that reads as code (`def f(...):`, `function f(`, `#include`, `SELECT ... FROM`,
  braces or semicolons ending lines, `x = y;`), or a request to write code ("write a Python function").
- `non_english`: more than 5 % of the letters outside the Latin script (Cyrillic, CJK, Arabic, ...), or, for a
  text of 8 words or more, fewer than 12 % of its words among common English function words.
Speech cannot carry formulas or code, and the TTS voices speak English: SageLM dropped the same three kinds.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from lalm_judge.core.files import shard_of, stable_hash, with_provenance, write_json, write_parquet
from lalm_judge.core.tables import PREFERENCE_COMPLETIONS, PREFERENCE_RATINGS
from lalm_judge.core.taxonomy import slug
from lalm_judge.preference.render import speakable_text

SEMANTIC_ASPECTS = ("helpfulness", "honesty", "instruction_following", "truthfulness")
DROP_REASONS = ("math", "code", "non_english")
TOO_FEW = "too_few_completions"
RATING_RANGE = (1, 5)
SOURCE_SUFFIXES = (".jsonl", ".json", ".parquet")


class SourceError(ValueError):
    """Preference data that cannot be read; the message names the file, line and key."""


@dataclass(frozen=True)
class Completion:
    model: str
    response: str
    # aspect -> (rating or None when unrated, rationale)
    ratings: Mapping[str, tuple[int | None, str]]


@dataclass(frozen=True)
class PreferenceItem:
    item_id: str
    source: str
    instruction: str
    completions: tuple[Completion, ...]
    origin: str  # "<file>:<line or row>"


# --- reading ------------------------------------------------------------------------------------------------
def source_files(path: str | os.PathLike) -> list[Path]:
    """The data files of a path: the file itself, or the JSONL/JSON/parquet files of a folder (sorted)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES)
        if files:
            return files
        raise SourceError(f"preference source folder {path} holds no {'/'.join(SOURCE_SUFFIXES)} files")
    raise SourceError(f"preference source {path} does not exist")


def _raw_records(path: Path) -> Iterator[tuple[str, Any]]:
    if path.suffix == ".parquet":
        for index, row in enumerate(pl.read_parquet(path).iter_rows(named=True)):
            yield f"{path}:row {index}", row
        return
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            records = json.loads(text)
        except json.JSONDecodeError as err:
            raise SourceError(f"{path}: invalid JSON ({err})") from err
        if not isinstance(records, list):
            raise SourceError(f"{path}: a .json source is a list of items")
        for index, record in enumerate(records):
            yield f"{path}:item {index}", record
        return
    for line_no, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield f"{path}:{line_no}", json.loads(line)
            except json.JSONDecodeError as err:
                raise SourceError(f"{path}:{line_no}: invalid JSON ({err})") from err


def _rating(value: Any, where: str) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().upper() in ("", "N/A", "NA")):
        return None
    try:
        rating = int(float(value))
    except (TypeError, ValueError) as err:
        raise SourceError(f"{where}: rating {value!r} is not a number or N/A") from err
    low, high = RATING_RANGE
    if not low <= rating <= high:
        raise SourceError(f"{where}: rating {rating} is outside {low}-{high}")
    return rating


def _completion(raw: Any, where: str) -> Completion:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("response"), str):
        raise SourceError(f"{where}: a completion is an object with a string 'response'")
    annotations = raw.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise SourceError(f"{where}: 'annotations' must be an object of aspects")
    ratings = {}
    for aspect in SEMANTIC_ASPECTS:
        note = annotations.get(aspect)
        if not isinstance(note, Mapping):
            continue
        # Parquet copies of the dataset hold a list of annotations per aspect; the first is the rating.
        rationale = note.get("Rationale For Rating") or note.get("Rationale") or ""
        ratings[aspect] = (_rating(note.get("Rating"), f"{where} annotations.{aspect}"), str(rationale).strip())
    return Completion(model=str(raw.get("model") or ""), response=raw["response"], ratings=ratings)


def item_id_of(source: str, instruction: str) -> str:
    return f"{slug(source) or 'item'}_{stable_hash(instruction, length=10)}"


def read_items(path: str | os.PathLike) -> list[PreferenceItem]:
    """Every item of the source, in file order; items with the same instruction and source keep the first."""
    items, seen = [], set()
    for file in source_files(path):
        for where, raw in _raw_records(file):
            if not isinstance(raw, Mapping) or not isinstance(raw.get("instruction"), str):
                raise SourceError(f"{where}: an item is an object with a string 'instruction'")
            completions = raw.get("completions")
            if not isinstance(completions, Sequence) or isinstance(completions, str):
                raise SourceError(f"{where}: 'completions' must be a list")
            source = str(raw.get("source") or "unknown")
            item_id = item_id_of(source, raw["instruction"])
            if item_id in seen:
                continue
            seen.add(item_id)
            items.append(
                PreferenceItem(
                    item_id=item_id,
                    source=source,
                    instruction=raw["instruction"],
                    completions=tuple(_completion(c, f"{where} completions[{i}]") for i, c in enumerate(completions)),
                    origin=where,
                )
            )
    return items


# --- filters ------------------------------------------------------------------------------------------------
_LATEX = re.compile(r"\\(?:frac|sqrt|sum|int|cdot|times|alpha|beta|pi|theta|leq|geq|neq|begin\{)|\$[^$\n]+\$")
# An equation between numbers or unknowns ("3x + 7 = 22"), a product, quotient or power of numbers ("12 * 4",
# "5^2") or a sum of numbers ("2 + 2"); "2-3 days" and "1/2 cup" are no arithmetic.
_ARITHMETIC = re.compile(
    r"\b\d*[a-z]?\s*[-+*/^]\s*\d+[a-z]?\s*=\s*-?\d|=\s*-?\d+\s*[-+*/^]\s*\d|\d\s*[*×÷^]\s*\d|\d\s+\+\s+\d",
    re.IGNORECASE,
)
_MATH_WORDS = re.compile(
    r"\b(?:solve\s+for|simplify|integral|integrate|derivative|differentiate|equation|polynomial|theorem|"
    r"factori[sz]e|quadratic|logarithm|algebra(?:ic)?|arithmetic|calculate|compute\s+the\s+(?:sum|product|value))\b",
    re.IGNORECASE,
)
_CODE_FENCE = re.compile(r"```|~~~")
_CODE_LINE = re.compile(
    r"^\s*(?:def\s+\w+\s*\(.*\)\s*:|class\s+\w+.*:|function\s+\w*\s*\(|#include\b|import\s+\w+|from\s+\w+\s+import\b|"
    r"(?:public|private|static)\s+\w+|(?:SELECT|INSERT|UPDATE|DELETE)\b.+\b(?:FROM|INTO|SET|WHERE)\b|"
    r"(?:var|let|const)\s+\w+\s*=|.*[;{}]\s*$|\w+\s*=\s*[^=].*;\s*$)",
    re.MULTILINE,
)
_CODE_REQUEST = re.compile(
    r"\b(?:write|create|implement|fix|debug|refactor)\b.{0,40}\b(?:code|function|script|program|class|method|"
    r"query|regex|snippet)\b|\b(?:python|javascript|typescript|java|c\+\+|c#|golang|rust|sql|html|css|bash|php)\b"
    r".{0,30}\b(?:code|function|script|program|snippet)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
_FUNCTION_WORDS = (
    "a an the and or but if of to in on at by for with from as is are was were be been being it its this that "
    "these those there here what which who whom whose when where why how not no do does did have has had can "
    "could will would should may might must i you he she we they me him her us them my your his our their"
)
_ENGLISH_FUNCTION_WORDS = frozenset(_FUNCTION_WORDS.split())
MIN_WORDS_FOR_LANGUAGE = 8
ENGLISH_WORD_SHARE = 0.12
NON_LATIN_LETTER_SHARE = 0.05


def _non_latin_share(text: str) -> float:
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 0.0
    return sum("LATIN" not in unicodedata.name(c, "") for c in letters) / len(letters)


def looks_non_english(text: str) -> bool:
    if _non_latin_share(text) > NON_LATIN_LETTER_SHARE:
        return True
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) < MIN_WORDS_FOR_LANGUAGE:
        return False
    return sum(w in _ENGLISH_FUNCTION_WORDS for w in words) / len(words) < ENGLISH_WORD_SHARE


def looks_math(text: str) -> bool:
    return bool(_LATEX.search(text) or _ARITHMETIC.search(text) or _MATH_WORDS.search(text))


def looks_code(text: str) -> bool:
    return bool(_CODE_FENCE.search(text) or _CODE_LINE.search(text) or _CODE_REQUEST.search(text))


_CHECKS = {"math": looks_math, "code": looks_code, "non_english": looks_non_english}


def drop_reason(item: PreferenceItem, drop: Sequence[str] = DROP_REASONS) -> str | None:
    """The first filter (in `DROP_REASONS` order, among `drop`) the item's instruction or a response trips."""
    texts = [item.instruction, *(completion.response for completion in item.completions)]
    for reason in DROP_REASONS:
        if reason in drop and any(_CHECKS[reason](text) for text in texts):
            return reason
    return None


# --- the selection stage --------------------------------------------------------------------------------------
def select_items(
    settings: Mapping[str, Any],
    completions_path: str | os.PathLike,
    ratings_path: str | os.PathLike,
    report_path: str | os.PathLike,
    *,
    shards: int,
    seed: int = 0,
) -> dict[str, Any]:
    """Read the source, drop what speech cannot carry, make the responses speakable and assign item shards;
    write the completion and rating tables and the selection report (counts per reason); return the report.

    `settings` is the validated `preference.source` with `drop`: the filters to apply. A completion whose
    speakable text is empty is left out (counted); an item left with fewer than two completions cannot make a
    pair and is dropped (`too_few_completions`)."""
    items = read_items(settings["path"])
    if settings["max_items"] is not None:
        items = items[: settings["max_items"]]
    dropped = dict.fromkeys([*DROP_REASONS, TOO_FEW], 0)
    completions, ratings, n_empty = [], [], 0
    for item in items:
        reason = drop_reason(item, settings["drop"])
        spoken = [(index, c, speakable_text(c.response)) for index, c in enumerate(item.completions)]
        n_empty += sum(not text for _, _, text in spoken) if reason is None else 0
        spoken = [entry for entry in spoken if entry[2]]
        if reason is None and len(spoken) < 2:
            reason = TOO_FEW
        if reason is not None:
            dropped[reason] += 1
            continue
        shard = shard_of(item.item_id, shards)
        for index, completion, text in spoken:
            completions.append(
                {
                    "item_id": item.item_id,
                    "shard": shard,
                    "source": item.source,
                    "origin": item.origin,
                    "instruction": item.instruction,
                    "completion": index,
                    "model": completion.model,
                    "response": completion.response,
                    "text": text,
                }
            )
            for aspect, (rating, rationale) in completion.ratings.items():
                ratings.append(
                    {
                        "item_id": item.item_id,
                        "completion": index,
                        "aspect": aspect,
                        "rating": rating,
                        "rationale": rationale,
                    }
                )
    if not completions:
        raise SourceError(f"no item of {settings['path']} is left after the filters ({dropped})")
    config_hash = stable_hash({"source": dict(settings), "shards": shards})
    write_parquet(
        completions_path, with_provenance(PREFERENCE_COMPLETIONS.frame(completions), config_hash=config_hash, seed=seed)
    )
    write_parquet(ratings_path, with_provenance(PREFERENCE_RATINGS.frame(ratings), config_hash=config_hash, seed=seed))
    kept = len({row["item_id"] for row in completions})
    report = {
        "source": os.fspath(settings["path"]),
        "items_read": len(items),
        "items_kept": kept,
        "items_dropped": dropped,
        "completions_kept": len(completions),
        "completions_without_speakable_text": n_empty,
        "items_per_shard": {str(k): len({r["item_id"] for r in completions if r["shard"] == k}) for k in range(shards)},
    }
    write_json(report_path, report)
    return report
