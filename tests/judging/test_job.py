"""The judge job on synthetic tone manifests (`bench.manifests`): one model load for every cell of a judge, the
request cache across reruns, added prompts and conditions, a SIGKILL or SIGTERM and its resume (an endpoint judge's
answers committed one by one), and the order in which requests reach each kind of backend.

Real judges throughout (the tiny random-weight Qwen2-Audio through the transformers backend, the MiniLM
embedding baseline, the openai backend against `StandInServer`, tests/support/openai_standin.py: a stdlib server
standing in for a paid API), except the order tests, which record requests with a test double of the JudgeBackend
interface.
"""

from __future__ import annotations

import dataclasses
import json
import signal

import numpy as np
import pytest
import torch

from bench.judge_stage import job_cells as cells_of
from bench.judge_stage import job_out_paths as out_paths
from bench.judge_stage import run_job, stop_job_half_way
from bench.manifests import ASR_SOURCE, write_tone_manifests
from lalm_judge.core.signals import EXIT_STATUS
from lalm_judge.judging.backends.base import JudgeOutput, JudgeSpec
from lalm_judge.judging.backends.embedding import BUNDLED_MODEL
from lalm_judge.judging.backends.hf import TransformersBackend
from lalm_judge.judging.cache import RequestCache
from lalm_judge.judging.conditions import CONDITION_TRANSFORMS
from lalm_judge.manifest.samples import Manifest
from tests.support.openai_standin import Reply, StandInServer, serving

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def manifests(tmp_path_factory):
    # 2 dialogues x (1 original + 2 turns x 3 variants) = 14 samples
    return write_tone_manifests(tmp_path_factory.mktemp("manifests"), n_dialogues=2, variants_per_turn=3)


@pytest.fixture(scope="module")
def lalm_spec(qwen2audio_dir):
    return JudgeSpec(
        name="tiny_lalm",
        backend="transformers",
        model=str(qwen2audio_dir),
        modalities=("audio", "audio_text"),
        generation={"max_new_tokens": 6},
        batch_size=4,
        options={"device": "cpu"},
    )


class CountingBuilds:
    """Builds the judge's real backend, counting how often (a model load each)."""

    def __init__(self, spec):
        self.spec, self.builds = spec, 0

    def __call__(self):
        self.builds += 1
        return TransformersBackend(self.spec)


LALM_CELLS = [("audio", "none"), ("audio_text", "gt")]


def test_one_job_scores_every_cell_with_one_model_load_then_reruns_for_free(manifests, lalm_spec, tmp_path):
    cells = cells_of(LALM_CELLS, ["basic", "rubric"])
    build = CountingBuilds(lalm_spec)
    cold = run_job(manifests, lalm_spec, cells, tmp_path, backend=build).stats
    n_samples = sum(1 for path in manifests for _ in Manifest.load(path).samples())
    assert build.builds == 1 and cold.model_loads == 1
    assert cold.requests == n_samples * len(cells) == cold.distinct_requests == cold.computed
    for path in out_paths(tmp_path, cells):
        assert path.is_file()
    written = [path.read_bytes() for path in out_paths(tmp_path, cells)]
    assert json.loads((tmp_path / "stats.json").read_text())["computed"] == cold.computed

    rerun = run_job(manifests, lalm_spec, cells, tmp_path, backend=build).stats
    assert (rerun.computed, rerun.cached, rerun.model_loads, build.builds) == (0, cold.computed, 0, 1)
    assert [path.read_bytes() for path in out_paths(tmp_path, cells)] == written, "cached rows equal computed ones"


def test_adding_a_prompt_computes_only_its_requests(manifests, lalm_spec, tmp_path):
    first = run_job(manifests, lalm_spec, cells_of(LALM_CELLS, ["basic"]), tmp_path).stats
    before = out_paths(tmp_path, cells_of(LALM_CELLS, ["basic"]))[0].read_bytes()

    added = run_job(manifests, lalm_spec, cells_of(LALM_CELLS, ["basic", "cot"]), tmp_path).stats
    assert added.model_loads == 1 and added.cached == first.computed
    assert added.computed == added.requests - first.requests
    for label, counts in added.cells.items():
        assert (counts.cached, counts.computed) == (
            (counts.requests, 0) if "/basic/" in label else (0, counts.requests)
        )
    assert out_paths(tmp_path, cells_of(LALM_CELLS, ["basic"]))[0].read_bytes() == before


def quieter(sample, audio, sample_rate):
    """A test condition: the dialogue at half the amplitude (a stand-in for the control conditions)."""
    return sample, None if audio is None else (audio[0] * 0.5, audio[1])


def test_adding_a_condition_computes_only_the_requests_it_changes(manifests, tmp_path):
    spec = JudgeSpec(
        name="minilm",
        backend="embedding",
        model=BUNDLED_MODEL,
        modalities=("text", "audio"),
        options={"threads": 1, "cascade_asr": ASR_SOURCE.removeprefix("asr:")},
    )
    conditions = {**CONDITION_TRANSFORMS, "quieter": quieter}
    grid = [("text", "gt"), ("audio", "none")]
    clean = run_job(manifests, spec, cells_of(grid, ["basic"]), tmp_path, conditions=conditions).stats
    both = run_job(manifests, spec, cells_of(grid, ["basic"], ["clean", "quieter"]), tmp_path, conditions=conditions)
    counts = both.stats.cells
    # The text cell's inputs do not change under an audio condition: all its requests come from the cache.
    assert counts["text-gt/basic/quieter"].cached == counts["text-gt/basic/quieter"].requests
    assert counts["audio-none/basic/quieter"].computed == counts["audio-none/basic/quieter"].requests
    assert both.stats.computed == clean.requests // 2
    assert both.tables[1]["condition"].unique().to_list() == ["quieter"]


def test_a_condition_that_is_not_deterministic_is_an_error(manifests, lalm_spec, tmp_path):
    rng = np.random.default_rng()

    def noisy(sample, audio, sample_rate):  # unseeded: the request changes every time it is built
        return sample, (audio[0] + 1e-3 * rng.standard_normal(len(audio[0])), audio[1])

    with pytest.raises(RuntimeError, match="came out different when built again.*must be deterministic"):
        run_job(
            manifests,
            lalm_spec,
            cells_of([("audio", "none")], ["basic"], ["noisy"]),
            tmp_path,
            conditions={"noisy": noisy},
            backend=RecordingBackend(),
        )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kill_at", "stop_signal"), [(0.1, signal.SIGKILL), (0.5, signal.SIGKILL), (0.5, signal.SIGTERM)]
)
def test_a_job_killed_at_any_point_resumes_with_only_the_missing_requests(
    manifests, lalm_spec, tmp_path, kill_at, stop_signal
):
    """SIGKILL (a node failure, the end of SLURM's grace period) or SIGTERM (SLURM's time limit: the job stops
    cleanly, `core.signals`, exit status 143): what was committed stays in the request cache."""
    cells = cells_of(LALM_CELLS, ["basic", "rubric"])
    spec = dataclasses.replace(lalm_spec, batch_size=2, generation={"max_new_tokens": 16})
    n_requests = 14 * len(cells)
    stored, status = stop_job_half_way(manifests, spec, cells, tmp_path, int(kill_at * n_requests), stop_signal)
    assert 0 < stored < n_requests, "killed before the end"
    assert not any(path.exists() for path in out_paths(tmp_path, cells))
    if stop_signal == signal.SIGTERM:
        assert status == EXIT_STATUS and "stopped by SIGTERM" in (tmp_path / "killed_job.stderr").read_text()

    resumed = run_job(manifests, spec, cells, tmp_path).stats
    assert (resumed.cached, resumed.computed) == (stored, n_requests - stored)
    assert RequestCache(tmp_path / "cache" / spec.name).count() == n_requests


@pytest.mark.slow
@pytest.mark.server
def test_an_endpoint_judge_stopped_by_sigterm_keeps_every_answer_it_got(manifests, tmp_path, monkeypatch):
    """One request at a time, a quarter of a second each: SIGTERM after two answers keeps them and the answer in
    flight, and the rerun sends the endpoint only the requests it did not answer."""
    monkeypatch.setenv("LALM_JUDGE_JOB_TEST_KEY", "sk-job-test-0000")
    server = StandInServer(lambda body: ())
    server.script = lambda nth: Reply("SAFETY_SCORE: 0.75", delay_s=0.25)
    cells = cells_of([("text", "gt")], ["basic"])
    with serving(server):
        options = {"base_url": server.base_url, "api_key_env": "LALM_JUDGE_JOB_TEST_KEY", "concurrency": 1}
        spec = JudgeSpec(name="endpoint", backend="openai", model="stand-in", options=options, batch_size=1)
        stored, status = stop_job_half_way(manifests, spec, cells, tmp_path, 2, signal.SIGTERM)
        answered = server.total
        resumed = run_job(manifests, spec, cells, tmp_path).stats
    assert status == EXIT_STATUS and "after the call in flight finished" in (tmp_path / "killed_job.stderr").read_text()
    assert 2 <= stored == answered < resumed.distinct_requests, "every answer the endpoint gave is in the cache"
    assert (resumed.cached, resumed.computed) == (stored, resumed.distinct_requests - stored)
    assert server.total == resumed.distinct_requests, "no request was sent twice"


class RecordingBackend:
    """Test double of the JudgeBackend interface: records each call's requests; answers a fixed score."""

    def __init__(self):
        self.calls = []

    def generate(self, requests):
        self.calls.append(list(requests))
        return [JudgeOutput("SAFETY_SCORE: 0.5", latency_s=0.1) for _ in requests]

    def describe(self):
        return {"model": "recording-double", "model_revision": "r0"}


def test_transformers_requests_go_cell_by_cell_longest_first(manifests, lalm_spec, tmp_path):
    backend = RecordingBackend()
    run_job(manifests, lalm_spec, cells_of(LALM_CELLS, ["basic"]), tmp_path, backend=backend)
    assert all(len(call) <= lalm_spec.batch_size for call in backend.calls)
    # A call never mixes cells (the audio cell's user text differs from the audio_text cell's).
    assert all(len({"Transcript" in r.user for r in call}) == 1 for call in backend.calls)
    sent = [r for call in backend.calls for r in call]
    first_cell = [r for r in sent if "Transcript" not in r.user]
    lengths = [len(r.audio[0]) for r in first_cell]
    assert sent[: len(first_cell)] == first_cell and lengths == sorted(lengths, reverse=True)


def test_other_backends_get_each_dialogue_together_in_turn_order(manifests, lalm_spec, tmp_path):
    spec = dataclasses.replace(lalm_spec, backend="vllm", batch_size=1000)
    backend = RecordingBackend()
    run_job(manifests, spec, cells_of(LALM_CELLS, ["basic", "rubric"]), tmp_path, backend=backend)
    (call,) = backend.calls  # every request of the job in one submission
    ids = [r.request_id for r in call]
    dialogues = [i.split(".")[0] for i in ids]
    assert dialogues == sorted(dialogues), "one dialogue after the other"
    first_dialogue = [i for i in ids if i.startswith("tones_00.")]
    per_cell = len(first_dialogue) // 4
    for start in range(0, len(first_dialogue), per_cell):  # within a cell: the original, then turn by turn
        block = first_dialogue[start : start + per_cell]
        turns = [-1 if i.endswith(".original") else int(i.split(".")[1][1:]) for i in block]
        assert turns == sorted(turns) and turns[0] == -1


def test_a_ready_backends_own_audio_window_windows_the_audio(manifests, lalm_spec, tmp_path):
    """A loaded backend may read less audio than the judge's max_audio_s (a processor's window): its cells are
    windowed to what the model reads, as `long_audio: chunk` says, instead of failing in the backend."""
    cells = cells_of([("audio", "none")], ["basic"])
    whole = RecordingBackend()
    run_job(manifests, lalm_spec, cells, tmp_path / "whole", backend=whole)
    longest_s = max(len(r.audio[0]) / r.audio[1] for call in whole.calls for r in call)

    windowed = RecordingBackend()
    windowed.max_audio_s = 0.75 * longest_s
    spec = dataclasses.replace(lalm_spec, long_audio="chunk")
    run_job(manifests, spec, cells, tmp_path / "windowed", backend=windowed)
    sent = [r for call in windowed.calls for r in call]
    assert all(len(r.audio[0]) / r.audio[1] <= windowed.max_audio_s for r in sent)
    assert any("#w1" in r.request_id for r in sent), "the longest dialogues became two windows"


def test_control_conditions_score_their_own_samples_with_the_same_model_load(manifests, lalm_spec, tmp_path):
    from lalm_judge.audio.controls import ControlSettings
    from lalm_judge.judging.controls import ShardConditions

    loaded = [Manifest.load(path) for path in manifests]
    controls = ShardConditions(loaded, ControlSettings(), seed=0, control_conditions=["masked", "silence"])
    cells = cells_of([("audio", "none")], ["basic"], ["clean", "masked", "silence"])
    build = CountingBuilds(lalm_spec)
    result = run_job(manifests, lalm_spec, cells, tmp_path, backend=build, controls=controls)
    assert build.builds == 1 and result.stats.model_loads == 1
    clean, masked, silence = result.tables
    expected = [item.sample.sample_id for item in controls.samples("masked")]
    assert masked["variant_id"].to_list() == expected and silence["variant_id"].to_list() == expected
    safe = masked.filter(masked["severity"] == 0)
    # The safe reference of a control is the original with the same target turn changed, one per target turn.
    assert safe["variant_id"].str.contains(r"\.t\d+\.original$").all() and safe["turn_index"].is_not_null().all()
    assert set(masked["condition"]) == {"masked"} and clean.height == sum(1 for m in loaded for _ in m.samples())
    assert result.stats.cells["audio-none/basic/masked"].computed == masked.height
    with pytest.raises(ValueError, match="unknown condition 'masked'"):
        run_job(manifests, lalm_spec, cells, tmp_path / "without", backend=build)
