"""Which items each rater rates: k raters per item with balanced overlap between raters, a per-rater limit on the
versions of one source dialogue, and raters who join while the study runs.

With `raters_per_item` k and `planned_raters` R, the counted items are first laid out over R rater slots
(`plan_slots`), in k rounds over the items (in a seeded random order), each round giving every item one more slot:
the slot that, in this order, holds the fewest versions of the item's source dialogue, has (nearly) the fewest
items so far, shares the fewest items with the slots the item already has (so that every pair of slots shares
about as many items as any other, and agreement is estimable for every pair of raters), and comes first in a
seeded random order. A slot that already holds `max_versions_per_dialogue` versions of the item's source dialogue
is skipped, counting the practice, gold and attention items every rater hears (`fixed`); where that leaves an item
fewer than k slots, the rounds still give every item its first ones. A rater takes the lowest slot that no rater
holds (the i-th rater registered takes slot i, unless an earlier one's assignment was freed), whenever they join.
A rater beyond the R planned (a replacement, say) gets, one at a time, the items with the fewest raters so far,
preferring items held by raters they share few items with, under the same per-dialogue limit.

Without k, every rater gets every item (at most `max_versions_per_dialogue` versions of one dialogue, those
with the fewest raters so far). A rater's items are fixed when they are registered and never change.

`check_feasibility` computes the plan before anyone rates: how many raters each item would get and how many items
each rater, and where items fall below k, the nearest setting of each design key that meets it (confirmed with
the plan), for `serve` to refuse or warn.
"""

from __future__ import annotations

import dataclasses
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
def _plan(
    items: tuple[str, ...], dialogues: tuple[str, ...], fixed: tuple[str, ...], design: Design, seed: int
) -> tuple[tuple[str, ...], ...]:
    rng = random.Random(f"{seed}:slots")
    n_slots = design.planned_raters
    load = [0] * n_slots
    together = [[0] * n_slots for _ in range(n_slots)]
    # The practice, gold and attention items every rater hears count against the per-dialogue limit.
    versions: Counter[tuple[int, str]] = Counter(
        {(slot, dialogue): n for slot in range(n_slots) for dialogue, n in Counter(fixed).items()}
    )
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
    _repair(chosen, dialogues, versions, design)
    slots: list[list[str]] = [[] for _ in range(n_slots)]
    for index in sorted(chosen):
        for slot in chosen[index]:
            slots[slot].append(items[index])
    return tuple(tuple(slot) for slot in slots)


def _repair(
    chosen: dict[int, list[int]], dialogues: tuple[str, ...], versions: Counter[tuple[int, str]], design: Design
) -> None:
    """Give items the rounds left below k their missing slots where the per-dialogue limit allows, by moving
    versions of the same dialogue between slots along an augmenting path (as in a bipartite matching): the greedy
    rounds can fill a slot with a dialogue's versions that another slot could have taken."""
    k, n_slots = design.raters_per_item, design.planned_raters
    for index, mine in chosen.items():
        dialogue = dialogues[index]
        while len(mine) < k:
            holders = {i: chosen[i] for i in chosen if dialogues[i] == dialogue}
            # Breadth-first from the item: a slot it lacks with room for the dialogue ends the path; a full slot
            # continues it through each version it holds, which would move to another slot.
            came_from: dict[int, int] = {}  # slot -> the item that would take it
            left_from: dict[int, int] = {}  # item -> the slot it would leave
            queue, end = [index], None
            while queue and end is None:
                item = queue.pop(0)
                for slot in range(n_slots):
                    if slot in holders[item] or slot in came_from:
                        continue
                    came_from[slot] = item
                    if versions[slot, dialogue] < design.limit:
                        end = slot
                        break
                    for other, slots in holders.items():
                        if slot in slots and other not in left_from and other != index:
                            left_from[other] = slot
                            queue.append(other)
            if end is None:
                break
            versions[end, dialogue] += 1
            slot = end
            while True:
                item = came_from[slot]
                chosen[item].append(slot)
                if item == index:
                    break
                slot = left_from[item]
                chosen[item].remove(slot)


def plan_slots(
    items: Sequence[str],
    dialogue_of: Mapping[str, str],
    design: Design,
    seed: int,
    fixed: Sequence[str] = (),
) -> tuple[tuple[str, ...], ...]:
    """The items of each of the `planned_raters` slots (module docstring); deterministic per seed. `fixed`: the
    items every rater hears besides (practice, gold, attention), which count against the per-dialogue limit."""
    if design.raters_per_item is None:
        raise AssignmentError("plan_slots needs raters_per_item and planned_raters")
    fixed_dialogues = tuple(sorted(dialogue_of[item] for item in fixed))
    return _plan(tuple(items), tuple(dialogue_of[item] for item in items), fixed_dialogues, design, seed)


def assign(
    rater_id: str,
    slot: int,
    items: Sequence[str],
    dialogue_of: Mapping[str, str],
    existing: Mapping[str, Sequence[str]],
    design: Design,
    seed: int,
    fixed: Sequence[str] = (),
) -> list[str]:
    """The counted items of the rater in `slot` (0-based), given the assignments of the raters who hold theirs;
    `fixed` as in `plan_slots`."""
    if design.raters_per_item is not None and slot < design.planned_raters:
        return list(plan_slots(items, dialogue_of, design, seed, fixed)[slot])
    holders: dict[str, list[str]] = {item: [] for item in items}
    for other, assigned in existing.items():
        for item in assigned:
            if item in holders:
                holders[item].append(other)
    rank = {item: i for i, item in enumerate(random.Random(f"{seed}:{rater_id}").sample(list(items), len(items)))}
    wanted = design.items_per_rater(len(items))
    shared: Counter[str] = Counter()
    versions: Counter[str] = Counter(dialogue_of[item] for item in fixed)
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


def design_summary(
    items: Sequence[str],
    assignments: Mapping[str, Sequence[str]],
    design: Design,
    rated: Mapping[str, int],
    unheld: Mapping[str, int],
) -> dict:
    """What the study achieves so far: ratings per item (`rated`, from the raters who count), items below k
    ratings, items that cannot reach k as configured (their ratings, the items still due from the raters who hold
    them (`assignments`) and the planned slots nobody holds yet (`unheld`) add up to fewer than k), items per
    rater, and the overlap of every pair of raters."""
    overlaps = pair_overlaps(assignments)
    k = design.raters_per_item
    due = {item: n - rated.get(item, 0) for item, n in coverage(items, assignments).items()}
    reachable = {item: rated.get(item, 0) + max(due[item], 0) + unheld.get(item, 0) for item in items}
    return {
        "raters_per_item": k,
        "planned_raters": design.planned_raters,
        "items_per_rater": design.items_per_rater(len(items)),
        "max_versions_per_dialogue": design.max_versions_per_dialogue,
        "n_raters": len(assignments),
        "ratings": sum(rated.get(item, 0) for item in items),
        "ratings_per_item": {str(n): c for n, c in sorted(Counter(rated.get(item, 0) for item in items).items())},
        "items_below_k": sum(rated.get(item, 0) < k for item in items) if k else None,
        "items_cannot_reach_k": sum(n < k for n in reachable.values()) if k else None,
        "pair_overlap_min": min(overlaps.values(), default=None),
        "pair_overlap_max": max(overlaps.values(), default=None),
        "pairs_sharing_nothing": sum(n == 0 for n in overlaps.values()),
    }


@dataclass(frozen=True)
class Feasibility:
    """Whether a design can be met, from its plan computed up front (`check_feasibility`).

    `per_rater`: the counted items of each planned slot; `coverage`: raters per item -> number of items;
    `over_limit`: dialogues whose practice, gold and attention items alone exceed the per-dialogue limit, with
    their number of versions; `unreachable`: counted items no rater can get (their dialogue's limit is used up by
    those items); `nearest`: the nearest setting of each design key that meets the design, the others unchanged
    (checked with the plan itself; a key without one is absent)."""

    design: Design
    n_items: int
    n_fixed: int
    per_rater: tuple[int, ...]
    coverage: Mapping[int, int]
    over_limit: Mapping[str, int]
    unreachable: int
    nearest: Mapping[str, int]

    @property
    def short(self) -> int:
        """Counted items below raters_per_item (with raters_per_item), or that no rater can get (without)."""
        k = self.design.raters_per_item
        if k is None:
            return self.unreachable
        return sum(count for n, count in self.coverage.items() if n < k)

    @property
    def feasible(self) -> bool:
        return self.short == 0 and not self.over_limit

    def problems(self) -> str:
        """What cannot be met, with the numbers and the nearest feasible settings ('' when feasible)."""
        if self.feasible:
            return ""
        design, parts = self.design, []
        limit = design.max_versions_per_dialogue
        fixed = ""
        if self.n_fixed:
            fixed = f" (the {self.n_fixed} practice, gold and attention items every rater hears included)"
        if self.over_limit:
            worst = ", ".join(f"{dialogue} ({n})" for dialogue, n in sorted(self.over_limit.items()))
            parts.append(
                f"the practice, gold and attention items alone give every rater more than {limit} versions of "
                f"source dialogue(s) {worst}"
            )
        k = design.raters_per_item
        if k is not None and self.short:
            below = ", ".join(f"{count} with {n}" for n, count in sorted(self.coverage.items()) if n < k)
            wanted = design.items_per_rater(self.n_items)
            lowest, highest = min(self.per_rater), max(self.per_rater)
            got = f"{lowest}" if lowest == highest else f"{lowest}-{highest}"
            parts.append(
                f"with {k} raters per item, {design.planned_raters} planned raters and at most {limit} version(s) "
                f"of a source dialogue per rater{fixed}, {self.short} of the {self.n_items} counted items would "
                f"get fewer than {k} raters ({below}), and each rater {got} counted items instead of about {wanted}"
            )
        elif self.unreachable:
            parts.append(
                f"at most {limit} version(s) of a source dialogue per rater{fixed} leaves {self.unreachable} of the "
                f"{self.n_items} counted items to no rater"
            )
        nearest = "; ".join(f"{key}: {value}" for key, value in self.nearest.items())
        advice = f"Nearest feasible settings (each alone): {nearest}" if nearest else "No single setting meets it"
        return "study.yaml assignment cannot be met: " + "; ".join(parts) + f". {advice}"


def _short_of(items, dialogues, fixed, design: Design, seed: int) -> int:
    slots = _plan(items, dialogues, fixed, design, seed)
    counts = Counter(item for slot in slots for item in slot)
    return sum(counts[item] < design.raters_per_item for item in items)


def _nearest(
    items: tuple[str, ...], dialogues: tuple[str, ...], fixed: tuple[str, ...], design: Design, seed: int
) -> dict[str, int]:
    """The nearest value of each design key that leaves no item below k, the others unchanged, searched from the
    bound that the per-dialogue counts imply (each rater holds at most limit - fixed versions of a dialogue, so a
    dialogue of v versions needs k * v <= R * (limit - fixed)) and confirmed with the plan."""
    k, planned, limit = design.raters_per_item, design.planned_raters, design.max_versions_per_dialogue
    versions, fixed_versions = Counter(dialogues), Counter(fixed)
    nearest: dict[str, int] = {}

    def works(**change) -> bool:
        return _short_of(items, dialogues, fixed, dataclasses.replace(design, **change), seed) == 0

    if limit is not None:
        bound = max(fixed_versions[d] + math.ceil(k * v / planned) for d, v in versions.items())
        ceiling = max(fixed_versions[d] + v for d, v in versions.items())
        found = next(
            (value for value in range(max(bound, limit + 1), ceiling + 1) if works(max_versions_per_dialogue=value)),
            None,
        )
        if found is not None:
            nearest["max_versions_per_dialogue"] = found
    room = {d: design.limit - fixed_versions[d] for d in versions}
    if all(space >= 1 for space in room.values()):
        bound = max(max(math.ceil(k * v / min(room[d], v)) for d, v in versions.items()), planned + 1)
        found = next((r for r in range(bound, bound + 2 * k + 8) if works(planned_raters=r)), None)
        if found is not None:
            nearest["planned_raters"] = found
        bound = min(planned * min(room[d], v) // v for d, v in versions.items())
        found = next((n for n in range(min(bound, k - 1), 0, -1) if works(raters_per_item=n)), None)
        if found is not None:
            nearest["raters_per_item"] = found
    return nearest


def check_feasibility(
    items: Sequence[str], dialogue_of: Mapping[str, str], fixed: Sequence[str], design: Design, seed: int
) -> Feasibility:
    """The design's plan computed up front (module docstring): what it gives the planned raters, and where it
    falls short, the nearest feasible settings."""
    fixed_versions = Counter(dialogue_of[item] for item in fixed)
    over_limit = {d: n for d, n in fixed_versions.items() if n > design.limit}
    unreachable = sum(fixed_versions[dialogue_of[item]] >= design.limit for item in items)
    if design.raters_per_item is None:
        nearest = {"max_versions_per_dialogue": max(fixed_versions.values()) + 1} if unreachable or over_limit else {}
        return Feasibility(design, len(items), len(fixed), (), {}, over_limit, unreachable, nearest)
    slots = plan_slots(items, dialogue_of, design, seed, fixed)
    counts = Counter(item for slot in slots for item in slot)
    feasibility = Feasibility(
        design,
        len(items),
        len(fixed),
        tuple(len(slot) for slot in slots),
        dict(sorted(Counter(counts[item] for item in items).items())),
        over_limit,
        unreachable,
        {},
    )
    if feasibility.short and items:
        dialogues = tuple(dialogue_of[item] for item in items)
        fixed_dialogues = tuple(sorted(fixed_versions.elements()))
        nearest = _nearest(tuple(items), dialogues, fixed_dialogues, design, seed)
        feasibility = dataclasses.replace(feasibility, nearest=nearest)
    return feasibility
