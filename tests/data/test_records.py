"""Corpus record checks at listing (lalm_judge.data.records, lalm_judge.audio.integrity) and the per-dialogue index
(lalm_judge.data.corpus.index_dialogue), for the project's jsonl format and both DeepDialogue layouts. The cases of
the bad-input corpus are in tests/reliability/test_bad_inputs.py; here, the pieces and the other layouts."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import soundfile as sf

from lalm_judge.audio.integrity import audio_file_problem
from lalm_judge.core.dialogue import CorpusError
from lalm_judge.core.files import file_sha256, read_json
from lalm_judge.data import corpus, deepdialogue, records
from tests.support.workflow import HUB_DIALOGUES, write_hub_corpus

SR = 16000


def write_jsonl(folder, records_):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dialogues.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records_))
    return {"format": "jsonl", "path": str(folder), "pause_s": 0.3}


def turn(speaker, text, **extra):
    return {"speaker": speaker, "text": text, **extra}


@pytest.mark.parametrize(
    ("subtype", "frames"), [("PCM_16", 3200), ("PCM_24", 1600), ("FLOAT", 8000)], ids=["pcm16", "pcm24", "float"]
)
def test_a_whole_wav_passes_and_a_cut_one_is_named_with_its_frame_counts(tmp_path, subtype, frames):
    path = tmp_path / "clip.wav"
    sf.write(path, np.zeros(frames, np.float32), SR, subtype=subtype)
    assert audio_file_problem(path) is None
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    problem = audio_file_problem(path)
    assert problem.startswith("holds ") and f"frames but its header promises {frames} (" in problem


def test_other_containers_are_checked_through_libsndfile(tmp_path):
    flac = tmp_path / "clip.flac"
    sf.write(flac, np.zeros(SR // 2, np.float32), SR)
    assert audio_file_problem(flac) is None
    sf.write(flac, np.zeros(SR // 20, np.float32), SR)
    assert audio_file_problem(flac) == "lasts 50.0 ms (800 frames at 16000 Hz); a turn's audio lasts at least 100 ms"
    (tmp_path / "notes.txt").write_text("not audio")
    assert audio_file_problem(tmp_path / "notes.txt").startswith("is not a readable audio file")


def test_a_key_given_twice_is_refused_also_inside_a_turn():
    assert records.loads_unique('{"a": {"b": 1}}', "x") == {"a": {"b": 1}}
    with pytest.raises(CorpusError, match=r"f:3: key 'b' appears twice in one JSON object"):
        records.loads_unique('{"a": [{"b": 1, "b": 2}]}', "f:3")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("tab\tand\nnew lines are fine", None),
        ("a zero\u200bwidth space is fine", None),
        ("escape \x1b[31m", "the control character U+001B at character 7"),
        ("next line \x85", "the control character U+0085 at character 10"),
        ("isolate \u2067x\u2069", "the bidirectional control U+2067 (RIGHT-TO-LEFT ISOLATE)"),
    ],
)
def test_text_hygiene_names_the_character_and_where_it_is(text, problem):
    if problem is None:
        assert records.check_text(text, "here", field="text") == text
    else:
        with pytest.raises(CorpusError, match="^here field 'text': the text holds " + re.escape(problem)):
            records.check_text(text, "here", field="text")


def test_speech_warnings_say_why_a_voice_cannot_speak_the_text():
    assert records.speech_warning("Plain words, 42.", "t") is None
    assert records.speech_warning("Café au lait, naïve.", "t") is None
    assert "no letters or digits" in records.speech_warning("!!! ... ???", "t")
    assert "2 emoji or symbol character(s) (\u2764\U0001f600)" in records.speech_warning("Hi \u2764\U0001f600", "t")


def test_the_listing_names_the_files_that_define_each_dialogue_and_digests_its_record(tmp_path):
    folder = tmp_path / "c"
    (folder / "clips").mkdir(parents=True)
    sf.write(folder / "clips/x.wav", np.zeros(SR), SR)
    given = [turn("A", "Hello.", audio="clips/x.wav"), turn("B", "Hi.", emotion="happy")]
    config = write_jsonl(folder, [{"id": "d", "turns": given}])
    [listed] = corpus.list_source_dialogues(config, check_audio=True)
    assert listed.files == (str(folder / "clips/x.wav"),) and listed.spoken_turns == (1,)
    assert listed.speakers == ("A", "B") and listed.location == f"{folder / 'dialogues.jsonl'}:1"
    # Key order and spacing of the line do not change the digest; a changed text does.
    (folder / "dialogues.jsonl").write_text(json.dumps({"turns": given, "id": "d"}, indent=None, separators=(",", ":")))
    assert corpus.list_source_dialogues(config)[0].record_digest == listed.record_digest
    write_jsonl(folder, [{"id": "d", "turns": [given[0], turn("B", "Hi!", emotion="happy")]}])
    assert corpus.list_source_dialogues(config)[0].record_digest != listed.record_digest


def test_the_index_holds_the_record_and_the_content_of_each_file(tmp_path):
    folder = tmp_path / "c"
    (folder / "clips").mkdir(parents=True)
    sf.write(folder / "clips/x.wav", np.zeros(SR), SR)
    config = write_jsonl(folder, [{"id": "d", "turns": [turn("A", "Hello.", audio="clips/x.wav"), turn("B", "Hi.")]}])
    [listed] = corpus.list_source_dialogues(config)
    out = tmp_path / "source.json"
    corpus.index_dialogue(config, "d", listed.files, listed.record_digest, out)
    source = read_json(out)
    assert source["record"]["turns"][1] == turn("B", "Hi.")
    assert source["files"] == {str(folder / "clips/x.wav"): file_sha256(folder / "clips/x.wav")}
    with pytest.raises(CorpusError, match=r"dialogue 'd' of .*dialogues\.jsonl changed \(or went\) after the run"):
        corpus.index_dialogue(config, "d", listed.files, "another digest", out)


def test_hub_dialogues_are_defined_by_their_json_and_segments(tmp_path):
    root = write_hub_corpus(tmp_path / "hub", HUB_DIALOGUES[:1])
    [listed] = deepdialogue.list_dialogues(root, layout=deepdialogue.HUB, check_audio=True)
    folder = root / "data/dialogues_llama3-8B"
    segments = sorted((folder / "art_22_4/segments").glob("*.wav"))
    assert listed.files == (str(folder / "art_22_4.json"), *map(str, segments))
    assert listed.speakers == ("LLM1", "LLM2", "LLM1", "LLM2")


def test_a_hub_segment_linked_from_outside_is_refused_unless_allowed(tmp_path):
    root = write_hub_corpus(tmp_path / "hub", HUB_DIALOGUES[:1])
    segment = next((root / "data/dialogues_llama3-8B/art_22_4/segments").glob("001_*.wav"))
    outside = tmp_path / "store" / segment.name
    outside.parent.mkdir()
    segment.rename(outside)
    os.symlink(outside, segment)
    with pytest.raises(
        CorpusError, match=r"dialogue llama3_8b_art_22_4: .*001_LLM1_neutral\.wav is .*/store/.*, outside"
    ):
        deepdialogue.list_dialogues(root, layout=deepdialogue.HUB)
    [listed] = deepdialogue.list_dialogues(root, layout=deepdialogue.HUB, allow_external_audio=True)
    assert str(segment) in listed.files


def test_a_hub_turn_with_a_nul_or_a_cut_segment_is_refused_at_listing(tmp_path):
    root = write_hub_corpus(tmp_path / "hub", HUB_DIALOGUES[:1])
    json_path = root / "data/dialogues_llama3-8B/art_22_4.json"
    record = json.loads(json_path.read_text())
    record["conversation"][2]["text"] = "Fine\x00"
    json_path.write_text(json.dumps(record))
    with pytest.raises(CorpusError, match=r"art_22_4\.json: turn 2 field 'text': the text holds a NUL character"):
        deepdialogue.list_dialogues(root, layout=deepdialogue.HUB)
    record["conversation"][2]["text"] = "Fine."
    json_path.write_text(json.dumps(record))
    segment = next((root / "data/dialogues_llama3-8B/art_22_4/segments").glob("002_*.wav"))
    segment.write_bytes(segment.read_bytes()[:-400])
    with pytest.raises(CorpusError, match=r"002_LLM2_happy\.wav holds 2200 frames but its header promises 2400"):
        deepdialogue.list_dialogues(root, layout=deepdialogue.HUB, check_audio=True)
