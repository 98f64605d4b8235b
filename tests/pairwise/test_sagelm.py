"""SageLM record import and export on project-made fixtures with the structure of its published test sets
(tests/fixtures/sagelm: a semantic file with blocks of four aspects per response pair, an acoustic file
with gender (TTS and QA), character, explicit and implicit emotion and mixed aspects, and a file in the
out-of-distribution layout with extra keys). The records' texts were written for the project."""

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import soundfile as sf

from lalm_judge.pairwise.items import ItemError, apply_missing_audio_policy, response_paths
from lalm_judge.pairwise.prompts import load_pairwise_prompt
from lalm_judge.pairwise.sagelm import export_sagelm, import_sagelm, parse_instruction, sagelm_instruction

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sagelm"
FILES = [FIXTURES / name for name in ("test_semantic.json", "test_acoustic.json", "test_truncation_layout.json")]
MISSING = {"Audio/stage2/Emotion/qa-750-3-audio2.wav"}


def records(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


@pytest.fixture
def audio_root(tmp_path):
    """Every response file of the fixtures (short tones whose length encodes their order), but one."""
    root = tmp_path / "data"
    paths = sorted({a for f in FILES for r in records(f) for a in r["audios"]} - MISSING)
    for index, relative in enumerate(paths):
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        sf.write(target, np.zeros(8000 * (index % 3 + 1), dtype=np.float32), 16000)
    return root


def test_import_makes_one_row_per_record_grouped_into_items(audio_root):
    items, summary = import_sagelm(FILES, audio_root)
    assert items.height == 8 + 6 + 1
    semantic = items.filter(pl.col("source_file").str.ends_with("test_semantic.json"))
    assert semantic["item_id"].n_unique() == 2
    assert (
        semantic.group_by("item_id").agg(pl.col("aspect").sort())["aspect"].to_list()
        == [["helpfulness", "honesty", "instruction_following", "truthfulness"]] * 2
    )
    acoustic = items.filter(pl.col("source_file").str.ends_with("test_acoustic.json"))
    assert acoustic["aspect"].to_list() == [
        "gender",
        "gender",
        "character",
        "emotion",
        "implicit_emotion",
        "gender_emotion",
    ]
    implicit = acoustic.filter(pl.col("aspect") == "implicit_emotion").row(0, named=True)
    assert implicit["aspect_text"] == "emotion instruction following"
    assert implicit["rationale"].count("\n") == 2  # a multi-paragraph rationale, verbatim
    poem = semantic.filter(pl.col("query").str.starts_with("Write a two-line poem")).row(0, named=True)
    assert poem["query"] == "Write a two-line poem about rain.\n\n"
    first = semantic.row(0, named=True)
    assert (first["label"], first["source_row"], first["audio_ok"]) == ("1", 0, True)
    assert first["response1_audio"] == "Audio/stage1/flan-1001-0.wav" and first["source_format"] == "sagelm"
    assert response_paths(first)[0] == str(audio_root / "Audio/stage1/flan-1001-0.wav")
    assert first["response1_duration_s"] in (0.5, 1.0, 1.5)
    ood = items.filter(pl.col("source_file").str.ends_with("layout.json")).row(0, named=True)
    assert (ood["label"], ood["rationale"]) == ("1", None)
    assert json.loads(ood["source_extra"]) == {"sum_len": 71.5, "trunc_len": 0.0, "bin_key": "60~80"}
    assert summary.n_rows == 15 and summary.n_items == 2 + 6 + 1


def test_missing_audio_is_reported_with_count_and_first_ids(audio_root):
    items, summary = import_sagelm(FILES, audio_root)
    mixed = items.filter(pl.col("aspect") == "gender_emotion")
    assert mixed["audio_ok"].to_list() == [False] and mixed["response2_duration_s"].to_list() == [None]
    assert summary.n_missing_audio_items == 1 and summary.n_missing_audio_rows == 1
    assert summary.first_missing_items == tuple(mixed["item_id"])
    assert summary.first_missing_files == (str(audio_root / "Audio/stage2/Emotion/qa-750-3-audio2.wav"),)
    kept, _ = apply_missing_audio_policy(items, "keep")
    assert kept.height == 15
    excluded, before = apply_missing_audio_policy(items, "exclude")
    assert excluded.height == 14 and before.n_missing_audio_rows == 1
    with pytest.raises(ItemError, match=r"1 of 9 items \(1 rows\) have missing or unreadable audio; first ids: "):
        apply_missing_audio_policy(items, "fail")


def test_round_trip_gives_every_record_back_unchanged(audio_root, tmp_path):
    items, _ = import_sagelm(FILES, audio_root)
    written = export_sagelm(items, tmp_path / "export")
    assert sorted(p.name for p in written) == sorted([*(f.name for f in FILES), "dataset_info.json"])
    for source in FILES:
        assert records(tmp_path / "export" / source.name) == records(source)
    info = json.loads((tmp_path / "export" / "dataset_info.json").read_text())
    assert info["test_semantic"] == {
        "file_name": "test_semantic.json",
        "columns": {"prompt": "instruction", "query": "input", "response": "output", "audios": "audios"},
    }


def test_export_of_edited_or_new_items_renders_the_instruction_afresh(audio_root, tmp_path):
    items, _ = import_sagelm(FILES[:1], audio_root)
    edited = items.with_columns(query=pl.lit("A new question?"), label=pl.lit("Tie"), rationale=pl.lit(None))
    export_sagelm(edited, tmp_path / "out", name="edited")
    record = records(tmp_path / "out" / "edited.json")[0]
    assert record["instruction"] == sagelm_instruction("helpfulness", "A new question?")
    assert record["output"] == "Tie" and record["input"] == ""
    assert record["instruction"].count("<audio>") == len(record["audios"]) == 2


def test_the_sagelm_prompt_asks_what_the_records_ask():
    """prompts/pairwise/sagelm.yaml with the records' <audio> placeholders in its slots is the record text."""
    prompt = load_pairwise_prompt("sagelm")
    for record in records(FILES[0]) + records(FILES[1]):
        parsed = parse_instruction(record["instruction"])
        aspect_text, query = parsed.aspect_text, parsed.query
        _, user = prompt.render(
            "text", aspect=aspect_text, aspect_text=aspect_text, query=query, transcripts=("<audio>",) * 2
        )
        assert user == record["instruction"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: {**r, "audios": r["audios"] + ["third.wav"]}, "record 1: 'audios' must be a list of the two"),
        (lambda r: {**r, "output": "Response 1\nbecause"}, "record 1: output starts with 'Response 1'"),
        (lambda r: {**r, "instruction": "Which is better?"}, "record 1: the instruction is not SageLM's"),
        (lambda r: {**r, "input": 3}, "record 1: 'input' must be a string"),
    ],
)
def test_bad_records_are_rejected_naming_file_and_row(tmp_path, change, message):
    source = records(FILES[0])
    source[1] = change(source[1])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(source))
    with pytest.raises(ItemError, match=message) as error:
        import_sagelm([path], tmp_path)
    assert str(path) in str(error.value)


def test_duplicate_aspects_of_an_item_are_rejected(tmp_path):
    source = records(FILES[0])
    path = tmp_path / "dup.json"
    path.write_text(json.dumps([source[0], source[0]]))
    with pytest.raises(ItemError, match="aspect 'helpfulness' twice"):
        import_sagelm([path], tmp_path)


def test_acoustic_rows_carry_style_and_the_task_format_of_sagelm_s_evaluation_script(audio_root):
    """SageLM's eval_stage2_acoustic_with_args.py: implicit emotion by its folder; otherwise equal response ids in
    `<source>-<instruction>-<response>-audioN.wav` are explicit TTS, different ones explicit dialogue."""
    items, _ = import_sagelm(FILES[1:2], audio_root)
    assert items.select("aspect", "style", "task_format").rows() == [
        ("gender", "gender", "explicit_tts"),
        ("gender", "gender", "explicit_dialogue"),
        ("character", "character", "explicit_dialogue"),
        ("emotion", "emotion", "explicit_tts"),
        ("implicit_emotion", "emotion", "implicit"),
        ("gender_emotion", "mixed", "explicit_dialogue"),
    ]
    semantic, _ = import_sagelm(FILES[:1], audio_root)
    assert semantic["style"].null_count() == semantic["task_format"].null_count() == semantic.height


def test_the_readme_layout_is_read_and_exported_as_it_was(audio_root, tmp_path):
    """SageLM's README writes its template with a blank line before '### Instruction:'; its records have none."""
    source = records(FILES[0])[:4]
    for record in source:
        record["instruction"] = record["instruction"].replace("1, 2 or Tie.\n###", "1, 2 or Tie.\n\n###", 1)
    path = tmp_path / "readme_layout.json"
    path.write_text(json.dumps(source))
    items, _ = import_sagelm([path], audio_root)
    assert items["query"].to_list() == import_sagelm(FILES[:1], audio_root)[0]["query"].to_list()[:4]
    export_sagelm(items, tmp_path / "out")
    assert records(tmp_path / "out" / "readme_layout.json") == source


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda i: i.replace("### Instruction:", "## Instruction:"), r"line 2 of the instruction differs .*'### Instr"),
        (lambda i: i.replace("### Response 2:", "### Response B:"), r"line \d+ .*'### Response 2:', found '###"),
        (lambda i: i.replace("Below are two", "Here are two"), r"line 1 of the instruction differs .*\*\*<aspect>\*\*"),
        (lambda i: i.replace("**helpfulness**", "**creativity**"), r"aspect 'creativity', which is not one of SageLM"),
        (lambda i: i.split("### Instruction:\n")[0] + "### Instruction:\n \n\n" + i.split("\n\n", 1)[1], "is empty"),
    ],
)
def test_an_instruction_that_is_not_sagelm_s_names_the_line_that_differs(tmp_path, change, message):
    source = records(FILES[0])
    source[0]["instruction"] = change(source[0]["instruction"])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(source))
    with pytest.raises(ItemError, match=message) as error:
        import_sagelm([path], tmp_path)
    assert f"{path} record 0" in str(error.value)


@pytest.mark.parametrize("outside", ["../../etc/passwd", "/etc/passwd", "Audio/../../secret.wav"])
def test_audio_paths_stay_inside_the_audio_root(tmp_path, outside):
    source = records(FILES[0])
    source[2]["audios"][1] = outside
    path = tmp_path / "escape.json"
    path.write_text(json.dumps(source))
    with pytest.raises(ItemError, match=rf"{path} record 2: audio path '{outside}' leaves the audio root"):
        import_sagelm([path], tmp_path)


def test_a_symbolic_link_out_of_the_audio_root_is_refused(audio_root, tmp_path):
    """`Audio/link/secret.wav` with `link` pointing outside the audio root reads a file the root does not hold; the
    record is refused naming it. A link that stays inside the root is followed."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    sf.write(outside / "secret.wav", np.zeros(8000, dtype=np.float32), 16000)
    (audio_root / "Audio" / "link").symlink_to(outside, target_is_directory=True)
    (audio_root / "Audio" / "inside").symlink_to(audio_root / "Audio" / "stage1", target_is_directory=True)
    first, second = records(FILES[0])[:2]
    inside = {**first, "audios": [a.replace("Audio/stage1/", "Audio/inside/") for a in first["audios"]]}
    linked = {**second, "audios": ["Audio/link/secret.wav", second["audios"][1]]}
    path = tmp_path / "linked.json"
    path.write_text(json.dumps([inside, linked]))
    with pytest.raises(ItemError, match=r"linked\.json record 1: audio path 'Audio/link/secret\.wav' is .*elsewhere"):
        import_sagelm([path], audio_root)
    path.write_text(json.dumps([inside]))
    items, _ = import_sagelm([path], audio_root)
    assert items["audio_ok"].all() and items["response1_audio"].item().startswith("Audio/inside/")
