"""The preference builder's pair stage (one job per item shard) and its export (one job).

`pair_shard` applies the clip filters to the shard's transcripts, draws the pairs of each item, labels every
aspect rated for both responses and writes the comparative rationales (template or LLM). `export_preference`
gathers every shard's pairs and the acoustic pairs into the pairwise item table (`core.tables.PAIRWISE_ITEMS`,
so the pairwise track can judge the built data), writes them as SageLM/LLaMA-Factory records with the pairwise
track's exporter (`semantic.json`, `acoustic.json`, `dataset_info.json`) and as a Hugging Face parquet folder
with the audio, and writes the filter report: what each filter dropped, per engine for the clip filters.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from lalm_judge.core.files import read_json, stable_hash, with_provenance, write_json, write_parquet
from lalm_judge.core.tables import (
    PAIRWISE_ITEMS,
    PREFERENCE_ACOUSTIC,
    PREFERENCE_COMPLETIONS,
    PREFERENCE_PAIRS,
    PREFERENCE_RATINGS,
    PREFERENCE_TRANSCRIPTS,
)
from lalm_judge.core.vocabulary import ACOUSTIC_STYLES, IMPLICIT
from lalm_judge.pairwise.items import ASPECTS, check_unique_rows, with_durations
from lalm_judge.pairwise.sagelm import export_sagelm, sagelm_instruction
from lalm_judge.preference.acoustic import EXPLICIT_DIALOGUE, EXPLICIT_TTS, IMPLICIT_DIALOGUE
from lalm_judge.preference.hf import write_hf_pairs
from lalm_judge.preference.pairs import Candidate, aspect_labels, draw_pairs, template_rationale
from lalm_judge.preference.rationales import LLM, OK, TEMPLATE, LLMRationales, PairNotes
from lalm_judge.preference.render import ClipFilter, filter_clips, merge_counts

SEMANTIC, ACOUSTIC = "semantic", "acoustic"
# The acoustic builder's task formats in the pairwise item table's words (core.vocabulary.TASK_FORMATS).
TASK_FORMAT_OF = {EXPLICIT_TTS: EXPLICIT_TTS, EXPLICIT_DIALOGUE: EXPLICIT_DIALOGUE, IMPLICIT_DIALOGUE: IMPLICIT}
SOURCE_FORMAT = "preference"


def _clip_filter(filters: Mapping[str, Any]) -> ClipFilter:
    return ClipFilter(max_wer=float(filters["max_wer"]), min_duration_s=float(filters["min_duration_s"]))


def pair_shard(
    completions_path: str | os.PathLike,
    ratings_path: str | os.PathLike,
    transcript_paths: Sequence[str | os.PathLike],
    shard: int,
    settings: Mapping[str, Any],
    out_path: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike,
    seed: int = 0,
) -> pl.DataFrame:
    """The pairs of one item shard with labels and rationales; `settings` holds the validated `filters`,
    `pairs` and `rationales` sections of `preference`."""
    completions = PREFERENCE_COMPLETIONS.read(completions_path).filter(pl.col("shard") == shard)
    items = completions["item_id"].unique().to_list()
    ratings = PREFERENCE_RATINGS.read(ratings_path).filter(pl.col("item_id").is_in(items))
    kept, _ = filter_clips(PREFERENCE_TRANSCRIPTS.read(list(transcript_paths)), _clip_filter(settings["filters"]))
    clips = {(r["item_id"], r["completion"], r["engine"]): r["clip"] for r in kept.iter_rows(named=True)}
    texts = {(r["item_id"], r["completion"]): r for r in completions.iter_rows(named=True)}
    rated = {
        (r["item_id"], r["completion"], r["aspect"]): (r["rating"], r["rationale"])
        for r in ratings.iter_rows(named=True)
    }
    # item -> completion -> the engines whose clip of it passed the filters
    engines: dict[str, dict[int, set[str]]] = {}
    for clip_item, completion, engine in clips:
        engines.setdefault(clip_item, {}).setdefault(completion, set()).add(engine)
    pairs_settings = settings["pairs"]
    rows = []
    for item_id in sorted(items):
        candidates = [Candidate(c, frozenset(e)) for c, e in sorted(engines.get(item_id, {}).items())]
        for pair in draw_pairs(item_id, candidates, pairs_settings["pairs_per_item"], seed):
            first, second = (texts[item_id, c] for c in pair.completions)
            both = {
                aspect: tuple(rated.get((item_id, c, aspect), (None, ""))[0] for c in pair.completions)
                for aspect in pairs_settings["aspects"]
            }
            for aspect, label in aspect_labels(both, pairs_settings["tie_margin"]).items():
                notes = tuple(rated[item_id, c, aspect][1] or "" for c in pair.completions)
                rows.append(
                    {
                        "item_id": f"{item_id}_p{pair.pair}",
                        "source_item": item_id,
                        "aspect": aspect,
                        "query": first["instruction"],
                        "engine": pair.engine,
                        "completion1": pair.completions[0],
                        "completion2": pair.completions[1],
                        "response1_text": first["text"],
                        "response2_text": second["text"],
                        "response1_audio": clips[item_id, pair.completions[0], pair.engine],
                        "response2_audio": clips[item_id, pair.completions[1], pair.engine],
                        "rating1": both[aspect][0],
                        "rating2": both[aspect][1],
                        "note1": notes[0],
                        "note2": notes[1],
                        "label": label,
                    }
                )
    rows = write_rationales(rows, settings["rationales"], cache_dir, seed)
    config_hash = stable_hash({key: settings[key] for key in ("filters", "pairs", "rationales")})
    frame = with_provenance(PREFERENCE_PAIRS.frame(rows), config_hash=config_hash, seed=seed)
    write_parquet(out_path, frame)
    return frame


def write_rationales(
    rows: list[dict[str, Any]], settings: Mapping[str, Any], cache_dir: str | os.PathLike, seed: int
) -> list[dict[str, Any]]:
    """Each pair row with its rationale, its source and status (`settings`: the validated `rationales`)."""
    if settings["generator"] == TEMPLATE:
        for row in rows:
            row["rationale"] = template_rationale(row["aspect"], row["label"], (row["note1"], row["note2"]))
            row.update(rationale_source=TEMPLATE, rationale_status=OK, rationale_error=None)
        return rows
    if settings["generator"] != LLM:
        raise ValueError(f"unknown rationale generator {settings['generator']!r}; use {TEMPLATE!r} or {LLM!r}")
    rewriter = LLMRationales(settings["llm"], cache_dir, seed)
    notes = [
        PairNotes(
            key=f"{row['item_id']}/{row['aspect']}",
            instruction=row["query"],
            responses=(row["response1_text"], row["response2_text"]),
            aspect=row["aspect"],
            ratings=(row["rating1"], row["rating2"]),
            notes=(row["note1"], row["note2"]),
            label=row["label"],
        )
        for row in rows
    ]
    for row, result in zip(rows, rewriter.rewrite(notes) if notes else [], strict=True):
        row.update(
            rationale=result.rationale,
            rationale_source=rewriter.source,
            rationale_status=result.status,
            rationale_error=result.error,
        )
    return rows


# --- export ---------------------------------------------------------------------------------------------------
def item_rows(pairs: pl.DataFrame, acoustic: pl.DataFrame, root: str) -> list[dict[str, Any]]:
    """Pairwise item-table rows of the usable semantic pairs and of the acoustic pairs."""

    def item(row: dict[str, Any], aspect_text: str, texts: tuple[str, str], source_file: str) -> dict[str, Any]:
        return {
            "item_id": row["item_id"],
            "aspect": row["aspect"],
            "aspect_text": aspect_text,
            "query": row["query"],
            "response1_audio": row["response1_audio"],
            "response2_audio": row["response2_audio"],
            "audio_root": root,
            "label": row["label"],
            "rationale": row["rationale"],
            "response1_text": texts[0],
            "response2_text": texts[1],
            "task_format": TASK_FORMAT_OF.get(row.get("task_format")),
            "style": ACOUSTIC_STYLES.get(row["aspect"]),
            "source_format": SOURCE_FORMAT,
            "source_file": source_file,
            "source_instruction": sagelm_instruction(aspect_text, row["query"]),
            "source_extra": "{}",
        }

    rows = [
        item(row, ASPECTS.get(row["aspect"], row["aspect"]), (row["response1_text"], row["response2_text"]), SEMANTIC)
        for row in pairs.filter(pl.col("rationale_status") == OK).iter_rows(named=True)
    ]
    # An acoustic pair speaks one text twice, in two styles.
    rows += [
        item(row, ASPECTS[row["aspect"]], (row["response_text"], row["response_text"]), ACOUSTIC)
        for row in acoustic.iter_rows(named=True)
    ]
    for index, row in enumerate(rows):
        row["source_row"] = index
    check_unique_rows(rows)
    return with_durations(rows)


def filter_report(
    selection_path: str | os.PathLike,
    transcript_paths: Sequence[str | os.PathLike],
    pairs: pl.DataFrame,
    acoustic: pl.DataFrame,
    filters: Mapping[str, Any],
) -> dict[str, Any]:
    """What every filter dropped and what was made: items (math, code, non-English, too few completions),
    clips per engine (WER, duration), pairs per aspect and label, rationale statuses, acoustic pairs."""
    clip_filter = _clip_filter(filters)
    per_shard = [filter_clips(PREFERENCE_TRANSCRIPTS.read(path), clip_filter)[1] for path in transcript_paths]

    def counts(frame: pl.DataFrame, *keys: str) -> dict[str, Any]:
        nested: dict[str, Any] = {}
        for values in frame.select(keys).iter_rows():
            node = nested
            for value in values[:-1]:
                node = node.setdefault(str(value), {})
            node[str(values[-1])] = node.get(str(values[-1]), 0) + 1
        return nested

    return {
        "selection": read_json(selection_path),
        "clip_filters": {"max_wer": clip_filter.max_wer, "min_duration_s": clip_filter.min_duration_s},
        "clips": merge_counts(per_shard),
        "semantic_pairs": {
            "pairs": pairs["item_id"].n_unique(),
            "rows_by_aspect_and_label": counts(pairs, "aspect", "label"),
            "rationale_status": counts(pairs, "rationale_status"),
            "engines": counts(pairs.unique("item_id"), "engine"),
        },
        "acoustic_pairs": {
            "pairs": acoustic.height,
            "by_aspect_and_label": counts(acoustic, "aspect", "label"),
            "by_format": counts(acoustic, "style_category", "task_format"),
        },
    }


def export_preference(
    pair_paths: Sequence[str | os.PathLike],
    acoustic_paths: Sequence[str | os.PathLike],
    selection_path: str | os.PathLike,
    transcript_paths: Sequence[str | os.PathLike],
    filters: Mapping[str, Any],
    root: str | os.PathLike,
    *,
    items_path: str | os.PathLike,
    sagelm_dir: str | os.PathLike,
    hf_dir: str | os.PathLike,
    report_path: str | os.PathLike,
    sample_rate: int = 16000,
    seed: int = 0,
) -> dict[str, Any]:
    """Write the item table, the SageLM records, the HF parquet folder and the filter report; return the report."""
    pairs = PREFERENCE_PAIRS.read(list(pair_paths))
    acoustic = PREFERENCE_ACOUSTIC.read(list(acoustic_paths)) if acoustic_paths else PREFERENCE_ACOUSTIC.empty()
    root = os.fspath(root)
    items = PAIRWISE_ITEMS.frame(item_rows(pairs, acoustic, root))
    if items.filter(~pl.col("audio_ok")).height:
        missing = items.filter(~pl.col("audio_ok"))["item_id"].head(5).to_list()
        raise FileNotFoundError(f"clips of the built pairs are missing below {root}: items {missing}")
    config_hash = stable_hash({"filters": dict(filters), "pairs": [os.fspath(p) for p in pair_paths]})
    write_parquet(items_path, with_provenance(items, config_hash=config_hash, seed=seed))
    written = export_sagelm(items, sagelm_dir)
    hf = write_hf_pairs(items, hf_dir, sample_rate=sample_rate)
    report = filter_report(selection_path, transcript_paths, pairs, acoustic, filters)
    report["export"] = {
        "items_table": os.fspath(items_path),
        "sagelm": [os.fspath(p) for p in written],
        "sagelm_media_dir": root,
        "hf": hf,
        "records": {name: items.filter(pl.col("source_file") == name).height for name in (SEMANTIC, ACOUSTIC)},
    }
    write_json(report_path, report)
    return report
