"""A corpus of bad inputs, each given to the entry point that meets it in a run, with what must come out: an error
naming the culprit (file and line, key path, dialogue or turn, column) or a recorded status, never a crash with a
bare traceback and never a partial output.

Areas: the config (schema and cross-checks, YAML duplicate keys), the corpus file, turn audio, ASR transcripts,
judge outputs (through the real judge stage and `openai` backend, answered by the fault proxy's canned texts) and
score tables given to `lalm-judge metrics`. Real components throughout (soundfile, espeak-ng, Whisper tiny.en).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import soundfile as sf
import yaml

from bench.fault_proxy import FaultProxy
from bench.simulated import simulate_scores
from lalm_judge.audio.synthesis import synthesize_turn_variants
from lalm_judge.audio.transcription import transcript_rows
from lalm_judge.audio.waveform import AudioError, read_audio, write_wav
from lalm_judge.cli import metrics as metrics_cli
from lalm_judge.cli import validate as validate_cli
from lalm_judge.core.dialogue import CorpusError, Dialogue
from lalm_judge.core.taxonomy import InvalidIdentifier
from lalm_judge.core.vocabulary import TranscriptSource
from lalm_judge.data.corpus import ingest
from lalm_judge.data.variants import rewrite_turn, write_variant_table
from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.judging.backends.openai_backend import OpenAIBackend
from lalm_judge.judging.cell import cell_settings
from lalm_judge.judging.job import score_samples
from lalm_judge.judging.windows import plan_long_audio, turn_windows
from lalm_judge.manifest.samples import Sample
from lalm_judge.workflow.config import ConfigError, load_config
from lalm_judge.workflow.preflight import preflight
from tests.support import bad_inputs
from tests.support.workflow import ROOT, TEST_CONFIG, snakemake

SR = 16000
VOICES = {"A": {"engine": "espeak", "voice": "en-us+f3"}, "B": {"engine": "espeak", "voice": "en-us"}}


# --- the config ---------------------------------------------------------------------------------------------------
def _edited(edit) -> dict:
    config = yaml.safe_load(TEST_CONFIG.read_text())
    edit(config)
    return config


CONFIG_CASES = {
    "unknown_top_level_key": (lambda c: c.update(colour="blue"), r"<root>: unknown key 'colour' \(valid keys: asr,"),
    "unknown_nested_key": (
        lambda c: c["variants"].update(severity=3),
        r"variants: unknown key 'severity'; did you mean 'severities'\?",
    ),
    "wrong_type_seed": (lambda c: c.update(seed="zero"), r"seed: 'zero' is not of type 'integer'"),
    "wrong_type_shards": (
        lambda c: c["evaluation"].update(shards="2"),
        r"evaluation\.shards: '2' is not valid under any of the given schemas",
    ),
    "unknown_judge": (
        lambda c: c["evaluation"].update(judges=["minilm", "gpt5_audio"]),
        r"unknown judge\(s\) \['gpt5_audio'\]; known judges: \['minilm', 'smollm2', 'tiny_qwen2_audio'\]",
    ),
    "unknown_prompt": (
        lambda c: c["evaluation"].update(prompts=["basic", "socratic"]),
        r"evaluation\.prompts\.1: 'socratic' is not one of",
    ),
    "unknown_condition": (
        lambda c: c["evaluation"].update(conditions=["clean", "underwater"]),
        r"evaluation\.conditions\.1: 'underwater' does not match",
    ),
    "unknown_category": (
        lambda c: c["variants"].update(categories=["harassment", "weapons"]),
        r"variants\.categories\.1: 'weapons' is not one of",
    ),
    "severity_0": (lambda c: c["variants"].update(severities=[0, 1]), r"variants\.severities\.0: 0 is less than"),
    "severity_6": (lambda c: c["variants"].update(severities=[1, 6]), r"variants\.severities\.1: 6 is greater than"),
    "empty_category_list": (lambda c: c["variants"].update(categories=[]), r"variants\.categories: \[\] should be"),
    "unknown_backend": (
        lambda c: c["judges"]["minilm"].update(backend="tensorrt"),
        r"judges\.minilm\.backend: 'tensorrt' is not one of",
    ),
}


@pytest.mark.parametrize("case", CONFIG_CASES, ids=list(CONFIG_CASES))
def test_bad_config_names_the_key(case, tmp_path):
    edit, message = CONFIG_CASES[case]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_edited(edit), sort_keys=False))
    with pytest.raises(ConfigError, match=message):
        load_config(path)


DUPLICATE_JUDGE = textwrap.dedent(
    """\
    judges:
      minilm:
        backend: embedding
        model: bundled:all-MiniLM-L6-v2
        modalities: [text]
      minilm:
        backend: transformers
        model: bundled:smollm2-135m-instruct
        modalities: [text]
    """
)


def test_duplicate_judge_names_are_an_error_not_the_last_one_wins(tmp_path, capsys):
    """PyYAML keeps the last of two equal keys without a word; the config reader names both lines."""
    config = yaml.safe_load(TEST_CONFIG.read_text())
    del config["judges"]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False) + DUPLICATE_JUDGE)
    line = path.read_text().splitlines().index("  minilm:", path.read_text().splitlines().index("judges:") + 2) + 1
    with pytest.raises(ConfigError, match=rf"config\.yaml:{line}: duplicate key 'minilm' \(first at line {line - 4}\)"):
        load_config(path)
    assert validate_cli.main([str(path)]) == 2
    assert "duplicate key 'minilm'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.workflow
def test_the_workflow_refuses_a_config_with_duplicate_judge_names(tmp_path):
    config = yaml.safe_load(TEST_CONFIG.read_text())
    del config["judges"]
    path = tmp_path / "dup.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False) + DUPLICATE_JUDGE)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "dialogues.jsonl").write_text((ROOT / "data/demo/dialogues.jsonl").read_text())
    result = snakemake(tmp_path, path, "-n", check=False, timeout_s=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "dup.yaml:" in output and "duplicate key 'minilm'" in output


# --- the corpus file ----------------------------------------------------------------------------------------------
def _turn(speaker: str, text: str, **extra) -> dict:
    return {"speaker": speaker, "text": text, "emotion": "neutral", **extra}


def write_corpus(folder: Path, records: list) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    (folder / "dialogues.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"format": "jsonl", "path": str(folder), "pause_s": 0.3}


@pytest.mark.parametrize("case", bad_inputs.CASES, ids=list(bad_inputs.CASES))
def test_bad_input_is_refused_before_the_first_job_naming_the_culprit(case, tmp_path, monkeypatch):
    """Every case of the bad-input corpus (tests/support/bad_inputs.py) goes through the checks the workflow runs when
    it is parsed (`preflight`): the error names the key and value, or the file, line, dialogue, turn and field."""
    bad = bad_inputs.CASES[case]
    configfile = bad_inputs.prepare(tmp_path, bad)
    monkeypatch.chdir(tmp_path)
    if bad.message is None:
        preflight(load_config(configfile))
    else:
        with pytest.raises((ConfigError, CorpusError, InvalidIdentifier), match=bad.message):
            preflight(load_config(configfile))


def test_turns_a_voice_cannot_speak_are_warned_about_with_the_reason(tmp_path, monkeypatch):
    configfile = bad_inputs.prepare(tmp_path, bad_inputs.ACCEPTED_CASES["emoji_only_turn"])
    edit = bad_inputs.edit_turn("demo_travel", 1, text="See you there \U0001f44b\U0001f44b!")
    edit(tmp_path / "corpus")
    monkeypatch.chdir(tmp_path)
    warnings = preflight(load_config(configfile)).warnings
    assert len(warnings) == 2
    assert re.match(
        r"corpus/dialogues\.jsonl:2: dialogue 'demo_travel' turn 1: the text holds 2 emoji or symbol", warnings[0]
    )
    assert re.match(
        r"corpus/dialogues\.jsonl:2: dialogue 'demo_travel' turn 2: the text '.*' has no letters or digits", warnings[1]
    )


def test_one_turn_dialogue_is_recorded_as_skipped(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", [{"id": "solo", "turns": [_turn("A", "Alone here.")]}])
    dialogue = ingest(corpus, "solo", tmp_path / "out/dialogue.json", tmp_path / "out/turns", SR, VOICES)
    assert dialogue.status == "skipped" and "1 turn(s) < corpus.min_turns=2" in dialogue.skip_reason
    assert Dialogue.load(tmp_path / "out/dialogue.json").status == "skipped"


# --- turn audio ---------------------------------------------------------------------------------------------------
def ingest_with_clip(tmp_path: Path, write_clip) -> Dialogue:
    """Ingest a two-turn dialogue whose first turn has the given clip (written by `write_clip(path)`)."""
    folder = tmp_path / "corpus"
    (folder / "clips").mkdir(parents=True, exist_ok=True)
    write_clip(folder / "clips" / "t0.wav")
    record = {"id": "given_clip", "turns": [_turn("A", "Hello there.", audio="clips/t0.wav"), _turn("B", "Hi.")]}
    corpus = write_corpus(folder, [record])
    return ingest(corpus, "given_clip", tmp_path / "out/dialogue.json", tmp_path / "out/turns", SR, VOICES)


def tone(seconds: float, sr: int, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    return (amplitude * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


UNREADABLE_CLIPS = {
    "missing_clip": (lambda path: None, r"cannot read audio file .*clips/t0\.wav"),
    "clip_is_a_folder": (lambda path: path.mkdir(), r"cannot read audio file .*clips/t0\.wav"),
    "empty_file": (lambda path: path.write_bytes(b""), r"cannot read audio file .*clips/t0\.wav"),
    "corrupt_header": (lambda path: path.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt garbage" * 4), r"t0\.wav"),
    "header_without_samples": (lambda path: sf.write(path, np.zeros(0), SR), r"clips/t0\.wav is empty \(0 samples\)"),
    "nan_samples": (
        lambda path: sf.write(path, np.array([0.1, np.nan, 0.2] * 1000, np.float32), SR, subtype="FLOAT"),
        r"clips/t0\.wav holds 1000 non-finite samples",
    ),
}


@pytest.mark.parametrize("case", UNREADABLE_CLIPS, ids=list(UNREADABLE_CLIPS))
def test_unusable_clip_fails_its_ingest_naming_the_file(case, tmp_path):
    write_clip, message = UNREADABLE_CLIPS[case]
    with pytest.raises(AudioError, match=message):
        ingest_with_clip(tmp_path, write_clip)
    assert not (tmp_path / "out/dialogue.json").exists(), "no dialogue.json for a failed ingest"


@pytest.mark.parametrize(("rate", "channels"), [(8000, 1), (48000, 1), (44100, 2)], ids=["8khz", "48khz", "stereo"])
def test_other_rates_and_stereo_are_resampled_and_mixed_down(rate, channels, tmp_path):
    signal = tone(1.5, rate)
    frames = np.stack([signal] * channels, axis=1) if channels > 1 else signal
    dialogue = ingest_with_clip(tmp_path, lambda path: sf.write(path, frames, rate))
    clip, sr = read_audio(dialogue.turns[0].clip)
    info = sf.info(dialogue.turns[0].clip)
    assert (sr, info.channels) == (SR, 1) and dialogue.turns[0].end == pytest.approx(1.5, abs=1e-3)
    assert np.max(np.abs(clip)) == pytest.approx(0.3, abs=0.01)
    assert dialogue.warnings == []


def test_silent_and_clipped_turns_are_recorded_as_warnings(tmp_path):
    dialogue = ingest_with_clip(tmp_path, lambda path: sf.write(path, np.zeros(SR, np.float32), SR))
    assert dialogue.warnings == ["dialogue given_clip turn 0: the audio is silent (peak below -60 dBFS)"]
    assert Dialogue.load(tmp_path / "out/dialogue.json").warnings == dialogue.warnings
    clipped = np.clip(tone(1.0, SR, amplitude=3.0), -1.0, 1.0)
    again = ingest_with_clip(tmp_path / "again", lambda path: sf.write(path, clipped, SR))
    assert len(again.warnings) == 1 and "turn 0: the audio is clipped (" in again.warnings[0]


def test_a_silent_neighbour_does_not_set_the_loudness_of_a_variant(tmp_path):
    """Loudness matching averages the neighbouring turns; a silent one would make the variant near-silent."""
    dialogue = ingest_with_clip(tmp_path, lambda path: sf.write(path, np.zeros(SR, np.float32), SR))
    dialogue_json = tmp_path / "out/dialogue.json"
    generator = {"name": "template"}
    variants = rewrite_turn(dialogue, 1, ["harassment"], [2], generator, seed=0, cache_dir=tmp_path / "cache")
    write_variant_table(variants, tmp_path / "variants.parquet")
    table = synthesize_turn_variants(
        str(dialogue_json), str(tmp_path / "variants.parquet"), str(tmp_path / "tts"), str(tmp_path / "tts.parquet"),
        VOICES, match_loudness=True, progress=False,
    )  # fmt: skip
    clip, _ = read_audio(table["clip"][0])
    own, _ = read_audio(dialogue.turns[1].clip)
    assert np.isfinite(table["gain_db"][0]) and np.max(np.abs(clip)) > 0.5 * np.max(np.abs(own))


@pytest.mark.slow
def test_a_30_minute_turn_is_ingested_and_chunked_for_a_30_second_judge(tmp_path):
    dialogue = ingest_with_clip(tmp_path, lambda path: write_wav(path, tone(1800.0, SR), SR))
    assert dialogue.turns[0].end == pytest.approx(1800.0)
    bounds = [(round(t.start * SR), round(t.end * SR)) for t in dialogue.turns]
    plan = plan_long_audio(turn_windows(bounds), bounds[-1][1], SR, max_audio_s=30.0, policy="chunk")
    assert plan.action == f"chunked:{len(plan.windows)}" and len(plan.windows) == 61
    assert max(w.length for w in plan.windows) <= 30 * SR
    assert plan_long_audio(turn_windows(bounds), bounds[-1][1], SR, 30.0, "skip").action == "skipped"


# --- transcripts --------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_empty_asr_output_is_a_row_with_wer_1(tmp_path):
    """Whisper hears nothing in a silent turn: the row keeps the empty text and a WER of 1, the run goes on."""
    from lalm_judge.audio.asr import load_asr

    dialogue = ingest_with_clip(tmp_path, lambda path: sf.write(path, np.zeros(2 * SR, np.float32), SR))
    asr = load_asr("bundled:tiny.en", device="cpu", compute_type="int8", cpu_threads=1)
    rows = transcript_rows(dialogue, [], lambda _s, _t, audio, sr: asr.transcribe(audio, sr).text, desc="asr")
    assert rows["text"].to_list()[0] == "" and rows["wer"].to_list()[0] == 1.0
    assert rows["wer"].to_list()[1] < 1.0


# --- judge outputs ------------------------------------------------------------------------------------------------
JUDGE_OUTPUTS = {
    "garbage": ("}{ asdf ### qwerty", "missing", None),
    "refusal": ("I cannot help with evaluating this conversation.", "refusal", None),
    "several_numbers": ("First SAFETY_SCORE: 0.2, on reflection\nSAFETY_SCORE: 0.9", "ok", 0.9),
    "numbers_without_the_contract": ("Scores: 0.2, 0.7 and 0.9", "missing", None),
    "out_of_range": ("SAFETY_SCORE: 7", "out_of_range", None),
    "negative": ("SAFETY_SCORE: -0.5", "out_of_range", None),
    "not_a_number": ("SAFETY_SCORE: nan", "malformed", None),
    "empty": ("", "missing", None),
}


def text_sample(dialogue_id: str, text: str) -> Sample:
    return Sample(
        sample_id=f"{dialogue_id}.original",
        dialogue_id=dialogue_id,
        category=None,
        severity=0,
        turn_index=None,
        speakers=("A", "B"),
        clips=("", ""),
        gaps_s=(0.3,),
        sample_rate=SR,
        # The dialogue id is in the judged text, so the canned answers can tell the samples apart.
        texts={TranscriptSource.GT: (f"[{dialogue_id}] Hello there.", text)},
    )


@pytest.mark.parametrize("case", JUDGE_OUTPUTS, ids=list(JUDGE_OUTPUTS))
def test_bad_judge_output_is_a_recorded_status_beside_good_rows(case, tmp_path):
    answer, status, score = JUDGE_OUTPUTS[case]
    replies = {"good_dialogue": "SAFETY_SCORE: 0.8", "bad_dialogue": answer}
    with FaultProxy(answer=lambda body: next(r for d, r in replies.items() if d in str(body["messages"]))) as proxy:
        spec = JudgeSpec(
            name="api_judge",
            backend="openai",
            model="stand-in",
            modalities=("text",),
            options={"base_url": proxy.base_url, "api_key_env": None, "cache_dir": None},
        )
        cell = cell_settings(spec, "text", "gt", ROOT / "prompts" / "basic.yaml")
        samples = [text_sample("good_dialogue", "Fine, thanks."), text_sample("bad_dialogue", "Nice weather.")]
        rows = score_samples(samples, cell, OpenAIBackend(spec))
    assert [(r["parse_status"], r["score"]) for r in rows] == [("ok", 0.8), (status, score)]
    assert rows[1]["raw_output"] == answer


# --- score tables given to `lalm-judge metrics` --------------------------------------------------------------------
def scores_table(tmp_path: Path, change) -> Path:
    path = tmp_path / "scores.parquet"
    change(simulate_scores(n_dialogues=4, seed=1)).write_parquet(path)
    return path


METRICS_CASES = {
    "missing_columns": (
        lambda s: s.drop("parse_status", "n_turns"),
        r"scores\.parquet' lacks required column\(s\) n_turns, parse_status",
    ),
    "score_as_text": (
        lambda s: s.with_columns(pl.col("score").cast(pl.String)),
        r"scores\.parquet' has column\(s\) of the wrong type: score is String \(needs Float64\)",
    ),
    "severity_as_text": (
        lambda s: s.with_columns(pl.col("severity").cast(pl.String)),
        r"wrong type: severity is String \(needs Int64\)",
    ),
}


@pytest.mark.parametrize("case", METRICS_CASES, ids=list(METRICS_CASES))
def test_bad_score_table_is_rejected_by_metrics_naming_file_and_column(case, tmp_path, capsys):
    change, message = METRICS_CASES[case]
    table = scores_table(tmp_path, change)
    assert metrics_cli.main([str(table), "--out", str(tmp_path / "m"), "--bootstrap", "10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(message, err), err
    assert not (tmp_path / "m").exists()


def test_a_file_that_is_not_parquet_is_rejected_by_metrics_naming_it(tmp_path, capsys):
    table = tmp_path / "scores.parquet"
    simulate_scores(n_dialogues=4, seed=1).write_csv(table)
    assert metrics_cli.main([str(table), "--out", str(tmp_path / "m")]) == 2
    assert "scores.parquet' is not a readable parquet table" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


# --- validate-config and the run agree ----------------------------------------------------------------------------
def agreement_cases() -> dict[str, bad_inputs.BadInput]:
    """Every case of the bad-input corpus of the config and the corpus: the schema cases above and those of
    tests/support/bad_inputs.py (the classes the run used to fail on mid-run, and the accepted ones)."""
    schema = {name: bad_inputs.BadInput(message, config=edit) for name, (edit, message) in CONFIG_CASES.items()}
    return {**schema, **bad_inputs.CASES}


AGREEMENT = agreement_cases()


@pytest.fixture(scope="module")
def planned_cases(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """Every agreement case in a working directory of its own, dry-run by the workflow: Snakemake's API in one
    process for all of them (tests/support/plan_runs.py; the command line agrees: see the test after the next)."""
    root = tmp_path_factory.mktemp("agreement")
    for name, case in AGREEMENT.items():
        bad_inputs.prepare(root / name, case)
    command = [sys.executable, "-m", "tests.support.plan_runs", *(str(root / name) for name in AGREEMENT)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = {Path(run["workdir"]).name: run for run in map(json.loads, result.stdout.splitlines())}
    assert set(runs) == set(AGREEMENT)
    return root, runs


@pytest.mark.slow
@pytest.mark.workflow
@pytest.mark.parametrize("case", AGREEMENT, ids=list(AGREEMENT))
def test_validate_config_fails_exactly_when_the_run_would(case, planned_cases, capsys):
    """`lalm-judge validate-config` and the workflow's dry run (the run, stopped before its first job) on the same
    working directory: both refuse a bad input with the same message, and both accept the inputs the run accepts."""
    root, runs = planned_cases
    workdir, bad, run = root / case, AGREEMENT[case], runs[case]

    validated = validate_cli.main([str(workdir / "config.yaml"), "--directory", str(workdir)])
    printed = capsys.readouterr()

    assert (validated != 0) == (run["returncode"] != 0), (printed, run["error"][-3000:])
    if bad.message is None:
        assert validated == 0 and run["returncode"] == 0
    else:
        assert re.search(bad.message, printed.err), printed.err
        assert re.search(bad.message, run["error"]), run["error"][-3000:]
        assert not (workdir / "results").exists(), "no job ran"


@pytest.mark.slow
@pytest.mark.workflow
@pytest.mark.parametrize("case", ["severity_as_decimal", "wav_cut_short", "emoji_only_turn"])
def test_the_command_line_run_refuses_what_the_api_dry_run_refuses(case, tmp_path):
    """`snakemake -n` as users run it gives the answer and the message of the API dry run above."""
    bad = AGREEMENT[case]
    result = snakemake(tmp_path, bad_inputs.prepare(tmp_path, bad), "-n", check=False, timeout_s=300)
    output = result.stdout + result.stderr
    assert (result.returncode == 0) == (bad.message is None), output[-3000:]
    assert bad.message is None or re.search(bad.message, output), output[-3000:]
