"""What `lalm-judge judges` says about a judge (`lalm_judge.workflow.judge_facts`), and that docs/judges.md has a row
for every known family naming the tests that prove it."""

from __future__ import annotations

import re
from pathlib import Path

from lalm_judge.cli import main as cli
from lalm_judge.judging.backends.capabilities import FAMILIES
from lalm_judge.workflow.config import load_config, validate_judge_entry
from lalm_judge.workflow.context_length import AUDIO_MARKER_TOKENS, audio_tokens
from lalm_judge.workflow.judge_facts import judge_facts

ROOT = Path(__file__).resolve().parents[2]
JUDGES_PAGE = (ROOT / "docs" / "judges.md").read_text()


def test_every_family_has_a_row_naming_the_tests_that_prove_it_and_they_exist():
    rows = [line for line in JUDGES_PAGE.splitlines() if line.startswith("| ")]
    for family in FAMILIES:
        row = next((r for r in rows if r.removeprefix("| ").removeprefix("**").startswith(family.name)), None)
        assert row is not None, f"docs/judges.md has no row for {family.name}"
        for test in family.verified_by:
            assert (ROOT / test).is_file(), test
            assert f"`{test}`" in row, f"{family.name}: {test} not named in its row"
    for named in re.findall(r"`(tests/[\w/]+\.py)", JUDGES_PAGE):
        assert (ROOT / named).is_file(), named


def test_a_known_familys_facts_and_what_the_entry_adds(capsys):
    assert cli(["judges", str(ROOT / "configs" / "judges-2026.yaml"), "--judge", "qwen3_omni_30b"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("qwen3_omni_30b: Qwen/Qwen3-Omni-30B-A3B-Instruct on vllm\n")
    for fact in (
        "family: Qwen3-Omni",
        "audio tokens: 13 audio tokens a second",
        "audio placeholder: <|audio_start|><|audio_pad|><|audio_end|>",
        "context: 65,536 tokens",
        "assumes: its thinker answers",
        "verified by: tests/engine/test_qwen3_omni.py",
        "this entry: modalities text, audio, audio_text; max_audio_s 300 (long_audio chunk); revision main",
    ):
        assert f"  {fact}" in out, fact


def test_the_documented_phi4mm_entry_gets_its_familys_facts():
    """Phi-4-multimodal's entry, commented in configs/judges-2026.yaml (the one its engine test runs)."""
    from bench.engine_agreement import shipped_entry

    entry = validate_judge_entry("phi4_multimodal", shipped_entry("configs/judges-2026.yaml", "phi4_multimodal"))
    lines = judge_facts("phi4_multimodal", entry).lines()
    for fact in (
        "family: Phi-4-multimodal",
        "audio tokens: 12.5 audio tokens a second",
        "context: 131,072 tokens",
        "verified by: tests/engine/test_phi4mm.py",
    ):
        assert f"  {fact}" in lines, fact
    assert any(line.startswith("  audio placeholder: <|audio_1|>, <|audio_2|>") for line in lines)


def test_granite_speech_says_how_its_audio_lora_is_applied(capsys):
    assert cli(["judges", str(ROOT / "configs" / "judges-2026.yaml"), "--judge", "granite_speech_8b"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("granite_speech_8b: ibm-granite/granite-speech-3.3-8b on vllm\n")
    for fact in (
        "family: Granite Speech 3.3",
        "audio tokens: 10 audio tokens a second",
        "audio placeholder: <|audio|> (one per audio item)",
        'capabilities it needs: system_role true, prompt_format "granite"',
        "assumes: its LoRA adapter applies to requests with audio only",
        "verified by: tests/engine/test_granite_speech.py",
    ):
        assert f"  {fact}" in out, fact


def test_an_api_judge_says_when_it_retires():
    config = load_config(ROOT / "configs" / "judges-2026.yaml")
    lines = judge_facts("gpt_audio_15", config["judges"]["gpt_audio_15"]).lines()
    assert "  family: GPT-Audio 1.5" in lines
    assert any(line.startswith("  retires: no shutdown announced") for line in lines)


def test_a_model_of_no_known_family_says_what_is_assumed():
    entry = validate_judge_entry(
        "local", {"backend": "vllm", "model": "models/my-audio-llm", "modalities": ["audio"], "max_audio_s": 20}
    )
    lines = judge_facts("local", entry).lines()
    assert lines[1] == "  family: none known; the entry is checked only against itself"
    assert lines[2] == (
        '  assumes: its capabilities hold (system_role true, prompt_format "chat", logprobs true); the model reads '
        "20 s of audio whole; options.max_model_len: auto counts 50 audio tokens a second assumed (Whisper's "
        "unpooled frame rate)"
    )


def test_the_auto_context_counts_each_familys_audio_tokens():
    assert audio_tokens("Qwen/Qwen3-Omni-30B-A3B-Instruct", 10.0) == 130 + AUDIO_MARKER_TOKENS
    # Phi-4-multimodal: 100 mel frames a second pooled by 8.
    assert audio_tokens("microsoft/Phi-4-multimodal-instruct", 10.0) == 125 + AUDIO_MARKER_TOKENS
    # Gemma 3n: 188 tokens per item, whatever its length.
    assert audio_tokens("google/gemma-3n-E4B-it", 2.0) == audio_tokens("google/gemma-3n-E4B-it", 30.0) == 188 + 8
