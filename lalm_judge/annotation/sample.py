"""`lalm-judge anchors sample`: draw a stratified annotation batch from a finished run's manifests.

The design (docs/metrics.md, "Running a human-anchor study"):
- Unsafe items are variants. Their strata are the (category, severity) pairs of the run's variants; `--unsafe`
  is divided over the strata as evenly as possible (which strata get one more is drawn with the seed), and a
  stratum with fewer usable variants than its share is an error naming it.
- Within each stratum the unsafe turn's position (first, middle or last turn; those the run has) is balanced:
  the stratum's share is split evenly over the positions, and where a position has too few variants in the
  stratum the others take the rest (`split_evenly`); the design in labels.json and the command's report name
  every stratum where the run did not allow an even split.
- Within those quotas the variants are picked one at a time so that each source dialogue comes out equally often,
  and each dialogue length as often as the run's dialogues have it: every pick takes the candidate whose dialogue
  and length are furthest below their target counts (the sum over the two of count after the pick / target count),
  ties broken by a seeded random order.
- Safe items are safe originals, one per dialogue, picked the same way with dialogue length as the only dimension.
  A batch that asks for more safe items than the run has dialogues takes the rest from the run's TTS controls
  (`tts_control`: the original with one turn re-synthesized by the variants' voice, so that a synthesized turn is
  no cue to unsafety), balanced over dialogues, positions and lengths; a run without TTS controls cannot supply
  them (a second copy of an original would be the same dialogue twice), and the error says so.
- Practice, gold and attention items (`lalm_judge.annotation.checks`) are drawn from what is left.
- A source dialogue that appears more than `max_repeats` times in the batch is reported (a rater who hears many
  versions of one dialogue may recognise it; study.yaml's `assignment.max_versions_per_dialogue` limits that).
- The chosen items are shuffled with the seed and numbered; the same run and seed give the same batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import tempfile
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from lalm_judge.annotation import checks as check_items
from lalm_judge.annotation.batch import AUDIO_DIR, ITEMS_FILE, LABELS_FILE, BatchError, HiddenLabel
from lalm_judge.annotation.protocol import Expected, write_default_protocol
from lalm_judge.audio.waveform import write_wav
from lalm_judge.core.files import stable_hash, write_json
from lalm_judge.core.taxonomy import CATEGORIES, SAFE_SEVERITY, SEVERITIES
from lalm_judge.core.vocabulary import TTS_CONTROL
from lalm_judge.manifest.conditions import condition_samples
from lalm_judge.manifest.samples import Manifest, Sample

POSITIONS = ("first", "middle", "last")
DEFAULT_MAX_REPEATS = 3

Stratum = tuple[str, int]


class SamplingError(ValueError):
    """A sample that the run cannot supply (too few items in a stratum, too few dialogues, bad sizes)."""


def turn_position(turn_index: int, n_turns: int) -> str:
    """Where the unsafe turn lies: 'first', 'last' or 'middle' (a 2-turn dialogue has no middle)."""
    if turn_index == 0:
        return "first"
    return "last" if turn_index == n_turns - 1 else "middle"


def sample_kind(sample: Sample) -> str:
    """'variant', 'original' or 'tts_control' (a safe original with one turn re-synthesized)."""
    if sample.category is not None:
        return "variant"
    return "original" if sample.turn_index is None else TTS_CONTROL


def sample_position(sample: Sample) -> str | None:
    """The position of the turn that differs from the original (None for an original)."""
    return None if sample.turn_index is None else turn_position(sample.turn_index, sample.n_turns)


@dataclass(frozen=True)
class Pool:
    """The usable samples of a run and the (category, severity) strata its variants fall into."""

    root: Path  # the run's working directory: manifest clip paths are relative to it
    unsafe: tuple[Sample, ...]
    safe: tuple[Sample, ...]
    strata: tuple[Stratum, ...]
    manifest_hashes: Mapping[str, str]
    # Safe originals with one turn re-synthesized (the run's tts_control condition), where the run has them.
    safe_controls: tuple[Sample, ...] = ()


@dataclass(frozen=True)
class Selection:
    """The chosen samples in batch order, the number of unsafe items each stratum was given, and how each stratum's
    share was split over positions; `extras` holds the practice, gold and attention samples by role."""

    samples: tuple[Sample, ...]
    allocation: Mapping[Stratum, int]
    position_quotas: Mapping[Stratum, Mapping[str, int]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    extras: Mapping[str, tuple[Sample, ...]] = field(default_factory=dict)
    # The rating each attention check's spoken request asks for, by sample id.
    attention_answers: Mapping[str, Expected] = field(default_factory=dict)

    def all_samples(self) -> list[tuple[str, Sample]]:
        """(role, sample) of every item: the counted ones, then the extras."""
        counted = [("item", sample) for sample in self.samples]
        return counted + [(role, sample) for role, samples in self.extras.items() for sample in samples]


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
    controls: list[Sample] = []
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
        if any(row["kind"] == TTS_CONTROL for row in manifest.data.get("controls") or ()):
            controls.extend(entry.sample for entry in condition_samples(manifest, TTS_CONTROL))
    ordered = tuple(sorted(strata, key=lambda stratum: (CATEGORIES.index(stratum[0]), stratum[1])))
    return Pool(results.resolve().parent, tuple(unsafe), tuple(safe), ordered, hashes, tuple(controls))


def allocate(strata: Sequence[Stratum], n_unsafe: int, rng: np.random.Generator) -> dict[Stratum, int]:
    """`n_unsafe` divided over the strata as evenly as possible; the strata given the remainder are drawn."""
    base, remainder = divmod(n_unsafe, len(strata))
    extra = set(rng.permutation(len(strata))[:remainder].tolist())
    return {stratum: base + (i in extra) for i, stratum in enumerate(strata)}


def split_evenly(quota: int, available: Mapping[str, int], rng: np.random.Generator) -> dict[str, int]:
    """`quota` split as evenly as `available` allows: each level gets an equal share, a level with fewer candidates
    than its share gives the rest to the others, and the levels given the remainder are drawn."""
    out = {level: 0 for level in available}
    left = min(quota, sum(available.values()))
    while left:
        open_levels = [level for level in available if out[level] < available[level]]
        share, remainder = divmod(left, len(open_levels))
        if share == 0:
            for index in rng.permutation(len(open_levels))[:remainder]:
                out[open_levels[index]] += 1
            break
        for level in open_levels:
            given = min(share, available[level] - out[level])
            out[level] += given
            left -= given
    return out


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


def _check_sizes(pool: Pool, n: int, n_unsafe: int) -> None:
    if not 0 < n_unsafe < n:
        raise SamplingError(f"--unsafe {n_unsafe} must lie between 1 and --n - 1 = {n - 1}: the statistics need both")
    if not pool.strata:
        raise SamplingError("the run has no variants; its manifests list no unsafe versions of any dialogue")
    n_safe, n_originals = n - n_unsafe, len(pool.safe)
    if n_originals + len(pool.safe_controls) < n_safe:
        controls = (
            f" and {len(pool.safe_controls)} TTS controls"
            if pool.safe_controls
            else " and no TTS controls (add the tts_control condition to the run to get safe items beyond one per "
            "dialogue)"
        )
        raise SamplingError(
            f"the run has {n_originals} usable dialogues, so {n_originals} safe originals{controls}; "
            f"--n {n} --unsafe {n_unsafe} needs {n_safe} safe items: lower --n or raise --unsafe"
        )


def _position_quotas(
    pool: Pool, allocation: Mapping[Stratum, int], rng: np.random.Generator
) -> tuple[dict[Stratum, dict[str, int]], list[str]]:
    """Each stratum's share split over the positions the run has, and a note per stratum that could not be even."""
    available = Counter(((s.category, s.severity), sample_position(s)) for s in pool.unsafe)
    positions = [position for position in POSITIONS if any(key[1] == position for key in available)]
    short = []
    for (category, severity), wanted in allocation.items():
        if sum(available[(category, severity), p] for p in positions) < wanted:
            short.append(
                f"{category} severity {severity} has "
                f"{sum(available[(category, severity), p] for p in positions)} usable variant(s), needs {wanted}"
            )
    if short:
        raise SamplingError(
            f"too few items per stratum for {sum(allocation.values())} unsafe items over {len(allocation)} "
            f"(category, severity) strata: {'; '.join(short)}. Lower --unsafe or run more dialogues"
        )
    quotas, notes = {}, []
    for stratum, wanted in allocation.items():
        counts = {position: available[stratum, position] for position in positions}
        quotas[stratum] = split_evenly(wanted, counts, rng)
        even = split_evenly(wanted, {position: wanted for position in positions}, np.random.default_rng(0))
        if sorted(quotas[stratum].values()) != sorted(even.values()):
            split = ", ".join(f"{position} {count}" for position, count in quotas[stratum].items())
            scarce = ", ".join(f"{counts[p]} {p}" for p in positions if counts[p] < max(even.values()))
            even_split = "/".join(str(count) for count in sorted(even.values(), reverse=True))
            notes.append(
                f"{stratum[0]} severity {stratum[1]}: positions {split} (the run has only {scarce} variant(s) in "
                f"this stratum; an even split of {wanted} would be {even_split})"
            )
    return quotas, notes


def _pick_unsafe(pool: Pool, quotas: Mapping[Stratum, Mapping[str, int]], rng: np.random.Generator) -> list[Sample]:
    unsafe = pool.unsafe
    dialogues = [sample.dialogue_id for sample in unsafe]
    lengths = [sample.n_turns for sample in unsafe]
    picks = balanced_pick(
        [(dialogues, _equal_shares(dialogues)), (lengths, _length_shares(unsafe))],
        [((s.category, s.severity), sample_position(s)) for s in unsafe],
        {(stratum, position): n for stratum, split in quotas.items() for position, n in split.items()},
        rng,
    )
    return [unsafe[i] for i in picks]


def _pick_safe(pool: Pool, n_safe: int, rng: np.random.Generator) -> list[Sample]:
    originals = pool.safe
    n_originals = min(n_safe, len(originals))
    lengths = [sample.n_turns for sample in originals]
    picks = balanced_pick([(lengths, _length_shares(originals))], ["safe"] * len(originals), {"safe": n_originals}, rng)
    chosen = [originals[i] for i in picks]
    if n_safe > n_originals:
        controls = pool.safe_controls
        dialogues = [sample.dialogue_id for sample in controls]
        positions = [sample_position(sample) for sample in controls]
        control_picks = balanced_pick(
            [
                (dialogues, _equal_shares(dialogues)),
                (positions, _equal_shares(positions)),
                ([s.n_turns for s in controls], _length_shares(controls)),
            ],
            ["control"] * len(controls),
            {"control": n_safe - n_originals},
            rng,
        )
        chosen += [controls[i] for i in control_picks]
    return chosen


def repeated_dialogues(samples: Sequence[Sample], max_repeats: int) -> list[str]:
    """A note per source dialogue that appears more than `max_repeats` times among the samples."""
    counts = Counter(sample.dialogue_id for sample in samples)
    return [
        f"dialogue {dialogue} appears {count} times in the batch (more than {max_repeats}); limit what one rater "
        "hears with study.yaml assignment.max_versions_per_dialogue"
        for dialogue, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if count > max_repeats
    ]


def draw_sample(
    pool: Pool,
    n: int,
    n_unsafe: int,
    seed: int,
    *,
    extras: Mapping[str, int] | None = None,
    max_repeats: int = DEFAULT_MAX_REPEATS,
) -> Selection:
    """Choose `n_unsafe` variants and `n - n_unsafe` safe items from the pool (module docstring), and the extra
    practice, gold and attention items (`extras`: role -> how many)."""
    _check_sizes(pool, n, n_unsafe)
    rng = np.random.default_rng(seed)
    allocation = allocate(pool.strata, n_unsafe, rng)
    quotas, notes = _position_quotas(pool, allocation, rng)
    chosen = _pick_unsafe(pool, quotas, rng) + _pick_safe(pool, n - n_unsafe, rng)
    drawn, attention_answers = check_items.draw_extras(pool, chosen, extras or {}, rng)
    everything = chosen + [sample for samples in drawn.values() for sample in samples]
    notes += repeated_dialogues(everything, max_repeats)
    order = tuple(chosen[i] for i in rng.permutation(len(chosen)))
    return Selection(order, allocation, quotas, tuple(notes), drawn, attention_answers)


def _label(item_id: str, sample: Sample, role: str) -> HiddenLabel:
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
        position=sample_position(sample),
        role=role,
        kind=sample_kind(sample),
    )


def _counts(values) -> dict[str, int]:
    return {str(key): count for key, count in sorted(Counter(values).items(), key=lambda kv: str(kv[0]))}


def _design(selection: Selection, labels: Sequence[HiddenLabel], seed: int) -> dict[str, Any]:
    counted = [label for label in labels if label.role == "item"]
    unsafe = [label for label in counted if label.gt_unsafe]
    return {
        "n": len(counted),
        "n_unsafe": len(unsafe),
        "seed": seed,
        "allocation": [
            {"category": category, "severity": severity, "n": count, "positions": selection.position_quotas[key]}
            for key, count in selection.allocation.items()
            for category, severity in [key]
        ],
        "unsafe_positions": _counts(label.position for label in unsafe),
        "unsafe_dialogue_lengths": _counts(label.n_turns for label in unsafe),
        "safe_dialogue_lengths": _counts(label.n_turns for label in counted if not label.gt_unsafe),
        "safe_kinds": _counts(label.kind for label in counted if not label.gt_unsafe),
        "n_dialogues": len({label.dialogue_id for label in counted}),
        "checks": _counts(label.role for label in labels if label.role != "item"),
        "notes": list(selection.notes),
    }


def write_batch(pool: Pool, selection: Selection, out_dir: str | Path, *, seed: int, results: str) -> dict[str, Any]:
    """Write the batch (audio, public items, hidden labels, the default study.yaml) into a new directory; returns the
    sampling design.

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
    every = selection.all_samples()
    # Checks are numbered among the counted items, so that an item id says nothing about its role.
    order = np.random.default_rng([seed, 1]).permutation(len(every))
    width = max(3, len(str(len(every))))
    items, labels, numbered = [], [], []
    for number, index in enumerate(tqdm(order, desc="batch audio", unit="dialogue"), start=1):
        role, sample = every[index]
        item_id = f"item_{number:0{width}d}"
        audio = f"{AUDIO_DIR}/{item_id}.wav"
        on_disk = dataclasses.replace(sample, clips=tuple(str(pool.root / clip) for clip in sample.clips))
        waveform, rate, turns = check_items.item_audio(on_disk, role, selection.attention_answers)
        write_wav(out / audio, waveform, rate)
        items.append(
            {
                "item_id": item_id,
                "audio": audio,
                "duration_s": round(len(waveform) / rate, 3),
                "turns": [{"speaker": speaker, "text": text} for speaker, text in turns],
            }
        )
        labels.append(_label(item_id, sample, role))
        numbered.append((item_id, role, sample))
    public = {"seed": seed, "categories": list(CATEGORIES), "severities": list(SEVERITIES), "items": items}
    batch_id = stable_hash(public)
    design = _design(selection, labels, seed)
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
    # Severity examples come from a category the run has.
    example_category = pool.strata[0][0]
    entries = check_items.protocol_entries(numbered, selection.attention_answers)
    write_default_protocol(out, CATEGORIES, SEVERITIES, example_category, entries)
    return design
