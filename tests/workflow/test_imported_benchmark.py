"""The released benchmark end to end: the test workflow's results exported as a Hugging Face dataset, loaded
with `datasets`, imported back as an `hf_benchmark` corpus in a fresh working directory, and judged there by
the workflow without rewriting, synthesizing or recognizing anything: the scores equal the original run's.

Judged again are three cells that cover every path of the judge stage's inputs: text from released ASR
transcripts, an audio cascade (minilm), and audio with ground-truth text through the tiny random-weight
Qwen2-Audio (chunked at turn boundaries), over both shards.
"""

from __future__ import annotations

import io
from pathlib import Path

import datasets
import polars as pl
import pytest
import soundfile as sf
import yaml

from lalm_judge.cli import main as lalm_judge
from lalm_judge.core.tables import EFFORT_COLUMNS, SCORES
from lalm_judge.workflow.config import ConfigError, validate_config
from tests.support.workflow import load_test_config, scheduled_jobs, snakemake, write_config

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

CELLS = (
    "minilm/text-asr:whisper_tiny_en/basic/clean",
    "minilm/audio-none/basic/clean",
    "tiny_qwen2_audio/audio_text-gt/basic/clean",
)


def _cell_tables(cell: str) -> str:
    """The glob of a cell's score tables ('<judge>/<modality>-<source>/<prompt>/<condition>'), one per shard."""
    judge, label = cell.split("/", 1)
    return f"results/scores/{judge}/shard*/{label}.parquet"


def _imported_config() -> dict:
    config = load_test_config()
    variants = config["variants"]
    config["corpus"] = {"format": "hf_benchmark", "path": "benchmark"}
    config["variants"] = {
        "source": "imported",
        "categories": variants["categories"],
        "severities": variants["severities"],
    }
    config["tts"] = {"voices": {}}
    config["asr"]["models"] = {"whisper_tiny_en": {"model": "imported"}}
    return config


def _clean_only(config: dict) -> dict:
    """The released benchmark judged as released: no control makes new audio (no voices, no ASR that hears)."""
    config["evaluation"]["conditions"] = ["clean"]
    for entry in config["judges"].values():
        entry.get("schedule", {}).pop("conditions", None)
    return config


def test_controls_of_an_imported_benchmark_need_voices_and_an_asr_that_hears():
    config = _imported_config()
    with pytest.raises(ConfigError, match=r"\['injection', 'tts_control'\] speak new turns, but tts.voices is empty"):
        validate_config(config)
    config["evaluation"]["conditions"] = ["clean", "masked"]
    for entry in config["judges"].values():
        entry.get("schedule", {}).pop("conditions", None)
    with pytest.raises(ConfigError, match=r"'masked' cell .* asr.models.whisper_tiny_en has only the released"):
        validate_config(config)
    validate_config(_clean_only(config))


def _scores(shards) -> pl.DataFrame:
    scores = SCORES.read(shards).drop(EFFORT_COLUMNS, strict=False)
    return scores.sort("judge", "modality", "transcript_source", "prompt", "variant_id")


def test_export_load_import_and_judge_give_the_same_scores(finished_run, tmp_path, monkeypatch, capsys):
    workdir, configfile = finished_run
    dataset = tmp_path / "dataset"
    monkeypatch.chdir(workdir)  # where the run was made: its config names the corpus relative to it
    assert lalm_judge(["export", "--format", "hf", "--out", str(dataset), "--config", str(configfile)]) == 0

    released = datasets.load_dataset("parquet", data_dir=str(dataset), split="test", cache_dir=str(tmp_path / "hf"))
    assert released.num_rows == 16 and released.features["audio"].sampling_rate == 16000
    first = released.cast_column("audio", datasets.Audio(decode=False))[0]
    audio, rate = sf.read(io.BytesIO(first["audio"]["bytes"]))
    assert rate == 16000 and len(audio) / rate == pytest.approx(first["turn_end_s"][-1])

    judged = tmp_path / "judged"
    judged.mkdir()
    (judged / "models").symlink_to(workdir / "models")  # the same tiny judge model
    assert lalm_judge(["import", "--format", "hf", str(dataset), "--out", str(judged / "benchmark")]) == 0
    hint = capsys.readouterr().out
    assert "format: hf_benchmark" in hint and "whisper_tiny_en: {model: imported}" in hint
    imported = write_config(judged, _clean_only(_imported_config()))
    assert yaml.safe_load(imported.read_text())["variants"]["source"] == "imported"

    # A cell's tables, one per shard: results/scores/<judge>/shard<k>/<cell>.parquet, in its judge job's folder.
    originals = {cell: sorted(workdir.glob(_cell_tables(cell))) for cell in CELLS}
    tables = [p.relative_to(workdir) for shards in originals.values() for p in shards]
    targets = sorted({str(Path(*p.parts[:4])) for p in tables})  # results/scores/<judge>/shard<k>
    planned = scheduled_jobs(snakemake(judged, imported, "-n", "--cores", "2", *targets))
    # One judge job per (judge, shard) of the targets; each writes every cell of its judge.
    judge_jobs = {tuple(target.split("/")[2:4]) for target in targets}
    assert planned["import_variants"] == 7
    assert {rule: n for rule, n in planned.items() if rule.startswith("judge_")} == {
        f"judge_{judge}": sum(j == judge for j, _ in judge_jobs) for judge, _ in judge_jobs
    }
    assert not {"rewrite_turn", "synthesize_variants", "transcribe_dialogue"} & set(planned)
    snakemake(judged, imported, "--cores", "2", *targets, timeout_s=900)

    before = _scores([p for shards in originals.values() for p in shards])
    after = _scores([judged / t for t in tables])
    assert before.height == 16 * len(CELLS)
    assert after.equals(before)
