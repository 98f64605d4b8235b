"""Import and export of SageLM's records: LLaMA-Factory's alpaca layout with two audios per record.

A record (a JSON list of them per file, e.g. SageLM's `test_semantic.json`, `test_acoustic.json` and its
training data) is

    {"instruction": "<the SageLM instruction with the aspect, the query and two <audio> placeholders>",
     "input": "", "output": "<1, 2 or Tie>\\n<rationale>", "audios": ["<response 1>", "<response 2>"]}

The instruction is "Below are two responses for a given task. ... Evaluate in terms of **<aspect>** and
indicate a better response using 1, 2 or Tie." then `### Instruction:` with the query, `### Response 1:`
and `### Response 2:` each with one `<audio>`. The query is taken verbatim (trailing newlines included);
some SageLM files have spaces after `### Instruction:`, which are kept too. `output` holds the label on its
first line and the rationale after it (an empty output is an unlabelled record, as at inference).

Import (`import_sagelm`) makes one item-table row per record (`lalm_judge.core.tables.PAIRWISE_ITEMS`):
records that share the query and both audios are one item (SageLM's semantic test set has blocks of four
aspects per pair). Aspects: the semantic ones keep their words; the acoustic ones become `emotion`,
`implicit_emotion` (SageLM marks implicit emotion only by its audio folder `Implicit-Emotion`), `gender`,
`character` and `gender_emotion`; any other aspect text becomes its slug. Audio paths stay as written,
relative to the audio root (LLaMA-Factory's `media_dir`); a record whose audio is missing is kept with
`audio_ok` false and reported (count and first ids).

Export (`export_sagelm`) writes the records back: the stored instruction when it still says the row's
aspect and query (else the instruction rendered afresh), the stored input, `output` from label and
rationale, the audio paths, and the record's other keys. Importing and exporting a file gives its records
back unchanged. A `dataset_info.json` beside the files registers them for LLaMA-Factory.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from lalm_judge.core.files import stable_hash, write_json
from lalm_judge.core.tables import PAIRWISE_ITEMS
from lalm_judge.core.taxonomy import slug
from lalm_judge.core.vocabulary import VERDICTS
from lalm_judge.pairwise.items import ASPECTS, ItemError, ItemSummary, check_unique_rows, with_durations

FORMAT = "sagelm"
RECORD_AUDIO = "<audio>"
STANDARD_KEYS = ("instruction", "input", "output", "audios")
_HEADER = (
    "Below are two responses for a given task. The task is defined by the Instruction. Evaluate in terms of "
    "**{aspect}** and indicate a better response using 1, 2 or Tie."
)
_INSTRUCTION = re.compile(
    r"^"
    + re.escape(_HEADER).replace(re.escape("{aspect}"), r"(?P<aspect>.+?)")
    + r"\n### Instruction:(?P<pad>[ \t]*)\n(?P<query>.*)\n\n### Response 1:\n<audio>\n\n### Response 2:\n<audio>\n\n$",
    re.S,
)
# Acoustic aspect words -> slug; semantic aspects keep their words (they are slugs already).
_ACOUSTIC_SLUGS = {text: aspect for aspect, text in ASPECTS.items() if aspect != "implicit_emotion" and " " in text}
IMPLICIT_EMOTION_FOLDER = "Implicit-Emotion"
# The dataset_info.json entry LLaMA-Factory needs for an alpaca file with audios.
DATASET_COLUMNS = {"prompt": "instruction", "query": "input", "response": "output", "audios": "audios"}


def sagelm_instruction(aspect_text: str, query: str, pad: str = "") -> str:
    """The SageLM instruction of an aspect and a query (`pad`: spaces after '### Instruction:')."""
    return (
        f"{_HEADER.format(aspect=aspect_text)}\n### Instruction:{pad}\n{query}\n\n"
        f"### Response 1:\n{RECORD_AUDIO}\n\n### Response 2:\n{RECORD_AUDIO}\n\n"
    )


def parse_instruction(instruction: str) -> tuple[str, str, str] | None:
    """(aspect text, query, pad) of a SageLM instruction, or None when it is not one."""
    match = _INSTRUCTION.match(instruction)
    return (match.group("aspect"), match.group("query"), match.group("pad")) if match else None


def aspect_slug(aspect_text: str, audios: Sequence[str]) -> str:
    if aspect_text in _ACOUSTIC_SLUGS:
        aspect = _ACOUSTIC_SLUGS[aspect_text]
        return "implicit_emotion" if aspect == "emotion" and IMPLICIT_EMOTION_FOLDER in audios[0] else aspect
    return re.sub(r"[^a-z0-9_]+", "_", aspect_text.lower()).strip("_")


def split_output(output: str | None, where: str) -> tuple[str | None, str | None]:
    """(label, rationale) of a record's output: the label on the first line, the rationale after the first
    newline (None when there is no newline). An empty output is an unlabelled record."""
    if not output:
        return None, None
    label, newline, rationale = output.partition("\n")
    if label not in VERDICTS:
        raise ItemError(f"{where}: output starts with {label[:40]!r}; its first line must be exactly 1, 2 or Tie")
    return label, rationale if newline else None


def join_output(label: str | None, rationale: str | None) -> str:
    if label is None:
        return rationale or ""
    return label if rationale is None else f"{label}\n{rationale}"


def item_id_of(query: str, audios: Sequence[str]) -> str:
    """A readable, stable id: the first response file's stem, then a hash of the query and both files."""
    return f"{slug(Path(audios[0]).stem) or 'item'}_{stable_hash([query, list(audios)], length=8)}"


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    try:
        records = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ItemError(f"cannot read SageLM records from {path}: {err}") from err
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ItemError(f"{path}: SageLM records are a JSON list of objects (LLaMA-Factory's alpaca layout)")
    return records


def record_to_row(record: Mapping[str, Any], source_file: str, index: int, audio_root: str) -> dict[str, Any]:
    """The item-table row of one record (durations not yet read); raise naming the file and row."""
    where = f"{source_file} record {index}"
    instruction, audios = record.get("instruction"), record.get("audios")
    if not isinstance(instruction, str):
        raise ItemError(f"{where}: needs a string 'instruction'")
    if not isinstance(audios, list) or len(audios) != 2 or not all(isinstance(a, str) and a for a in audios):
        raise ItemError(f"{where}: 'audios' must be a list of the two response paths, got {audios!r}")
    for key in ("input", "output"):
        if key in record and not isinstance(record[key], str):
            raise ItemError(f"{where}: {key!r} must be a string")
    parsed = parse_instruction(instruction)
    if parsed is None:
        raise ItemError(
            f"{where}: the instruction is not SageLM's ('Below are two responses ... Evaluate in terms of **<aspect>**"
            " ...', '### Instruction:', two '### Response N:' with one <audio> each); first 80 characters: "
            f"{instruction[:80]!r}"
        )
    aspect_text, query, _ = parsed
    label, rationale = split_output(record.get("output"), where)
    extra = {key: value for key, value in record.items() if key not in STANDARD_KEYS}
    return {
        "item_id": item_id_of(query, audios),
        "aspect": aspect_slug(aspect_text, audios),
        "aspect_text": aspect_text,
        "query": query,
        "response1_audio": audios[0],
        "response2_audio": audios[1],
        "audio_root": audio_root,
        "label": label,
        "rationale": rationale,
        "source_format": FORMAT,
        "source_file": source_file,
        "source_row": index,
        "source_instruction": instruction,
        "source_input": record.get("input"),
        "source_extra": json.dumps(extra, ensure_ascii=False),
    }


def import_sagelm(
    files: Sequence[str | os.PathLike], audio_root: str | os.PathLike
) -> tuple[pl.DataFrame, ItemSummary]:
    """Item rows of every record of `files` (audio resolved under `audio_root`) and the table's summary.
    Rows without audio are kept, flagged; `items.apply_missing_audio_policy` decides what happens to them."""
    if not files:
        raise ItemError("no SageLM record files given")
    rows = [
        record_to_row(record, os.fspath(path), index, os.fspath(audio_root))
        for path in files
        for index, record in enumerate(read_records(path))
    ]
    check_unique_rows(rows)
    items = PAIRWISE_ITEMS.frame(with_durations(rows))
    return items, ItemSummary.of(items)


def row_to_record(row: Mapping[str, Any], audios: Sequence[str]) -> dict[str, Any]:
    stored = row.get("source_instruction")
    parsed = parse_instruction(stored) if stored else None
    if parsed is not None and parsed[:2] == (row["aspect_text"], row["query"]):
        instruction = stored
    else:
        instruction = sagelm_instruction(row["aspect_text"], row["query"])
    record = {
        "instruction": instruction,
        "input": row.get("source_input") if row.get("source_input") is not None else "",
        "output": join_output(row["label"], row["rationale"]),
        "audios": list(audios),
    }
    extra = json.loads(row["source_extra"]) if row.get("source_extra") else {}
    return {**record, **{key: value for key, value in extra.items() if key not in STANDARD_KEYS}}


def export_sagelm(items: pl.DataFrame, out_dir: str | os.PathLike, name: str | None = None) -> list[Path]:
    """Write the items as SageLM/LLaMA-Factory records and a `dataset_info.json`; return the paths written.

    Without `name`, rows go back to one file per source file (named by its stem; rows made by the project go
    to `items.json`), in their source order; with `name`, all rows go to `<name>.json`. Audio paths are
    written as stored when the file's rows share one audio root (set LLaMA-Factory's `media_dir` to it),
    else as absolute paths.
    """
    items = PAIRWISE_ITEMS.conform(items, "pairwise item table").collect()
    out_dir = Path(out_dir)
    stems = (
        pl.lit(name)
        if name
        else pl.col("source_file").map_elements(lambda p: Path(p).stem, return_dtype=pl.String).fill_null("items")
    )
    items = items.with_columns(_file=stems).sort("_file", "source_row", "item_id", "aspect", nulls_last=True)
    written, dataset_info = [], {}
    for (stem,), rows in items.group_by("_file", maintain_order=True):
        shared_root = rows["audio_root"].n_unique() == 1
        records = []
        for row in rows.iter_rows(named=True):
            audios = [row["response1_audio"], row["response2_audio"]]
            if not shared_root:
                audios = [os.path.abspath(os.path.join(row["audio_root"] or "", path)) for path in audios]
            records.append(row_to_record(row, audios))
        path = out_dir / f"{stem}.json"
        write_json(path, records)
        written.append(path)
        dataset_info[str(stem)] = {"file_name": path.name, "columns": dict(DATASET_COLUMNS)}
    info_path = out_dir / "dataset_info.json"
    write_json(info_path, dataset_info)
    return [*written, info_path]
