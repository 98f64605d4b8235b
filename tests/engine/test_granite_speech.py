"""Granite Speech 3.3 as configs/judges-2026.yaml serves it (`granite_speech_8b`: the released chat template with
`<|audio|>`, the checkpoint's audio LoRA adapter on audio requests only), on the real vLLM engine and on transformers
(which applies the same adapter with peft).

Its feature extractor (transformers `feature_extraction_granite_speech.py`, which vLLM runs too) builds torchaudio's
`MelSpectrogram`: without torchaudio neither engine can read its audio, and the module is skipped."""

from __future__ import annotations

import json

import pytest

from bench.engine_agreement import tiny_spec
from lalm_judge.judging.backends.base import JudgeRequest
from tests.engine.support import QUESTION, SYSTEM, AudioEngineContract, audio_request, refuses_two_audio_items

pytest.importorskip("torchaudio", reason="Granite Speech's feature extractor needs torchaudio (MelSpectrogram)")
pytest.importorskip("peft", reason="transformers applies Granite Speech's audio LoRA adapter with peft")

# 100 mel frames a second, stacked by 2, in windows of 15 pooled by 5: 3 tokens per 1.5 s started.
TOKENS_PER_S = 10


class TestGraniteSpeech(AudioEngineContract):
    judge = "granite_speech_8b"
    placeholder = "<|audio|>"

    def test_the_released_template_writes_the_placeholder_before_the_question(self, model, engine):
        """The released chat template (system role, `<|start_of_role|>` turns) with `<|audio|>` right before the
        question, and the engine expands it into 10 audio tokens a second."""
        processor = json.loads((model / "processor_config.json").read_text())
        assert processor["audio_processor"]["feature_extractor_type"] == "GraniteSpeechFeatureExtractor"
        assert engine.sampling_rate == 16000
        request = audio_request("a", 1.0)
        assert engine.render(request) == (
            f"<|start_of_role|>system<|end_of_role|>{SYSTEM}<|end_of_text|>\n"
            f"<|start_of_role|>user<|end_of_role|><|audio|>{QUESTION}<|end_of_text|>\n"
            "<|start_of_role|>assistant<|end_of_role|>"
        )
        one, three, six = engine.generate([request, audio_request("b", 3.0), audio_request("c", 6.0)])
        # 1 s: 101 mel frames, 50 encoder frames, 4 windows of 3 tokens.
        assert one.n_input_tokens == len(engine.build_prompt(request)["prompt_token_ids"]) - 1 + 12
        assert six.n_input_tokens - three.n_input_tokens == 3 * TOKENS_PER_S

    def test_the_audio_lora_applies_to_audio_requests_only(self, model, engine):
        """The engine starts with LoRA on at the adapter's rank; an audio prompt names the checkpoint's adapter and
        answers otherwise without it, a text prompt names none."""
        lora_config = engine.llm.llm_engine.vllm_config.lora_config
        adapter = json.loads((model / "adapter_config.json").read_text())
        assert lora_config is not None and lora_config.max_lora_rank == adapter["r"]
        audio = audio_request("a", 2.0)
        assert engine.lora_request(audio).lora_path == str(model)
        assert engine.lora_request(JudgeRequest("t", SYSTEM, QUESTION)) is None
        params = engine.sampling_params_class(max_tokens=1, temperature=0.0, logprobs=5)
        prompt = engine.build_prompt(audio)
        with_lora, without = (
            engine.llm.generate([prompt], params, use_tqdm=False, lora_request=lora)[0].outputs[0].logprobs[0]
            for lora in (engine.lora_request(audio), None)
        )
        assert {t: e.logprob for t, e in with_lora.items()} != {t: e.logprob for t, e in without.items()}

    def test_one_audio_item_per_prompt(self, engine):
        refuses_two_audio_items(engine)

    def test_transformers_reads_each_audio_alone_and_refuses_a_folder_without_the_adapter(self, model, tmp_path):
        """transformers (5.19, peft 0.21) answers an audio request the same alone and in a batch (one audio request
        per forward pass: its encoder would read the batch's padding), and refuses a copy of the checkpoint without
        its adapter. (That it applies the adapter to audio requests only is the agreement with vLLM above: vLLM
        names the adapter with audio prompts alone, and the adapter changes an audio answer.)"""
        import shutil

        from lalm_judge.core.registry import MissingDependency
        from lalm_judge.judging.backends.hf import TransformersBackend

        judge = TransformersBackend(tiny_spec(*self.entry(), model, "transformers"))
        audios = [audio_request("short", 1.0), audio_request("long", 2.5)]
        batched = judge.generate(audios)
        alone = [judge.generate([request])[0] for request in audios]
        assert [(o.text, o.n_input_tokens) for o in batched] == [(o.text, o.n_input_tokens) for o in alone]
        bare = tmp_path / "without-adapter"
        shutil.copytree(model, bare, ignore=shutil.ignore_patterns("adapter_*"))
        with pytest.raises(MissingDependency, match="its folder has none"):
            TransformersBackend(tiny_spec(*self.entry(), bare, "transformers"))
