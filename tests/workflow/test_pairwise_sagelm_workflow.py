"""configs/pairwise.yaml's path end to end on tiny same-architecture stand-ins (tests/config/pairwise_sagelm.yaml):
SageLM-format records (the project's fixtures in SageLM's layout) with audio spoken at the paths they name,
random-weight Qwen2-Audio and Qwen2.5-Omni thinker hearing both responses, the cascade Whisper tiny.en + a
random-weight Llama, every item in both orders, metrics in SageLM's splits, findings and the report. The models'
verdicts are random; the test checks the path, not them."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest
import yaml

from lalm_judge.audio.tts import SynthesisRequest, Voice, synthesize
from lalm_judge.audio.waveform import write_wav
from lalm_judge.core.tables import PAIRWISE_PREDICTIONS, PAIRWISE_TRANSCRIPTS
from lalm_judge.core.vocabulary import VERDICT_STATUSES
from lalm_judge.workflow.config import ConfigError, load_config, validate_config
from lalm_judge.workflow.pairwise import PairwisePlan
from tests.support.workflow import ROOT, snakemake, write_config

pytestmark = [pytest.mark.workflow, pytest.mark.slow]
CONFIG = ROOT / "tests" / "config" / "pairwise_sagelm.yaml"
FIXTURES = ROOT / "tests" / "fixtures" / "sagelm"
RECORD_FILES = ("test_semantic.json", "test_acoustic.json")


def speak_records(folder) -> int:
    """Copy the record files into `folder` and speak every audio path they name (espeak-ng); return the count."""
    voice = Voice.from_config({"engine": "espeak", "voice": "en-us+f3"})
    paths = []
    for name in RECORD_FILES:
        shutil.copy(FIXTURES / name, folder / name)
        paths += [a for record in json.loads((FIXTURES / name).read_text()) for a in record["audios"]]
    for index, relative in enumerate(dict.fromkeys(paths)):
        audio, rate = synthesize(voice, SynthesisRequest(f"This is spoken response number {index + 1}."))
        write_wav(folder / relative, audio, rate)
    return len(set(paths))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from bench.models import build_tiny_llama, build_tiny_qwen2audio, build_tiny_qwen25omni_thinker

    workdir = tmp_path_factory.mktemp("pairwise_sagelm")
    (workdir / "sagelm").mkdir()
    n_files = speak_records(workdir / "sagelm")
    config = yaml.safe_load(CONFIG.read_text())
    build_tiny_qwen2audio(workdir / config["judges"]["tiny_qwen2_audio"]["model"])
    # A 30 s window: the released processor pads every clip to 300 s, ten times the feature extraction per response
    # on CPU, and this test is of the path, not the window (tests/engine/test_qwen25_omni.py tests the window).
    build_tiny_qwen25omni_thinker(workdir / config["judges"]["tiny_omni"]["model"], audio_window_s=30)
    build_tiny_llama(workdir / config["judges"]["tiny_llama"]["model"])
    configfile = write_config(workdir, config)
    snakemake(workdir, configfile, "--cores", "2", timeout_s=900)
    return workdir, configfile, load_config(configfile), n_files


def test_sagelm_records_are_judged_by_every_cell_in_both_orders(finished_run):
    workdir, _, config, n_files = finished_run
    items = pl.read_parquet(workdir / "results/pairwise/items.parquet")
    assert items.height == 8 + 6 and items["item_id"].n_unique() == 2 + 6 and items["audio_ok"].all()
    assert not (workdir / "results/pairwise/audio").exists()  # SageLM's audio is read where it is
    cells = PairwisePlan(config).cells()
    assert {(c.judge, c.modality, str(c.transcript_source)) for c in cells} == {
        ("tiny_qwen2_audio", "audio", "none"),
        ("tiny_omni", "audio", "none"),
        ("tiny_llama", "text", "asr:whisper_tiny_en"),
    }
    assert len(cells) == 6  # x 2 prompts
    for cell in cells:
        predictions = PAIRWISE_PREDICTIONS.read(workdir / f"results/pairwise/predictions/{cell.path}.parquet")
        assert predictions.select("item_id", "aspect").equals(items.select("item_id", "aspect"))
        assert predictions["prediction"].null_count() == predictions["prediction_swapped"].null_count() == 0
        for column in ("verdict_status", "verdict_swapped_status", "verdict_combined_status"):
            assert set(predictions[column]) <= set(VERDICT_STATUSES)
        assert predictions.select("task_format", "style").equals(items.select("task_format", "style"))
        if cell.modality == "text":
            assert predictions["asr_model"].to_list() == ["bundled:tiny.en"] * items.height
        # The Omni thinker samples as SageLM does: three seeds per request, each recorded, their majority beside.
        assert set(predictions["n_samples"]) == ({3} if cell.judge == "tiny_omni" else {1})
        if cell.judge == "tiny_omni":
            assert predictions["samples"].null_count() == 0
            # Random weights answer noise: the agreement is the share of samples giving the commonest readable verdict.
            assert predictions["sample_agreement"].is_between(0.0, 1.0).all()
            assert [len(json.loads(s)) for s in predictions["samples"]] == [3] * items.height
    # The cascade transcribed every response file once, in full.
    transcripts = PAIRWISE_TRANSCRIPTS.read(workdir / "results/pairwise/asr/whisper_tiny_en.parquet")
    assert transcripts.height == n_files and transcripts["text"].str.len_chars().min() > 0


def test_metrics_findings_and_report_in_sagelm_s_layout(finished_run):
    workdir, _, config, _ = finished_run
    document = json.loads((workdir / "results/pairwise/metrics/metrics.json").read_text())
    assert len(document["cells"]) == len(PairwisePlan(config).cells())
    for cell in document["cells"]:
        splits = cell["splits"]
        assert {g: r["n"] for g, r in splits["dimension"].items()} == {"semantic": 8, "acoustic": 6}
        assert {g: r["n"] for g, r in splits["task_format"].items()} == {
            "explicit_tts": 2,
            "explicit_dialogue": 3,
            "implicit": 1,
        }
        assert set(splits["style"]) == {"emotion", "gender", "character", "mixed"}
    assert pl.read_parquet(workdir / "results/pairwise/metrics/findings.parquet").columns[:4] == [
        "judge",
        "modality",
        "transcript_source",
        "prompt",
    ]
    page = (workdir / "results/pairwise/report/index.html").read_text()
    for heading in ("<h3>Semantic aspects</h3>", "<h3>Acoustic aspects</h3>", "<h2>Answers per item</h2>"):
        assert heading in page
    assert page.count("<details>") == 6 and "3 of 3 judges" in page


def test_an_unchanged_rerun_schedules_nothing(finished_run):
    workdir, configfile, _, _ = finished_run
    result = snakemake(workdir, configfile, "-n", "--cores", "2")
    assert "Nothing to be done" in result.stdout + result.stderr


def test_cells_the_records_cannot_serve_are_refused_at_validation():
    """SageLM records bring audio only: a text cell that reads the responses' source texts ('gt') cannot run."""
    config = yaml.safe_load(CONFIG.read_text())
    config["pairwise"]["transcript_sources"].append("gt")
    with pytest.raises(ConfigError, match=r"'gt' reads the texts .* cells tiny_llama/text-gt cannot be served"):
        validate_config(config)
