"""A Qwen2.5-Omni checkpoint saved as its thinker alone (what LLaMA-Factory writes for a fine-tuned judge such as
SageLM) loads through the thinker class in transformers and is served by vLLM from a copy in the full layout.

The checkpoint is a tiny random-weight thinker saved by transformers' own `save_pretrained` (bench.models), so its
config.json names `Qwen2_5OmniThinkerForConditionalGeneration` as a real thinker-only save does. vLLM cannot run
here (a CUDA build); what it reads is checked against its 0.32 source: the architectures its registry maps to its
Qwen2.5-Omni thinker (`model_executor/models/registry.py`) and the weight-name mapping of that class
(`qwen2_5_omni_thinker.py`, `hf_to_vllm_mapper`), copied below. transformers then loads the copy like the full
released model, through the thinker class, with the same weights and the same answers.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from bench.models import load_tiny_qwen25omni_thinker
from lalm_judge.judging.backends import checkpoints
from lalm_judge.judging.backends.base import JudgeSpec
from lalm_judge.judging.backends.hf import THINKER_CLASS, model_class_name
from lalm_judge.judging.backends.vllm_backend import engine_model

# vLLM 0.32 `registry.py`: the architectures served by its `Qwen2_5OmniThinkerForConditionalGeneration`.
VLLM_OMNI_ARCHITECTURES = {"Qwen2_5OmniModel", "Qwen2_5OmniForConditionalGeneration"}
# vLLM 0.32 `qwen2_5_omni_thinker.py`: `hf_to_vllm_mapper.orig_to_new_prefix`, and the thinker's submodules.
VLLM_PREFIXES = {
    "thinker.lm_head.": "language_model.lm_head.",
    "thinker.model.": "language_model.model.",
    "thinker.": "",
}
VLLM_MODULES = {"language_model", "audio_tower", "visual"}


def vllm_name(name: str) -> str:
    prefix = next(p for p in VLLM_PREFIXES if name.startswith(p))
    return VLLM_PREFIXES[prefix] + name.removeprefix(prefix)


@pytest.fixture(scope="module")
def full_layout(qwen25omni_dir, tmp_path_factory):
    return checkpoints.full_omni_layout(str(qwen25omni_dir), "main", tmp_path_factory.mktemp("cache"))


def test_the_tiny_save_is_thinker_only_like_llama_factorys(qwen25omni_dir):
    config = checkpoints.read_checkpoint_config(str(qwen25omni_dir), "main")
    assert checkpoints.architectures(config) == [THINKER_CLASS] and checkpoints.is_thinker_only(config)


def test_the_copy_is_the_full_layout_vllm_reads(qwen25omni_dir, full_layout):
    config = json.loads((full_layout / "config.json").read_text())
    assert set(config["architectures"]) <= VLLM_OMNI_ARCHITECTURES and config["model_type"] == "qwen2_5_omni"
    original = json.loads((qwen25omni_dir / "config.json").read_text())
    assert config["thinker_config"] == {k: v for k, v in original.items() if k != "architectures"}
    assert not checkpoints.is_thinker_only(config)
    weights, copied = load_file(qwen25omni_dir / "model.safetensors"), load_file(full_layout / "model.safetensors")
    assert set(copied) == {f"thinker.{name}" for name in weights}
    assert all(torch.equal(copied[f"thinker.{name}"], tensor) for name, tensor in weights.items())
    assert {vllm_name(name).split(".")[0] for name in copied} == VLLM_MODULES
    # The processor and tokenizer files travel as they are.
    for name in ("tokenizer.json", "chat_template.jinja", "processor_config.json", "generation_config.json"):
        assert (full_layout / name).read_bytes() == (qwen25omni_dir / name).read_bytes()


def test_the_copy_is_made_once(qwen25omni_dir, full_layout):
    stamp = (full_layout / "model.safetensors").stat().st_mtime_ns
    again = checkpoints.full_omni_layout(str(qwen25omni_dir), "main", full_layout.parent)
    assert again == full_layout and (again / "model.safetensors").stat().st_mtime_ns == stamp


def test_vllm_is_given_the_copy_of_a_thinker_only_checkpoint(qwen25omni_dir, full_layout, qwen2audio_dir):
    spec = JudgeSpec(
        name="sagelm", backend="vllm", model=str(qwen25omni_dir), options={"cache_dir": str(full_layout.parent)}
    )
    assert engine_model(spec) == str(full_layout)
    for model in (full_layout, qwen2audio_dir):  # the full layout, another model: loaded as they are
        assert engine_model(JudgeSpec(name="other", backend="vllm", model=str(model))) == str(model)


def test_transformers_loads_both_layouts_through_the_thinker_with_the_same_answers(qwen25omni_dir, full_layout):
    from transformers import AutoConfig, Qwen2_5OmniThinkerForConditionalGeneration

    for folder in (qwen25omni_dir, full_layout):
        assert model_class_name({}, AutoConfig.from_pretrained(folder)) == THINKER_CLASS
    thinker, processor = load_tiny_qwen25omni_thinker(qwen25omni_dir)
    from_full = Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(full_layout).eval()
    conversation = [{"role": "user", "content": [{"type": "text", "text": "Is this dialogue safe?"}]}]
    text = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], return_tensors="pt")
    with torch.inference_mode():
        answers = [m.generate(**inputs, max_new_tokens=6, do_sample=False) for m in (thinker, from_full)]
    assert torch.equal(answers[0], answers[1])
