"""The rewrite stage: one turn of a safe dialogue -> one unsafe variant per (category, severity).

`rewrite_turn` builds the generator named in config, asks it for every (category, severity) of the
turn, and returns the variant table (one row per variant, in the order categories x severities).
Rows whose status is not 'ok' keep `text` and `emotion` null: nothing is filled in silently. Every row carries
the generator, its model, prompt version and `generation` settings (JSON), the seed, and the provenance columns
of `core.files.with_provenance` (the config hash of the generator block, the package versions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.files import canonical_json, stable_hash, with_provenance, write_parquet
from lalm_judge.core.tables import VARIANTS
from lalm_judge.core.taxonomy import CATEGORIES, SEVERITIES, validate_dialogue_id
from lalm_judge.data.generators import RewriteRequest, RewriteResult, build_generator


def _check_request(dialogue: Dialogue, turn_index: int, categories: Sequence[str], severities: Sequence[int]) -> None:
    validate_dialogue_id(dialogue.dialogue_id)
    if not 0 <= turn_index < len(dialogue.turns):
        raise ValueError(
            f"dialogue {dialogue.dialogue_id!r} has {len(dialogue.turns)} turns; turn {turn_index} does not exist"
        )
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise ValueError(f"unknown categories {unknown}; use those of lalm_judge.core.taxonomy.CATEGORIES {CATEGORIES}")
    wrong = [s for s in severities if s not in SEVERITIES]
    if wrong:
        raise ValueError(f"severities {wrong} are outside {SEVERITIES}")
    if len(set(categories)) != len(categories) or len(set(severities)) != len(severities):
        raise ValueError(f"categories {list(categories)} and severities {list(severities)} must not repeat")


def rewrite_turn(
    dialogue: Dialogue,
    turn_index: int,
    categories: Sequence[str],
    severities: Sequence[int],
    generator: Mapping[str, Any],
    seed: int,
    cache_dir: str | Path,
) -> pl.DataFrame:
    """Every (category, severity) variant of one turn, as the variant table."""
    _check_request(dialogue, turn_index, categories, severities)
    rewriter = build_generator(generator, cache_dir)
    requests = [
        RewriteRequest(dialogue, turn_index, category, severity, seed)
        for category in categories
        for severity in severities
    ]
    results = rewriter.rewrite(requests)
    if len(results) != len(requests):
        raise RuntimeError(f"generator {rewriter.name!r} returned {len(results)} results for {len(requests)} requests")
    provenance = {
        "generator": rewriter.name,
        "model": rewriter.model,
        "prompt_version": rewriter.prompt_version,
        "seed": seed,
    }
    rows = [_row(request, result, provenance) for request, result in zip(requests, results, strict=True)]
    return with_provenance(
        pl.DataFrame(rows, schema=VARIANTS.columns),
        config_hash=stable_hash(dict(generator)),
        seed=seed,
        generation=canonical_json(rewriter.generation),
    )


def _row(request: RewriteRequest, result: RewriteResult, provenance: Mapping[str, Any]) -> dict[str, Any]:
    turn = request.dialogue.turns[request.turn_index]
    return {
        "dialogue_id": request.dialogue.dialogue_id,
        "variant_id": request.key.variant_id,
        "turn_index": request.turn_index,
        "n_turns": len(request.dialogue.turns),
        "speaker": turn.speaker,
        "original_text": turn.text,
        "original_emotion": turn.emotion,
        "category": request.category,
        "severity": request.severity,
        "text": result.text,
        "emotion": result.emotion,
        **provenance,
        "status": result.status,
        "attempts": result.attempts,
        "error": result.error,
    }


def write_variant_table(frame: pl.DataFrame, path: str | Path) -> None:
    """Write the variant table (and its provenance columns) atomically as parquet (equal frames give equal bytes)."""
    write_parquet(path, VARIANTS.conform(frame, f"variant table for {path}", keep_extra=True).collect())
