"""The preference builder end to end on its test config (tests/config/preference.yaml) in a scratch directory:
selection and filters, speaking per (shard, engine) with Piper and espeak-ng, Whisper tiny.en WER, pairs with
template rationales, acoustic pairs, the exports and the filter report; then a no-op rerun."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest
import yaml

from lalm_judge.core.tables import PAIRWISE_ITEMS, PREFERENCE_PAIRS, PREFERENCE_TRANSCRIPTS
from lalm_judge.pairwise.consistency import consistency
from lalm_judge.pairwise.sagelm import import_sagelm
from lalm_judge.training.records import read_dataset
from lalm_judge.training.settings import DatasetSource
from tests.support.workflow import ROOT, snakemake, write_config

pytestmark = [pytest.mark.workflow, pytest.mark.slow]
CONFIG = ROOT / "tests" / "config" / "preference.yaml"
OUT = "results/pairwise/preference"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("preference")
    for name in ("ultrafeedback.jsonl", "acoustic.yaml"):
        shutil.copy(ROOT / "data" / "preference_demo" / name, workdir / name)
    configfile = write_config(workdir, yaml.safe_load(CONFIG.read_text()))
    snakemake(workdir, configfile, "--cores", "2", timeout_s=900)
    return workdir, configfile


def test_the_filter_report_counts_every_drop(finished_run):
    workdir, _ = finished_run
    report = json.loads((workdir / OUT / "filter_report.json").read_text())
    selection = report["selection"]
    assert selection["items_read"] == 6 and selection["items_kept"] == 3
    assert selection["items_dropped"] == {"math": 1, "code": 1, "non_english": 1, "too_few_completions": 0}
    transcripts = PREFERENCE_TRANSCRIPTS.read(sorted((workdir / OUT / "asr").rglob("*.parquet")))
    for engine, counts in report["clips"].items():
        spoken = transcripts.filter(pl.col("engine") == engine)
        assert counts["clips"] == spoken.height == 12  # 3 items x 4 completions, per engine
        too_bad = spoken.filter(pl.col("wer") > 0.35).height
        assert counts["dropped_wer"] == too_bad and counts["kept"] == 12 - too_bad - counts["dropped_short"]
    assert report["clip_filters"] == {"max_wer": 0.35, "min_duration_s": 0.2}


def test_pairs_are_labelled_per_aspect_with_consistent_rationales(finished_run):
    workdir, _ = finished_run
    pairs = PREFERENCE_PAIRS.read(sorted((workdir / OUT / "pairs").glob("shard*.parquet")))
    assert pairs["source_item"].n_unique() == 3 and pairs.height == 12  # one pair per item, four aspects
    assert set(pairs["rationale_status"]) == {"ok"} and set(pairs["label"]) <= {"1", "2", "Tie"}
    for row in pairs.iter_rows(named=True):
        # The label follows from the ratings (tie margin 1: only equal ratings tie).
        expected = "Tie" if row["rating1"] == row["rating2"] else "1" if row["rating1"] > row["rating2"] else "2"
        assert row["label"] == expected
        assert (workdir / OUT / row["response1_audio"]).is_file()
    summary = consistency(pairs.select("label", "rationale").iter_rows())
    assert summary.n_determined == summary.n and summary.n_contradicting == 0


def test_acoustic_pairs_cover_the_categories_and_formats(finished_run):
    workdir, _ = finished_run
    report = json.loads((workdir / OUT / "filter_report.json").read_text())["acoustic_pairs"]
    assert report["by_format"]["emotion"] == {"explicit_tts": 2, "explicit_dialogue": 2, "implicit_dialogue": 2}
    assert report["by_format"]["gender"] == {"explicit_tts": 2, "explicit_dialogue": 2}
    assert report["pairs"] == 10


def test_exports_are_sagelm_records_and_a_hugging_face_dataset(finished_run):
    workdir, _ = finished_run
    items = PAIRWISE_ITEMS.read(workdir / OUT / "export/items.parquet")
    assert items.height == 22 and items["audio_ok"].all()
    sagelm = workdir / OUT / "export/sagelm"
    assert set(json.loads((sagelm / "dataset_info.json").read_text())) == {"semantic", "acoustic"}
    # The records read back through the pairwise track's importer and the trainer's reader.
    imported, summary = import_sagelm([sagelm / "semantic.json", sagelm / "acoustic.json"], workdir / OUT)
    assert imported.height == 22 and summary.n_missing_audio_rows == 0
    # The implicit-emotion subset and the task formats survive the export (SageLM's clip names and folder).
    acoustic = imported.filter(pl.col("style").is_not_null())
    assert acoustic.filter(pl.col("aspect") == "implicit_emotion").height == 2
    assert acoustic.group_by("task_format").len().sort("task_format").rows() == [
        ("explicit_dialogue", 4),
        ("explicit_tts", 4),
        ("implicit", 2),
    ]
    records = read_dataset(DatasetSource("acoustic", (str(sagelm / "acoustic.json"),), str(workdir / OUT)))
    assert len(records) == 10 and all(record.audios for record in records)

    from datasets import Audio, load_dataset

    dataset = load_dataset(str(workdir / OUT / "export/hf"))  # the card names the splits and their files
    splits = {name: dataset[name] for name in dataset}
    assert {name: len(split) for name, split in splits.items()} == {"semantic": 12, "acoustic": 10}
    semantic = splits["semantic"]
    assert isinstance(semantic.features["response1_audio"], Audio)
    # Decoding needs torchcodec (not in this environment): read the stored wav bytes instead.
    for column in ("response1_audio", "response2_audio"):
        semantic = semantic.cast_column(column, Audio(decode=False))
    first = semantic[0]
    row = items.filter(pl.col("item_id") == first["item_id"], pl.col("aspect") == first["aspect"]).row(0, named=True)
    assert first["response1_audio"]["bytes"] == (workdir / OUT / row["response1_audio"]).read_bytes()


def test_a_rerun_has_nothing_to_do(finished_run):
    workdir, configfile = finished_run
    result = snakemake(workdir, configfile, "-n", "--cores", "1", timeout_s=300)
    assert "Nothing to be done" in result.stdout + result.stderr
