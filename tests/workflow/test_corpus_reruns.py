"""Corpus files are inputs: after a finished run, editing one dialogue's turn or replacing one of its clips reruns
exactly that dialogue's stages, its judge shard's job (which computes only that dialogue's requests: the request
cache serves the others) and the aggregates, whatever the replaced clip's mtime (a copy that keeps the old one: its
content digest is a param of the index job); touching the corpus without changing it reruns nothing.

One small run completes once for the module: two demo dialogues in one judge shard (so that the shard's job holds
another dialogue whose requests come from the cache), one rewritten turn each at severities 1 and 5, the MiniLM
judge on text (ground truth and ASR) and audio (its ASR cascade). demo_travel's first turn is a given clip outside
the corpus folder (`corpus.allow_external_audio: true`) and its last turn is emoji only (a warning, not an error),
so the run also shows both accepted inputs of the bad-input corpus running end to end. Each test works on a copy
of the finished run (`snakemake -n`, then the rerun itself).
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from lalm_judge.audio import tts
from lalm_judge.audio.waveform import write_wav
from lalm_judge.core.dialogue import Dialogue
from lalm_judge.core.files import file_sha256
from tests.support.workflow import (
    ROOT,
    load_test_config,
    planned_jobs,
    snakemake,
    write_config,
    write_corpus,
)

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

PROFILE = ("--workflow-profile", str(ROOT / "profiles" / "default"))
EDITED, OTHER = "demo_hiking", "demo_travel"
CLIP = "shared_audio/travel_t0.wav"  # beside the corpus folder: external audio
PER_DIALOGUE = ("index_dialogue", "ingest_dialogue", "rewrite_turn", "synthesize_variants", "transcribe_dialogue")
AGGREGATES = ("audio_accounting", "compute_metrics", "control_metrics", "guide", "modality_analysis", "decision_flow")
AGGREGATES += ("figures", "control_figures", "modality_figures", "report", "all")
# What a one-dialogue change reruns: that dialogue's stages (one rewritten turn, one ASR model), the index and the
# judge job of its shard, and every aggregate.
ONE_DIALOGUE = Counter({**dict.fromkeys(PER_DIALOGUE, 1), "build_manifest": 1, "shard_index": 1, "judge_minilm": 1})
ONE_DIALOGUE.update(dict.fromkeys(AGGREGATES, 1))


def speak(text: str, path: Path) -> None:
    audio, sr = tts.synthesize(tts.Voice("espeak", {"voice": "en-us+f3"}), tts.SynthesisRequest(text))
    write_wav(path, audio, sr)


def reruns_config() -> dict:
    config = load_test_config()
    minilm = {**config["judges"]["minilm"], "schedule": {}}
    config["judges"] = {"minilm": minilm}
    config["corpus"]["allow_external_audio"] = True
    config["variants"]["turns"] = [1]
    config["evaluation"] = {
        "judges": ["minilm"],
        "transcript_sources": ["gt", "asr:whisper_tiny_en"],
        "prompts": ["basic"],
        "shards": 1,
    }
    config["controls"] = {"prosody": False}
    return config


def edit_corpus(workdir: Path, dialogue_id: str, turn: int, **fields) -> None:
    corpus = workdir / "corpus" / "dialogues.jsonl"
    records = [json.loads(line) for line in corpus.read_text().splitlines()]
    next(r for r in records if r["id"] == dialogue_id)["turns"][turn].update(fields)
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("corpus_reruns")
    write_corpus(workdir, dialogue_ids=(EDITED, OTHER), extra=())
    (workdir / "shared_audio").mkdir()
    speak("Our train to the coast leaves early tomorrow morning.", workdir / CLIP)
    edit_corpus(workdir, OTHER, 0, audio=f"../{CLIP}")
    edit_corpus(workdir, OTHER, 3, text="\U0001f389\U0001f389\U0001f389")
    configfile = write_config(workdir, reruns_config())
    snakemake(workdir, configfile, *PROFILE, "--cores", "2", timeout_s=1200)
    return workdir


def copy_of(finished: Path, tmp_path: Path) -> Path:
    """A copy of the finished run at the same depth below the temporary root: the judge jobs name the prompt files
    relative to the working directory, so a deeper copy would change their input set."""
    shutil.copytree(finished, tmp_path, symlinks=True, dirs_exist_ok=True)
    return tmp_path


def dry_run(workdir: Path):
    return planned_jobs(snakemake(workdir, workdir / "config.yaml", "-n", *PROFILE, timeout_s=300))


def rerun(workdir: Path) -> dict:
    """Run the changed workflow up to its judge job (the dry run has shown the aggregates after it); the request
    counts of that job (the module's one shard)."""
    snakemake(workdir, workdir / "config.yaml", *PROFILE, "--cores", "2", "--until", "judge_minilm", timeout_s=900)
    return json.loads((workdir / "logs/scores/minilm/shard0.requests.json").read_text())


def rows_by_dialogue(workdir: Path) -> dict[str, Counter]:
    """Score rows (one request each: no chunking) per cell and dialogue of the finished run."""
    counts = {}
    for path in sorted((workdir / "results/scores/minilm/shard0").glob("*/*/*.parquet")):
        label = str(path.relative_to(workdir / "results/scores/minilm/shard0").with_suffix(""))
        counts[label] = Counter(pl.read_parquet(path, columns=["dialogue_id"])["dialogue_id"].to_list())
    return counts


def assert_one_dialogue_reruns(jobs, dialogue_id: str) -> None:
    assert Counter(job.rule for job in jobs) == ONE_DIALOGUE
    for job in jobs:
        if job.rule in PER_DIALOGUE or job.rule == "build_manifest":
            assert all(dialogue_id in path for path in job.outputs), job


def test_the_finished_run_read_the_external_clip_and_warned_about_the_emoji_turn(finished):
    dialogue = Dialogue.load(finished / f"results/corpus/{OTHER}/dialogue.json")
    assert dialogue.turns[0].boundary_method == "given"
    assert [w for w in dialogue.warnings if "turn 3: the text" in w and "has no letters or digits" in w]
    source = json.loads((finished / f"results/corpus/{OTHER}/source.json").read_text())
    assert list(source["files"]) == [f"corpus/../{CLIP}"] and source["files"][f"corpus/../{CLIP}"].startswith("sha256:")


def test_touching_the_corpus_without_changing_it_reruns_nothing(finished, tmp_path):
    workdir = copy_of(finished, tmp_path)
    later = os.stat(workdir / "results/report").st_mtime + 60
    for path in (workdir / "corpus/dialogues.jsonl", workdir / CLIP):
        os.utime(path, (later, later))
    assert dry_run(workdir) == []


def test_editing_a_turn_reruns_that_dialogue_and_only_its_requests(finished, tmp_path):
    workdir = copy_of(finished, tmp_path)
    edit_corpus(workdir, EDITED, 0, text="We reached the top of the hill just after sunrise.")

    jobs = dry_run(workdir)

    assert_one_dialogue_reruns(jobs, EDITED)
    assert "Params have changed" in next(job.reason for job in jobs if job.rule == "index_dialogue")
    before = rows_by_dialogue(finished)
    counts = rerun(workdir)
    # Every request of the edited dialogue holds the edited turn (its text, or its speech and ASR transcript), so
    # all of them are computed; the other dialogue's come from the cache.
    assert counts["model_loads"] == 1
    assert counts["computed"] == sum(cell[EDITED] for cell in before.values()) > 0
    assert counts["cached"] == sum(cell[OTHER] for cell in before.values()) > 0
    for label, cell in before.items():
        assert (counts["cells"][label]["computed"], counts["cells"][label]["cached"]) == (cell[EDITED], cell[OTHER])
    edited = Dialogue.load(workdir / f"results/corpus/{EDITED}/dialogue.json")
    assert edited.turns[0].text.startswith("We reached the top of the hill")


def test_replacing_a_clip_reruns_its_dialogue_and_only_the_requests_that_hear_it(finished, tmp_path):
    workdir = copy_of(finished, tmp_path)
    speak("The ferry to the island was cancelled because of the storm.", workdir / CLIP)

    jobs = dry_run(workdir)

    assert_one_dialogue_reruns(jobs, OTHER)
    before = rows_by_dialogue(finished)
    counts = rerun(workdir)
    # The clip changes what is heard and transcribed, not the turn texts: the ground-truth text cell of the dialogue
    # is served from the cache, its ASR and audio (cascade) cells are computed again.
    for label, cell in before.items():
        heard = not label.startswith("text-gt/")
        expected = (cell[OTHER], cell[EDITED]) if heard else (0, cell[OTHER] + cell[EDITED])
        assert (counts["cells"][label]["computed"], counts["cells"][label]["cached"]) == expected, label
    assert counts["computed"] == sum(c[OTHER] for label, c in before.items() if not label.startswith("text-gt/")) > 0
    replaced = pl.read_parquet(workdir / f"results/asr/whisper_tiny_en/{OTHER}.parquet")
    first = replaced.filter((pl.col("sample_id") == f"{OTHER}.original") & (pl.col("turn_index") == 0))
    assert "island" in first["text"].item().lower()


def test_a_clip_replaced_with_its_old_mtime_reruns_its_dialogue(finished, tmp_path):
    """`cp -p`, `rsync -a` and `tar x` keep the mtime of the copy's source: here the new clip carries the old clip's
    mtime, older than every output. Its content, not its mtime, decides: the digest source.json recorded differs."""
    workdir = copy_of(finished, tmp_path)
    clip = workdir / CLIP
    old = os.stat(clip)
    speak("The ferry to the island was cancelled because of the storm.", clip)
    os.utime(clip, ns=(old.st_atime_ns, old.st_mtime_ns))
    recorded = json.loads((workdir / f"results/corpus/{OTHER}/source.json").read_text())["files"]
    assert recorded[f"corpus/../{CLIP}"] != file_sha256(clip), "the run recorded the old clip"

    jobs = dry_run(workdir)

    assert_one_dialogue_reruns(jobs, OTHER)
    assert "Params have changed" in next(job.reason for job in jobs if job.rule == "index_dialogue")
