"""SageLM's evaluation scripts' record handling: the `sagelm_compatible` evaluation, beside the project's default.

SageLM evaluates a judge with two scripts of its LLaMA-Factory fork, one per test set. The default evaluation reads
each record's aspect from its instruction's first line, reads verdicts by the documented rule and splits the
records by aspect, task format and style (`lalm_judge.pairwise.metrics`). The `sagelm_compatible` evaluation
counts the records as the scripts do, so its numbers can be put beside SageLM's published ones:

- semantic records (`judge-eval/eval_compare_1_aspect_with_args.py`): the aspect is the record's position in its
  file, helpfulness, honesty, instruction following and truthfulness in turn (SageLM's test set is in blocks of
  four in that order, so there position and instruction agree);
- acoustic records (`judge-eval/eval_stage2_acoustic_with_args.py`): the aspect is the greedy match of
  `Evaluate in terms of \\*\\*(.*)\\*\\*` over the whole instruction, so a record whose query holds `**` gets the
  text up to the query's last `**`, which names no aspect, and counts nowhere (9 of the 410 records of SageLM's
  acoustic test set); an emotion record whose first audio lies in an `Implicit-Emotion` folder is implicit
  emotion; emotion, gender and character records are split by task format by their file names
  (`format_by_file_names`); the mixed gender + emotion records are not split;
- both: the verdict is the answer's first character, `1`, `2` or `T` (Tie), so an answer starting "The ..." is a
  Tie (`script_verdict`); the scripts stop on an empty answer or any other first character, here such an answer
  has no verdict and counts wrong. Finish reasons are not looked at, and there is one order only (the scripts
  never swap).
A sampled judge's seeds are evaluated one by one (the scripts run once per seed's predictions file); SageLM
reports their mean (`*_seed_mean` in the metrics).

`sagelm_compatible_view` rewrites a predictions table into the rows and verdicts the scripts count; the metrics
are then computed as for any table. Only rows of imported SageLM records (with their stored instruction and file
position) have a script reading; other rows are left out of the view and counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from lalm_judge.core.vocabulary import (
    ACOUSTIC_STYLES,
    EXPLICIT_DIALOGUE,
    EXPLICIT_TTS,
    IMPLICIT,
    RESPONSE_1,
    RESPONSE_2,
    SAGELM_RULE,
    SEMANTIC_ASPECTS,
    TIE,
)

DEFAULT_EVALUATION = "default"
SAGELM_COMPATIBLE = "sagelm_compatible"
EVALUATIONS = (DEFAULT_EVALUATION, SAGELM_COMPATIBLE)
IMPLICIT_EMOTION_FOLDER = "Implicit-Emotion"
# The acoustic script's aspect: greedy, over the whole instruction (query included).
_SCRIPT_ASPECT = re.compile(r"Evaluate in terms of \*\*(.*)\*\*", re.DOTALL)
# The aspect texts the acoustic script compares with, and the project's aspect of each.
_SCRIPT_ACOUSTIC = {
    "emotion instruction following": "emotion",
    "gender instruction following": "gender",
    "character instruction following": "character",
    "gender instruction following and emotion instruction following": "gender_emotion",
}
# The aspects the acoustic script splits by task format (not the mixed one).
_SPLIT_BY_FORMAT = ("emotion", "gender", "character")
_FIRST_CHARACTER = {"1": RESPONSE_1, "2": RESPONSE_2, "T": TIE}
# What the view needs of the item table, per (item_id, aspect).
RECORD_COLUMNS = ("source_instruction", "source_row", "response1_audio", "response2_audio")


def format_by_file_names(audios: Sequence[str]) -> str | None:
    """The task format SageLM's acoustic script reads from two response files named
    `<source>-<instruction id>-<response id>-...`: the same response id is one text spoken twice (explicit TTS),
    different ones answer the question differently (explicit dialogue). None for names outside that pattern or
    of two instructions (where the script stops)."""
    parts = [Path(audio).name.split("-") for audio in audios]
    if len(parts) != 2 or any(len(part) < 3 for part in parts) or parts[0][1] != parts[1][1]:
        return None
    return EXPLICIT_TTS if parts[0][2] == parts[1][2] else EXPLICIT_DIALOGUE


def script_verdict(answer: str | None) -> str | None:
    """The verdict SageLM's scripts read from an answer: its first character, 1, 2 or T (Tie); None otherwise."""
    return _FIRST_CHARACTER.get(answer[0]) if answer else None


def script_aspect(aspect: str, instruction: str, audios: Sequence[str], position: int | None) -> str | None:
    """The aspect SageLM's scripts count a record under (module docstring), given the project's reading of it
    (`aspect`), its instruction, response files and position in its file; None when they count it nowhere."""
    if aspect in SEMANTIC_ASPECTS:
        return aspect if position is None else SEMANTIC_ASPECTS[position % len(SEMANTIC_ASPECTS)]
    match = _SCRIPT_ASPECT.search(instruction)
    found = _SCRIPT_ACOUSTIC.get(match.group(1)) if match else None
    if found == "emotion" and IMPLICIT_EMOTION_FOLDER in audios[0]:
        return "implicit_emotion"
    return found


def script_task_format(aspect: str | None, audios: Sequence[str]) -> str | None:
    """The task format the acoustic script splits a record of `aspect` (its own reading) by."""
    if aspect == "implicit_emotion":
        return IMPLICIT
    return format_by_file_names(audios) if aspect in _SPLIT_BY_FORMAT else None


@dataclass(frozen=True)
class CompatibleView:
    """A predictions table as SageLM's scripts count it, and the rows they leave out."""

    frame: pl.DataFrame
    n_rows: int
    # (item_id, aspect) of rows the scripts count nowhere, and of rows without a SageLM record (no script reading).
    dropped: tuple[tuple[str, str], ...]
    not_sagelm: tuple[tuple[str, str], ...]

    def summary(self) -> dict[str, object]:
        return {
            "n_rows": self.n_rows,
            "n_counted": self.frame.height,
            "n_dropped": len(self.dropped),
            "dropped": [list(key) for key in self.dropped],
            "n_not_sagelm_records": len(self.not_sagelm),
        }


def _script_samples(text: str | None) -> str | None:
    """A row's samples record with every answer replaced by the verdict the scripts read from it."""
    if not text:
        return text
    samples = json.loads(text)
    for sample in samples:
        sample["answer"] = script_verdict(sample.get("answer")) or ""
        sample["finish_reason"] = None
    return json.dumps(samples, ensure_ascii=False)


def sagelm_compatible_view(predictions: pl.DataFrame, items: pl.DataFrame) -> CompatibleView:
    """The rows of one judge cell's `predictions` that SageLM's scripts count, with their aspect, task format and
    style as the scripts read them and each answer replaced by the verdict its first character gives (an empty
    answer where it gives none); single order, no finish reasons, read with the `sagelm` rule. `items` is the item
    table the predictions were judged on (its stored instructions and file positions)."""
    records = items.select("item_id", "aspect", *RECORD_COLUMNS)
    joined = predictions.join(records, on=["item_id", "aspect"], how="left")
    keep, aspects, formats, dropped, not_sagelm = [], [], [], [], []
    columns = ("item_id", "aspect", *RECORD_COLUMNS)
    for index, (item, aspect, instruction, position, audio1, audio2) in enumerate(joined.select(columns).iter_rows()):
        if instruction is None:
            not_sagelm.append((item, aspect))
            continue
        counted = script_aspect(aspect, instruction, (audio1, audio2), position)
        if counted is None:
            dropped.append((item, aspect))
            continue
        keep.append(index)
        aspects.append(counted)
        formats.append(script_task_format(counted, (audio1, audio2)))
    kept = joined[keep] if keep else joined.clear()
    view = kept.with_columns(
        aspect=pl.Series(aspects, dtype=pl.String),
        task_format=pl.Series(formats, dtype=pl.String),
        style=pl.Series([ACOUSTIC_STYLES.get(a) for a in aspects], dtype=pl.String),
        prediction=pl.col("prediction").map_elements(lambda a: script_verdict(a) or "", return_dtype=pl.String),
        verdict_rule=pl.lit(SAGELM_RULE),
    )
    if "samples" in view.columns:
        view = view.with_columns(pl.col("samples").map_elements(_script_samples, return_dtype=pl.String))
    single_order = [c for c in ("prediction_swapped", "finish_reason", "finish_reason_swapped") if c in view.columns]
    view = view.drop(*single_order, *RECORD_COLUMNS)
    return CompatibleView(view, predictions.height, tuple(dropped), tuple(not_sagelm))
