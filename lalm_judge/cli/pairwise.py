"""`lalm-judge pairwise import|export|metrics|train`: the pairwise track's data, metrics and judge training
outside the workflow.

- `import --format sagelm FILE.json... --audio-root DIR --out DIR`: SageLM records (test or training sets) to
  the item table `DIR/items.parquet` and `DIR/items_summary.json`; records whose audio is missing are refused
  (`--missing-audio fail`, the default, as in the workflow), excluded or kept flagged, and always reported once.
- `export --format sagelm ITEMS.parquet --out DIR [--name NAME]`: the items as LLaMA-Factory records and
  its `dataset_info.json`.
- `metrics PREDICTIONS --out FILE.json [--items ITEMS.parquet]`: accuracy, agreement, swap consistency and parse
  failures with item-level bootstrap intervals, per aspect, overall, in SageLM's splits and by duration, a sampled
  judge's per-seed values and their mean (docs/metrics.md); with the item table of imported SageLM records, also
  the `sagelm_compatible` evaluation (SageLM's scripts' record handling) beside the default one.
- `findings [METRICS_DIR]`: the findings of a run's metrics stage (default `results/pairwise/metrics`): each family
  of tests with its size and correction, the judge cells whose accuracy lies above chance and the length baseline
  and the cells the surface-cue audit flags, in words, then the audit's verdict on every cell and condition with
  its interval and adjusted p-value (docs/metrics.md, "Findings and their families", "Pairwise audit").
- `train --config FILE [--method sft|grpo] [--resume]`: train a pairwise judge from the `training` section of FILE
  (a run config, or a file with only that section; docs/training.md) by rationale SFT or by GRPO with SageLM's
  accuracy + format reward: its stages in order, each from the previous one's
  checkpoint, every stage's loss and checkpoint printed. The last checkpoint is a `transformers` judge. Stages
  already trained on the same inputs are reused; `--resume` continues an interrupted stage from its latest
  trainer checkpoint (kept when `hyperparameters.save_steps` is set).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

from lalm_judge.analysis.support import DEFAULT_MIN_ITEMS
from lalm_judge.pairwise.audit_metrics import audit_verdict_line
from lalm_judge.pairwise.families import family_summary
from lalm_judge.pairwise.items import (
    DEFAULT_MISSING_AUDIO,
    MISSING_AUDIO_POLICIES,
    ItemError,
    apply_missing_audio_policy,
    items_config_hash,
    missing_audio_warning,
    read_items,
    write_items,
)
from lalm_judge.pairwise.metrics import (
    DEFAULT_DURATION_BINS,
    PairwiseMetricsError,
    PairwiseMetricSettings,
    finding_sentence,
    read_pairwise_stage,
    run_pairwise_metrics,
)
from lalm_judge.pairwise.sagelm import FORMAT as SAGELM
from lalm_judge.pairwise.sagelm import export_sagelm, import_sagelm
from lalm_judge.pairwise.sagelm_eval import SAGELM_COMPATIBLE
from lalm_judge.workflow.config import load_training_section

FORMATS = (SAGELM,)


def _bins(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"duration bins are comma-separated seconds, got {text!r}") from err


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lalm-judge pairwise", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    importer = commands.add_parser("import", help="records -> item table")
    importer.add_argument("files", nargs="+", help="SageLM record files (JSON lists)")
    importer.add_argument("--format", choices=FORMATS, required=True)
    importer.add_argument("--audio-root", required=True, help="folder the records' audio paths are relative to")
    importer.add_argument("--out", required=True, help="output folder (items.parquet, items_summary.json)")
    importer.add_argument(
        "--missing-audio",
        choices=MISSING_AUDIO_POLICIES,
        default=DEFAULT_MISSING_AUDIO,
        help="records whose audio is missing: fail (default, as in the workflow), exclude them, or keep them flagged",
    )
    exporter = commands.add_parser("export", help="item table -> records")
    exporter.add_argument("items", nargs="+", help="item tables (parquet)")
    exporter.add_argument("--format", choices=FORMATS, required=True)
    exporter.add_argument("--out", required=True, help="output folder (record files, dataset_info.json)")
    exporter.add_argument("--name", help="write every record to <name>.json (default: one file per source file)")
    metrics = commands.add_parser("metrics", help="metrics of one judge cell's predictions")
    metrics.add_argument("predictions", help="JSONL or parquet with item_id, aspect, label, prediction[, ...]")
    metrics.add_argument("--out", required=True, help="output JSON file")
    metrics.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples over items (default 1000)")
    metrics.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    metrics.add_argument(
        "--duration-bins",
        type=_bins,
        default=DEFAULT_DURATION_BINS,
        help="left edges (s) of the combined-duration bins, starting at 0 (default 0,10,20,30,40,60,80)",
    )
    metrics.add_argument(
        "--min-items",
        type=int,
        default=DEFAULT_MIN_ITEMS,
        help=f"items a value needs for an interval; below it 'not_estimable' (default {DEFAULT_MIN_ITEMS})",
    )
    metrics.add_argument(
        "--items",
        help="the item table of imported SageLM records the predictions were judged on: adds the sagelm_compatible "
        "evaluation (its scripts' record handling) beside the default one",
    )
    findings = commands.add_parser("findings", help="print the findings of a pairwise run's metrics stage")
    findings.add_argument(
        "metrics_dir", nargs="?", default="results/pairwise/metrics", help="the metrics stage's folder"
    )
    trainer = commands.add_parser("train", help="train a pairwise judge (staged rationale SFT of an audio LLM)")
    trainer.add_argument("--config", required=True, help="YAML file with a `training` section")
    trainer.add_argument("--resume", action="store_true", help="continue an interrupted stage from its last save")
    trainer.add_argument(
        "--method",
        choices=("sft", "grpo"),
        help="sft (rationale SFT, SageLM's) or grpo (SageLM's RL arm, accuracy + format reward); default: the "
        "config's training.method",
    )
    return parser


def _train(args: argparse.Namespace) -> int:
    # Imported here: the training settings are light, but torch, transformers and TRL take seconds to load.
    from lalm_judge.training.settings import TrainingSettings

    settings = TrainingSettings.from_config(load_training_section(args.config), method=args.method)
    try:
        from lalm_judge.training.sft import run_training
    except ModuleNotFoundError as error:
        print(f"error: training needs {error.name} (requirements.txt; GPU runs: envs/train.yaml)", file=sys.stderr)
        return 2
    report = run_training(settings, resume=args.resume)
    for stage in report["stages"]:
        losses = stage["losses"]
        state = "reused" if stage["reused"] else f"{stage['steps']} steps, {stage['seconds_per_step']:.2f} s/step"
        rewards = [entry["reward"] for entry in losses if "reward" in entry]
        reward = f", mean reward {rewards[0]:.3f} -> {rewards[-1]:.3f}" if rewards else ""
        evaluations = stage.get("evaluations") or []
        held_out = f", verdict accuracy held out {evaluations[-1]['verdict_accuracy']:.3f}" if evaluations else ""
        print(
            f"{stage['name']} ({report['settings']['method']}): {stage['n_records']} records, {state}, "
            f"loss {losses[0]['loss']:.4f} -> {losses[-1]['loss']:.4f}{reward}{held_out}"
        )
    print(f"judge model (backend transformers): {report['judge_model']}")
    return 0


def _findings(metrics_dir: str) -> int:
    stage = read_pairwise_stage(metrics_dir)
    for sentence in family_summary(stage.findings):
        print(f"Family: {sentence}")
    claimed = stage.findings.filter(pl.col("finding"))
    if claimed.height == 0:
        print(
            "No judge cell's accuracy lies above both chance and the length baseline after its family's correction, "
            "and the audit flags none, in this run."
        )
    for finding in claimed.iter_rows(named=True):
        print(f"Finding: {finding_sentence(finding)}")
    for row in stage.audit.filter(pl.col("flagged").is_not_null()).iter_rows(named=True):
        print(f"Audit: {audit_verdict_line(row)}")
    return 0


def _import(args: argparse.Namespace) -> int:
    items, _ = import_sagelm(args.files, args.audio_root)
    kept, summary = apply_missing_audio_policy(items, args.missing_audio, "--missing-audio exclude or keep")
    if summary.n_missing_audio_rows:
        print(f"warning: {missing_audio_warning(summary, args.missing_audio)}", file=sys.stderr)
    out = Path(args.out)
    sources = {"format": args.format, "files": list(args.files), "audio_root": args.audio_root}
    write_items(
        kept,
        out / "items.parquet",
        out / "items_summary.json",
        summary,
        config_hash=items_config_hash(sources),
        extra={**sources, "missing_audio": args.missing_audio, "n_items_judged": kept["item_id"].n_unique()},
    )
    print(f"{out / 'items.parquet'}: {kept.height} rows, {kept['item_id'].n_unique()} items")
    return 0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "import":
            return _import(args)
        if args.command == "train":
            return _train(args)
        if args.command == "findings":
            return _findings(args.metrics_dir)
        if args.command == "export":
            for path in export_sagelm(read_items(args.items), args.out, args.name):
                print(path)
            return 0
        settings = PairwiseMetricSettings(
            n_boot=args.bootstrap, seed=args.seed, duration_bins=args.duration_bins, min_items=args.min_items
        )
        document = run_pairwise_metrics(args.predictions, args.out, settings, args.items)
    except (ItemError, PairwiseMetricsError, ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    overall = document["overall"]
    accuracy, agreement = overall["accuracy"]["value"], overall["agreement"]["value"]
    print(f"{args.out}: n={overall['n']} accuracy={accuracy} agreement={agreement}")
    compatible = document.get(SAGELM_COMPATIBLE)
    if compatible:
        counted = compatible.get("overall", {}).get("accuracy", {}).get("value")
        print(
            f"{SAGELM_COMPATIBLE}: {compatible['n_counted']} of {compatible['n_rows']} rows counted as SageLM's "
            f"scripts count them ({compatible['n_dropped']} under no aspect) accuracy={counted}"
        )
    return 0
