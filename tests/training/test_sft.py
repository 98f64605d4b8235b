"""Two-stage SFT end to end on CPU: a tiny random-weight Qwen2-Audio built at test time, trained through
`lalm-judge pairwise train` with the real TRL SFTTrainer; its checkpoint reloads as a `transformers` judge of
the pairwise track and judges the records' items in both orders."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from lalm_judge.cli import main as cli
from lalm_judge.core.vocabulary import VERDICT_STATUSES
from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.pairwise.judge import judge_items, load_backend, pairwise_cell
from lalm_judge.pairwise.sagelm import import_sagelm
from lalm_judge.training.sft import REPORT_FILE, STAGE_FILE
from tests.training.conftest import training_section

torch.set_num_threads(1)
pytestmark = pytest.mark.slow


def train(tmp_path, section) -> dict:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump({"training": section}))
    assert cli(["pairwise", "train", "--config", str(path)]) == 0
    return json.loads((tmp_path / "out" / REPORT_FILE).read_text())


def weights(folder):
    return load_file(str(folder / "model.safetensors"))


def judge(model_dir, data) -> list[dict]:
    """The pairwise judge stage on the acoustic records (imported as items) with the checkpoint as judge."""
    spec = JudgeSpec(
        name="trained",
        backend="transformers",
        model=str(model_dir),
        modalities=("audio",),
        generation={"max_new_tokens": 12},
        options={"device": "cpu", "num_threads": 1},
    )
    items, _ = import_sagelm([data["acoustic"]], data["audio_root"])
    cell = pairwise_cell(spec, "audio", "none", "sagelm")
    return judge_items(items, cell, load_backend(spec))


def assert_judged(rows, n):
    assert len(rows) == n
    for row in rows:
        assert isinstance(row["prediction"], str) and isinstance(row["prediction_swapped"], str)
        assert row["verdict_status"] in VERDICT_STATUSES and row["long_audio_action"] == "none"


def test_two_stages_learn_and_the_checkpoint_judges(tmp_path, qwen2audio_dir, training_data, capsys):
    report = train(tmp_path, training_section(qwen2audio_dir, training_data, tmp_path / "out"))
    semantic, acoustic = report["stages"]
    for stage in (semantic, acoustic):
        losses = [entry["loss"] for entry in stage["losses"]]
        assert len(losses) == 4
        assert losses[-1] < losses[0], f"stage {stage['name']}: loss did not fall: {losses}"
    # Stage two starts from stage one (so from a lower loss) and trains on the acoustic data plus half the semantic.
    assert acoustic["init_from"] == str(tmp_path / "out" / "semantic")
    assert acoustic["losses"][0]["loss"] < semantic["losses"][0]["loss"]
    assert {name: sum(labels.values()) for name, labels in acoustic["records"].items()} == {
        "acoustic": 2,
        "semantic": 2,
    }
    assert report["judge_model"] == str(tmp_path / "out" / "acoustic")
    assert "loss" in capsys.readouterr().out

    # Only the language model trained: the audio encoder and its projector are the backbone's.
    before, after = weights(qwen2audio_dir), weights(tmp_path / "out" / "acoustic")
    assert set(before) == set(after)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    # (checkpoint keys: `language_model.*` is the language model, `audio_tower.*` and `multi_modal_projector.*` not)
    assert changed and all(name.startswith("language_model.") for name in changed)

    # The checkpoint is a pairwise judge: the transformers backend loads it (model, processor, chat template) and
    # the judge stage asks it about every item in both orders, two audios per request.
    assert_judged(judge(tmp_path / "out" / "acoustic", training_data), 2)

    # An unchanged rerun reuses both stages.
    rerun = train(tmp_path, training_section(qwen2audio_dir, training_data, tmp_path / "out"))
    assert [stage["reused"] for stage in rerun["stages"]] == [True, True]
    assert (
        json.loads((tmp_path / "out" / "acoustic" / STAGE_FILE).read_text())["fingerprint"] == acoustic["fingerprint"]
    )


def test_lora_adapters_are_merged_into_a_plain_checkpoint(tmp_path, qwen2audio_dir, training_data):
    section = training_section(qwen2audio_dir, training_data, tmp_path / "out", max_steps=2, learning_rate=1e-2)
    section.update(finetuning="lora", lora={"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"]})
    section["stages"] = section["stages"][:1]
    (stage,) = train(tmp_path, section)["stages"]
    assert stage["trainable"]["trainable_parameters"] < stage["trainable"]["parameters"]
    after = weights(tmp_path / "out" / "semantic")
    assert not any("lora" in name for name in after)
    before = weights(qwen2audio_dir)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    # The merged adapters changed the language model's q/v projections and nothing in the audio encoder.
    assert changed and all(
        name.startswith("language_model.") and name.endswith(("q_proj.weight", "v_proj.weight")) for name in changed
    )
    assert_judged(judge(tmp_path / "out" / "semantic", training_data), 2)


def test_a_held_out_split_is_evaluated_during_training_and_cutoff_len_is_applied(
    tmp_path, qwen2audio_dir, training_data, capsys
):
    """LLaMA-Factory's val_size and cutoff_len: two of the four semantic pairs held out and evaluated every two
    steps (loss and verdict accuracy); a limit that only a long answer passes is cut, never the prompt."""
    from transformers import AutoProcessor

    from lalm_judge.training.collator import PairwiseSFTCollator
    from lalm_judge.training.records import read_dataset
    from lalm_judge.training.settings import DatasetSource

    source = DatasetSource("semantic", (str(training_data["semantic"]),), str(training_data["audio_root"]))
    records = read_dataset(source)
    collator = PairwiseSFTCollator(AutoProcessor.from_pretrained(qwen2audio_dir), "You are a helpful assistant.", 60)
    prompt = max(collator.prompt_length(record.as_row()) for record in records)
    section = training_section(
        qwen2audio_dir, training_data, tmp_path / "out", val_size=2, eval_steps=2, cutoff_len=prompt + 3
    )
    section["stages"] = section["stages"][:1]
    (stage,) = train(tmp_path, section)["stages"]
    assert stage["n_validation"] == 2 and stage["n_records"] == 2
    assert [entry["step"] for entry in stage["evaluations"]] == [2, 4]
    for entry in stage["evaluations"]:
        assert entry["loss"] > 0 and 0.0 <= entry["verdict_accuracy"] <= 1.0
    # Every answer is longer than 3 tokens, so each record's answer (trained and held out) was cut; no prompt was.
    assert stage["cutoff"] == {"cutoff_len": prompt + 3, "n_dropped": 0, "dropped": [], "n_answers_cut": 4}
    # A limit under the prompts leaves every record out, and says so.
    section["hyperparameters"]["cutoff_len"] = 16
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump({"training": section}))
    assert cli(["pairwise", "train", "--config", str(path)]) == 2
    assert "every record's prompt is longer" in capsys.readouterr().err
