"""The workflow end to end on the test config (tests/config/test.yaml), in a scratch directory.

Real components throughout: Piper and espeak-ng voices, Whisper tiny.en, the MiniLM embedding judge and
a tiny random-weight Qwen2-Audio built from a config (its scores are meaningless; it drives the LALM
audio and audio+text code paths).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml

from lalm_judge.workflow.config import load_config
from lalm_judge.workflow.plan import Plan
from tests.support.workflow import snakemake, write_config, write_corpus

pytestmark = [pytest.mark.workflow, pytest.mark.slow]


def test_every_configured_output_exists(finished_run, monkeypatch):
    workdir, configfile = finished_run
    monkeypatch.chdir(workdir)  # the corpus path in the config is relative to the working directory
    plan = Plan(load_config(configfile))
    for cell in plan.judge_cells():
        for shard in plan.shards():
            path = workdir / (
                f"results/scores/{cell.judge}/{cell.modality}-{cell.transcript_source}/{cell.prompt}/{cell.condition}/"
                f"shard{shard}.parquet"
            )
            assert path.exists(), path
    assert (workdir / "results/report/index.html").exists()
    cells = pl.read_parquet(workdir / "results/metrics/cells.parquet")
    assert cells.height == len(plan.judge_cells())


def test_one_turn_dialogue_is_skipped_with_a_warning(finished_run):
    workdir, _ = finished_run
    manifest = json.loads((workdir / "results/manifests/single_turn.json").read_text())
    assert manifest["status"] == "skipped" and "min_turns" in manifest["skip_reason"]
    assert manifest["variants"] == []
    assert "dialogue single_turn skipped" in (workdir / "logs/corpus/single_turn.log").read_text()


def test_scores_have_the_documented_columns_and_provenance(finished_run):
    workdir, _ = finished_run
    scores = pl.concat(
        [pl.read_parquet(p) for p in sorted((workdir / "results/scores").rglob("*.parquet"))], how="diagonal"
    )
    for column in (
        "dialogue_id",
        "variant_id",
        "category",
        "severity",
        "turn_index",
        "n_turns",
        "judge",
        "modality",
        "transcript_source",
        "prompt",
        "prompt_version",
        "condition",
        "score",
        "parse_status",
        "raw_output",
        "latency_s",
        "long_audio_action",
        "model_revision",
        "package_versions",
        "seed",
    ):
        assert column in scores.columns, column
    # 2 usable dialogues (3 + 4 turns) x 1 category x 2 severities + 2 originals = 16 samples per cell
    per_cell = scores.group_by("judge", "modality", "transcript_source", "prompt").len()
    assert set(per_cell["len"]) == {16}
    originals = scores.filter(pl.col("severity") == 0)
    assert originals["turn_index"].is_null().all()
    minilm = scores.filter((pl.col("judge") == "minilm") & (pl.col("modality") == "text"))
    assert (minilm["parse_status"] == "ok").all()
    lalm = scores.filter(pl.col("judge") == "tiny_qwen2_audio")
    # the dialogues are longer than the judge's 8 s limit: chunked at turn boundaries, never silently cut
    assert lalm["long_audio_action"].str.starts_with("chunked:").all()


def test_wer_is_stored_per_turn(finished_run):
    workdir, _ = finished_run
    asr = pl.read_parquet(workdir / "results/asr/whisper_tiny_en/demo_travel.parquet")
    assert asr.height == 4 + 4 * 2  # 4 original turns + 8 variant turns, each transcribed once
    assert asr["wer"].mean() < 0.35


def test_variant_tables_and_transcripts_are_byte_identical_on_rerun(finished_run):
    workdir, configfile = finished_run
    outputs = sorted((workdir / "results/variants").rglob("*.parquet")) + sorted(
        (workdir / "results/asr").rglob("*.parquet")
    )
    before = {p: p.read_bytes() for p in outputs}
    snakemake(
        workdir,
        configfile,
        "--cores",
        "2",
        "--forcerun",
        "rewrite_turn",
        "synthesize_variants",
        "transcribe_dialogue",
        "--until",
        "transcribe_dialogue",
    )
    assert {p: p.read_bytes() for p in outputs} == before


def test_unchanged_rerun_schedules_nothing(finished_run):
    workdir, configfile = finished_run
    result = snakemake(workdir, configfile, "-n", "--cores", "2")
    assert "Nothing to be done" in result.stdout + result.stderr


def test_corrupt_audio_fails_only_its_dialogue(tmp_path):
    write_corpus(tmp_path, extra=())
    corpus = tmp_path / "corpus" / "dialogues.jsonl"
    records = [json.loads(line) for line in corpus.read_text().splitlines()]
    (tmp_path / "corpus/clips").mkdir()
    (tmp_path / "corpus/clips/broken.wav").write_bytes(b"RIFF\x00\x00")
    records[0]["turns"][0]["audio"] = "clips/broken.wav"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    config = yaml.safe_load((Path(__file__).parents[1] / "config/test.yaml").read_text())
    configfile = write_config(tmp_path, config)
    result = snakemake(tmp_path, configfile, "corpus", "--cores", "2", "--keep-going", check=False)
    assert result.returncode != 0
    failed, ok = records[0]["id"], records[1]["id"]
    assert "broken.wav" in (tmp_path / f"logs/corpus/{failed}.log").read_text()
    assert (tmp_path / f"results/corpus/{ok}/dialogue.json").exists()
    assert not (tmp_path / f"results/corpus/{failed}/dialogue.json").exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c["variants"].update(categories=["weapons"]), "variants"),
        (lambda c: c["variants"].update(severities=[7]), "variants"),
        (lambda c: c["evaluation"].update(judges=["minilm", "nope"]), "known judges: ['minilm', 'tiny_qwen2_audio']"),
    ],
)
def test_bad_config_fails_before_any_job(tmp_path, edit, message):
    write_corpus(tmp_path)
    config = yaml.safe_load((Path(__file__).parents[1] / "config/test.yaml").read_text())
    edit(config)
    result = snakemake(tmp_path, write_config(tmp_path, config), "-n", "--cores", "1", check=False)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()


def test_unsafe_dialogue_id_is_rejected_at_parse_time(tmp_path):
    write_corpus(tmp_path, extra=({"id": "../escape", "turns": [{"speaker": "A", "text": "x"}]},))
    config = yaml.safe_load((Path(__file__).parents[1] / "config/test.yaml").read_text())
    result = snakemake(tmp_path, write_config(tmp_path, config), "-n", "--cores", "1", check=False)
    assert result.returncode != 0
    assert "invalid dialogue id '../escape'" in result.stdout + result.stderr
