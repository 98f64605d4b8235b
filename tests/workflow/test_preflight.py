"""The checks a run makes before its first job (lalm_judge.workflow.preflight), piece by piece; the bad-input
corpus runs through all of them in tests/reliability/test_bad_inputs.py."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from lalm_judge.cli import validate as validate_cli
from lalm_judge.judging import prompts as judging_prompts
from lalm_judge.judging.prompts import PROMPTS_DIR, SAFETY_PROMPTS
from lalm_judge.pairwise import prompts as pairwise_prompts
from lalm_judge.pairwise.prompts import PAIRWISE_PROMPTS
from lalm_judge.workflow.config import ConfigError, load_config
from lalm_judge.workflow.preflight import check_value_types, preflight, summarized
from tests.support import bad_inputs
from tests.support.plan_runs import dry_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A valid run of the bad-input corpus's base in tmp_path; returns a function that checks it after an edit."""
    monkeypatch.chdir(tmp_path)

    def check(edit=lambda config: None, environ=None):
        configfile = bad_inputs.prepare(tmp_path, bad_inputs.BadInput(None, config=edit))
        return preflight(load_config(configfile), environ=environ or {})

    return check


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c["evaluation"].update(shards=2.0), r"evaluation\.shards: 2\.0 is a decimal number.*write 2"),
        (lambda c: c["variants"].update(turns=[1.0]), r"variants\.turns\.0: 1\.0 is a decimal number"),
        (lambda c: c["metrics"].update(bootstrap=True), r"metrics\.bootstrap: True is not of type 'integer'"),
        (lambda c: c["variants"].update(severities=[2.5]), r"variants\.severities\.0: 2\.5 is not an integer"),
    ],
    ids=["shards", "turns_one_of", "boolean", "fraction"],
)
def test_an_integer_key_takes_integers_only(edit, message):
    config = bad_inputs.base_config()
    edit(config)
    with pytest.raises(ConfigError, match=message):
        check_value_types(config)


def test_a_valid_run_passes_with_its_plan(run):
    checked = run()
    assert checked.plan.dialogue_ids == ["demo_hiking", "demo_travel", "single_turn"]
    assert checked.warnings == [] and checked.pairwise_plan is None


def test_default_voices_speak_every_speaker(run):
    def defaults_only(config):
        config["tts"]["voices"] = {"default_a": {"engine": "espeak"}, "default_b": {"engine": "espeak"}}

    assert run(defaults_only).plan is not None


def test_an_unset_key_variable_is_a_note_naming_it(run):
    def api_judge(config):
        bad_inputs.CONFIG_CASES["timeout_zero"].config(config)
        config["judges"]["api"]["options"] = {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "MY_KEY"}

    notes = run(api_judge).notes
    assert any(
        n.startswith("judges.api.options.api_key_env: the environment variable MY_KEY is not set") for n in notes
    )
    assert not any("MY_KEY" in n for n in run(api_judge, environ={"MY_KEY": "x"}).notes)


def test_many_warnings_are_summarized():
    assert summarized(["a", "b"], limit=2) == ["a", "b"]
    assert summarized(list("abcd"), limit=2) == [
        "a",
        "b",
        "... and 2 more like these (each dialogue's dialogue.json lists its own)",
    ]


@pytest.fixture
def broken_prompts(tmp_path, monkeypatch):
    """A copy of the shipped prompts whose safety `basic.yaml` never uses {transcript} and whose pairwise
    `sagelm.yaml` never uses {query}; the loaders read this copy (the run reads the checkout's prompts/)."""
    prompts = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR, prompts)
    basic = prompts / "basic.yaml"
    basic.write_text(basic.read_text().replace("  {transcript}\n", ""))
    sagelm = prompts / "pairwise" / "sagelm.yaml"
    sagelm.write_text(sagelm.read_text().replace("{query}", "the task"))
    monkeypatch.setattr(judging_prompts, "SAFETY_PROMPTS", dataclasses.replace(SAFETY_PROMPTS, directory=prompts))
    monkeypatch.setattr(
        pairwise_prompts, "PAIRWISE_PROMPTS", dataclasses.replace(PAIRWISE_PROMPTS, directory=prompts / "pairwise")
    )
    return basic, sagelm


def test_a_prompt_without_a_placeholder_is_refused_by_validate_config_and_the_parse_alike(
    broken_prompts, tmp_path, capsys
):
    """A judge's prompt file without {transcript} is refused before the first job, not when the judge job starts
    after ingest, TTS and ASR: `validate-config` and the workflow's parse give the same message."""
    basic, _ = broken_prompts
    workdir = tmp_path / "run"
    configfile = bad_inputs.prepare(workdir, bad_inputs.BadInput(None))
    expected = (
        f"judges.minilm.schedule.prompts: prompt file {basic}: the templates (system, user) never use {{transcript}}; "
        "text and audio_text cells are shown the dialogue there"
    )
    assert validate_cli.main([str(configfile), "--directory", str(workdir), "--config-only"]) == 2
    assert expected in capsys.readouterr().err
    parsed = dry_run(workdir)
    assert parsed["returncode"] == 1 and expected in parsed["error"]
    assert not (workdir / "results").exists()


def test_a_pairwise_prompt_without_a_placeholder_is_refused_when_the_config_is_checked(broken_prompts):
    _, sagelm = broken_prompts
    config = load_config(ROOT / "tests" / "config" / "pairwise.yaml")
    with pytest.raises(
        ConfigError, match=rf"pairwise\.prompts: pairwise prompt file {sagelm}: .* never use \{{query\}}"
    ):
        preflight(config, config_only=True)
