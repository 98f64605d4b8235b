"""The `lalm-judge` entry point, run as users run it (a subprocess of the installed console script)."""

import hashlib
import os
import shutil
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from bench.servers import reply_json, start_stand_in
from bench.simulated import cell_metrics_by_group_by, position_bias_by_group_by, simulate_scores
from lalm_judge.analysis.engine import CELL_KEYS, CONFIG_KEYS

ROOT = Path(__file__).resolve().parents[2]


def lalm_judge(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    script = shutil.which("lalm-judge", path=str(Path(sys.executable).parent))
    assert script, "the lalm-judge console script is not installed in this environment"
    environment = None if env is None else {**os.environ, **env}
    return subprocess.run([script, *args], capture_output=True, text=True, cwd=ROOT, timeout=300, env=environment)


def test_help_lists_every_command():
    result = lalm_judge("--help")
    assert result.returncode == 0
    for command in ("score", "metrics", "anchors", "validate-config", "export", "import", "pin-revisions"):
        assert command in result.stdout


def test_unknown_command_is_an_error():
    result = lalm_judge("judge-everything")
    assert result.returncode == 2 and "unknown command 'judge-everything'" in result.stderr


def test_export_and_import_report_what_is_missing(tmp_path):
    result = lalm_judge("export", "--format", "hf", "--out", str(tmp_path / "ds"), "--results", str(tmp_path / "none"))
    assert result.returncode == 2 and "no usable sample in the manifests of" in result.stderr
    result = lalm_judge("import", "--format", "hf", str(tmp_path), "--out", str(tmp_path / "corpus"))
    assert result.returncode == 2 and "holds no parquet files" in result.stderr
    assert not (tmp_path / "ds").exists() and not (tmp_path / "corpus").exists()


def test_validate_config_reports_the_bad_key(tmp_path):
    assert lalm_judge("validate-config", "--config-only", "configs/paper.yaml").returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "config.yaml").read_text().replace("severities: [1, 3, 5]", "severities: [1, 9]"))
    result = lalm_judge("validate-config", str(bad))
    assert result.returncode == 2 and "variants.severities.1" in result.stderr
    api_judge = "  api:\n    backend: openai\n    model: gpt-4o\n    options: {baseurl: 'http://127.0.0.1:8000/v1'}\n"
    bad.write_text((ROOT / "config.yaml").read_text().replace("judges:\n", "judges:\n" + api_judge, 1))
    result = lalm_judge("validate-config", str(bad))
    assert (
        result.returncode == 2
        and "judges.api.options: unknown key 'baseurl'; did you mean 'base_url'?" in result.stderr
    )


@pytest.mark.slow
def test_metrics_on_a_table_it_did_not_produce(tmp_path):
    """A score table written by other code (the simulator, scores in 0.1 steps as coarse judges give them), not by
    the judge stage: every metric matches the independent group-by reference of bench/simulated.py."""
    flat = (pl.col("judge") == "judge_b") & (pl.col("modality") == "audio")  # scores everything 0.8
    scores = simulate_scores(n_dialogues=12, seed=3).with_columns(
        score=pl.when(flat & pl.col("score").is_not_null()).then(0.8).otherwise(pl.col("score").round(1))
    )
    table = tmp_path / "external_scores.parquet"
    scores.write_parquet(table)
    options = ["--bootstrap", "50", "--folds", "3", "--min-pb-dialogues", "3", "--permutations", "30"]
    result = lalm_judge("metrics", str(table), "--out", str(tmp_path / "m"), *options)
    assert result.returncode == 0, result.stderr
    cells = pl.read_parquet(tmp_path / "m" / "cells.parquet")
    expected = cell_metrics_by_group_by(scores)
    joined = cells.join(expected, on=CELL_KEYS, suffix="_reference", nulls_equal=True)
    assert joined.height == cells.height == 8
    for column in ("sensitivity", "specificity", *(f"delta_{i}" for i in range(1, 6)), "mean_safe", "n_severities"):
        np.testing.assert_allclose(joined[column], joined[f"{column}_reference"], rtol=1e-12, err_msg=column)
    # Every severity mean of the flat judge is 0.8, whatever the order of its sums: all pairs tie.
    assert cells.filter(flat)["specificity"].to_list() == [0.5, 0.5]
    for column in ("sensitivity", "specificity", "delta_5", "mean_safe", "avg_abs_pb_sensitivity"):
        assert (cells[f"{column}_lo"] <= cells[f"{column}_hi"]).all(), column
    assert cells["avg_abs_pb_sensitivity_p"].is_between(0, 1).all()

    bias = pl.read_parquet(tmp_path / "m" / "position_bias.parquet")
    keys = [*CELL_KEYS, "metric", "n_turns", "position"]
    joined = bias.join(position_bias_by_group_by(scores), on=keys, suffix="_reference", nulls_equal=True)
    assert joined.height == bias.height
    np.testing.assert_allclose(joined["pb"].fill_null(np.nan), joined["pb_reference"].fill_null(np.nan), rtol=1e-12)
    assert joined["n_dialogues"].to_list() == joined["n_dialogues_reference"].to_list()

    pareto = pl.read_parquet(tmp_path / "m" / "pareto.parquet")
    assert pareto.height == 4 and pareto["on_front"].any() and pareto["cv_sensitivity"].is_not_null().all()
    selection = pl.read_parquet(tmp_path / "m" / "prompt_selection.parquet")
    assert selection.group_by(*CONFIG_KEYS, "metric").len()["len"].to_list() == [3] * 8


def test_metrics_rejects_rows_that_would_bias_it_naming_them(tmp_path):
    scores = simulate_scores(n_dialogues=4, seed=3)
    table = tmp_path / "scores.parquet"
    pl.concat([scores, scores.head(2)]).write_parquet(table)
    result = lalm_judge("metrics", str(table), "--out", str(tmp_path / "m"))
    assert result.returncode == 2
    assert "2 row(s) break the rule: exact duplicate rows" in result.stderr
    assert scores["variant_id"][0] in result.stderr
    assert not (tmp_path / "m").exists()


def test_score_one_dialogue_with_a_judge_whose_model_is_a_local_folder(tmp_path, qwen2audio_dir):
    """`lalm-judge score --config FILE --judge NAME --dialogue D --modality audio`; the model is a local folder
    holding a tiny random-weight Qwen2-Audio."""
    import numpy as np
    import yaml

    from lalm_judge.audio.waveform import write_wav
    from lalm_judge.core.dialogue import Dialogue, Turn

    clips = []
    for i, seconds in enumerate((1.0, 1.5)):
        clip = tmp_path / "turns" / f"t{i}.wav"
        write_wav(clip, (0.1 * np.sin(np.arange(int(16000 * seconds)) / (5 + i))).astype(np.float32), 16000)
        clips.append(clip)
    turns = [
        Turn(0, "A", "Hi, how was the trip?", "curious", 0.0, 1.0, str(clips[0])),
        Turn(1, "B", "Long, but worth it.", "happy", 1.4, 2.9, str(clips[1])),
    ]
    dialogue = tmp_path / "dialogue.json"
    Dialogue("trip", turns, "jsonl", "handmade", 16000).save(dialogue)
    config = tmp_path / "judges.yaml"
    entry = {
        "backend": "transformers",
        "model": str(qwen2audio_dir),
        "modalities": ["audio", "audio_text"],
        "max_audio_s": 30,
        "generation": {"max_new_tokens": 4},
        "options": {"device": "cpu", "num_threads": 1},
    }
    config.write_text(yaml.safe_dump({"judges": {"tiny": entry}}))
    result = lalm_judge(
        "score", "--config", str(config), "--judge", "tiny", "--dialogue", str(dialogue), "--modality", "audio"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "judge=tiny modality=audio prompt=basic-v1 long_audio=none" in result.stdout
    assert "status=" in result.stdout


class HubStandIn:
    """Stands in for the Hugging Face Hub's model API on 127.0.0.1 (`GET /api/models/<owner>/<name>/revision/<rev>`,
    answered with the `id` and commit `sha` fields huggingface_hub's `ModelInfo` reads); the hub is unreachable here.
    The commit is a hash of the repository and revision, so each repository gets its own."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                hub.paths.append(self.path)
                repository, _, revision = self.path.split("?")[0].removeprefix("/api/models/").rpartition("/revision/")
                reply_json(self, 200, {"id": repository, "sha": hub.commit(repository, revision), "private": False})

        self.http, self.endpoint = start_stand_in(Handler)

    @staticmethod
    def commit(repository: str, revision: str) -> str:
        return hashlib.sha1(f"{repository}@{revision}".encode()).hexdigest()


def test_pin_revisions_writes_each_hub_judges_commit_and_keeps_the_file(tmp_path):
    import yaml

    hub = HubStandIn()
    config = tmp_path / "paper.yaml"
    shutil.copy(ROOT / "configs" / "paper.yaml", config)
    before = config.read_text()
    try:
        result = lalm_judge("pin-revisions", str(config), env={"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0"})
    finally:
        hub.http.shutdown()
    assert result.returncode == 0, result.stderr
    pinned, original = yaml.safe_load(config.read_text()), yaml.safe_load(before)
    for name, entry in original["judges"].items():
        if entry["backend"] == "openai":
            assert "revision" not in pinned["judges"][name]
        else:
            assert pinned["judges"][name].pop("revision") == HubStandIn.commit(entry["model"], "main"), name
    # The Whisper models (faster-whisper's repositories) and the XTTS-v2 voices (coqui-tts's) are pinned too.
    whisper = {"whisper_large_v3": "Systran/faster-whisper-large-v3", "whisper_base": "Systran/faster-whisper-base"}
    for name, repository in whisper.items():
        assert pinned["asr"]["models"][name].pop("revision") == HubStandIn.commit(repository, "main")
    for voice in pinned["tts"]["voices"].values():
        assert voice.pop("revision") == HubStandIn.commit("tts-hub/XTTS-v2", "main")
    assert pinned == original, "only revisions were added"
    assert before.splitlines()[0] in config.read_text(), "comments are kept"
    # One question per repository and branch: 6 judges, 2 Whisper models, XTTS-v2 once for both voices.
    assert len([path for path in hub.paths if path.startswith("/api/models/")]) == 9, "\n".join(hub.paths)
    assert "no checksum is recorded" in result.stdout, "the corpus is not downloaded here"
    validated = lalm_judge("validate-config", "--config-only", str(config), env={"COQUI_TOS_AGREED": "1"})
    assert validated.returncode == 0 and "revision is 'main'" not in validated.stdout
