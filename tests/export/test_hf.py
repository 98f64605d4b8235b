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
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
import yaml

from lalm_judge.audio.waveform import read_audio, write_wav
from lalm_judge.core.dialogue import CorpusError, Dialogue, Turn
from lalm_judge.core.files import write_parquet
from lalm_judge.core.tables import ASR, TTS
from lalm_judge.core.taxonomy import original_id
from lalm_judge.data.benchmark import read_index, variants_path
from lalm_judge.data.benchmark_tables import TRANSCRIPTS
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
    features = raw.features
    assert features["label"].int2str(variant["label"]) == "unsafe" and variant["unsafe_turn_index"] == 1
    assert features["category"].int2str(variant["category"]) == "harassment"
    assert variant["severity"] == 5 and features["severity"].int2str(5) == "5"  # the class index is the severity
    assert variant["texts"][1] == "unsafe 5 at 1" and variant["original_text"] == "Yes, let us."
    assert variant["emotions"] == ["happy", "angry", "happy"]
    assert variant["asr_transcripts"] == [
        {"source": "asr:tiny", "texts": ["Shall we go?", f"heard {variant['sample_id']}", "Great."]}
    ]
    assert variant["generation"]["generator"] == "template" and variant["speech"]["tts_engine"] == "piper"
    original = raw.filter(lambda r: r["sample_id"] == "d_one.original")[0]
    assert features["label"].int2str(original["label"]) == "safe" and original["severity"] == 0
    assert original["category"] is None and original["generation"] is None


def test_the_dataset_card_header_is_what_datasets_reads(exported, tmp_path):
    out, info = exported
    text = (out / "README.md").read_text()
    header = yaml.safe_load(text.split("---\n")[1])
    assert header["license"] == "unknown"  # exported without a config: the corpus's terms are not known
    assert "states no licence or source of its corpus" in text
    assert header["dataset_info"]["splits"] == [{"name": "test", "num_bytes": info.num_bytes, "num_examples": 11}]
    # Loading the folder as a repository reads the card: its split sizes are checked, its features used.
    repo = datasets.load_dataset(str(out), split="test", cache_dir=str(tmp_path / "cache"))
    assert repo.features._to_yaml_list() == [card_feature(n, f) for n, f in benchmark_features(RATE).items()]
    assert "d_one" not in text
    assert {feature: repo.features[feature].names[:2] for feature in ("label", "category", "severity")} == {
        "label": ["safe", "unsafe"],
        "category": ["overall", "dangerous"],
        "severity": ["0", "1"],
    }


def test_import_restores_every_clip_text_and_label(exported, run, tmp_path):
    out, _ = exported
    corpus = tmp_path / "benchmark"
    index = import_hf(out, corpus, progress=False)
    assert index["dialogues"] == [
        {"id": "d_one", "n_turns": 2, "variant_turns": [0, 1]},
        {"id": "d_two", "n_turns": 3, "variant_turns": [0, 1, 2]},
    ]
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


ROOT = Path(__file__).resolve().parents[2]


def card_header(card: str) -> dict:
    return yaml.safe_load(card.split("---\n")[1])


def card_problems(card: str, corpus: dict) -> list[str]:
    """What a dataset card gets wrong about its run's corpus config: licence, source, content warning, tag."""
    header, problems = card_header(card), []
    if header["license"] != corpus["license"]:
        problems.append(f"license {header['license']!r} is not the corpus's {corpus['license']!r}")
    if header.get("source_datasets") != [corpus["source"]]:
        problems.append(f"source_datasets {header.get('source_datasets')} is not [{corpus['source']!r}]")
    if "not-for-all-audiences" not in header["tags"]:
        problems.append("no not-for-all-audiences tag")
    if "> **Content warning.** This dataset contains unsafe speech by design" not in card:
        problems.append("no content warning")
    terms = card.split("\n## License\n", 1)[1]
    if "DeepDialogue" in terms and "DeepDialogue" not in str(corpus.values()):
        problems.append("the card's terms name DeepDialogue, which the corpus is not")
    return problems


def test_the_demo_card_states_the_demo_corpus_terms_and_warns(run, tmp_path):
    """Exported with the demo's config (config.yaml): the project's own dialogues under the project's licence,
    'original' as their source, no DeepDialogue, the content warning and tag, the licences of both voices."""
    config = load_config(ROOT / "config.yaml")
    assert (config["corpus"]["license"], config["corpus"]["source"]) == ("mit", "original")
    export_hf(run / "results", tmp_path / "ds", run_config=config, progress=False)
    card = (tmp_path / "ds/README.md").read_text()
    assert card_problems(card, config["corpus"]) == []
    assert "written for this benchmark (not drawn from another dataset), under `mit`" in card
    for terms in ("Piper (piper-tts), the synthesis engine: GPL-3.0-or-later", "en_US-joe-medium", "CC0", "espeak-ng"):
        assert terms in card, terms
    assert card.count("the Piper voice en_US-joe-medium") == 1  # named by the rows and by the config, listed once
    assert "9 of its 11 samples are dialogues with one turn rewritten" in card
    assert "## Citation" not in card  # the demo corpus has none
    assert card_header(card)["task_categories"] == ["audio-classification", "text-classification"]


def test_deepdialogue_terms_are_the_defaults_of_its_formats_only():
    from lalm_judge.export.terms import DEEPDIALOGUE_CITATION, corpus_terms

    hub = corpus_terms({"format": "deepdialogue_hub", "tts_system": "xtts"}, ["deepdialogue_hub"])
    assert (hub.license, hub.source_datasets, hub.citation) == (
        "cc-by-nc-sa-4.0",
        ["SALT-Research/DeepDialogue-xtts"],
        DEEPDIALOGUE_CITATION,
    )
    assert corpus_terms({"tts_system": "orpheus"}, ["deepdialogue"]).source == "SALT-Research/DeepDialogue-orpheus"
    jsonl = corpus_terms({"format": "jsonl"}, ["jsonl"])
    assert (jsonl.license, jsonl.source, jsonl.citation, jsonl.known) == ("unknown", "unknown", None, False)
    stated = corpus_terms({"license": "cc-by-4.0", "source": "me/my-dialogues"}, ["jsonl"])
    assert (stated.license, stated.source_datasets, stated.known) == ("cc-by-4.0", ["me/my-dialogues"], True)
    assert "configuration states" in stated.origin and "DeepDialogue's published terms" in hub.origin


def test_a_paper_run_card_names_deepdialogue_and_the_xtts_licence():
    from lalm_judge.export.card import CardFacts, SplitInfo, dataset_card
    from lalm_judge.export.features import benchmark_features

    config = load_config(ROOT / "configs/paper.yaml")
    facts = CardFacts(
        n_samples=2, n_dialogues=1, n_unsafe=1, categories=("hate",), severities=(5,), transcript_sources=(),
        generators=("llm",), tts=("xtts",), corpus_formats=("deepdialogue_hub",), sample_rate=16000,
        voices=(("xtts", "tts_models/multilingual/multi-dataset/xtts_v2"),),
    )  # fmt: skip
    card = dataset_card(facts, benchmark_features(16000), SplitInfo("test", 2, 1, ()), config)
    corpus = {**config["corpus"], "license": "cc-by-nc-sa-4.0", "source": "SALT-Research/DeepDialogue-xtts"}
    assert card_problems(card, corpus) == []
    assert "Coqui Public Model License 1.0.0" in card and "non-commercial use of the model and of its outputs" in card
    assert "@misc{koudounas2025deepdialogue" in card


def readme_loading_example() -> str:
    """The README's first loading example, as it stands (the python block after the export command's text)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    after = readme[readme.index("Upload the folder as a Hub dataset repository, or load it directly:") :]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_loading_example_runs_as_written_and_decodes_a_row(exported, run, tmp_path, monkeypatch):
    """The README's lines, executed verbatim in a folder holding the export as `release`, in this environment
    (no torchcodec): the first row's waveform is the one the run's clips assemble to. The card's example is the
    same text with its own folder."""
    from lalm_judge.export.card import loading_example

    out, _ = exported
    source = readme_loading_example()
    assert source == loading_example("test", data_dir="release")
    assert loading_example("test") in (out / "README.md").read_text()
    (tmp_path / "release").symlink_to(out, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")  # keep the user's cache clean
    namespace: dict = {}
    exec(compile(source, "README.md", "exec"), namespace)
    first = namespace["benchmark"][0]
    monkeypatch.chdir(run)
    expected = assemble_waveform(_samples(run)[first["sample_id"]]).waveform
    assert namespace["sample_rate"] == RATE and np.array_equal(namespace["waveform"], expected)


def test_an_imported_row_with_an_unknown_category_names_it(exported, tmp_path):
    out, _ = exported
    table = pq.read_table(sorted((out / "data").glob("*.parquet")))
    index = table.column_names.index("category")
    labels = ["weapons" if c is not None else None for c in table.column("category").to_pylist()]
    (tmp_path / "ds/data").mkdir(parents=True)
    pq.write_table(table.set_column(index, "category", pa.array(labels, pa.string())), tmp_path / "ds/data/x.parquet")
    with pytest.raises(ExportError, match=r"'weapons' is not one of the class labels \['overall'"):
        import_hf(tmp_path / "ds", tmp_path / "corpus", progress=False)


def _with_copy_of(table: pa.Table, sample_id: str, edit) -> pa.Table:
    """The table with a copy of the row `sample_id`, edited by `edit(row)`, appended as its last row."""
    rows = table.to_pylist()
    copy = dict(next(row for row in rows if row["sample_id"] == sample_id))
    edit(copy)
    return pa.Table.from_pylist([*rows, copy], schema=table.schema)


@pytest.mark.parametrize("tampered", [True, False], ids=["benign_text_under_the_label", "exact_copy"])
def test_a_reimported_export_with_a_duplicated_sample_id_is_refused_naming_both_rows(exported, tmp_path, tampered):
    """A re-released export holds a second row with the id of a severity-5 variant whose unsafe turn is a benign
    sentence: both would be judged under the severity-5 label. Any second row with an id is refused."""
    out, _ = exported
    table = pq.read_table(sorted((out / "data").glob("*.parquet")))
    target = "d_two.t1.harassment.s5"
    turn = 1

    def benign(row: dict) -> None:
        if tampered:
            row["texts"] = [row["texts"][0], "What a lovely day for a walk.", *row["texts"][turn + 1 :]]

    doubled = _with_copy_of(table, target, benign)
    (tmp_path / "ds/data").mkdir(parents=True)
    shard = tmp_path / "ds/data/test-00000-of-00001.parquet"
    pq.write_table(doubled, shard)
    first = table.column("sample_id").to_pylist().index(target)
    how = "they differ in texts" if tampered else "an exact copy"
    message = rf"{shard} row {table.num_rows}: sample id '{target}' is also {shard} row {first} \({how}\)"
    with pytest.raises(ExportError, match=message):
        import_hf(tmp_path / "ds", tmp_path / "corpus", progress=False)
    assert not (tmp_path / "corpus").exists()
