"""The pairwise prompts of prompts/pairwise/ and their validation."""

import pytest
import yaml

from lalm_judge.judging.backends.base import AUDIO_SLOT
from lalm_judge.pairwise.items import ASPECTS
from lalm_judge.pairwise.prompts import PAIRWISE_PROMPTS_DIR, PairwisePromptError, load_pairwise_prompt


@pytest.mark.parametrize("name", ["sagelm", "explained"])
def test_shipped_prompts_render_every_aspect_in_every_modality(name):
    prompt = load_pairwise_prompt(name)
    assert prompt.version.startswith("pairwise-")
    for aspect, text in ASPECTS.items():
        _, audio = prompt.render("audio", aspect=aspect, aspect_text=text, query="Q?")
        assert audio.count(AUDIO_SLOT) == 2 and text in audio and "Q?" in audio
        _, cascade = prompt.render(
            "text", aspect=aspect, aspect_text=text, query="Q?", transcripts=("FIRST_T", "SECOND_T")
        )
        assert AUDIO_SLOT not in cascade and cascade.index("FIRST_T") < cascade.index("SECOND_T")
        _, both = prompt.render("audio_text", aspect=aspect, aspect_text=text, query="Q?", transcripts=("a", "b"))
        assert both.count(AUDIO_SLOT) == 2


def test_prompt_names_resolve_and_text_needs_transcripts():
    assert load_pairwise_prompt(PAIRWISE_PROMPTS_DIR / "sagelm.yaml").name == "sagelm"
    with pytest.raises(PairwisePromptError, match="known prompts: explained, sagelm"):
        load_pairwise_prompt("rubric")
    with pytest.raises(ValueError, match="needs the transcripts of both responses"):
        load_pairwise_prompt("sagelm").render("text", aspect="honesty", aspect_text="honesty", query="Q?")


def test_an_aspect_without_a_definition_is_an_error():
    with pytest.raises(PairwisePromptError, match="defines no aspect 'politeness'"):
        load_pairwise_prompt("explained").render("audio", aspect="politeness", aspect_text="politeness", query="Q")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda raw: raw.pop("version"), "missing key"),
        (lambda raw: raw.update(user="Which is better, 1, 2 or Tie? {response1} {response2}"), "never use {query}"),
        (lambda raw: raw.update(user=raw["user"].replace("Tie", "neither")), "verdict of 1, 2 or Tie"),
        (lambda raw: raw["responses"].pop("audio_text"), "exactly the modalities"),
        (lambda raw: raw["responses"].update(audio="{transcript}"), "uses unknown fields \\[.transcript.\\]"),
        (lambda raw: raw.update(user=raw["user"] + "{rubric}"), "unknown fields \\['rubric'\\]"),
        (lambda raw: raw.update(aspects={"honesty": "x"}), "exactly when a template uses"),
    ],
)
def test_bad_prompt_files_name_the_key(tmp_path, change, message):
    raw = yaml.safe_load((PAIRWISE_PROMPTS_DIR / "sagelm.yaml").read_text())
    change(raw)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(PairwisePromptError, match=message):
        load_pairwise_prompt(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda raw: raw.update(user=raw["user"].replace("{response2}", "")), r"never use \{response2\}"),
        (lambda raw: raw.update(user=raw["user"] + "{response1}"), r"'user' must use \{response1\} exactly once"),
        (lambda raw: raw.update(system="{response1}"), r"'user' must use \{response1\} exactly once"),
        (
            lambda raw: raw.update(user=raw["user"].replace("**{aspect}**", "the aspect")),
            r"never use \{aspect\} or \{aspect_description\}",
        ),
        (lambda raw: raw["responses"].update(audio="(audio)"), r"'responses.audio' .*; it lacks \['audio'\]"),
        (lambda raw: raw["responses"].update(audio_text="{audio}"), r"it lacks \['transcript'\]"),
        (lambda raw: raw["responses"].update(audio="{audio} {audio}"), r"'responses.audio' must use .* exactly once"),
    ],
)
def test_placeholders_are_checked_at_load_naming_file_and_name(tmp_path, change, message):
    raw = yaml.safe_load((PAIRWISE_PROMPTS_DIR / "sagelm.yaml").read_text())
    change(raw)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(PairwisePromptError, match=rf"pairwise prompt file {path}: .*{message}"):
        load_pairwise_prompt(path)
