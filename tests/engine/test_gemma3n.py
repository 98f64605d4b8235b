"""Gemma 3n E4B-it as configs/judges-2026.yaml serves it (`gemma3n_e4b`: vLLM, the released chat template and
processor), on the real vLLM engine and on transformers (`Gemma3nForConditionalGeneration`), both building the timm
vision tower (the tiny model: `bench/gemma3n_tiny.py`).

The two engines read the same prompt tokens and the same audio features, and give the same answers to text requests.
To audio requests they do not: vLLM embeds `<end_of_audio>`, which closes every audio item, with the text embedding
table (`gemma3n_mm.py` takes only the `<audio_soft_token>` positions from the audio tower; the released table's rows
for the audio ids are copies of the pad row), transformers with the audio embedder's own row for it
(`modeling_gemma3n.py`: ids from `embed_audio.vocab_offset` on go through `embed_audio`). With that one row made
equal, the two engines give the same answers to audio requests as well."""

from __future__ import annotations

import json
from contextlib import contextmanager

import numpy as np
import pytest

from bench.engine_agreement import MAX_NEW_TOKENS, identical, release, tiny_spec
from tests.engine.support import (
    P_SAFE_TOLERANCE,
    QUESTION,
    SYSTEM,
    AudioEngineContract,
    audio_request,
    refuses_two_audio_items,
)

# About a minute on a quiet core (engine start, the transformers reference): handed out early (tests/conftest.py).
pytestmark = pytest.mark.slow

AUDIO_TOKENS_PER_ITEM = 188  # Gemma3nProcessor `audio_seq_length`, vLLM gemma3n_mm.py `TOKENS_PER_AUDIO`


def engine_model(engine):
    """The vLLM engine's model (the in-process CPU engine's only worker)."""
    return engine.llm.apply_model(lambda model: model)[0]


def differing(requests, expected, got):
    return [r.request_id for r, a, b in zip(requests, expected, got) if not identical(a, b)]


@contextmanager
def end_of_audio_embedded_as_transformers_embeds_it(engine, reference):
    """The engine's text table row of `<end_of_audio>` set to what transformers embeds it as (its audio embedder's
    output over the text table's scale), the prefix cache emptied; restored afterwards. Only what the engine embeds
    changes: the CPU engine computes the logits from a packed copy of the tied table, made at load
    (`vocab_parallel_embedding.py` `dispatch_cpu_unquantized_gemm`), which stays as loaded, like transformers'
    output layer."""
    import torch

    eoa = reference.model.config.eoa_token_id
    table = engine_model(engine).language_model.model.embed_tokens.weight
    saved = table[eoa].clone()
    with torch.no_grad():
        audio_row = reference.model.model.embed_audio(input_ids=torch.tensor([[eoa]]))[0, 0]
        table[eoa] = audio_row / reference.model.get_input_embeddings().embed_scale
    engine.llm.reset_prefix_cache()
    try:
        yield
    finally:
        with torch.no_grad():
            table[eoa] = saved
        engine.llm.reset_prefix_cache()


class TestGemma3n(AudioEngineContract):
    judge = "gemma3n_e4b"
    placeholder = "<audio_soft_token>"

    @pytest.fixture(scope="class")
    @classmethod
    def reference(cls, model):
        """The transformers backend on the same weights."""
        from lalm_judge.judging.backends.hf import TransformersBackend

        backend = TransformersBackend(tiny_spec(*cls.entry(), model, "transformers"))
        yield backend
        release(backend)

    @pytest.fixture(scope="class")
    @classmethod
    def answers(cls, reference, engine, requests):
        return reference.generate(requests), engine.generate(requests)

    def test_two_engines_give_the_same_answers(self, requests, answers):
        """Text requests: the same answers and P(safe). Audio requests: the same prompt tokens (the placeholder
        expanded alike), other answers (the `<end_of_audio>` embedding, module docstring)."""
        expected, got = answers
        text = [i for i, request in enumerate(requests) if not request.audio_items]
        audio = [i for i, request in enumerate(requests) if request.audio_items]
        assert text and audio
        assert differing([requests[i] for i in text], [expected[i] for i in text], [got[i] for i in text]) == []
        for i in text:
            if expected[i].p_safe is not None:
                assert abs(expected[i].p_safe - got[i].p_safe) <= P_SAFE_TOLERANCE, requests[i].request_id
        assert [expected[i].n_input_tokens for i in audio] == [got[i].n_input_tokens for i in audio]
        assert differing([requests[i] for i in audio], [expected[i] for i in audio], [got[i] for i in audio])

    def test_with_one_end_of_audio_embedding_the_engines_answer_audio_alike(self, engine, reference, requests):
        """The `<end_of_audio>` embedding is the only difference: vLLM embeds it as its text table row, transformers as
        its audio embedder's; with the engine embedding it as transformers does, audio requests get the same answers
        and P(safe) (the features, their masks and the 188 tokens per item agree)."""
        import torch

        audio = [request for request in requests if request.audio_items]
        eoa = torch.tensor([reference.model.config.eoa_token_id])
        with torch.no_grad():
            vllm_embeds = engine_model(engine).language_model.embed_input_ids(eoa)[0].numpy()
            text_row = reference.model.get_input_embeddings()(eoa)[0].numpy()
            audio_row = reference.model.model.embed_audio(input_ids=eoa[None])[0, 0].numpy()
        assert np.allclose(vllm_embeds, text_row, atol=1e-6) and not np.allclose(vllm_embeds, audio_row, atol=1e-2)
        with end_of_audio_embedded_as_transformers_embeds_it(engine, reference):
            expected, got = reference.generate(audio), engine.generate(audio)
        assert differing(audio, expected, got) == []
        for request, a, b in zip(audio, expected, got):
            if a.p_safe is not None:
                assert abs(a.p_safe - b.p_safe) <= P_SAFE_TOLERANCE, request.request_id

    def test_the_released_template_and_processor(self, model, engine):
        """The checkpoint's processor is the released one (Gemma3nProcessor: 16 kHz features, 188 audio tokens per
        item), the chat template puts the system prompt before the first user turn's text (Gemma has no system role)
        and writes `<audio_soft_token>` where the audio goes, and the prompt starts with one `<bos>`."""
        processor = json.loads((model / "processor_config.json").read_text())
        assert processor["processor_class"] == "Gemma3nProcessor" and processor["audio_seq_length"] == 188
        assert processor["feature_extractor"]["sampling_rate"] == engine.sampling_rate == 16000
        assert type(engine.template_owner).__name__ == "Gemma3nProcessor"
        request = audio_request("a", 1.0)
        assert engine.render(request) == (
            f"<bos><start_of_turn>user\n{SYSTEM}\n\n<audio_soft_token>{QUESTION}<end_of_turn>\n<start_of_turn>model\n"
        )
        assert engine.build_prompt(request)["prompt_token_ids"][:2] == [
            engine.tokenizer.bos_token_id,
            engine.tokenizer.convert_tokens_to_ids("<start_of_turn>"),
        ]

    def test_every_audio_item_is_188_tokens_as_the_processor_counts_them(self, engine):
        """A 1 s and a 30 s clip take the same prompt tokens in the engine: the processor's count of the rendered
        prompt with its audio (`<start_of_audio>`, 188 `<audio_soft_token>`, `<end_of_audio>`, the newlines around
        them merged as the tokenizer merges them)."""
        short, full = audio_request("s", 1.0), audio_request("l", 30.0)
        processed = engine.template_owner(
            text=[engine.render(short)],
            audio=[short.audio[0]],
            sampling_rate=engine.sampling_rate,
            add_special_tokens=False,
        )["input_ids"][0]
        assert list(processed).count(engine.tokenizer.convert_tokens_to_ids("<audio_soft_token>")) == 188
        one, thirty = engine.generate([short, full])
        assert one.n_input_tokens == thirty.n_input_tokens == len(processed)
        assert one.n_output_tokens <= MAX_NEW_TOKENS

    def test_the_encoder_makes_6_25_tokens_a_second_which_30_s_fill(self, reference):
        """100 mel frames a second (10 ms hops), two stride-2 convolutions, every fourth conformer frame kept
        (`conf_reduction_factor`): 6.25 audio tokens a second, so that 30 s, the window, are the 188 of every item."""
        import torch

        processor = reference.processor
        counts = []
        for seconds in (2.0, 10.0, 30.0):
            features = processor.feature_extractor([audio_request("a", seconds).audio[0]], return_tensors="pt")
            with torch.no_grad():
                encoded = reference.model.model.get_audio_features(
                    features["input_features"], ~features["input_features_mask"]
                )
            counts.append(int((~encoded.audio_mel_mask).sum()))
        assert counts == [13, 63, AUDIO_TOKENS_PER_ITEM]

    def test_the_window_is_the_feature_extractors_30_s(self, engine):
        """The limit the engine refuses audio over is the feature extractor's cut (480,000 samples at 16 kHz), read
        from the processor; two audio items need `audio_per_prompt`."""
        assert engine.max_audio_s == 30.0
        refuses_two_audio_items(engine)
