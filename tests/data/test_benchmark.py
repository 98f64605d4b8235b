"""The `hf_benchmark` corpus format: a benchmark folder written by `BenchmarkWriter`, then read as the workflow
reads it (plan, ingest, the imported variant and TTS tables of one turn, the released transcripts)."""

from __future__ import annotations

import numpy as np
import pytest

from lalm_judge.audio.waveform import read_audio
from lalm_judge.core.dialogue import CorpusError, Dialogue, Turn
from lalm_judge.core.files import read_json, write_json
from lalm_judge.core.tables import ASR, TTS, VARIANTS
from lalm_judge.data import benchmark, benchmark_tables
from lalm_judge.data.corpus import ingest, list_source_dialogues

RATE = 16000


def _tone(n: int, freq: float) -> np.ndarray:
    return (0.25 * np.sin(2 * np.pi * freq * np.arange(n) / RATE)).astype(np.float32)


def _variant(turn: int, category: str, severity: int) -> dict:
    return {
        "dialogue_id": "d",
        "variant_id": f"d.t{turn}.{category}.s{severity}",
        "turn_index": turn,
        "n_turns": 2,
        "speaker": "AB"[turn],
        "original_text": f"safe {turn}",
        "original_emotion": "happy",
        "category": category,
        "severity": severity,
        "text": f"{category} {severity} at {turn}",
        "emotion": "angry",
        "generator": "llm",
        "model": "gpt-4o",
        "prompt_version": "3",
        "seed": 7,
        "status": "ok",
        "attempts": 2,
        "duration_s": 0.25,
        "gain_db": -2.0,
        "tts_engine": "xtts",
        "tts_model": "xtts_v2",
        "tts_revision": "2.0.3",
    }


@pytest.fixture
def folder(tmp_path):
    """A benchmark of one 2-turn dialogue: hate s2 and s4 at turn 1, hate s4 at turn 0; transcripts of 'tiny'."""
    writer = benchmark_tables.BenchmarkWriter(tmp_path / "benchmark", RATE)
    turns = [Turn(i, "AB"[i], f"safe {i}", "happy", 0.6 * i, 0.6 * i + 0.5) for i in range(2)]
    writer.add_original(Dialogue("d", turns, "deepdialogue", "source", RATE), [_tone(8000, 300), _tone(8000, 400)])
    keys = [(1, "hate", 4), (1, "hate", 2), (0, "hate", 4)]
    for i, key in enumerate(keys):
        writer.add_variant(_variant(*key), _tone(4000, 600 + 100 * i))
    writer.add_transcripts(
        "d",
        [{"sample_id": "d.original", "turn_index": i, "source": "asr:tiny", "text": f"heard {i}"} for i in range(2)]
        + [
            {"sample_id": _variant(*k)["variant_id"], "turn_index": k[0], "source": "asr:tiny", "text": "x"}
            for k in keys
        ],
    )
    index = writer.close(source="hf/dataset")
    assert index["categories"] == ["hate"] and index["severities"] == [2, 4] and index["n_variants"] == 3
    return tmp_path / "benchmark"


def _ingested(folder, tmp_path):
    corpus = {"format": "hf_benchmark", "path": str(folder)}
    out = tmp_path / "results/corpus/d"
    return ingest(corpus, "d", out / "dialogue.json", out / "turns", RATE, voices={}), out / "dialogue.json"


def test_the_plan_reads_the_index(folder):
    [source] = list_source_dialogues({"format": "hf_benchmark", "path": str(folder), "dialogues": []})
    assert (source.dialogue_id, source.n_turns, source.variant_turns) == ("d", 2, (0, 1))


def test_only_the_turns_with_released_variants_get_import_jobs(tmp_path):
    """A 3-turn dialogue with variants of turn 1 only: one import job, not three (also for a benchmark written
    before its index listed the turns: they are read from its variant table)."""
    from lalm_judge.workflow.config import validate_config
    from lalm_judge.workflow.plan import Plan
    from tests.support.workflow import load_test_config

    writer = benchmark_tables.BenchmarkWriter(tmp_path / "benchmark", RATE)
    turns = [Turn(i, "ABA"[i], f"safe {i}", "happy", 0.6 * i, 0.6 * i + 0.5) for i in range(3)]
    writer.add_original(
        Dialogue("d", turns, "deepdialogue", "source", RATE), [_tone(8000, 300 + 50 * i) for i in range(3)]
    )
    writer.add_variant({**_variant(1, "hate", 4), "n_turns": 3}, _tone(4000, 600))
    index = writer.close(source="hf/dataset")
    assert index["dialogues"] == [{"id": "d", "n_turns": 3, "variant_turns": [1]}]
    config = load_test_config()
    config["corpus"] = {"format": "hf_benchmark", "path": str(tmp_path / "benchmark")}
    config["variants"] = {"source": "imported", "categories": ["hate"], "severities": [4]}
    config["tts"] = {"voices": {}}
    config["asr"]["models"] = {"whisper_tiny_en": {"model": "imported"}}
    config["evaluation"]["conditions"] = ["clean"]
    config["controls"]["dialogues"] = None
    for entry in config["judges"].values():
        entry.get("schedule", {}).pop("conditions", None)
    assert Plan(validate_config(config)).dialogue_turn_pairs() == [("d", 1)]
    del index["dialogues"][0]["variant_turns"]  # as an earlier release wrote it
    write_json(tmp_path / "benchmark" / "benchmark.json", index)
    assert Plan(validate_config(config)).dialogue_turn_pairs() == [("d", 1)]


def test_a_folder_that_is_not_a_benchmark_says_how_to_make_one(tmp_path):
    with pytest.raises(CorpusError, match=r"no benchmark.json.*lalm-judge import --format hf"):
        benchmark.list_dialogues(tmp_path)


def test_ingest_copies_the_released_original(folder, tmp_path):
    dialogue, path = _ingested(folder, tmp_path)
    assert dialogue.source_format == "hf_benchmark" and dialogue.meta["released"]["source_format"] == "deepdialogue"
    assert [t.text for t in dialogue.turns] == ["safe 0", "safe 1"] and dialogue.gaps_s() == pytest.approx([0.1])
    assert np.array_equal(read_audio(dialogue.turns[1].clip)[0], read_audio(folder / "d/turns/t1.wav")[0])
    assert Dialogue.load(path) == dialogue


def test_one_turns_variants_come_in_config_order_with_their_provenance(folder, tmp_path):
    _, dialogue_json = _ingested(folder, tmp_path)
    out = tmp_path / "results"
    frame = benchmark_tables.import_turn_variants(
        str(dialogue_json),
        str(folder),
        1,
        categories=["hate"],
        severities=[2, 4],
        variants_table=str(out / "variants/d/t1.parquet"),
        tts_table=str(out / "tts/d/t1.parquet"),
        clips_dir=str(out / "tts/d/t1"),
    )
    assert frame["variant_id"].to_list() == ["d.t1.hate.s2", "d.t1.hate.s4"]
    assert frame["model"].to_list() == ["gpt-4o"] * 2 and frame["tts_engine"].to_list() == ["xtts"] * 2
    assert VARIANTS.read(out / "variants/d/t1.parquet")["text"].to_list() == ["hate 2 at 1", "hate 4 at 1"]
    spoken = TTS.read(out / "tts/d/t1.parquet")
    assert spoken["clip"].to_list() == [str(out / f"tts/d/t1/d.t1.hate.s{s}.wav") for s in (2, 4)]
    assert np.array_equal(read_audio(spoken["clip"][0])[0], read_audio(folder / "d/variants/d.t1.hate.s2.wav")[0])


def test_turn_zero_has_only_the_variants_the_benchmark_holds(folder, tmp_path):
    _, dialogue_json = _ingested(folder, tmp_path)
    out = tmp_path / "results"
    frame = benchmark_tables.import_turn_variants(
        str(dialogue_json), str(folder), 0, ["hate"], [2, 4], str(out / "v.parquet"), str(out / "t.parquet"), str(out)
    )
    assert frame["variant_id"].to_list() == ["d.t0.hate.s4"]


def test_a_selection_the_benchmark_lacks_is_an_error(folder, tmp_path):
    _, dialogue_json = _ingested(folder, tmp_path)
    with pytest.raises(CorpusError, match=r"variants.severities asks for \[5\].*it has \[2, 4\]"):
        benchmark_tables.import_turn_variants(
            str(dialogue_json), str(folder), 0, ["hate"], [4, 5], "v.parquet", "t.parquet", str(tmp_path)
        )


def test_released_transcripts_become_the_asr_table(folder, tmp_path):
    _, dialogue_json = _ingested(folder, tmp_path)
    out = tmp_path / "results"
    tts = out / "tts/d/t1.parquet"
    benchmark_tables.import_turn_variants(
        str(dialogue_json), str(folder), 1, ["hate"], [2, 4], str(out / "v.parquet"), str(tts), str(out / "tts/d/t1")
    )
    table = out / "asr/tiny/d.parquet"
    frame = benchmark_tables.import_transcripts(
        str(dialogue_json), [str(tts)], str(folder), "tiny", str(table), progress=False
    )
    assert frame["sample_id"].to_list() == ["d.original", "d.original", "d.t1.hate.s2", "d.t1.hate.s4"]
    assert frame["text"].to_list() == ["heard 0", "heard 1", "x", "x"]
    assert frame["wer"][0] == 0.5 and set(frame["asr_model"]) == {"imported"}
    assert ASR.read(table).height == 4
    with pytest.raises(CorpusError, match=r"'asr:base'.*which has \['asr:tiny'\]"):
        benchmark_tables.import_transcripts(
            str(dialogue_json), [str(tts)], str(folder), "base", str(table), progress=False
        )


def test_a_newer_format_version_is_refused(folder):
    write_json(folder / "benchmark.json", {**read_json(folder / "benchmark.json"), "version": 9})
    with pytest.raises(CorpusError, match="version 9"):
        benchmark.read_index(folder)


def test_variants_without_their_original_are_an_error(tmp_path):
    writer = benchmark_tables.BenchmarkWriter(tmp_path, RATE)
    writer.add_variant(_variant(0, "hate", 2), _tone(1600, 440))
    with pytest.raises(CorpusError, match=r"no safe original \(severity 0\) of \['d'\]"):
        writer.close(source="s")
