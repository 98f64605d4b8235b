"""The pairwise track's plan: its judge cells, the ASR models its cascade needs, the files its item stage reads."""

from pathlib import Path

from lalm_judge.workflow.config import load_config
from lalm_judge.workflow.pairwise import PairwisePlan

ROOT = Path(__file__).resolve().parents[2]


def test_cells_of_the_demo_config():
    plan = PairwisePlan(load_config(ROOT / "configs" / "pairwise_demo.yaml"))
    assert [cell.path for cell in plan.cells()] == [
        "tiny_qwen2_audio/audio-none/sagelm",
        "tiny_qwen2_audio/audio-none/explained",
        *(
            f"{judge}/text-{source}/{prompt}"
            for judge in ("smollm2_pmi", "relevance")
            for source in ("gt", "asr:whisper_tiny_en")
            for prompt in ("sagelm", "explained")
        ),
    ]
    assert plan.speaks_items()  # the demo speaks its own items
    assert plan.asr_models() == ["whisper_tiny_en"]
    assert plan.item_sources() == ["data/pairwise_demo/items.jsonl"]


def test_paper_scale_cells_audio_native_and_cascade():
    plan = PairwisePlan(load_config(ROOT / "configs" / "pairwise.yaml"))
    cells = {(c.judge, c.modality, c.transcript_source) for c in plan.cells()}
    assert {("sagelm", "audio", "none"), ("qwen2_audio_7b", "audio", "none"), ("gpt_audio", "audio", "none")} <= cells
    assert ("gpt4o", "text", "asr:whisper_large_v3") in cells
    assert len(plan.cells()) == 5 * 2  # five judges, one cell each, two prompts
    assert plan.item_sources() == ["data/sagelm/test_semantic.json", "data/sagelm/test_acoustic.json"]
    assert not plan.speaks_items()  # SageLM's records bring their audio: no audio folder is made
