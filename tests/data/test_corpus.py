import json

import numpy as np
import pytest

from lalm_judge.audio.waveform import write_wav
from lalm_judge.core.dialogue import CorpusError, Dialogue
from lalm_judge.data.corpus import ingest, list_source_dialogues

VOICES = {"A": {"engine": "piper", "voice": "joe"}, "B": {"engine": "espeak", "voice": "en-us+f3"}}


def write_corpus(folder, records):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dialogues.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return {"format": "jsonl", "path": str(folder), "pause_s": 0.3}


def turn(speaker, text, audio=None):
    t = {"speaker": speaker, "text": text, "emotion": "happy"}
    return {**t, "audio": audio} if audio else t


def test_ingest_speaks_text_turns_with_the_speakers_voices(tmp_path):
    corpus = write_corpus(tmp_path / "c", [{"id": "d", "turns": [turn("A", "Good morning."), turn("B", "Hi there.")]}])
    dialogue = ingest(corpus, "d", tmp_path / "out/dialogue.json", tmp_path / "out/turns", 16000, VOICES)
    assert [t.boundary_method for t in dialogue.turns] == ["synthesized:piper", "synthesized:espeak"]
    assert dialogue.gaps_s() == pytest.approx([0.3])
    assert Dialogue.load(tmp_path / "out/dialogue.json") == dialogue


def test_ingest_reads_given_clips_and_skips_one_turn_dialogues(tmp_path, caplog):
    folder = tmp_path / "c"
    write_wav(folder / "clips/x.wav", np.full(8000, 0.1, dtype=np.float32), 8000)
    corpus = write_corpus(folder, [{"id": "solo", "turns": [turn("A", "Alone here.", "clips/x.wav")]}])
    dialogue = ingest(corpus, "solo", tmp_path / "o/dialogue.json", tmp_path / "o/turns", 16000, VOICES)
    assert dialogue.turns[0].end == pytest.approx(1.0)
    assert dialogue.status == "skipped" and "1 turn(s) < corpus.min_turns=2" in dialogue.skip_reason
    assert "dialogue solo skipped" in caplog.text


def test_subset_and_limit(tmp_path):
    records = [{"id": f"d{i}", "turns": [turn("A", "x"), turn("B", "y")]} for i in range(4)]
    corpus = write_corpus(tmp_path / "c", records)
    assert [d.dialogue_id for d in list_source_dialogues({**corpus, "max_dialogues": 2})] == ["d0", "d1"]
    assert [d.dialogue_id for d in list_source_dialogues({**corpus, "dialogues": ["d3", "d1"]})] == ["d3", "d1"]
    with pytest.raises(CorpusError, match="d9"):
        list_source_dialogues({**corpus, "dialogues": ["d9"]})


def test_corpus_emotions_outside_the_label_set_are_kept_with_a_warning(tmp_path, caplog):
    """Real corpora use labels beyond the 20 of the project's set (DeepDialogue: 'worried', 'nostalgic'): the
    dialogue is listed and ingested with its own labels, and the ingest log and dialogue.json say so."""
    turns = [{**turn("A", "I keep thinking about the exam."), "emotion": "worried"}, turn("B", "You will do fine.")]
    corpus = write_corpus(tmp_path / "c", [{"id": "d", "turns": turns}])
    assert [d.dialogue_id for d in list_source_dialogues(corpus)] == ["d"]
    dialogue = ingest(corpus, "d", tmp_path / "o/dialogue.json", tmp_path / "o/turns", 16000, VOICES)
    assert [t.emotion for t in dialogue.turns] == ["worried", "happy"]
    assert len(dialogue.warnings) == 1 and "turn 0" in dialogue.warnings[0] and "'worried'" in dialogue.warnings[0]
    assert "'worried' is not one of the 20" in caplog.text
    assert Dialogue.load(tmp_path / "o/dialogue.json").warnings == dialogue.warnings
