"""Import and export of SageLM's records: LLaMA-Factory's alpaca layout with two audios per record.

A record (a JSON list of them per file, e.g. SageLM's `test_semantic.json`, `test_acoustic.json` and its
training data) is

    {"instruction": "<the SageLM instruction with the aspect, the query and two <audio> placeholders>",
     "input": "", "output": "<1, 2 or Tie>\\n<rationale>", "audios": ["<response 1>", "<response 2>"]}

The instruction is "Below are two responses for a given task. ... Evaluate in terms of **<aspect>** and
indicate a better response using 1, 2 or Tie." then `### Instruction:` with the query, `### Response 1:`
and `### Response 2:` each with one `<audio>`: the layout of SageLM's released records. Its README writes the
same template with a blank line before `### Instruction:`; both are read, and a record in either is exported
back as it was. Anything else is refused, naming the record and the first line that differs from the prompt;
so is an empty query or an aspect that is not one of SageLM's (the four semantic words and the four acoustic
"... instruction following" texts). The query is taken verbatim (trailing newlines included); some SageLM
files have spaces after `### Instruction:`, which are kept too. `output` holds the label on its first line and
the rationale after it (an empty output is an unlabelled record, as at inference).

Import (`import_sagelm`) makes one item-table row per record (`lalm_judge.core.tables.PAIRWISE_ITEMS`):
records that share the query and both audios are one item (SageLM's semantic test set has blocks of four
aspects per pair). Aspects: the semantic ones keep their words; the acoustic ones become `emotion`,
`implicit_emotion` (SageLM marks implicit emotion only by its audio folder `Implicit-Emotion`), `gender`,
`character` and `gender_emotion`. Acoustic rows get their `style` and SageLM's `task_format`
(`task_format_of`: the rule of SageLM's evaluation script). Audio paths stay as written, relative to the
audio root (LLaMA-Factory's `media_dir`), and must stay inside it (no absolute path, no `..`, no symbolic link out of
it); a record whose audio is missing is kept with `audio_ok` false and reported (count and first ids).

Export (`export_sagelm`) writes the records back: the stored instruction when it still says the row's
aspect and query (else the instruction rendered afresh), the stored input, `output` from label and
rationale, the audio paths, and the record's other keys. Importing and exporting a file gives its records
back unchanged. A `dataset_info.json` beside the files registers them for LLaMA-Factory.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from lalm_judge.core.files import stable_hash, write_json
from lalm_judge.core.tables import PAIRWISE_ITEMS
from lalm_judge.core.taxonomy import slug
from lalm_judge.core.vocabulary import ACOUSTIC_STYLES, IMPLICIT, VERDICTS
from lalm_judge.pairwise.items import ASPECTS, ItemError, ItemSummary, check_unique_rows, with_durations
from lalm_judge.pairwise.sagelm_eval import IMPLICIT_EMOTION_FOLDER, format_by_file_names

log = logging.getLogger(__name__)

FORMAT = "sagelm"
RECORD_AUDIO = "<audio>"
STANDARD_KEYS = ("instruction", "input", "output", "audios")
_HEADER = (
    "Below are two responses for a given task. The task is defined by the Instruction. Evaluate in terms of "
    "**{aspect}** and indicate a better response using 1, 2 or Tie."
)
_HEADER_LINE = re.compile("^" + re.escape(_HEADER).replace(re.escape("{aspect}"), "(?P<aspect>.+?)") + "$")
_INSTRUCTION_LINE = re.compile(r"^### Instruction:(?P<pad>[ \t]*)$")
# The lines after the query: a blank line, then each response heading with its placeholder, then a blank line.
_TAIL = ("", "### Response 1:", RECORD_AUDIO, "", "### Response 2:", RECORD_AUDIO, "", "")
# The two layouts SageLM uses: its released records (the heading right after the first line) and its README's
# template (a blank line between them).
RECORDS_LAYOUT, README_LAYOUT = "records", "readme"
# Acoustic aspect words -> slug; semantic aspects keep their words (they are slugs already).
_ACOUSTIC_SLUGS = {text: aspect for aspect, text in ASPECTS.items() if aspect != "implicit_emotion" and " " in text}
SAGELM_ASPECT_TEXTS = tuple(dict.fromkeys(ASPECTS.values()))
# The dataset_info.json entry LLaMA-Factory needs for an alpaca file with audios.
DATASET_COLUMNS = {"prompt": "instruction", "query": "input", "response": "output", "audios": "audios"}


@dataclass(frozen=True)
class ParsedInstruction:
    aspect_text: str
    query: str
    pad: str = ""  # spaces after '### Instruction:' (some SageLM files have them)
    layout: str = RECORDS_LAYOUT


def sagelm_instruction(aspect_text: str, query: str, pad: str = "", layout: str = RECORDS_LAYOUT) -> str:
    """The SageLM instruction of an aspect and a query, in one of its two layouts."""
    gap = "\n" if layout == README_LAYOUT else ""
    return (
        f"{_HEADER.format(aspect=aspect_text)}\n{gap}### Instruction:{pad}\n{query}\n\n"
        f"### Response 1:\n{RECORD_AUDIO}\n\n### Response 2:\n{RECORD_AUDIO}\n\n"
    )


class InstructionMismatch(ValueError):
    """An instruction that is not SageLM's prompt; the message names the first line that differs."""


def _differs(number: int, expected: str, found: str | None) -> InstructionMismatch:
    shown = "nothing (the instruction ends)" if found is None else repr(found[:120])
    return InstructionMismatch(
        f"line {number} of the instruction differs from SageLM's prompt: expected {expected!r}, found {shown}"
    )


def check_instruction(instruction: str) -> ParsedInstruction:
    """The aspect, query and layout of a SageLM instruction; raise InstructionMismatch naming the first line
    that differs from SageLM's prompt (`_HEADER`, '### Instruction:', the query, the two response headings)."""
    lines = instruction.split("\n")
    header = _HEADER_LINE.match(lines[0])
    if header is None:
        raise _differs(1, _HEADER.format(aspect="<aspect>"), lines[0])
    start = 1
    layout = RECORDS_LAYOUT
    if len(lines) > 2 and lines[1] == "" and _INSTRUCTION_LINE.match(lines[2]):
        start, layout = 2, README_LAYOUT
    heading = _INSTRUCTION_LINE.match(lines[start]) if len(lines) > start else None
    if heading is None:
        raise _differs(start + 1, "### Instruction:", lines[start] if len(lines) > start else None)
    body = lines[start + 1 :]
    if len(body) < len(_TAIL):
        raise _differs(len(lines) + 1, _TAIL[len(body)] or "(an empty line)", None)
    tail_start = len(body) - len(_TAIL)
    for offset, (expected, found) in enumerate(zip(_TAIL, body[tail_start:])):
        if expected != found:
            raise _differs(start + 2 + tail_start + offset, expected or "(an empty line)", found)
    query = "\n".join(body[:tail_start])
    if not query.strip():
        raise InstructionMismatch(f"the query after '### Instruction:' (line {start + 2}) is empty")
    aspect_text = header.group("aspect")
    if aspect_text not in SAGELM_ASPECT_TEXTS:
        raise InstructionMismatch(
            f"line 1 names the aspect {aspect_text!r}, which is not one of SageLM's: {', '.join(SAGELM_ASPECT_TEXTS)}"
        )
    return ParsedInstruction(aspect_text, query, heading.group("pad"), layout)


def parse_instruction(instruction: str) -> ParsedInstruction | None:
    """The parts of a SageLM instruction, or None when it is not one (`check_instruction` says why)."""
    try:
        return check_instruction(instruction)
    except InstructionMismatch:
        return None


def aspect_slug(aspect_text: str, audios: Sequence[str]) -> str:
    if aspect_text in _ACOUSTIC_SLUGS:
        aspect = _ACOUSTIC_SLUGS[aspect_text]
        return "implicit_emotion" if aspect == "emotion" and IMPLICIT_EMOTION_FOLDER in audios[0] else aspect
    return re.sub(r"[^a-z0-9_]+", "_", aspect_text.lower()).strip("_")


def task_format_of(aspect: str, audios: Sequence[str]) -> str | None:
    """SageLM's task format of an acoustic record, by its evaluation script's rule: implicit emotion by its folder;
    otherwise the file names read `<source>-<instruction id>-<response id>-...`, and two responses with the same
    response id speak the same text (explicit TTS) while different ones answer the question differently (explicit
    dialogue; `sagelm_eval.format_by_file_names`). None for semantic aspects and for names outside that pattern.
    Unlike the script, the mixed aspect is split by the same rule."""
    if aspect == "implicit_emotion":
        return IMPLICIT
    return format_by_file_names(audios) if aspect in ACOUSTIC_STYLES else None


def contained_path(path: str, where: str, audio_root: str | os.PathLike | None = None) -> str:
    """`path` when it stays inside the audio root it is relative to, also once symbolic links are resolved (with
    `audio_root` given: a link in the root that points out of it is refused); raise naming `where` otherwise."""
    normal = os.path.normpath(path)
    if os.path.isabs(path) or normal == os.pardir or normal.startswith(os.pardir + os.sep):
        raise ItemError(
            f"{where}: audio path {path!r} leaves the audio root; audio paths are relative to the audio root "
            "(LLaMA-Factory's media_dir) and stay inside it"
        )
    if audio_root is not None:
        root = Path(audio_root).resolve()
        resolved = (root / path).resolve()
        if not resolved.is_relative_to(root):
            raise ItemError(
                f"{where}: audio path {path!r} is {resolved} through a symbolic link, outside the audio root {root}; "
                "copy the file into the audio root"
            )
    return path


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
    try:
        parsed = check_instruction(instruction)
    except InstructionMismatch as err:
        raise ItemError(f"{where}: the instruction is not SageLM's prompt: {err}") from err
    for audio in audios:
        contained_path(audio, where, audio_root)
    label, rationale = split_output(record.get("output"), where)
    extra = {key: value for key, value in record.items() if key not in STANDARD_KEYS}
    aspect = aspect_slug(parsed.aspect_text, audios)
    return {
        "item_id": item_id_of(parsed.query, audios),
        "aspect": aspect,
        "aspect_text": parsed.aspect_text,
        "query": parsed.query,
        "response1_audio": audios[0],
        "response2_audio": audios[1],
        "audio_root": audio_root,
        "label": label,
        "rationale": rationale,
        "task_format": task_format_of(aspect, audios),
        "style": ACOUSTIC_STYLES.get(aspect),
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
    if parsed is not None and (parsed.aspect_text, parsed.query) == (row["aspect_text"], row["query"]):
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
    else relative to the folder that holds all their roots (logged), so a re-import keeps them inside it.
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
        roots = [os.path.abspath(root or "") for root in rows["audio_root"].unique(maintain_order=True)]
        media_dir = roots[0] if len(roots) == 1 else os.path.commonpath(roots)
        if len(roots) > 1:
            log.info(
                "%s.json: its rows have %d audio roots; paths are written relative to %s", stem, len(roots), media_dir
            )
        records = []
        for row in rows.iter_rows(named=True):
            audios = [row["response1_audio"], row["response2_audio"]]
            if len(roots) > 1:
                root = os.path.abspath(row["audio_root"] or "")
                audios = [os.path.relpath(os.path.join(root, path), media_dir) for path in audios]
            records.append(row_to_record(row, audios))
        path = out_dir / f"{stem}.json"
        write_json(path, records)
        written.append(path)
        dataset_info[str(stem)] = {"file_name": path.name, "columns": dict(DATASET_COLUMNS)}
    info_path = out_dir / "dataset_info.json"
    write_json(info_path, dataset_info)
    return [*written, info_path]
