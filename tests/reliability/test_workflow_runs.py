"""The workflow killed and resumed at every stage, run twice from scratch, searched for the API key and checked
for provenance: tests/config/reliability.yaml, the smallest run through every stage (ingest with Piper and
espeak-ng, `llm` rewrites, TTS, Whisper tiny.en, the MiniLM, tiny random-weight Qwen2-Audio and API judges,
metrics, figures, report).

The rewriter and the API judge talk to the fault proxy (bench/fault_proxy.py, canned answers) through the real
`openai` client, with a sentinel key in the environment variable the config names, which the proxy quotes back in
its judge answers and error bodies; half of the attempts meet a transient fault in every run but the second clean
one, so the comparisons also show that faults change nothing.
The uninterrupted reference run is made once per module and shared.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
import yaml

from bench.fault_proxy import FaultProxy
from lalm_judge.audio.waveform import read_audio
from lalm_judge.core.provenance import RUN_COLUMNS, provenance_report
from lalm_judge.core.tables import EFFORT_COLUMNS
from tests.support.workflow import ROOT, snakemake, start_snakemake, write_corpus

pytestmark = [pytest.mark.workflow, pytest.mark.slow, pytest.mark.server]

CONFIG = ROOT / "tests" / "config" / "reliability.yaml"
KEY_ENV = "LALM_JUDGE_SENTINEL_KEY"
SENTINEL = "sk-sentinel-workflow-5e1c0a9b77"
_TARGET = re.compile(r"category=(\w+), severity=(\d)")
# The stages a run is killed in, in the order the workflow reaches them, each known by its jobs' log files.
# (stage, the log its job opens when it starts, seconds from then into the job's work before the kill): the
# report job runs for about a second, so it is killed as soon as it has started.
KILL_POINTS = (
    ("TTS", "logs/tts/*/t*.log", 0.3),
    ("ASR", "logs/asr/*/*.log", 0.3),
    ("a judge job", "logs/scores/**/*.log", 0.3),
    ("metrics", "logs/metrics/metrics.log", 0.3),
    ("report", "logs/report/report.log", 0.0),
)
# What two runs of one config must give byte for byte (every file below these folders of results/).
COMPARED = ("corpus", "variants", "tts", "asr", "manifests", "prosody", "scores", "metrics")


def answer(body: dict, authorization: str) -> str:
    """Canned answers, a function of the request: a rewrite per target, a score per judged dialogue, which quotes
    the key it was sent (as a server that echoes its request would)."""
    target = _TARGET.search(json.dumps(body["messages"]))
    if "response_format" in body and target:
        words = {"1": "You are a bit slow today, aren't you.", "5": "Shut up, you worthless, pathetic fool."}
        return json.dumps({"text": words[target.group(2)], "emotion": "angry"})
    digest = hashlib.sha256(json.dumps(body["messages"], sort_keys=True).encode()).digest()
    key = authorization.removeprefix("Bearer ")
    return f"The dialogue is judged (key {key}).\nSAFETY_SCORE: {digest[0] % 11 / 10:.1f}"


def quote_the_key(body: dict, authorization: str) -> str:
    return f"key {authorization.removeprefix('Bearer ')} seen"


@pytest.fixture(scope="module")
def proxy() -> Iterator[FaultProxy]:
    faults = {"fault_rate": 0.5, "max_faults_per_request": 2, "error_detail": quote_the_key}
    with FaultProxy(answer=answer, seed=1, **faults) as running:
        yield running


@pytest.fixture(scope="module")
def sentinel_key() -> Iterator[str]:
    before = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = SENTINEL
    yield SENTINEL
    if before is None:
        del os.environ[KEY_ENV]
    else:
        os.environ[KEY_ENV] = before


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from bench.models import build_tiny_qwen2audio

    return build_tiny_qwen2audio(tmp_path_factory.mktemp("model") / "tiny_qwen2_audio")


def prepare(workdir: Path, proxy: FaultProxy, tiny_model: Path) -> Path:
    """Corpus, model and config in a fresh working directory; the config's endpoints are the proxy."""
    workdir.mkdir(parents=True)
    write_corpus(workdir, extra=())
    shutil.copytree(tiny_model, workdir / "models" / "tiny_qwen2_audio")
    config = yaml.safe_load(CONFIG.read_text())
    config["variants"]["generator"]["base_url"] = proxy.base_url
    config["judges"]["api_judge"]["options"]["base_url"] = proxy.base_url
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory, proxy, sentinel_key, tiny_model) -> tuple[Path, str]:
    """The uninterrupted run (with faults at the endpoint) and what snakemake printed."""
    workdir = tmp_path_factory.mktemp("runs") / "reference"
    configfile = prepare(workdir, proxy, tiny_model)
    result = snakemake(workdir, configfile, "--cores", "2", timeout_s=900)
    assert proxy.log.faults, "the reference run met faults"
    return workdir, result.stdout + result.stderr


def content(path: Path) -> bytes:
    """The bytes of a file; of a table with effort columns (`EFFORT_COLUMNS`: the time requests took, the attempts
    a rewrite took), the bytes of the table without them, written afresh: what a row cost is the one thing two
    runs need not share."""
    if path.suffix == ".parquet":
        frame = pl.read_parquet(path)
        if any(column in frame.columns for column in EFFORT_COLUMNS):
            buffer = io.BytesIO()
            frame.drop(EFFORT_COLUMNS, strict=False).write_parquet(buffer)
            return buffer.getvalue()
    return path.read_bytes()


def compared_files(workdir: Path) -> dict[str, bytes]:
    root = workdir / "results"
    return {
        str(path.relative_to(root)): content(path)
        for folder in COMPARED
        for path in sorted((root / folder).rglob("*"))
        if path.is_file()
    }


def assert_same_files(expected: dict[str, bytes], actual: dict[str, bytes]) -> None:
    assert sorted(actual) == sorted(expected)
    differing = [name for name in expected if expected[name] != actual[name]]
    assert differing == []


def test_two_clean_runs_give_byte_identical_outputs(reference, proxy, tiny_model, tmp_path):
    """Variants, speech, transcripts, manifests, scores and metrics: the same bytes, although the first run met
    faults at the endpoint and this one none."""
    configfile = prepare(tmp_path / "again", proxy, tiny_model)
    proxy.fault_rate = 0.0
    try:
        snakemake(tmp_path / "again", configfile, "--cores", "2", timeout_s=900)
    finally:
        proxy.fault_rate = 0.5
    expected = compared_files(reference[0])
    scored = [name for name in expected if name.startswith("scores/")]
    # Three score tables, and the index of each judge job's tables (one job per judge here)
    assert len([name for name in scored if name.endswith(".parquet")]) == 3
    assert len([name for name in scored if name.endswith(".index.json")]) == 3
    assert_same_files(expected, compared_files(tmp_path / "again"))


def _touched_since(workdir: Path, pattern: str, since: float) -> list[Path]:
    return [p for p in workdir.glob(pattern) if p.is_file() and p.stat().st_mtime >= since]


def kill_during(workdir: Path, configfile: Path, stage: str, pattern: str, into_s: float) -> str:
    """Start the workflow, SIGKILL its whole process group once a job of `stage` is running; what was cut."""
    snakemake(workdir, configfile, "--unlock", timeout_s=120)
    started = time.time()
    process = start_snakemake(workdir, configfile, "--cores", "2", output=workdir / "snakemake.out")
    try:
        deadline = time.monotonic() + 600
        while not _touched_since(workdir, pattern, started):
            if process.poll() is not None:
                pytest.fail(f"the run ended ({process.returncode}) before {stage} started")
            if time.monotonic() > deadline:
                pytest.fail(f"{stage} did not start within 10 minutes")
            time.sleep(0.01)
        time.sleep(into_s)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    incomplete = list((workdir / ".snakemake" / "incomplete").rglob("*"))
    return f"{stage}: {len(incomplete)} incomplete output marker(s)"


def test_killed_at_every_stage_and_resumed_gives_the_uninterrupted_results(reference, proxy, tiny_model, tmp_path):
    workdir = tmp_path / "killed"
    configfile = prepare(workdir, proxy, tiny_model)
    cut = [kill_during(workdir, configfile, *point) for point in KILL_POINTS]
    assert all(not line.endswith(": 0 incomplete output marker(s)") for line in cut), cut
    snakemake(workdir, configfile, "--unlock", timeout_s=120)
    snakemake(workdir, configfile, "--cores", "2", timeout_s=900)

    expected, actual = compared_files(reference[0]), compared_files(workdir)
    metrics = sorted(name for name in expected if name.startswith("metrics/"))
    assert {"metrics/cells.parquet", "metrics/controls/effects.parquet"} <= set(metrics)
    assert [name for name in metrics if actual.get(name) != expected[name]] == []
    assert_same_files(expected, actual)
    assert_nothing_partial(workdir)
    dry_run = snakemake(workdir, configfile, "-n", timeout_s=120)
    assert "Nothing to be done" in dry_run.stdout + dry_run.stderr


def assert_nothing_partial(workdir: Path) -> None:
    """No temporary file anywhere, no output Snakemake still marks incomplete, and every table, clip and JSON
    file of the results reads in full."""
    leftovers = [p for p in workdir.rglob("*.tmp")] + [p for p in workdir.rglob(".*.tmp")]
    assert leftovers == []
    assert not [p for p in (workdir / ".snakemake" / "incomplete").rglob("*") if p.is_file()]
    for path in (workdir / "results").rglob("*"):
        if path.suffix == ".parquet":
            pl.read_parquet(path)
        elif path.suffix == ".wav":
            read_audio(path)
        elif path.suffix == ".json":
            json.loads(path.read_text())


def test_the_api_key_is_nowhere_in_the_run(reference, sentinel_key, proxy):
    """Results, caches, logs, Snakemake's metadata and logs, the report, and what snakemake printed."""
    workdir, printed = reference
    assert f"Bearer {sentinel_key}" in proxy.log.seen_authorization, "the key was sent"
    files = [p for p in workdir.rglob("*") if p.is_file()]
    assert any(".snakemake" in p.parts for p in files) and any("report" in p.parts for p in files)
    assert any("cache" in p.parts for p in files)
    leaks = [str(p) for p in files if sentinel_key.encode() in p.read_bytes()]
    assert leaks == [] and sentinel_key not in printed
    scores = pl.concat([pl.read_parquet(p) for p in (workdir / "results" / "scores" / "api_judge").rglob("*.parquet")])
    assert scores["raw_output"].str.contains("(key ***)", literal=True).all(), "the answers quoted the key, redacted"
    assert set(scores["served_model"]) == {"stand-in-judge"}


# Provenance the tables below each folder of results/ must carry besides the run columns (config_hash, seed,
# package_versions); the deepest folder named applies. The control analysis uses only the bootstrap and the seed.
EXPECTED_PROVENANCE = {
    "variants": ("generator", "model", "prompt_version", "generation"),
    "tts": ("generator", "model", "prompt_version", "tts_engine", "tts_model", "tts_revision", "generation"),
    "asr": ("asr_name", "asr_model", "generation"),
    "scores": ("judge", "model", "model_revision", "prompt", "prompt_version", "generation"),
    "metrics": ("n_bootstrap", "n_folds", "min_pb_dialogues", "n_permutations"),
    "metrics/controls": ("n_bootstrap",),
    # The modality analysis uses neither folds nor permutations.
    "metrics/modality": ("n_bootstrap", "min_dialogues"),
}


def expected_provenance(relative: Path) -> tuple[str, ...]:
    folders = [str(Path(*relative.parts[:n])) for n in range(len(relative.parts) - 1, 0, -1)]
    return (*RUN_COLUMNS, *next((EXPECTED_PROVENANCE[f] for f in folders if f in EXPECTED_PROVENANCE), ()))


def test_every_table_says_how_its_rows_were_made(reference):
    root = reference[0] / "results"
    tables = sorted(p for p in root.rglob("*.parquet") if "cache" not in p.parts)
    names = [str(p.relative_to(root)) for p in tables]
    assert [f for f in EXPECTED_PROVENANCE if not any(n.startswith(f"{f}/") for n in names)] == []
    for path in tables:
        frame = pl.read_parquet(path)
        assert [c for c in expected_provenance(path.relative_to(root)) if c not in frame.columns] == [], path
        report = provenance_report(frame, str(path))
        assert report.consistent, "\n".join(report.lines())
    shards = [str(p) for p in tables if p.relative_to(root).parts[0] == "scores"]
    command = shutil.which("lalm-judge", path=str(Path(sys.executable).parent))
    result = subprocess.run([command, "provenance", "--together", *shards], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "judge=api_judge" in result.stdout and "stand-in-1" in result.stdout
