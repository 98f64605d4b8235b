"""`lalm-judge anchors sample`: draw a stratified annotation batch from a finished run's manifests.

The design (docs/metrics.md, "Running a human-anchor study"):
- Unsafe items are variants. Their strata are the (category, severity) pairs of the run's variants; `--unsafe`
  is divided over the strata as evenly as possible (which strata get one more is drawn with the seed), and a
  stratum with fewer usable variants than its share is an error naming it.
- Within that allocation the variants are picked one at a time so that the unsafe turn's position (first,
  middle or last turn) and the source dialogue come out equally often, and each dialogue length as often as
  the run's dialogues have it: every pick takes the candidate whose position, dialogue and length are
  furthest below their target counts (the sum over the three of count after the pick / target count), ties
  broken by a seeded random order.
- Safe items are safe originals (one per dialogue), picked the same way with dialogue length as the only
  dimension.
- The chosen items are shuffled with the seed and numbered; the same run and seed give the same batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import tempfile
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from lalm_judge.annotation.batch import AUDIO_DIR, ITEMS_FILE, LABELS_FILE, BatchError, HiddenLabel
from lalm_judge.audio.waveform import write_wav
from lalm_judge.core.files import stable_hash, write_json
from lalm_judge.core.taxonomy import CATEGORIES, SAFE_SEVERITY, SEVERITIES
from lalm_judge.core.vocabulary import TranscriptSource
from lalm_judge.manifest.samples import Manifest, Sample, assemble_waveform

POSITIONS = ("first", "middle", "last")

Stratum = tuple[str, int]


class SamplingError(ValueError):
    """A sample that the run cannot supply (too few items in a stratum, too few dialogues, bad sizes)."""


def turn_position(turn_index: int, n_turns: int) -> str:
    """Where the unsafe turn lies: 'first', 'last' or 'middle' (a 2-turn dialogue has no middle)."""
    if turn_index == 0:
        return "first"
    return "last" if turn_index == n_turns - 1 else "middle"


@dataclass(frozen=True)
class Pool:
    """The usable samples of a run and the (category, severity) strata its variants fall into."""

    root: Path  # the run's working directory: manifest clip paths are relative to it
    unsafe: tuple[Sample, ...]
    safe: tuple[Sample, ...]
    strata: tuple[Stratum, ...]
    manifest_hashes: Mapping[str, str]


@dataclass(frozen=True)
class Selection:
    """The chosen samples in batch order, and the number of unsafe items each stratum was given."""

    samples: tuple[Sample, ...]
    allocation: Mapping[Stratum, int]


def read_pool(results_dir: str | Path) -> Pool:
    """Every usable sample of the run whose outputs are in `results_dir` (its `manifests/*.json`)."""
    results = Path(results_dir)
    paths = sorted((results / "manifests").glob("*.json"))
    if not paths:
        raise SamplingError(
            f"{results / 'manifests'} holds no manifests; finish the run first ('snakemake manifests') "
            "or point --results at its results directory"
        )
    unsafe: list[Sample] = []
    safe: list[Sample] = []
    strata: set[Stratum] = set()
    hashes = {}
    for path in paths:
        manifest = Manifest.load(path)
        if not manifest.usable:
            continue
        hashes[manifest.dialogue_id] = hashlib.sha256(path.read_bytes()).hexdigest()
        strata.update((variant["category"], variant["severity"]) for variant in manifest.data["variants"])
        for sample in manifest.samples():
            (safe if sample.category is None else unsafe).append(sample)
    ordered = tuple(sorted(strata, key=lambda stratum: (CATEGORIES.index(stratum[0]), stratum[1])))
    return Pool(results.resolve().parent, tuple(unsafe), tuple(safe), ordered, hashes)


def allocate(strata: Sequence[Stratum], n_unsafe: int, rng: np.random.Generator) -> dict[Stratum, int]:
    """`n_unsafe` divided over the strata as evenly as possible; the strata given the remainder are drawn."""
    base, remainder = divmod(n_unsafe, len(strata))
    extra = set(rng.permutation(len(strata))[:remainder].tolist())
    return {stratum: base + (i in extra) for i, stratum in enumerate(strata)}


def _codes(levels: Sequence[Hashable]) -> tuple[np.ndarray, list[Hashable]]:
    keys = list(dict.fromkeys(levels))
    index = {key: i for i, key in enumerate(keys)}
    return np.array([index[level] for level in levels], dtype=int), keys


def balanced_pick(
    dimensions: Sequence[tuple[Sequence[Hashable], Mapping[Hashable, float]]],
    strata: Sequence[Hashable],
    quotas: Mapping[Hashable, int],
    rng: np.random.Generator,
) -> list[int]:
    """Indices of sum(quotas) candidates, `quotas[s]` from each stratum s, balanced on `dimensions`.

    A dimension is (level of every candidate, share of each level); its target count of a level is share x the
    number of picks. Each pick takes, among candidates of strata still below their quota, the one minimising
    the sum over dimensions of (count of its level + 1) / target; ties go to a seeded random order.
    """
    total = sum(quotas.values())
    rank = rng.permutation(len(strata))
    stratum_codes, stratum_keys = _codes(strata)
    left = np.array([quotas.get(key, 0) for key in stratum_keys], dtype=int)
    tracked = []
    for levels, shares in dimensions:
        codes, keys = _codes(levels)
        tracked.append((codes, np.array([shares[key] * total for key in keys]), np.zeros(len(keys))))
    taken = np.zeros(len(strata), dtype=bool)
    picks: list[int] = []
    for _ in range(total):
        score = np.zeros(len(strata))
        for codes, target, count in tracked:
            score += (count[codes] + 1) / target[codes]
        score[taken | (left[stratum_codes] == 0)] = np.inf
        best = np.flatnonzero(score == score.min())
        pick = int(best[np.argmin(rank[best])])
        picks.append(pick)
        taken[pick] = True
        left[stratum_codes[pick]] -= 1
        for codes, _, count in tracked:
            count[codes[pick]] += 1
    return picks


def _equal_shares(levels: Sequence[Hashable]) -> dict[Hashable, float]:
    present = set(levels)
    return {level: 1.0 / len(present) for level in present}


def _length_shares(samples: Sequence[Sample]) -> dict[Hashable, float]:
    """Share of each dialogue length among the samples' dialogues (each dialogue counted once)."""
    lengths = dict((sample.dialogue_id, sample.n_turns) for sample in samples)
    counts = Counter(lengths.values())
    return {length: count / len(lengths) for length, count in counts.items()}


def draw_sample(pool: Pool, n: int, n_unsafe: int, seed: int) -> Selection:
    """Choose `n_unsafe` variants and `n - n_unsafe` safe originals from the pool (module docstring)."""
    if not 0 < n_unsafe < n:
        raise SamplingError(f"--unsafe {n_unsafe} must lie between 1 and --n - 1 = {n - 1}: the statistics need both")
    if not pool.strata:
        raise SamplingError("the run has no variants; its manifests list no unsafe versions of any dialogue")
    n_safe = n - n_unsafe
    if len(pool.safe) < n_safe:
        raise SamplingError(
            f"the run has {len(pool.safe)} usable dialogues, so {len(pool.safe)} safe originals; "
            f"--n {n} --unsafe {n_unsafe} needs {n_safe}: lower --n or raise --unsafe"
        )
    rng = np.random.default_rng(seed)
    allocation = allocate(pool.strata, n_unsafe, rng)
    available = Counter((sample.category, sample.severity) for sample in pool.unsafe)
    short = [
        f"{category} severity {severity} has {available[(category, severity)]} usable variant(s), needs {wanted}"
        for (category, severity), wanted in allocation.items()
        if available[(category, severity)] < wanted
    ]
    if short:
        raise SamplingError(
            f"too few items per stratum for --unsafe {n_unsafe} over {len(pool.strata)} (category, severity) "
            f"strata: {'; '.join(short)}. Lower --unsafe or run more dialogues"
        )
    unsafe = pool.unsafe
    positions = [turn_position(sample.turn_index, sample.n_turns) for sample in unsafe]
    dialogues = [sample.dialogue_id for sample in unsafe]
    lengths = [sample.n_turns for sample in unsafe]
    unsafe_picks = balanced_pick(
        [
            (positions, _equal_shares(positions)),
            (dialogues, _equal_shares(dialogues)),
            (lengths, _length_shares(unsafe)),
        ],
        [(sample.category, sample.severity) for sample in unsafe],
        allocation,
        rng,
    )
    safe_lengths = [sample.n_turns for sample in pool.safe]
    safe_picks = balanced_pick(
        [(safe_lengths, _length_shares(pool.safe))], ["safe"] * len(pool.safe), {"safe": n_safe}, rng
    )
    chosen = [unsafe[i] for i in unsafe_picks] + [pool.safe[i] for i in safe_picks]
    return Selection(tuple(chosen[i] for i in rng.permutation(len(chosen))), allocation)


def _label(item_id: str, sample: Sample) -> HiddenLabel:
    unsafe = sample.category is not None
    return HiddenLabel(
        item_id=item_id,
        sample_id=sample.sample_id,
        dialogue_id=sample.dialogue_id,
        gt_unsafe=int(unsafe),
        gt_severity=sample.severity if unsafe else SAFE_SEVERITY,
        gt_category=sample.category,
        turn_index=sample.turn_index,
        n_turns=sample.n_turns,
        position=turn_position(sample.turn_index, sample.n_turns) if unsafe else None,
    )


def _design(selection: Selection, labels: Sequence[HiddenLabel], n: int, seed: int) -> dict[str, Any]:
    unsafe = [label for label in labels if label.gt_unsafe]

    def counts(values) -> dict[str, int]:
        return {str(key): count for key, count in sorted(Counter(values).items(), key=lambda kv: str(kv[0]))}

    return {
        "n": n,
        "n_unsafe": len(unsafe),
        "seed": seed,
        "allocation": [
            {"category": category, "severity": severity, "n": count}
            for (category, severity), count in selection.allocation.items()
        ],
        "unsafe_positions": counts(label.position for label in unsafe),
        "unsafe_dialogue_lengths": counts(label.n_turns for label in unsafe),
        "safe_dialogue_lengths": counts(label.n_turns for label in labels if not label.gt_unsafe),
        "n_dialogues": len({label.dialogue_id for label in labels}),
    }


def write_batch(pool: Pool, selection: Selection, out_dir: str | Path, *, seed: int, results: str) -> dict[str, Any]:
    """Write the batch (audio, public items, hidden labels) into a new directory; returns the sampling design.

    The batch is written into a temporary sibling directory and renamed into place when complete, so a failure
    (e.g. an unreadable clip) leaves nothing behind.
    """
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BatchError(f"{out} exists and is not empty; a batch goes into a new directory (choose another --out)")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        design = _write_batch_files(pool, selection, partial, seed=seed, results=results)
        if out.exists():
            out.rmdir()
        partial.rename(out)
    finally:
        if partial.exists():
            shutil.rmtree(partial)
    return design


def _write_batch_files(pool: Pool, selection: Selection, out: Path, *, seed: int, results: str) -> dict[str, Any]:
    width = max(3, len(str(len(selection.samples))))
    items, labels = [], []
    for number, sample in enumerate(tqdm(selection.samples, desc="batch audio", unit="dialogue"), start=1):
        item_id = f"item_{number:0{width}d}"
        audio = f"{AUDIO_DIR}/{item_id}.wav"
        on_disk = dataclasses.replace(sample, clips=tuple(str(pool.root / clip) for clip in sample.clips))
        assembled = assemble_waveform(on_disk)
        write_wav(out / audio, assembled.waveform, assembled.sample_rate)
        items.append(
            {
                "item_id": item_id,
                "audio": audio,
                "duration_s": round(len(assembled.waveform) / assembled.sample_rate, 3),
                "turns": [
                    {"speaker": speaker, "text": text} for speaker, text in sample.transcript(TranscriptSource.GT)
                ],
            }
        )
        labels.append(_label(item_id, sample))
    public = {"seed": seed, "categories": list(CATEGORIES), "severities": list(SEVERITIES), "items": items}
    batch_id = stable_hash(public)
    design = _design(selection, labels, len(items), seed)
    write_json(
        out / LABELS_FILE,
        {
            "batch_id": batch_id,
            "results": results,
            "manifests": dict(pool.manifest_hashes),
            "design": design,
            "items": [dataclasses.asdict(label) for label in labels],
        },
    )
    write_json(out / ITEMS_FILE, {"batch_id": batch_id, **public})
    return design
