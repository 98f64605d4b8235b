"""Which items each rater rates: k raters per item with balanced overlap between raters, a per-rater limit on the
versions of one source dialogue, and raters who join while the study runs.

With `raters_per_item` k and `planned_raters` R, the counted items are first laid out over R rater slots
(`plan_slots`), in k rounds over the items (in a seeded random order), each round giving every item one more slot:
the slot that, in this order, holds the fewest versions of the item's source dialogue, has (nearly) the fewest
items so far, shares the fewest items with the slots the item already has (so that every pair of slots shares
about as many items as any other, and agreement is estimable for every pair of raters), and comes first in a
seeded random order. A slot that already holds `max_versions_per_dialogue` versions of the item's source dialogue
is skipped; where that leaves an item fewer than k slots, the rounds still give every item its first ones.
The i-th rater registered takes slot i, whenever they join. A rater beyond the R planned (a replacement, say)
gets, one at a time, the items with the fewest raters so far, preferring items held by raters they share few
items with, under the same per-dialogue limit.

Without k, every rater gets every item (at most `max_versions_per_dialogue` versions of one dialogue, those
with the fewest raters so far). A rater's items are fixed when they are registered and never change.
"""

from __future__ import annotations

import functools
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class AssignmentError(ValueError):
    """A design the batch cannot satisfy (e.g. more raters per item than planned raters)."""


@dataclass(frozen=True)
class Design:
    """The assignment design of a study (`study.yaml`, `assignment`); None: no constraint of that kind."""

    raters_per_item: int | None = None
    planned_raters: int | None = None
    max_versions_per_dialogue: int | None = None

    def __post_init__(self) -> None:
        k, planned = self.raters_per_item, self.planned_raters
        if (k is None) != (planned is None):
            raise AssignmentError(
                "study.yaml assignment: give raters_per_item and planned_raters together (or neither: every "
                "rater rates every item)"
            )
        if k is not None and k > planned:
            raise AssignmentError(f"study.yaml assignment: raters_per_item {k} exceeds planned_raters {planned}")

    @property
    def limit(self) -> float:
        return self.max_versions_per_dialogue or math.inf

    def items_per_rater(self, n_items: int) -> int:
        if self.raters_per_item is None:
            return n_items
        return min(n_items, math.ceil(n_items * self.raters_per_item / self.planned_raters))


@functools.cache
def _plan(items: tuple[str, ...], dialogues: tuple[str, ...], design: Design, seed: int) -> tuple[tuple[str, ...], ...]:
    rng = random.Random(f"{seed}:slots")
    n_slots = design.planned_raters
    load = [0] * n_slots
    together = [[0] * n_slots for _ in range(n_slots)]
    versions: Counter[tuple[int, str]] = Counter()
    chosen: dict[int, list[int]] = {index: [] for index in range(len(items))}
    order = rng.sample(range(len(items)), len(items))
    tie_break = {index: [rng.random() for _ in range(n_slots)] for index in order}
    # One rater per item per round: where the per-dialogue limit leaves too few slots, every item still gets some.
    for _ in range(design.raters_per_item):
        for index in order:
            dialogue, mine = dialogues[index], chosen[index]
            free = [s for s in range(n_slots) if s not in mine and versions[s, dialogue] < design.limit]
            if not free:
                continue
            fewest = min(load[s] for s in free)
            slot = min(
                free,
                key=lambda s: (
                    versions[s, dialogue],
                    load[s] > fewest + 1,
                    sum(together[s][c] for c in mine),
                    load[s],
                    tie_break[index][s],
                ),
            )
            for other in mine:
                together[slot][other] += 1
                together[other][slot] += 1
            mine.append(slot)
            load[slot] += 1
            versions[slot, dialogue] += 1
    slots: list[list[str]] = [[] for _ in range(n_slots)]
    for index in sorted(chosen):
        for slot in chosen[index]:
            slots[slot].append(items[index])
    return tuple(tuple(slot) for slot in slots)


def plan_slots(
    items: Sequence[str], dialogue_of: Mapping[str, str], design: Design, seed: int
) -> tuple[tuple[str, ...], ...]:
    """The items of each of the `planned_raters` slots (module docstring); deterministic per seed."""
    if design.raters_per_item is None:
        raise AssignmentError("plan_slots needs raters_per_item and planned_raters")
    return _plan(tuple(items), tuple(dialogue_of[item] for item in items), design, seed)


def assign(
    rater_id: str,
    slot: int,
    items: Sequence[str],
    dialogue_of: Mapping[str, str],
    existing: Mapping[str, Sequence[str]],
    design: Design,
    seed: int,
) -> list[str]:
    """The counted items of the rater registered `slot`-th (0-based), given the assignments before them."""
    if design.raters_per_item is not None and slot < design.planned_raters:
        return list(plan_slots(items, dialogue_of, design, seed)[slot])
    holders: dict[str, list[str]] = {item: [] for item in items}
    for other, assigned in existing.items():
        for item in assigned:
            if item in holders:
                holders[item].append(other)
    rank = {item: i for i, item in enumerate(random.Random(f"{seed}:{rater_id}").sample(list(items), len(items)))}
    wanted = design.items_per_rater(len(items))
    shared: Counter[str] = Counter()
    versions: Counter[str] = Counter()
    chosen: list[str] = []
    left = set(items)
    while len(chosen) < wanted:
        candidates = [item for item in left if versions[dialogue_of[item]] < design.limit]
        if not candidates:
            break
        best = min(
            candidates,
            key=lambda item: (len(holders[item]), sum(shared[other] for other in holders[item]), rank[item]),
        )
        chosen.append(best)
        left.remove(best)
        versions[dialogue_of[best]] += 1
        shared.update(holders[best])
    return chosen


def coverage(items: Sequence[str], assignments: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """How many raters each item is assigned to."""
    counts = Counter(item for assigned in assignments.values() for item in assigned)
    return {item: counts[item] for item in items}


def pair_overlaps(assignments: Mapping[str, Sequence[str]]) -> dict[tuple[str, str], int]:
    """Items shared by each pair of raters (sorted pair)."""
    sets = {rater: set(assigned) for rater, assigned in assignments.items()}
    raters = sorted(sets)
    return {(a, b): len(sets[a] & sets[b]) for i, a in enumerate(raters) for b in raters[i + 1 :]}


def design_summary(items: Sequence[str], assignments: Mapping[str, Sequence[str]], design: Design) -> dict:
    """What the assignments achieve: raters per item, items per rater, and the overlap of every pair of raters."""
    counts = coverage(items, assignments)
    overlaps = pair_overlaps(assignments)
    k = design.raters_per_item
    return {
        "raters_per_item": k,
        "planned_raters": design.planned_raters,
        "items_per_rater": design.items_per_rater(len(items)),
        "max_versions_per_dialogue": design.max_versions_per_dialogue,
        "n_raters": len(assignments),
        "coverage": {str(n): c for n, c in sorted(Counter(counts.values()).items())},
        "items_below_k": sum(n < k for n in counts.values()) if k else None,
        "pair_overlap_min": min(overlaps.values(), default=None),
        "pair_overlap_max": max(overlaps.values(), default=None),
        "pairs_sharing_nothing": sum(n == 0 for n in overlaps.values()),
    }
