"""Voxtral Mini as configs/judges-2026.yaml serves it (`voxtral_mini_3b`: mistral_common's prompts, vLLM on the
Mistral-format files), on the real vLLM engine and on transformers (the Hugging Face files of the same weights)."""

from __future__ import annotations

import json

from tests.engine.support import QUESTION, SYSTEM, AudioEngineContract, audio_request, refuses_two_audio_items

# 16 kHz audio padded to whole 30 s chunks, 12.5 tokens a second: 375 `[AUDIO]` tokens per started chunk.
TOKENS_PER_CHUNK = 375


class TestVoxtral(AudioEngineContract):
    judge = "voxtral_mini_3b"
    placeholder = "[BEGIN_AUDIO]"

    def test_the_engine_reads_the_mistral_format_files(self, model, engine):
        """Both layouts of the released repository are there; the engine was started on Mistral's (the only one vLLM
        serves Voxtral from) and its tokenizer is the checkpoint's Tekken file."""
        assert {"params.json", "consolidated.safetensors", "tekken.json", "config.json"} <= {
            path.name for path in model.iterdir()
        }
        config = engine.llm.llm_engine.vllm_config
        assert (config.model_config.tokenizer_mode, config.model_config.config_format) == ("mistral", "mistral")
        assert config.load_config.load_format == "mistral"
        assert json.loads((model / "params.json").read_text())["multimodal"]["whisper_model_args"]

    def test_the_prompt_is_mistral_commons_with_the_system_prompt_before_the_text(self, engine):
        """One user turn: `[INST]`, the audio (`[BEGIN_AUDIO]` and its audio tokens), the system prompt and the
        question, `[/INST]`; no system message (Voxtral has none)."""
        request = audio_request("a", 2.0)
        tokens = engine.build_prompt(request)["prompt_token_ids"]
        audio_id, begin_id = (engine.tokenizer.convert_tokens_to_ids(token) for token in ("[AUDIO]", "[BEGIN_AUDIO]"))
        assert tokens[:3] == [engine.tokenizer.bos_token_id, engine.tokenizer.convert_tokens_to_ids("[INST]"), begin_id]
        assert tokens.count(audio_id) == TOKENS_PER_CHUNK
        assert engine.render(request).endswith(f"{SYSTEM}\n\n{QUESTION}[/INST]")
        assert "[SYSTEM_PROMPT]" not in engine.render(request)

    def test_audio_tokens_come_per_started_30_s_and_slots_place_each_item(self, engine):
        short, long = engine.generate([audio_request("s", 5.0), audio_request("l", 35.0)])
        assert long.n_input_tokens - short.n_input_tokens == TOKENS_PER_CHUNK
        refuses_two_audio_items(engine)
