import copy
from pathlib import Path

import pytest
import yaml

from lalm_judge.workflow.config import (
    ConfigError,
    check_config,
    check_run_environment,
    load_config,
    tracks,
    validate_config,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo_config():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.mark.parametrize("path", ["config.yaml", "configs/paper.yaml", "tests/config/test.yaml"])
def test_shipped_configs_are_valid(path):
    config = load_config(ROOT / path)
    assert config["seed"] == 0


def test_defaults_are_filled(demo_config):
    config = validate_config(demo_config)
    assert config["metrics"]["bootstrap"] == 1000
    assert config["judges"]["minilm"]["long_audio"] == "chunk"
    assert config["evaluation"]["modalities"] == ["text", "audio", "audio_text"]


def test_transcript_source_must_name_an_asr_model(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["evaluation"]["transcript_sources"] = ["gt", "asr:whisper_huge"]
    with pytest.raises(ConfigError, match="asr:whisper_huge"):
        validate_config(bad)


def test_judge_without_a_shared_modality_is_rejected(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["evaluation"]["modalities"] = ["audio_text"]
    with pytest.raises(ConfigError, match=r"judges\.minilm\.modalities"):
        validate_config(bad)


def test_metric_settings_defaults_are_the_schema_defaults(demo_config, monkeypatch):
    """The schema is the one place of the metrics defaults; MetricSettings (for code) and the CLI say the same."""
    from lalm_judge.analysis.engine import MetricSettings
    from lalm_judge.cli import metrics as metrics_cli

    metrics = validate_config(demo_config | {"metrics": {}})["metrics"]
    assert MetricSettings() == MetricSettings(
        n_boot=metrics["bootstrap"],
        n_folds=metrics["folds"],
        min_pb_dialogues=metrics["position_bias_min_dialogues"],
        n_permutations=metrics["permutations"],
    )
    seen = []
    monkeypatch.setattr(metrics_cli, "run_metrics", lambda paths, out, settings: seen.append(settings) or [])
    assert metrics_cli.main(["scores.parquet", "--out", "m"]) == 0
    assert seen == [MetricSettings()]


def _imported(config):
    """The demo config turned into one that judges an imported benchmark."""
    config = copy.deepcopy(config)
    config["corpus"] = {"format": "hf_benchmark", "path": "benchmark"}
    variants = config["variants"]
    config["variants"] = {
        "source": "imported",
        "categories": variants["categories"],
        "severities": variants["severities"],
    }
    config["asr"]["models"] = {name: {"model": "imported"} for name in config["asr"]["models"]}
    # Judged as released: the demo's controls would need voices and an ASR that hears the changed turn.
    config["evaluation"]["conditions"] = ["clean"]
    for entry in config["judges"].values():
        entry.get("schedule", {}).pop("conditions", None)
    return config


def test_an_imported_benchmark_needs_no_generator(demo_config):
    config = validate_config(_imported(demo_config))
    assert "generator" not in config["variants"] and config["variants"]["source"] == "imported"
    assert validate_config(demo_config)["variants"]["source"] == "generated"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c["variants"].update(generator={"name": "template"}), r"variants.generator: unused"),
        (lambda c: c["corpus"].update(format="jsonl"), r"variants.source: 'imported' .* needs corpus.format"),
        (lambda c: c["variants"].update(source="generated"), r"variants: 'generator' is a required property"),
    ],
)
def test_imported_settings_that_contradict_each_other_name_the_key(demo_config, edit, message):
    bad = _imported(demo_config)
    edit(bad)
    with pytest.raises(ConfigError, match=message):
        validate_config(bad)


def test_imported_transcripts_need_an_imported_benchmark(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["asr"]["models"]["whisper_tiny_en"]["model"] = "imported"
    with pytest.raises(ConfigError, match=r"asr.models.whisper_tiny_en.model: 'imported' takes released transcripts"):
        validate_config(bad)


# --- the pairwise track -------------------------------------------------------------------------------------------
@pytest.fixture
def pairwise_config():
    return yaml.safe_load((ROOT / "configs" / "pairwise_demo.yaml").read_text())


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("configs/pairwise.yaml", ("pairwise", "preference")),
        ("configs/pairwise_demo.yaml", ("pairwise", "preference")),
        ("tests/config/pairwise.yaml", ("pairwise",)),
        ("tests/config/pairwise_sagelm.yaml", ("pairwise",)),
    ],
)
def test_shipped_pairwise_configs_are_valid_and_run_only_that_track(path, expected):
    config = load_config(ROOT / path)
    assert tracks(config) == expected
    assert config["pairwise"]["long_audio"]["policy"] == "truncate"


def test_the_preference_test_config_builds_data_only():
    config = load_config(ROOT / "tests/config/preference.yaml")
    assert tracks(config) == ("preference",)
    assert config["preference"]["filters"] == {"max_wer": 0.35, "min_duration_s": 0.2}
    assert config["preference"]["pairs"]["aspects"] == [
        "helpfulness",
        "honesty",
        "instruction_following",
        "truthfulness",
    ]


def test_preference_cross_checks_name_the_key():
    config = yaml.safe_load((ROOT / "tests/config/preference.yaml").read_text())
    config["preference"]["asr"] = "whisper_base"
    with pytest.raises(ConfigError, match="preference.asr: 'whisper_base' is not in asr.models"):
        validate_config(config)
    config = yaml.safe_load((ROOT / "tests/config/preference.yaml").read_text())
    config["preference"]["rationales"] = {"generator": "llm"}
    with pytest.raises(ConfigError, match="preference.rationales.llm.model is required"):
        validate_config(config)
    config = yaml.safe_load((ROOT / "tests/config/preference.yaml").read_text())
    config["preference"]["acoustic"]["styles"]["gender"] = {"male": {"engine": "piper"}, "other": {"engine": "piper"}}
    with pytest.raises(ConfigError, match="gender must have the styles male and female"):
        validate_config(config)
    config = yaml.safe_load((ROOT / "tests/config/preference.yaml").read_text())
    config["preference"]["rationales"] = {"generator": "llm", "llm": {"model": "m", "tempreature": 0.1}}
    with pytest.raises(ConfigError, match="tempreature"):
        validate_config(config)


def test_pairwise_defaults_are_filled(pairwise_config):
    del pairwise_config["pairwise"]["long_audio"], pairwise_config["pairwise"]["metrics"]
    config = validate_config(pairwise_config)
    assert config["pairwise"]["long_audio"] == {"policy": "truncate", "max_response_s": 60}
    assert config["pairwise"]["metrics"] == {
        "bootstrap": 1000,
        "duration_bins": [0, 10, 20, 30, 40, 60, 80],
        "min_items": 10,
    }
    assert config["pairwise"]["items"]["missing_audio"] == "fail"


def test_a_config_may_hold_both_tracks(demo_config, pairwise_config):
    both = {**demo_config, "pairwise": pairwise_config["pairwise"]}
    both["judges"] = {**both["judges"], **pairwise_config["judges"]}
    assert tracks(validate_config(both)) == ("safety", "pairwise")


def test_a_config_needs_a_track_and_the_safety_track_its_sections(demo_config, pairwise_config):
    with pytest.raises(ConfigError, match="is not valid under any of the given schemas"):
        validate_config({"judges": pairwise_config["judges"]})
    without_corpus = {k: v for k, v in demo_config.items() if k != "corpus"}
    with pytest.raises(ConfigError, match="'corpus' is a dependency of 'evaluation'"):
        validate_config(without_corpus)


def with_embedding_judge(config):
    config["judges"]["e"] = {"backend": "embedding", "model": "m", "modalities": ["text", "audio"]}
    config["pairwise"]["judges"] = ["e"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["pairwise"].update(judges=["smollm2_pmi", "gpt5"]), r"unknown judge\(s\) \['gpt5'\]"),
        (lambda c: c["pairwise"].update(transcript_sources=[]), "judge 'smollm2_pmi' reads text only"),
        (lambda c: c["pairwise"].update(transcript_sources=["asr:huge"]), "'asr:huge' names no model in asr.models"),
        (lambda c: c["pairwise"]["items"].pop("path"), "pairwise.items.path is required for format 'jsonl'"),
        (with_embedding_judge, r"the embedding baseline judges pairs from their texts only.*\['audio'\]"),
        (lambda c: c["pairwise"].update(prompts=["basic"]), r"pairwise.prompts.0: 'basic' is not one of"),
        (lambda c: c["pairwise"]["long_audio"].update(policy="chunk"), "'chunk' is not one of"),
    ],
)
def test_bad_pairwise_settings_name_the_key(pairwise_config, change, message):
    change(pairwise_config)
    with pytest.raises(ConfigError, match=message):
        validate_config(pairwise_config)


def test_a_likelihood_judge_gives_no_safety_score(demo_config):
    demo_config["judges"]["lm"] = {"backend": "likelihood", "model": "bundled:smollm2-135m-instruct"}
    demo_config["evaluation"]["judges"] = ["lm"]
    with pytest.raises(ConfigError, match="judge 'lm' \\(backend 'likelihood'\\) compares two responses"):
        validate_config(demo_config)


def test_the_pairwise_track_cannot_use_released_safety_transcripts(demo_config, pairwise_config):
    both = {**_imported(demo_config), "pairwise": pairwise_config["pairwise"]}
    both["judges"] = {**both["judges"], **pairwise_config["judges"]}
    both["pairwise"]["transcript_sources"] = ["asr:whisper_tiny_en"]
    with pytest.raises(ConfigError, match="asr:whisper_tiny_en has released transcripts of the safety benchmark"):
        validate_config(both)


# --- What each judge can serve, checked when the config is parsed (judge capabilities) ------------------------
@pytest.fixture
def paper_config():
    return yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # MiniCPM-o's remote code does not import under transformers 5; vLLM serves it.
        (
            lambda j: j["minicpm_o"].update(backend="transformers", capabilities={}),
            r"judges\.minicpm_o\.backend: MiniCPM-o \(openbmb/MiniCPM-o-4_5\) runs on vllm, not 'transformers'",
        ),
        (
            lambda j: j["meralion2_10b"].update(capabilities={}),
            r"judges\.meralion2_10b\.capabilities\.system_role is true, but MERaLiON-2 needs false",
        ),
        (
            lambda j: j["gemini_25_flash_lite"].update(capabilities={}),
            r"judges\.gemini_25_flash_lite\.capabilities\.logprobs is true, .* set capabilities\.logprobs: false",
        ),
        (
            lambda j: j["qwen2_audio_7b"].update(max_audio_s=60),
            r"judges\.qwen2_audio_7b\.max_audio_s: 60 is over Qwen2-Audio's 30 s of audio",
        ),
        (
            lambda j: j["llama31_8b"].update(modalities=["text", "audio"]),
            r"judges\.llama31_8b\.modalities: \['audio'\] need audio input, but Llama-3\.1-Instruct is a text model; "
            r"cells audio-none/basic/clean, audio-none/basic/masked, .* cannot be served; keep only 'text'",
        ),
        (
            lambda j: j["audio_flamingo_3"].update(backend="transformers", capabilities={"prompt_format": "minicpmo"}),
            r"judges\.audio_flamingo_3\.capabilities\.prompt_format: 'minicpmo' is built by the vllm backend only",
        ),
    ],
)
def test_a_judge_that_cannot_serve_its_cells_is_rejected_when_parsed(paper_config, edit, message):
    edit(paper_config["judges"])
    with pytest.raises(ConfigError, match=message):
        validate_config(paper_config)


def test_the_calibrated_cells_of_a_judge_without_logprobs_are_routed_with_a_note(paper_config):
    notes = check_config(validate_config(paper_config))
    (routed,) = [note for note in notes if "calibrated" in note]
    assert routed.startswith(
        # Under clean and the injection, the only control that changes a text cell with the ground truth.
        "judge gemini_25_flash_lite, cells text-gt/calibrated/clean, text-gt/calibrated/injection, "
        "text-asr:whisper_large_v3/calibrated/clean"
    )
    assert "scored from its parsed SAFETY_SCORE line (score_source 'parsed')" in routed
    unpinned = [note for note in notes if "revision is 'main'" in note]
    assert len(unpinned) == 6 and all("lalm-judge pin-revisions" in note for note in unpinned)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda c: c["asr"]["models"]["whisper_base"].update(gpu=0),
            r"asr\.models\.whisper_base: device 'cuda' with gpu 0",
        ),
        (lambda c: c["tts"].update(gpu=0), r"tts\.gpu is 0, but the voices \['default_a', 'default_b'\] run on cuda"),
    ],
)
def test_a_cuda_stage_without_a_gpu_request_is_rejected(paper_config, edit, message):
    edit(paper_config)
    with pytest.raises(ConfigError, match=message):
        validate_config(paper_config)


def test_xtts_voices_need_the_accepted_coqui_licence(paper_config, tmp_path):
    config = validate_config(paper_config)
    with pytest.raises(
        ConfigError, match=r"tts\.voices\.default_a, tts\.voices\.default_b use XTTS-v2.*COQUI_TOS_AGREED=1"
    ):
        check_run_environment(config, {})
    warnings = check_run_environment(config, {"COQUI_TOS_AGREED": "1", "HF_HOME": str(tmp_path)})
    assert len(warnings) == 1 and "judges.llama31_8b" in warnings[0] and "HF_TOKEN" in warnings[0]
    assert check_run_environment(config, {"COQUI_TOS_AGREED": "1", "HF_TOKEN": "hf_x"}) == []


def _api_judge(**options):
    return {"backend": "openai", "model": "gpt-4o", "options": {"api_key_env": "OPENAI_API_KEY", **options}}


@pytest.mark.parametrize(
    ("typo", "nearest"),
    [("baseurl", "base_url"), ("timeout", "timeout_s"), ("max_retry", "max_retries"), ("proxy", None)],
)
def test_an_unknown_endpoint_option_is_named_with_the_nearest_valid_name(demo_config, typo, nearest):
    demo_config["judges"]["api"] = _api_judge(**{typo: "x"})
    with pytest.raises(ConfigError, match=rf"judges\.api\.options: unknown key '{typo}'") as raised:
        validate_config(demo_config)
    message = str(raised.value)
    assert (f"did you mean '{nearest}'?" in message) if nearest else "did you mean" not in message
    # The endpoint's keys ($defs/endpoint) and the backend's own.
    assert (
        "(valid keys: answer_token_ids, api_key_env, backoff_base_s, backoff_max_s, base_url, cascade_asr, "
        "concurrency, header_env," in message
    )


def test_unknown_keys_anywhere_are_named_with_the_nearest_valid_name(demo_config):
    demo_config["evaluation"]["judgs"] = ["minilm"]
    demo_config["judges"]["minilm"]["genration"] = {}
    # An endpoint section closed by unevaluatedProperties (the llm settings behind a $ref).
    demo_config["variants"]["generator"] = {"name": "llm", "model": "gpt-4o", "baseurl": "http://127.0.0.1:1/v1"}
    with pytest.raises(ConfigError) as raised:
        validate_config(demo_config)
    message = str(raised.value)
    assert "evaluation: unknown key 'judgs'; did you mean 'judges'?" in message
    assert "judges.minilm: unknown key 'genration'; did you mean 'generation'?" in message
    assert "variants.generator: unknown key 'baseurl'; did you mean 'base_url'?" in message
