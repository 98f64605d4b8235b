"""The benchmark as a Hugging Face dataset: export from a run's results folder, load with `datasets`, import back.

The results folder is built here from short tones by the real stage writers (dialogue.json, TTS tables,
ASR table, `build_manifest`), as the workflow lays it out. `datasets` decodes audio only through torchcodec,
which the CPU environment does not have, so its audio is read as bytes (`Audio(decode=False)`) and decoded
with soundfile, as the dataset card tells users to.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import datasets
import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import soundfile as sf
import yaml

from lalm_judge.audio.waveform import read_audio, write_wav
from lalm_judge.core.dialogue import CorpusError, Dialogue, Turn
from lalm_judge.core.files import write_parquet
from lalm_judge.core.tables import ASR, TTS
from lalm_judge.core.taxonomy import original_id
from lalm_judge.data.benchmark import TRANSCRIPTS, read_index, variants_path
from lalm_judge.export.features import benchmark_features, card_feature
from lalm_judge.export.hf import ShardSettings, export_hf, import_hf
from lalm_judge.export.rows import ExportError
from lalm_judge.manifest.build import build_manifest
from lalm_judge.manifest.samples import Manifest, assemble_waveform
from lalm_judge.workflow.config import load_config

RATE = 16000
SEVERITIES = (1, 5)


def _tone(seconds: float, freq: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _write_dialogue(workdir, dialogue_id: str, texts: list[str], refused_id: str | None = None) -> None:
    """One dialogue of a run: its ingest output, TTS tables (the variant `refused_id` was refused by the generator),
    ASR table and manifest."""
    corpus = f"results/corpus/{dialogue_id}"
    turns, clock = [], 0.0
    for i, text in enumerate(texts):
        clip = f"{corpus}/turns/t{i}.wav"
        audio = _tone(0.5 + 0.1 * i, 220 + 40 * i)
        write_wav(workdir / clip, audio, RATE)
        end = clock + len(audio) / RATE
        turns.append(Turn(i, "AB"[i % 2], text, "happy", clock, end, clip, "given", 1.0))
        clock = end + 0.25
    Dialogue(dialogue_id, turns, "jsonl", "corpus/dialogues.jsonl", RATE).save(workdir / corpus / "dialogue.json")
    tts_tables = []
    # The recognizer heard every original turn right and every variant turn as "heard <variant id>".
    asr_rows = [{"sample_id": original_id(dialogue_id), "turn_index": t.index, "text": t.text} for t in turns]
    for t in turns:
        rows = []
        for severity in SEVERITIES:
            variant_id = f"{dialogue_id}.t{t.index}.harassment.s{severity}"
            refused = variant_id == refused_id
            clip = None if refused else f"results/tts/{dialogue_id}/t{t.index}/{variant_id}.wav"
            if clip:
                write_wav(workdir / clip, _tone(0.4 + 0.05 * severity, 500 + 100 * severity), RATE)
                asr_rows.append({"sample_id": variant_id, "turn_index": t.index, "text": f"heard {variant_id}"})
            rows.append(
                {
                    "dialogue_id": dialogue_id,
                    "variant_id": variant_id,
                    "turn_index": t.index,
                    "n_turns": len(turns),
                    "speaker": t.speaker,
                    "original_text": t.text,
                    "original_emotion": t.emotion,
                    "category": "harassment",
                    "severity": severity,
                    "text": None if refused else f"unsafe {severity} at {t.index}",
                    "emotion": None if refused else "angry",
                    "generator": "template",
                    "model": "template_bank",
                    "prompt_version": "1",
                    "seed": 0,
                    "status": "refusal" if refused else "ok",
                    "attempts": 1,
                    "clip": clip,
                    "duration_s": None if refused else 0.4 + 0.05 * severity,
                    "gain_db": None if refused else -1.5,
                    "tts_engine": None if refused else "piper",
                    "tts_model": None if refused else "joe",
                    "tts_revision": None if refused else "1.0",
                }
            )
        table = f"results/tts/{dialogue_id}/t{t.index}.parquet"
        write_parquet(workdir / table, TTS.frame(rows))
        tts_tables.append(str(workdir / table))
    asr_table = workdir / f"results/asr/tiny/{dialogue_id}.parquet"
    write_parquet(asr_table, ASR.frame({"dialogue_id": dialogue_id, **r} for r in asr_rows))
    build_manifest(
        str(workdir / corpus / "dialogue.json"),
        tts_tables,
        {"tiny": str(asr_table)},
        str(workdir / f"results/manifests/{dialogue_id}.json"),
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run's working directory: two dialogues (2 and 3 turns), 2 severities per turn, one refused variant."""
    workdir = tmp_path_factory.mktemp("run")
    _write_dialogue(workdir, "d_one", ["Hello there.", "Hi, how are you?"], refused_id="d_one.t0.harassment.s5")
    _write_dialogue(workdir, "d_two", ["Shall we go?", "Yes, let us.", "Great."])
    (workdir / "results/manifests/shards").mkdir()  # shard indexes live here and are not dialogues
    return workdir


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "dataset"
    info = export_hf(run / "results", out, settings=ShardSettings(max_shard_mb=0.05, row_group_size=2), progress=False)
    return out, info


def _samples(run):
    return {
        s.sample_id: s for d in ("d_one", "d_two") for s in Manifest.load(run / f"results/manifests/{d}.json").samples()
    }


def test_shards_are_bounded_and_named_as_on_the_hub(exported, run):
    out, info = exported
    # 2 originals + (2 x 2 - 1) + 3 x 2 variants; each row is about 30 kB, so a 50 kB shard holds one row
    assert info.num_examples == 11
    assert len(info.files) == 11
    assert info.files[0] == "data/test-00000-of-00011.parquet"
    for name in info.files:
        shard = pq.ParquetFile(out / name)
        assert shard.metadata.num_rows == 1
        column = shard.metadata.row_group(0).column(shard.schema_arrow.names.index("audio"))
        assert column.path_in_schema == "audio.bytes" and column.compression == "UNCOMPRESSED"
    record = json.loads((out / "lalm_judge_export.json").read_text())
    assert record["dialogues"] == ["d_one", "d_two"] and record["files"] == list(info.files)


def test_row_groups_and_larger_shards(run, tmp_path):
    info = export_hf(run / "results", tmp_path / "ds", settings=ShardSettings(row_group_size=4), progress=False)
    assert info.files == ("data/test-00000-of-00001.parquet",)
    shard = pq.ParquetFile(tmp_path / "ds" / info.files[0])
    assert [shard.metadata.row_group(i).num_rows for i in range(shard.num_row_groups)] == [4, 4, 3]


def test_loads_with_datasets_and_decodes_the_audio(exported, run, tmp_path, monkeypatch):
    out, _ = exported
    dataset = datasets.load_dataset("parquet", data_dir=str(out), split="test", cache_dir=str(tmp_path / "cache"))
    assert dataset.num_rows == 11
    assert dataset.features["audio"] == datasets.Audio(sampling_rate=RATE)
    raw = dataset.cast_column("audio", datasets.Audio(decode=False))
    samples = _samples(run)
    monkeypatch.chdir(run)  # the manifests name clips relative to the run's working directory
    assert set(raw["sample_id"]) == set(samples)
    for row in raw:
        assembled = assemble_waveform(samples[row["sample_id"]])
        audio, rate = sf.read(io.BytesIO(row["audio"]["bytes"]), dtype="float32")
        assert rate == RATE and np.array_equal(audio, assembled.waveform)
        assert [round(s * RATE) for s in row["turn_start_s"]] == [a for a, _ in assembled.turn_bounds]
        assert row["audio"]["path"] == f"{row['sample_id']}.wav"
    variant = raw.filter(lambda r: r["sample_id"] == "d_two.t1.harassment.s5")[0]
    assert variant["label"] == "unsafe" and variant["severity"] == 5 and variant["unsafe_turn_index"] == 1
    assert variant["texts"][1] == "unsafe 5 at 1" and variant["original_text"] == "Yes, let us."
    assert variant["emotions"] == ["happy", "angry", "happy"]
    assert variant["asr_transcripts"] == [
        {"source": "asr:tiny", "texts": ["Shall we go?", f"heard {variant['sample_id']}", "Great."]}
    ]
    assert variant["generation"]["generator"] == "template" and variant["speech"]["tts_engine"] == "piper"
    original = raw.filter(lambda r: r["sample_id"] == "d_one.original")[0]
    assert original["label"] == "safe" and original["category"] is None and original["generation"] is None


def test_the_dataset_card_header_is_what_datasets_reads(exported, tmp_path):
    out, info = exported
    text = (out / "README.md").read_text()
    header = yaml.safe_load(text.split("---\n")[1])
    assert header["license"] == "cc-by-nc-sa-4.0"
    assert header["dataset_info"]["splits"] == [{"name": "test", "num_bytes": info.num_bytes, "num_examples": 11}]
    # Loading the folder as a repository reads the card: its split sizes are checked, its features used.
    repo = datasets.load_dataset(str(out), split="test", cache_dir=str(tmp_path / "cache"))
    assert repo.features._to_yaml_list() == [card_feature(n, f) for n, f in benchmark_features(RATE).items()]
    assert "inherit that license" in text and "d_one" not in text


def test_import_restores_every_clip_text_and_label(exported, run, tmp_path):
    out, _ = exported
    corpus = tmp_path / "benchmark"
    index = import_hf(out, corpus, progress=False)
    assert index["dialogues"] == [{"id": "d_one", "n_turns": 2}, {"id": "d_two", "n_turns": 3}]
    assert index["categories"] == ["harassment"] and index["severities"] == [1, 5] and index["n_variants"] == 9
    assert index["transcript_sources"] == ["asr:tiny"]
    original = Dialogue.load(run / "results/corpus/d_two/dialogue.json")
    released = Dialogue.load(corpus / "d_two/dialogue.json")
    for before, after in zip(original.turns, released.turns, strict=True):
        assert (after.speaker, after.text, after.emotion) == (before.speaker, before.text, before.emotion)
        assert np.array_equal(read_audio(corpus / "d_two" / after.clip)[0], read_audio(run / before.clip)[0])
    assert released.gaps_s() == pytest.approx(original.gaps_s(), abs=1e-9)
    variants = TTS.read(variants_path(corpus, "d_two"))
    spoken = TTS.read(sorted((run / "results/tts/d_two").glob("*.parquet"))).filter(pl.col("status") == "ok")
    compared = [c for c in TTS.columns if c != "clip"]
    assert variants.select(compared).sort("variant_id").equals(spoken.select(compared).sort("variant_id"))
    for row in variants.iter_rows(named=True):
        before = read_audio(run / spoken.filter(pl.col("variant_id") == row["variant_id"])["clip"][0])[0]
        assert np.array_equal(read_audio(corpus / "d_two" / row["clip"])[0], before)
    transcripts = TRANSCRIPTS.read(corpus / "d_two/transcripts.parquet")
    assert transcripts.height == 3 + 6  # each original turn and each replaced turn once


def test_import_takes_rows_in_any_order(exported, tmp_path):
    out, _ = exported
    shuffled = tmp_path / "shuffled"
    (shuffled / "data").mkdir(parents=True)
    table = pq.read_table(sorted((out / "data").glob("*.parquet")))
    pq.write_table(table.take(list(range(table.num_rows))[::-1]), shuffled / "data/test-00000-of-00001.parquet")
    import_hf(out, tmp_path / "a", progress=False)
    import_hf(shuffled, tmp_path / "b", progress=False)
    for name in ("d_two/dialogue.json", "d_two/variants.parquet", "d_one/turns/t1.wav", "benchmark.json"):
        a, b = (tmp_path / "a" / name).read_bytes(), (tmp_path / "b" / name).read_bytes()
        assert a == b or name.endswith(".json")  # the index and dialogue name their source folder
    assert read_index(tmp_path / "b")["n_variants"] == 9


def test_outputs_replace_only_what_they_wrote(exported, run, tmp_path):
    out, _ = exported
    export_hf(run / "results", out, progress=False)  # an earlier export is replaced
    assert len(list((out / "data").glob("*.parquet"))) == 1
    unrelated = tmp_path / "notes"
    unrelated.mkdir()
    (unrelated / "thesis.tex").write_text("keep me")
    with pytest.raises(FileExistsError, match="was not written by this command"):
        export_hf(run / "results", unrelated, progress=False)
    with pytest.raises(FileExistsError, match="was not written by this command"):
        import_hf(out, unrelated, progress=False)
    assert (unrelated / "thesis.tex").read_text() == "keep me"


def test_a_dataset_without_the_benchmark_columns_names_the_file(tmp_path):
    (tmp_path / "ds/data").mkdir(parents=True)
    pl.DataFrame({"sample_id": ["x"]}).write_parquet(tmp_path / "ds/data/test-00000-of-00001.parquet")
    with pytest.raises(
        ExportError, match=r"test-00000-of-00001.parquet lacks the benchmark column\(s\) \['dialogue_id'"
    ):
        import_hf(tmp_path / "ds", tmp_path / "corpus", progress=False)


def test_variants_without_their_original_are_an_error(exported, tmp_path):
    out, _ = exported
    table = pq.read_table(sorted((out / "data").glob("*.parquet")))
    kept = [i for i, s in enumerate(table.column("sample_id").to_pylist()) if s != "d_one.original"]
    (tmp_path / "ds/data").mkdir(parents=True)
    pq.write_table(table.take(kept), tmp_path / "ds/data/test-00000-of-00001.parquet")
    with pytest.raises(CorpusError, match=r"no safe original \(severity 0\) of \['d_one'\]"):
        import_hf(tmp_path / "ds", tmp_path / "corpus", progress=False)


def test_a_missing_manifest_is_an_error(run, tmp_path):
    with pytest.raises(ExportError, match="no manifest .*nope.json"):
        export_hf(run / "results", tmp_path / "a", dialogue_ids=["nope"], progress=False)


def test_the_card_records_the_run_settings(run, tmp_path):
    config = load_config(Path(__file__).parents[1] / "config/test.yaml")
    export_hf(run / "results", tmp_path / "ds", run_config=config, progress=False)
    card = (tmp_path / "ds/README.md").read_text()
    settings = yaml.safe_load(card.split("```yaml\n")[1].split("```")[0])
    assert settings["variants"]["generator"] == {"name": "template"}  # without the machine's cache folder
    assert settings["tts"]["voices"]["LLM1"]["engine"] == "piper" and "whisper_tiny_en" in settings["asr"]["models"]
