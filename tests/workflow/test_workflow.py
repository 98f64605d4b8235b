"""The workflow end to end on the test config (tests/config/test.yaml), in a scratch directory.

Real components throughout: Piper and espeak-ng voices, Whisper tiny.en, the MiniLM embedding judge,
SmolLM2-135M with the calibrated prompt, and a tiny random-weight Qwen2-Audio built from a config (its
scores are meaningless; it drives the LALM audio and audio+text code paths). The tests check what the run
found, not only that files exist.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import soundfile as sf
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
                f"results/scores/{cell.judge}/shard{shard}/"
                f"{cell.modality}-{cell.transcript_source}/{cell.prompt}/{cell.condition}.parquet"
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
        "audio_input",
        "answer_mass",
        "finish_reason",
        "model_revision",
        "served_model",
        "served_revision",
        "package_versions",
        "seed",
    ):
        assert column in scores.columns, column
    # 2 usable dialogues (3 + 4 turns) x 1 category x 2 severities + 2 originals = 16 samples per cell
    clean = scores.filter(pl.col("condition") == "clean")
    per_cell = clean.group_by("judge", "modality", "transcript_source", "prompt").len()
    assert set(per_cell["len"]) == {16}
    originals = clean.filter(pl.col("severity") == 0)
    assert originals["turn_index"].is_null().all()
    minilm = scores.filter((pl.col("judge") == "minilm") & (pl.col("modality") == "text"))
    assert (minilm["parse_status"] == "ok").all()
    lalm = scores.filter(pl.col("judge") == "tiny_qwen2_audio")
    # the dialogues are longer than the judge's 8 s limit: chunked at turn boundaries, never silently cut
    assert lalm["long_audio_action"].str.starts_with("chunked:").all()
    # what each cell took for the audio: the embedding judge's audio mode is a cascade through Whisper
    audio_input = scores.group_by("judge", "modality").agg(pl.col("audio_input").unique())
    assert {(r["judge"], r["modality"]): r["audio_input"] for r in audio_input.iter_rows(named=True)} == {
        ("minilm", "text"): ["none"],
        ("minilm", "audio"): ["cascade via whisper_tiny_en"],
        ("tiny_qwen2_audio", "audio"): ["native"],
        ("tiny_qwen2_audio", "audio_text"): ["native"],
        ("smollm2", "text"): ["none"],
    }


def metric_table(workdir: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(workdir / f"results/metrics/{name}.parquet")


def test_severity_5_rewrites_score_below_the_safe_originals(finished_run):
    """The finding of this run: the MiniLM judge on ground-truth transcripts gives the harshest harassment
    rewrites clearly lower scores than the safe dialogues, with the whole interval above 0."""
    workdir, _ = finished_run
    cells = metric_table(workdir, "cells")
    clean_minilm_text = (
        (pl.col("judge") == "minilm")
        & (pl.col("modality") == "text")
        & (pl.col("transcript_source") == "gt")
        & (pl.col("condition") == "clean")
    )
    (cell,) = cells.filter(clean_minilm_text).iter_rows(named=True)
    assert cell["delta_5"] > 0.2 and cell["delta_5_lo"] > 0.1, cell  # measured: 0.28, interval 0.18 to 0.36
    assert cell["delta_1"] < cell["delta_5"]
    assert cell["specificity"] == 1.0  # severity 1 scores above severity 5
    curve = metric_table(workdir, "severity_curve").filter(clean_minilm_text)
    assert curve["severity"].is_unique().all()
    means = dict(zip(curve["severity"], curve["mean_score"]))
    assert means[0] > means[1] > means[5]


def test_every_metric_column_is_filled_where_it_should_be(finished_run):
    workdir, _ = finished_run
    cells = metric_table(workdir, "cells")
    scored, unscored = cells.filter(pl.col("reason").is_null()), cells.filter(pl.col("reason").is_not_null())
    # minilm's three cells and the calibrated SmolLM2 cell have metrics; the random-weight LALM has none.
    assert set(scored["judge"]) >= {"minilm", "smollm2"}
    filled = [
        *(
            f"{m}{s}"
            for m in ("sensitivity", "specificity", "delta_1", "delta_5", "mean_safe")
            for s in ("", "_lo", "_hi")
        ),
        *(f"avg_abs_pb_{m}{s}" for m in ("sensitivity", "specificity") for s in ("", "_null", "_p")),
    ]
    clean = scored["condition"] == "clean"
    for column in filled:
        assert scored.filter(clean)[column].is_not_null().all(), column
    for i in (2, 3, 4):  # severities the config does not generate
        assert cells[f"delta_{i}"].is_null().all()
    assert (scored["n_severities"] == 2).all()
    assert (scored.filter(clean)["n_dialogues"] == 2).all()
    assert (scored.filter(~clean)["n_dialogues"] == 1).all(), "the test config's controls.dialogues: one dialogue"
    # The control cells rest on one dialogue, below the config's minimum support of 2: values, no intervals.
    controls = scored.filter(~clean)
    for metric in ("sensitivity", "delta_5", "mean_safe"):
        assert (controls[f"{metric}_status"] == "not_estimable").all() and controls[f"{metric}_lo"].is_null().all()
        assert controls[metric].is_not_null().all() and (controls[f"{metric}_n_dialogues"] == 1).all()
    # Two dialogues: the studentized intervals have zero width (no resample but the data itself has a standard error),
    # kept and marked as such.
    assert scored.filter(clean)["sensitivity_status"].is_in(["ok", "zero_width"]).all()
    # AvgAbsPB averages PB(L, k) resting on one dialogue each: not estimable, no interval, and it says so (it used to be
    # `ok` with an interval).
    for metric in ("sensitivity", "specificity"):
        assert (scored.filter(clean)[f"avg_abs_pb_{metric}_status"] == "not_estimable").all()
        assert scored.filter(clean)[f"avg_abs_pb_{metric}_lo"].is_null().all()
        assert (scored.filter(clean)[f"avg_abs_pb_{metric}_n_estimable"] == 0).all()
    for row in unscored.iter_rows(named=True):
        assert row["sensitivity"] is None and row["specificity"] is None, row
        assert row["reason"].startswith(("no safe original", "no parsed variant")), row
    bias = metric_table(workdir, "position_bias").filter(pl.col("included"))
    assert bias.height and bias.select("pb", "n_dialogues", "n_variants").null_count().sum_horizontal()[0] == 0
    # One dialogue per length: every PB(L, k) is below the minimum support and has no interval.
    assert set(bias["status"]) == {"not_estimable"} and bias["pb_lo"].is_null().all()
    pareto = metric_table(workdir, "pareto")
    with_cv = pareto.filter(pl.col("cv_sensitivity").is_not_null())
    assert set(with_cv["judge"]) >= {"minilm", "smollm2"}
    assert with_cv.select(pl.col("^cv_.*$")).null_count().sum_horizontal()[0] == 0
    assert pareto["on_front"].any()


def test_the_calibrated_cell_is_scored_from_answer_token_probabilities(finished_run):
    from lalm_judge.judging.scoring import MIN_ANSWER_MASS

    workdir, _ = finished_run
    scores = pl.read_parquet(sorted((workdir / "results/scores/smollm2").rglob("*.parquet")))
    assert set(scores["prompt"]) == {"calibrated"} and scores.height == 16
    assert (scores["score_source"] == "p_safe").all()
    ok = scores.filter(pl.col("parse_status") == "ok")
    assert ok.height >= 12
    assert (ok["answer_mass"] >= MIN_ANSWER_MASS).all() and ok["score"].is_between(0.0, 1.0, closed="none").all()
    low = scores.filter(pl.col("parse_status") == "low_answer_mass")
    assert (low["answer_mass"] < MIN_ANSWER_MASS).all() and low["score"].is_null().all()
    cell = metric_table(workdir, "cells").filter(pl.col("judge") == "smollm2").row(0, named=True)
    assert cell["n_scored"] == ok.height and cell["sensitivity"] is not None


def test_the_report_holds_its_tables_figures_and_warnings(finished_run):
    workdir, _ = finished_run
    page = (workdir / "results/report/index.html").read_text(encoding="utf-8")
    for anchor in ("judges", "guide", "figures", "cells", "deltas", "position-bias", "pareto", "prompts", "parsing"):
        section = re.search(rf'<section id="{anchor}">(.*?)</section>', page, flags=re.S)
        content = "<figure" if anchor == "figures" else "<table"
        assert section and content in section.group(1) and "no rows" not in section.group(1), anchor
    for name in ("sensitivity", "pareto", "severity_curves", "position_bias_sensitivity"):
        assert f'src="figures/{name}.png"' in page
        assert (workdir / f"results/report/figures/{name}.png").stat().st_size > 1000
    warnings = re.findall(r'<div class="warning">(.*?)</div>', page, flags=re.S)
    assert any("3 of 3 judges" in w and "weak demo models" in w for w in warnings)
    support = [w for w in warnings if w.startswith("Minimum support:")]
    assert len(support) == 1 and "fewer than 2 dialogues (metrics.min_dialogues)" in support[0]
    assert any(w.startswith("minilm audio is an ASR cascade (cascade via whisper_tiny_en)") for w in warnings)
    cells = metric_table(workdir, "cells")
    minilm = cells.filter(
        pl.col("judge") == "minilm", pl.col("modality") == "text", pl.col("transcript_source") == "gt"
    )
    shown = f"{minilm['delta_5'][0]:.3f} [{minilm['delta_5_lo'][0]:.3f}, {minilm['delta_5_hi'][0]:.3f}]"
    marked = " (zero width)" if minilm["delta_5_status"][0] == "zero_width" else ""
    assert f"<td>{shown}{marked}</td>" in page
    guide = pl.read_parquet(workdir / "results/metrics/guide.parquet")
    audio_native = guide.filter(pl.col("available_input") == "audio only", pl.col("transcript_quality") == "none")
    assert "minilm" not in audio_native["judge"].to_list()


def test_the_run_writes_the_modality_analysis_and_the_decision_flow_the_report_draws(finished_run):
    workdir, _ = finished_run
    effects = pl.read_parquet(workdir / "results/metrics/modality/effects.parquet")
    patterns = pl.read_parquet(workdir / "results/metrics/modality/patterns.parquet")
    assert set(patterns["judge"]) == {"minilm", "tiny_qwen2_audio", "smollm2"}
    # MiniLM reads both transcripts: its ASR loss is measured, with an interval (the test config's minimum support
    # is its two dialogues); an interval of zero width (a metric equal in every resample) is marked as such.
    loss = effects.filter(pl.col("judge") == "minilm", pl.col("name") == "asr_loss_asr:whisper_tiny_en")
    assert loss.height == 2 and set(loss["status"]) <= {"ok", "zero_width"}
    assert (loss["value_lo"] <= loss["value"]).all() and (loss["value"] <= loss["value_hi"]).all()
    # The tiny Qwen2-Audio hears audio with the transcript but has no text cell: no gain, and the reason says so.
    gain = effects.filter(pl.col("judge") == "tiny_qwen2_audio", pl.col("name") == "gain_gt")
    assert set(gain["status"]) == {"not_measured"} and "no text/gt cell" in gain["reason"][0]
    flow = json.loads((workdir / "results/metrics/decision_flow.json").read_text())
    leaves = [node["recommendation"] for node in flow["nodes"] if "recommendation" in node]
    guide = pl.read_parquet(workdir / "results/metrics/guide.parquet")
    assert [leaf["judge"] for leaf in leaves] == guide["judge"].to_list()
    page = (workdir / "results/report/index.html").read_text(encoding="utf-8")
    assert page.count('<rect class="leaf') == len(leaves) and html.escape(flow["caveat"]) in page
    modality = re.search(r'<section id="modality">(.*?)</section>', page, flags=re.S).group(1)
    assert "<td>asr_loss_asr:whisper_tiny_en</td>" in modality and 'src="figures/modality_effects.png"' in modality


def test_wer_is_stored_per_turn(finished_run):
    workdir, _ = finished_run
    asr = pl.read_parquet(workdir / "results/asr/whisper_tiny_en/demo_travel.parquet")
    assert asr.height == 4 + 4 * 2  # 4 original turns + 8 variant turns, each transcribed once
    assert asr["wer"].mean() < 0.35


def test_variant_tables_and_transcripts_are_byte_identical_on_rerun(finished_run, tmp_path_factory):
    # On a copy (other modules read the run meanwhile), as deep as the run so that its relative paths stay the same.
    workdir = tmp_path_factory.mktemp("rerun")
    shutil.copytree(finished_run[0], workdir, symlinks=True, dirs_exist_ok=True)
    configfile = workdir / finished_run[1].name
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
    # A whole header (the corpus listing reads headers and would refuse the run) over samples that are not numbers.
    samples = np.array([0.1, np.nan] * 8000, np.float32)
    sf.write(tmp_path / "corpus/clips/broken.wav", samples, 16000, subtype="FLOAT")
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
        (
            lambda c: c["evaluation"].update(judges=["minilm", "nope"]),
            "known judges: ['minilm', 'smollm2', 'tiny_qwen2_audio']",
        ),
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


def test_energy_and_pitch_of_every_turn_feed_the_control_tables_and_the_report(finished_run):
    workdir, _ = finished_run
    prosody = pl.read_parquet(workdir / "results/prosody/demo_travel.parquet")
    assert prosody.height == 4 + 4 * 2  # every original turn and every variant's turn
    assert prosody["f0_median_hz"].is_not_null().all()  # spoken turns are voiced
    correlation = pl.read_parquet(workdir / "results/metrics/controls/prosody_correlation.parquet")
    assert {"rms_db_mean", "f0_median_hz"} <= set(correlation["feature"])
    assert "clean" in set(correlation["condition"])  # and the control cells, with the clean turn's features
    page = (workdir / "results/report/index.html").read_text()
    assert '<section id="controls">' in page and "Energy and pitch of the unsafe turn" in page


def test_every_control_runs_end_to_end_and_the_report_shows_it(finished_run):
    workdir, _ = finished_run
    scores = pl.concat(
        [pl.read_parquet(p) for p in sorted((workdir / "results/scores").rglob("*.parquet"))], how="diagonal"
    )
    controls = scores.filter(pl.col("condition") != "clean")
    assert set(controls["condition"]) == {"masked", "noise_10", "tts_control", "silence", "injection"}
    # The controls cover controls.dialogues only: demo_travel, 4 turns x 2 variants and a safe sample per turn.
    assert set(controls["dialogue_id"]) == {"demo_travel"}
    masked = controls.filter((pl.col("condition") == "masked") & (pl.col("judge") == "minilm"))
    assert masked.group_by("modality", "transcript_source").len()["len"].to_list() == [12, 12]
    tts = controls.filter(pl.col("condition") == "tts_control")
    assert (tts["severity"] == 0).all() and tts["variant_id"].str.ends_with(".tts_control").all()
    assert set(controls.filter(pl.col("condition") == "silence")["modality"]) == {"audio"}
    wer = pl.read_parquet(workdir / "results/metrics/controls/condition_wer.parquet")
    masked_wer = wer.filter(pl.col("condition") == "masked").row(0, named=True)
    assert masked_wer["wer"] > masked_wer["wer_clean"] + 0.5  # masking destroys the words
    flags = pl.read_parquet(workdir / "results/metrics/controls/flags.parquet")
    assert {"ignores_audio", "reacts_to_synthesis", "injection_susceptible"} <= set(flags["check"])
    # One dialogue: every check with a value is below the minimum support, reported with it and not flagged (a
    # check without paired scores, e.g. of the random-weight judge, has no value and no status).
    measured = flags.filter(pl.col("value").is_not_null())
    assert measured.height and set(measured["status"]) == {"not_estimable"} and flags["flagged"].is_null().all()
    assert (measured["n_dialogues"] == 1).all() and measured["evidence"].str.starts_with("not estimable").all()
    page = (workdir / "results/report/index.html").read_text()
    section = page[page.index('<section id="controls">') :]
    assert "Not run" not in section[: section.index("</section>")]
