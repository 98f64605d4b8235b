"""Display tables of the report, derived from the metric tables, the ASR tables, the manifests and the config:
judges (with the registry's `weak` key), WER per transcript source, the audio accounting, prompt-selection
summaries, values with their intervals. Numbers are rounded for display only."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from lalm_judge.analysis.engine import CELL_KEYS, CONFIG_KEYS
from lalm_judge.analysis.multiplicity import BENJAMINI_HOCHBERG, STABILITY
from lalm_judge.analysis.support import NOT_ESTIMABLE, WITH_INTERVAL, ZERO_WIDTH
from lalm_judge.core.tables import ASR
from lalm_judge.core.vocabulary import CLEAN, TranscriptSource
from lalm_judge.manifest.samples import Manifest

DIGITS = 3


MISSING = "–"


PROVENANCE_COLUMNS = (
    "config_hash",
    "seed",
    "n_bootstrap",
    "n_folds",
    "min_pb_dialogues",
    "n_permutations",
    "min_dialogues",
    "package_versions",
)


def cell_text(value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return MISSING if value != value else f"{value:.{DIGITS}f}"
    return str(value)


def weak_judge_reason(spec: Mapping[str, Any]) -> str | None:
    """Why a judge registry entry is a weak demo model (its `weak` key: its scores do not measure LALM ability)."""
    return spec.get("weak") or None


def judge_table(config: Mapping[str, Any], judges: Iterable[str]) -> pl.DataFrame:
    """One row per judge (evaluated in config, or present in the metrics): registry entry and weakness."""
    registry = config.get("judges", {})
    names = list(dict.fromkeys([*config.get("evaluation", {}).get("judges", []), *sorted(judges)]))
    rows = []
    for name in names:
        spec = registry.get(name)
        rows.append(
            {
                "judge": name,
                "backend": spec.get("backend") if spec else None,
                "model": spec.get("model") if spec else None,
                "modalities": ", ".join(spec.get("modalities", ["text"])) if spec else None,
                "description": (spec.get("description") or None) if spec else "not in the configuration",
                "weak_reason": weak_judge_reason(spec) if spec else None,
            }
        )
    schema = dict.fromkeys(("judge", "backend", "model", "modalities", "description", "weak_reason"), pl.String)
    return pl.DataFrame(rows, schema=schema)


def wer_table(asr_paths: Sequence[str | os.PathLike]) -> pl.DataFrame:
    """WER per transcript source (results/asr/<model>/<dialogue>.parquet) and turn kind.

    Turn kind: 'original' turns or 'replaced' (variant) turns; mean_wer averages turns, audio_weighted_wer
    weights each turn's WER by its audio seconds.
    """
    frames = [
        ASR.conform(pl.scan_parquet(path), f"ASR table {os.fspath(path)!r}").select(
            pl.lit(TranscriptSource.asr(Path(path).parent.name)).alias("transcript_source"),
            "sample_id",
            "wer",
            "audio_s",
        )
        for path in asr_paths
    ]
    schema = {"transcript_source": pl.String, "turns": pl.String}
    if not frames:
        return pl.DataFrame(schema=schema)
    turns = pl.concat(frames).collect()
    kind = (
        pl.when(pl.col("sample_id").str.ends_with(".original")).then(pl.lit("original")).otherwise(pl.lit("replaced"))
    )
    return (
        turns.with_columns(turns=kind)
        .group_by("transcript_source", "turns")
        .agg(
            n_turns=pl.len().cast(pl.Int64),
            audio_s=pl.col("audio_s").sum(),
            mean_wer=pl.col("wer").mean(),
            audio_weighted_wer=(pl.col("wer") * pl.col("audio_s")).sum() / pl.col("audio_s").sum(),
        )
        .sort("transcript_source", "turns")
    )


ACCOUNTING_LABELS = {
    "n_variants": "variants",
    "original_turn_audio_s": "original turn audio synthesized/transcribed (s)",
    "variant_turn_audio_s": "replaced-turn audio synthesized/transcribed (s)",
    "design_audio_s": "total audio processed by the one-turn design (s)",
    "naive_full_dialogue_audio_s": "audio if every variant were rendered in full (s)",
    "ratio": "design / naive",
}


def accounting_table(accounting: Mapping[str, float]) -> pl.DataFrame:
    rows = [(ACCOUNTING_LABELS.get(key, key), cell_text(value)) for key, value in accounting.items()]
    return pl.DataFrame(rows, schema={"quantity": pl.String, "value": pl.String}, orient="row")


def prompt_selection_summary(prompt_selection: pl.DataFrame) -> pl.DataFrame:
    """Per configuration and metric: the selected prompt, the cross-validated value with its interval, and the
    per-fold choices."""
    summary = (
        prompt_selection.group_by(*CONFIG_KEYS, "metric", maintain_order=True)
        .agg(
            pl.col("selected_prompt").first(),
            pl.col(
                "cv_value",
                "cv_lo",
                "cv_hi",
                "complete",
                *(["cv_status"] if "cv_status" in prompt_selection.columns else []),
            ).first(),
            pl.col("chosen_prompt").fill_null(MISSING).str.join(", ").alias("fold_choices"),
            pl.col("reason").drop_nulls().unique(maintain_order=True).str.join("; ").alias("reason"),
        )
        .with_columns(pl.col("reason").replace("", None))
    )
    return with_interval(summary, "cv_value", "cv_lo", "cv_hi", "cv_status")


NOT_ESTIMABLE_TEXT = "not estimable"
ZERO_WIDTH_TEXT = "zero width"


def interval_text(value: float | None, low: float | None, high: float | None, status: str | None = None) -> str:
    """'value [low, high]' rounded to DIGITS decimals; the value alone when there is no interval, marked when it
    rests on fewer dialogues than the minimum support, and an interval of zero width marked as such."""
    if value is None:
        return MISSING
    if status == NOT_ESTIMABLE:
        return f"{cell_text(value)} ({NOT_ESTIMABLE_TEXT})"
    if low is None and high is None:
        return cell_text(value)
    shown = f"{cell_text(value)} [{cell_text(low)}, {cell_text(high)}]"
    return f"{shown} ({ZERO_WIDTH_TEXT})" if status == ZERO_WIDTH else shown


def smallest_supported(cells: pl.DataFrame) -> int | None:
    """The fewest dialogues a clean cell's sensitivity with an interval rests on (the size at which the report
    words its intervals), None where no cell has one."""
    if "sensitivity_n_dialogues" not in cells.columns or "sensitivity_status" not in cells.columns:
        return None
    clean = cells.filter(pl.col("condition") == CLEAN) if "condition" in cells.columns else cells
    supported = clean.filter(pl.col("sensitivity_status").is_in(WITH_INTERVAL))["sensitivity_n_dialogues"]
    return int(supported.min()) if supported.len() else None


def with_interval(
    frame: pl.DataFrame, metric: str, low: str | None = None, high: str | None = None, status: str | None = None
) -> pl.DataFrame:
    """Replace metric, <metric>_lo, <metric>_hi (and <metric>_status, where the frame has it) by one display column
    'value [low, high]'."""
    low, high, status = low or f"{metric}_lo", high or f"{metric}_hi", status or f"{metric}_status"
    statuses = frame[status] if status in frame.columns else pl.Series([None] * frame.height, dtype=pl.String)
    shown = [
        interval_text(*values, state)
        for values, state in zip(frame.select(metric, low, high).iter_rows(), statuses.to_list())
    ]
    return frame.with_columns(pl.Series(metric, shown, dtype=pl.String)).drop(low, high, status, strict=False)


def with_intervals(frame: pl.DataFrame, metrics: Sequence[str]) -> pl.DataFrame:
    for metric in metrics:
        frame = with_interval(frame, metric)
    return frame


def cells_display(cells: pl.DataFrame) -> pl.DataFrame:
    """The cells table as shown: values with their 95 % intervals; position bias in `position_bias_display`."""
    intervals = ("sensitivity", "specificity", "mean_safe", "avg_abs_pb_sensitivity", "avg_abs_pb_specificity")
    table = cells.select(
        *CELL_KEYS,
        "audio_input",
        *_interval_columns(cells, intervals),
        "n_severities",
        "n_dialogues",
        "parse_failure_rate",
        "refusal_rate",
        "reason",
    )
    return with_intervals(table, intervals)


def deltas_display(cells: pl.DataFrame) -> pl.DataFrame:
    """Delta_i with its 95 % interval per cell, for the severities any cell has."""
    present = [i for i in range(1, 6) if cells[f"delta_{i}"].is_not_null().any()]
    table = cells.select(*CELL_KEYS, *_interval_columns(cells, [f"delta_{i}" for i in present]), "n_dialogues")
    return with_intervals(table, [f"delta_{i}" for i in present])


def _interval_columns(frame: pl.DataFrame, metrics: Sequence[str]) -> list[str]:
    """Each metric's value, bounds and (where the frame has it) support status."""
    suffixes = ("", "_lo", "_hi", "_status")
    return [
        f"{m}{suffix}" for m in metrics for suffix in suffixes if suffix != "_status" or f"{m}_status" in frame.columns
    ]


# Below this permutation p-value an AvgAbsPB is read as more than noise alone gives.
NOISE_LEVEL = 0.05


def position_bias_display(cells: pl.DataFrame) -> pl.DataFrame:
    """Per cell and metric: AvgAbsPB with its interval, its permutation null (what noise alone gives), the
    p-value, whether it exceeds noise, and the lengths left out."""
    rows = []
    for cell in cells.iter_rows(named=True):
        for metric in ("sensitivity", "specificity"):
            name = f"avg_abs_pb_{metric}"
            p_value = cell[f"{name}_p"]
            status = cell.get(f"{name}_status")
            rows.append(
                {
                    **{key: cell[key] for key in CELL_KEYS},
                    "metric": metric,
                    "avg_abs_pb": interval_text(cell[name], cell[f"{name}_lo"], cell[f"{name}_hi"], status),
                    "noise_null": cell[f"{name}_null"],
                    "p_value": p_value,
                    "beyond_noise": None if p_value is None or status == NOT_ESTIMABLE else p_value < NOISE_LEVEL,
                    "lengths_left_out": cell["pb_left_out"],
                }
            )
    schema = {
        **dict.fromkeys(CELL_KEYS, pl.String),
        "metric": pl.String,
        "avg_abs_pb": pl.String,
        "noise_null": pl.Float64,
        "p_value": pl.Float64,
        "beyond_noise": pl.Boolean,
        "lengths_left_out": pl.String,
    }
    return pl.DataFrame(rows, schema=schema)


def pareto_display(pareto: pl.DataFrame) -> pl.DataFrame:
    """The Pareto table as shown: cross-validated values and AvgAbsPB objectives with their intervals, and where each
    configuration stands against the front."""
    intervals = ("cv_sensitivity", "cv_specificity", "avg_abs_pb_sensitivity", "avg_abs_pb_specificity")
    table = pareto.select(
        *CONFIG_KEYS,
        "audio_input",
        "prompt_sensitivity",
        "prompt_specificity",
        *_interval_columns(pareto, intervals),
        "complete",
        "front_objectives",
        *(name for name in ("n_compared",) if name in pareto.columns),
        "on_front",
        *(name for name in ("front_status", "dominated_by") if name in pareto.columns),
    )
    return with_intervals(table, intervals)


def _cell_name(row: Mapping[str, Any]) -> str:
    source = row["transcript_source"]
    modality = row["modality"] if source in (None, TranscriptSource.NONE) else f"{row['modality']}/{source}"
    return f"{row['judge']} {modality} {row['prompt']}"


def min_support_warning(cells: pl.DataFrame, flags: pl.DataFrame | None = None) -> str | None:
    """The one banner on the minimum support: how many values of the cells (and control checks) rest on fewer
    dialogues than `metrics.min_dialogues` and are therefore shown without an interval, finding or flag."""
    statuses = [name for name in cells.columns if name.endswith("_status")]
    below = (
        cells.select(pl.sum_horizontal((pl.col(n) == NOT_ESTIMABLE).fill_null(False) for n in statuses))
        if statuses
        else None
    )
    per_cell = below.to_series() if below is not None else pl.Series([0] * cells.height)
    checks = 0 if flags is None or "status" not in flags.columns else int((flags["status"] == NOT_ESTIMABLE).sum())
    if per_cell.sum() == 0 and checks == 0:
        return None
    minimum = sorted(set(cells["min_dialogues"].to_list())) if "min_dialogues" in cells.columns else []
    limit = f"{', '.join(map(str, minimum))} dialogues" if minimum else "the minimum number of dialogues"
    parts = []
    if per_cell.sum():
        parts.append(f"{int(per_cell.sum())} values in {int((per_cell > 0).sum())} of {cells.height} cells")
    if checks:
        parts.append(f"{checks} control check(s)")
    return (
        f"Minimum support: {' and '.join(parts)} rest on fewer than {limit} (metrics.min_dialogues) and are "
        f"{NOT_ESTIMABLE.replace('_', ' ')}: they are shown with their point value and n, without an interval, "
        "and give no finding and no flag. More dialogues, not a lower minimum, make them estimable."
    )


def zero_width_warning(cells: pl.DataFrame) -> str | None:
    """How many values of the cells have an interval of zero width (every resample gives the same value)."""
    statuses = [name for name in cells.columns if name.endswith("_status")]
    if not statuses:
        return None
    count = int(
        cells.select(pl.sum_horizontal((pl.col(n) == ZERO_WIDTH).fill_null(False) for n in statuses)).sum().item()
    )
    if count == 0:
        return None
    return (
        f"{count} interval(s) of the cells have zero width (marked '{ZERO_WIDTH_TEXT}'): every resample of the "
        "dialogues gives the same value (a specificity of 1 in each, say). That is no measure of the noise: more "
        "dialogues, or more severities, would show it."
    )


def metric_warnings(cells: pl.DataFrame, flags: pl.DataFrame | None = None) -> list[str]:
    """Warnings the report shows above its tables: values below the minimum support, intervals of zero width,
    position bias no larger than noise or not estimated, cells lacking a severity, ASR cascades standing in for
    audio."""
    support = min_support_warning(cells, flags)
    warnings = [support] if support else []
    zero = zero_width_warning(cells)
    warnings += [zero] if zero else []
    measured = cells.filter(pl.col("avg_abs_pb_sensitivity").is_not_null())
    if measured.height == 0 and cells.height:
        warnings.append(
            "Position bias is not estimated in any cell: no (length, position) has enough dialogues "
            "(metrics.position_bias_min_dialogues); see the position-bias table for the lengths left out."
        )
    else:
        noise = measured.filter(pl.col("avg_abs_pb_sensitivity_p") >= NOISE_LEVEL)
        if noise.height:
            warnings.append(
                f"AvgAbsPB (sensitivity) of {noise.height} of {measured.height} cells is within what noise alone "
                f"gives (permutation p >= {NOISE_LEVEL}): read it as no evidence of position bias, not as its size."
            )
    lacking = cells.filter(pl.col("reason").str.contains("has no paired parsed variant").fill_null(False))
    if lacking.height:
        names = ", ".join(_cell_name(row) for row in lacking.iter_rows(named=True))
        warnings.append(
            f"{lacking.height} cell(s) lack a severity ({names}): their sensitivity is a minimum over fewer "
            "severities; they are compared only among themselves in prompt selection and on the Pareto front."
        )
    cascades = (
        cells.filter(pl.col("audio_input").str.starts_with("cascade via").fill_null(False))
        .select("judge", "modality", "audio_input")
        .unique()
        .sort("judge", "modality")
    )
    for row in cascades.iter_rows(named=True):
        warnings.append(
            f"{row['judge']} {row['modality']} is an ASR cascade ({row['audio_input']}): it reads the transcript "
            "of that ASR model, not the audio, and is no audio-native judge."
        )
    return warnings


def family_sentence(row: dict) -> str:
    """A family in words, as the report and `lalm-judge findings` print it."""
    if row["control"] == STABILITY:
        control = f"each label stated only where at least {row['level']:.0%} of the resamples give it"
    else:
        kind = "false-discovery rate" if row["control"] == BENJAMINI_HOCHBERG else "family-wise error rate"
        control = f"{row['control']}, {kind} {row['level']:.0%}"
    return f"{row['family']}: {row['size']} {row['tests']}; {control}; {row['n_claims']} {row['claims']}."


def guide_display(guide: pl.DataFrame, weak_judges: Mapping[str, str]) -> pl.DataFrame:
    """The guide as shown: the value with its interval (or status), the candidates and how many of them the cell
    is tied with, whom, and a note on weak demo judges."""
    table = with_interval(guide, "value", "ci_lo", "ci_hi", "status").with_columns(
        judge_note=pl.col("judge").replace_strict(
            {name: "weak demo model" for name in weak_judges}, default=None, return_dtype=pl.String
        ),
        candidates=pl.when(pl.col("n_tied") > 0)
        .then(pl.format("{} ({} tied)", "n_candidates", "n_tied"))
        .otherwise(pl.col("n_candidates").cast(pl.String)),
    )
    # The guide table carries its provenance (shown once, in the provenance table), not a column of the guide; the
    # counts of estimable and separated candidates are in its note and in guide.parquet.
    dropped = ("metric", "condition", "n_candidates", "n_tied", "n_estimable", "n_separated", *PROVENANCE_COLUMNS)
    table = table.drop(*(name for name in dropped if name in table.columns))
    order = [name for name in table.columns if name not in ("candidates", "tied_with", "note", "judge_note")]
    return table.select(*order, "candidates", "tied_with", "note", "judge_note")


def overview_table(config: Mapping[str, Any], manifests: Sequence[Manifest], cells: pl.DataFrame) -> pl.DataFrame:
    evaluation = config.get("evaluation", {})
    metrics = config.get("metrics", {})
    usable = [m for m in manifests if m.usable]
    rows = [
        ("dialogues (usable / total)", f"{len(usable)} / {len(manifests)}"),
        ("variants", str(sum(1 for m in usable for v in m.data["variants"] if v["status"] == "ok"))),
        ("judges", ", ".join(evaluation.get("judges", sorted(cells["judge"].unique())))),
        # The prompts measured: a judge's own `schedule.prompts` replaces evaluation.prompts.
        ("prompts", ", ".join(sorted(cells["prompt"].unique()))),
        ("transcript sources", ", ".join(evaluation.get("transcript_sources", []))),
        # The conditions measured: a judge's own `schedule.conditions` replaces evaluation.conditions.
        ("conditions", ", ".join(sorted(cells["condition"].unique(), key=lambda c: (c != "clean", c)))),
        ("judge cells measured", str(cells.height)),
        ("bootstrap resamples / CV folds", f"{metrics.get('bootstrap', MISSING)} / {metrics.get('folds', MISSING)}"),
        # No interval, finding or flag rests on fewer dialogues (the banner counts the values below it).
        ("minimum support (dialogues)", str(metrics.get("min_dialogues", MISSING))),
        ("seed", str(config.get("seed", MISSING))),
    ]
    return pl.DataFrame(rows, schema={"setting": pl.String, "value": pl.String}, orient="row")


def provenance_table(cells: pl.DataFrame) -> pl.DataFrame:
    """The distinct values of the metric tables' provenance columns (config hash, seed, package versions)."""
    rows = [
        (name, ", ".join(sorted({str(v) for v in cells[name].to_list()})))
        for name in PROVENANCE_COLUMNS
        if name in cells.columns
    ]
    return pl.DataFrame(rows, schema={"field": pl.String, "value": pl.String}, orient="row")
