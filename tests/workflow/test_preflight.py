"""The checks a run makes before its first job (lalm_judge.workflow.preflight), piece by piece; the bad-input
corpus runs through all of them in tests/reliability/test_bad_inputs.py."""

from __future__ import annotations

import pytest

from lalm_judge.workflow.config import ConfigError, load_config
from lalm_judge.workflow.preflight import check_value_types, preflight, summarized
from tests.support import bad_inputs


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
