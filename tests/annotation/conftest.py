"""Runs and batches for the annotation tests, and the app started as users start it (`lalm-judge anchors serve`).

`synthetic_run` writes manifests in the workflow's layout (six dialogues of 3-5 turns, short tones as clips, and a
TTS control per turn) so that the sampler sees many strata without running the workflow; `finished_test_run` is
the real test workflow (tests/config/test.yaml) run up to its manifests.
"""

from __future__ import annotations

import json
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from lalm_judge.annotation.sample import draw_sample, read_pool, write_batch
from lalm_judge.audio.waveform import write_wav
from lalm_judge.core.files import write_json

SAMPLE_RATE = 16000
CATEGORIES = ("harassment", "hate")
SEVERITIES = (1, 3, 5)
LENGTHS = (3, 3, 4, 4, 5, 5)
# One variant that failed in rewrite: its stratum still counts, with one usable variant less.
FAILED_VARIANT = "d0.t0.hate.s5"


def _tone(path: Path, frequency: float, seconds: float = 0.25) -> str:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    write_wav(path, (0.2 * np.sin(2 * np.pi * frequency * t)).astype(np.float32), SAMPLE_RATE)
    return str(path)


def write_synthetic_run(workdir: Path) -> Path:
    """Manifests (and clips) of a small run in `workdir/results`; returns the results directory."""
    results = workdir / "results"
    for number, n_turns in enumerate(LENGTHS):
        dialogue = f"d{number}"
        turns, variants, controls = [], [], []
        for t in range(n_turns):
            clip = _tone(results / "corpus" / dialogue / f"t{t}.wav", 200 + 50 * t)
            texts = {"gt": f"{dialogue} turn {t} says something friendly."}
            turns.append({"index": t, "speaker": "AB"[t % 2], "emotion": "neutral", "clip": clip, "texts": texts})
            # The TTS control of the turn (the tts_control condition): the same text, re-synthesized.
            control = _tone(results / "tts" / dialogue / f"t{t}.tts_control.wav", 600)
            controls.append(
                {"sample_id": f"{dialogue}.t{t}.tts_control", "kind": "tts_control", "turn_index": t, "clip": control}
            )
            controls[-1]["text"] = texts["gt"]
            for category in CATEGORIES:
                for severity in SEVERITIES:
                    variant_id = f"{dialogue}.t{t}.{category}.s{severity}"
                    ok = variant_id != FAILED_VARIANT
                    variants.append(
                        {
                            "variant_id": variant_id,
                            "turn_index": t,
                            "category": category,
                            "severity": severity,
                            "status": "ok" if ok else "refusal",
                            "clip": _tone(results / "tts" / dialogue / f"{variant_id}.wav", 900) if ok else None,
                            "texts": {"gt": f"{category} line of severity {severity}."} if ok else None,
                        }
                    )
        # Clip paths relative to the working directory, as the workflow writes them.
        for entry in [*turns, *variants, *controls]:
            if entry["clip"]:
                entry["clip"] = str(Path(entry["clip"]).relative_to(workdir))
        write_json(
            results / "manifests" / f"{dialogue}.json",
            {
                "dialogue_id": dialogue,
                "status": "ok",
                "skip_reason": None,
                "sample_rate": SAMPLE_RATE,
                "n_turns": n_turns,
                "gaps_s": [0.1] * (n_turns - 1),
                "transcript_sources": ["gt"],
                "turns": turns,
                "variants": variants,
                "controls": controls,
            },
        )
    write_json(
        results / "manifests" / "skipped.json",
        {"dialogue_id": "skipped", "status": "skipped", "skip_reason": "min_turns", "turns": [], "variants": []},
    )
    return results


@pytest.fixture
def synthetic_run(tmp_path) -> Path:
    return write_synthetic_run(tmp_path / "run")


def make_batch(
    results: Path, out: Path, n: int = 12, n_unsafe: int = 8, seed: int = 0, extras: dict[str, int] | None = None
) -> Path:
    """A batch of the run (with practice, gold and attention items when `extras` asks for them)."""
    pool = read_pool(results)
    write_batch(pool, draw_sample(pool, n, n_unsafe, seed, extras=extras), out, seed=seed, results=str(results))
    return out


def edit_study(batch_dir: Path, **sections) -> None:
    """Replace top-level sections of a batch's study.yaml (e.g. assignment={...}, quality={...})."""
    path = batch_dir / "study.yaml"
    protocol = yaml.safe_load(path.read_text())
    protocol.update(sections)
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))


@pytest.fixture
def batch(tmp_path) -> Path:
    return make_batch(write_synthetic_run(tmp_path / "run"), tmp_path / "batch")


@pytest.fixture(scope="session")
def finished_test_run(finished_run) -> Path:
    """The results folder of the finished test workflow (Piper, espeak-ng, Whisper tiny.en: its manifests and what
    the annotation app samples from); the annotation tests only read it."""
    workdir, _ = finished_run
    return workdir / "results"


def lalm_judge_command() -> list[str]:
    script = shutil.which("lalm-judge", path=str(Path(sys.executable).parent))
    assert script, "the lalm-judge console script is not installed in this environment"
    return [script]


@dataclass
class Server:
    """A running `lalm-judge anchors serve` process and the URLs it printed."""

    process: subprocess.Popen
    base: str
    urls: dict[str, str]
    output: list[str]
    owner: str | None = None
    link: str | None = None

    def url(self, rater: str) -> str:
        return self.urls[rater]


_RATER_LINE = re.compile(r"^rater (\S+): (http://\S+/)$")
_OWNER_LINE = re.compile(r"^owner: (http://\S+/)$")
_LINK_LINE = re.compile(r"^public link: (http://\S+/)\?")
_SERVING_LINE = re.compile(r"^serving batch \S+ \(\d+ items\) on (http://\S+);")


@contextmanager
def running_server(batch_dir: Path, *args: str, timeout_s: float = 90.0) -> Iterator[Server]:
    """Start the app on a free port of 127.0.0.1 and wait until it answers; stop it afterwards."""
    process = subprocess.Popen(
        [*lalm_judge_command(), "anchors", "serve", str(batch_dir), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        urls, owner, link, base, deadline = {}, None, None, None, time.monotonic() + timeout_s
        while base is None:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the app printed no address within {timeout_s} s: {output}") from None
            if line is None:
                raise AssertionError(f"the app exited ({process.wait()}): {output}")
            output.append(line)
            if match := _RATER_LINE.match(line):
                urls[match[1]] = match[2]
            elif match := _OWNER_LINE.match(line):
                owner = match[1]
            elif match := _LINK_LINE.match(line):
                link = match[1]
            elif match := _SERVING_LINE.match(line):
                base = match[1]
        wait_until_up(base, deadline)
        yield Server(process, base, urls, output, owner, link)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_until_up(base: str, deadline: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# What the page sends with a rating of an item heard to its end (a rating needs study.yaml's share of it heard).
HEARD = {"heard_to_end": True}


def rate(url: str, item_id: str, **answer) -> tuple[int, object]:
    """Rate an item through a rater's API as the page does after the audio ended (`answer`: unsafe, ...)."""
    return request(url + "api/rate", {"item_id": item_id, **answer, **HEARD})


def consent(url: str, accept: bool = True) -> None:
    """Answer a rater's consent page (the items need an accepted consent)."""
    status, answer = request(url + "api/consent", {"accept": accept})
    assert status == 200, answer


def request(url: str, body: dict | None = None, method: str | None = None) -> tuple[int, object]:
    """(status, decoded JSON or raw bytes) of a GET, or of a POST when `body` is given."""
    data = None if body is None else json.dumps(body).encode()
    headers = {} if body is None else {"Content-Type": "application/json"}
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            status, payload, kind = response.status, response.read(), response.headers.get("content-type", "")
    except urllib.error.HTTPError as error:
        status, payload, kind = error.code, error.read(), error.headers.get("content-type", "")
    return status, json.loads(payload) if kind.startswith("application/json") else payload
