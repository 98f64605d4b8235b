"""Which models a config names by a branch rather than a commit (`lalm_judge.workflow.pins`), as the parse notes
and the report list them."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import yaml

from lalm_judge.report.html import judges_section
from lalm_judge.workflow.config import check_config, validate_config
from lalm_judge.workflow.pins import XTTS_REPOSITORY, hub_models, unpinned_models, whisper_model_repositories

ROOT = Path(__file__).resolve().parents[2]
PAPER = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_the_paper_config_names_its_judges_whisper_and_xtts_by_branch():
    unpinned = unpinned_models(PAPER)
    assert "asr.models.whisper_large_v3 (Systran/faster-whisper-large-v3@main)" in unpinned
    assert f"tts.voices.default_a ({XTTS_REPOSITORY}@main)" in unpinned
    assert "judges.llama31_8b (meta-llama/Llama-3.1-8B-Instruct@main)" in unpinned
    # API judges are not hub models; 6 local judges, 2 Whisper models, 2 XTTS voices.
    assert len(unpinned) == 10 and not any("gemini" in entry for entry in unpinned)


def test_the_whisper_names_are_faster_whispers_own():
    """Read from the installed faster-whisper's source without importing it: the same table its WhisperModel uses."""
    from faster_whisper.utils import _MODELS

    assert whisper_model_repositories() == _MODELS
    assert whisper_model_repositories()["large-v3"] == "Systran/faster-whisper-large-v3"


def test_a_commit_pins_a_model():
    config = yaml.safe_load(yaml.safe_dump(PAPER))
    config["asr"]["models"]["whisper_base"]["revision"] = COMMIT
    assert {m.key: m.pinned for m in hub_models(config)}["asr.models.whisper_base"]
    notes = check_config(validate_config(config))
    stages = [note for note in notes if "is on branch 'main'" in note]
    assert any(note.startswith("asr.models.whisper_large_v3 (Systran/faster-whisper-large-v3)") for note in stages)
    assert not any(note.startswith("asr.models.whisper_base") for note in stages)


def test_the_report_flags_unpinned_models():
    judges = pl.DataFrame(
        {"judge": ["a"], "backend": ["vllm"], "weak_reason": [None]}, schema_overrides={"weak_reason": pl.String}
    )
    shown = judges_section(judges, ["judges.a (org/model@main)"])
    assert "ran from a branch, not a pinned commit" in shown and "judges.a (org/model@main)" in shown
    assert "pinned commit" not in judges_section(judges)
