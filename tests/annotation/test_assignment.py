"""The assignment design: k raters per item, balanced overlap between every pair of raters, a per-rater limit on the
versions of one source dialogue, and raters added while the study runs (in the library and through the app's
registration in the ratings database)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
import yaml

from lalm_judge.annotation.app import open_study, rater_items
from lalm_judge.annotation.assignment import (
    AssignmentError,
    Design,
    assign,
    check_feasibility,
    design_summary,
    pair_overlaps,
)
from lalm_judge.annotation.store import StoreError


def items_of(n_items: int, n_dialogues: int) -> tuple[list[str], dict[str, str]]:
    items = [f"item_{i:03d}" for i in range(n_items)]
    return items, {item: f"d{i % n_dialogues}" for i, item in enumerate(items)}


def register(raters: int, items, dialogue_of, design: Design, seed: int = 0) -> dict[str, list[str]]:
    assignments: dict[str, list[str]] = {}
    for slot in range(raters):
        rater = f"r{slot}"
        assignments[rater] = assign(rater, slot, items, dialogue_of, assignments, design, seed)
    return assignments


@pytest.mark.parametrize(
    ("n_items", "planned", "k"), [(160, 5, 3), (160, 10, 3), (100, 7, 3), (12, 3, 2), (13, 4, 2), (160, 5, 2)]
)
def test_every_item_gets_k_raters_and_every_pair_of_raters_shares_items(n_items, planned, k):
    items, dialogue_of = items_of(n_items, n_items)
    design = Design(raters_per_item=k, planned_raters=planned)
    assignments = register(planned, items, dialogue_of, design)
    assert Counter(item for assigned in assignments.values() for item in assigned) == dict.fromkeys(items, k)
    loads = [len(assigned) for assigned in assignments.values()]
    assert max(loads) - min(loads) <= 2 and abs(max(loads) - design.items_per_rater(n_items)) <= 1
    overlaps = pair_overlaps(assignments).values()
    # Balanced: each pair shares about L (k - 1) / (R - 1) items; none shares nothing.
    balanced = n_items * k * (k - 1) / (planned * (planned - 1))
    assert min(overlaps) >= 1 and max(overlaps) - min(overlaps) <= 2 and min(overlaps) <= balanced <= max(overlaps)
    assert all(len(set(assigned)) == len(assigned) for assigned in assignments.values())
    assert register(planned, items, dialogue_of, design) == assignments  # deterministic per seed
    assert register(planned, items, dialogue_of, design, seed=1) != assignments


def test_the_per_rater_limit_on_versions_of_one_dialogue_holds():
    items, dialogue_of = items_of(48, 12)  # 4 versions of each of 12 dialogues
    design = Design(raters_per_item=2, planned_raters=4, max_versions_per_dialogue=2)
    assignments = register(4, items, dialogue_of, design)
    for assigned in assignments.values():
        assert max(Counter(dialogue_of[item] for item in assigned).values()) <= 2
    assert Counter(item for assigned in assignments.values() for item in assigned) == dict.fromkeys(items, 2)
    # Where the limit makes k raters impossible (4 versions x 3 raters > 4 raters x 2 versions) it wins: every
    # rater hears 2 versions of every dialogue, every item has a rater, and the summary says how many fall short.
    tight = Design(raters_per_item=3, planned_raters=4, max_versions_per_dialogue=2)
    short = register(4, items, dialogue_of, tight)
    for assigned in short.values():
        assert Counter(dialogue_of[item] for item in assigned) == dict.fromkeys(set(dialogue_of.values()), 2)
    coverage = Counter(item for assigned in short.values() for item in assigned)
    assert set(coverage) == set(items) and sum(n < 3 for n in coverage.values()) > 0
    # The summary counts ratings, not assignments: with every item rated by each rater holding it, the items below
    # k are those with fewer holders, and they cannot reach k (no planned slot is left to bring more).
    summary = design_summary(items, short, tight, rated=coverage, unheld={})
    assert summary["items_below_k"] == summary["items_cannot_reach_k"] == sum(n < 3 for n in coverage.values())
    assert summary["ratings"] == sum(coverage.values()) and summary["pairs_sharing_nothing"] == 0
    # Before anyone rated, every item is below k; the planned slots nobody holds yet can still bring them there.
    fresh = design_summary(items, {}, design, rated={}, unheld=Counter(i for a in assignments.values() for i in a))
    assert fresh["items_below_k"] == 48 and fresh["items_cannot_reach_k"] == 0 and fresh["ratings"] == 0
    # Without k, every rater gets every dialogue at most twice, the versions spread over the raters.
    everyone = register(3, items, dialogue_of, Design(max_versions_per_dialogue=2))
    assert all(len(assigned) == 24 for assigned in everyone.values())
    assert max(Counter(item for assigned in everyone.values() for item in assigned).values()) == 2


def test_practice_gold_and_attention_items_count_against_the_per_dialogue_limit():
    """Every rater hears the checks: a dialogue with a check item leaves one version less for a rater's counted
    items, both in the planned slots and for raters beyond them."""
    items, dialogue_of = items_of(24, 12)  # 2 versions of each of 12 dialogues
    fixed = ["practice_1", "gold_1", "attention_1"]
    dialogue_of |= {"practice_1": "d0", "gold_1": "d1", "attention_1": "d1"}
    design = Design(raters_per_item=2, planned_raters=4, max_versions_per_dialogue=2)
    assignments = {}
    for slot in range(5):  # 4 planned, then one beyond the plan
        rater = f"r{slot}"
        assignments[rater] = assign(rater, slot, items, dialogue_of, assignments, design, 0, fixed)
    for assigned in assignments.values():
        heard = Counter(dialogue_of[item] for item in [*assigned, *fixed])
        assert max(heard.values()) <= 2 and heard["d1"] == 2  # the gold and attention items fill d1
        assert not any(dialogue_of[item] == "d1" for item in assigned)
    # So no rater can take d1's counted items: the design check says so, with the nearest setting that works.
    feasibility = check_feasibility(items, dialogue_of, fixed, design, seed=0)
    assert not feasibility.feasible and feasibility.coverage[0] == 2
    assert feasibility.nearest == {"max_versions_per_dialogue": 3}
    assert check_feasibility(items, dialogue_of, fixed, Design(2, 4, 3), seed=0).feasible


def test_a_design_that_cannot_be_met_is_found_up_front_with_the_nearest_feasible_settings():
    """150 items from 25 dialogues (6 versions each), 3 raters per item, 5 planned raters, at most 2 versions of a
    dialogue per rater: each rater can hold 2 x 25 = 50 items, not the 90 the design needs."""
    items, dialogue_of = items_of(150, 25)
    design = Design(raters_per_item=3, planned_raters=5, max_versions_per_dialogue=2)
    feasibility = check_feasibility(items, dialogue_of, [], design, seed=0)
    assert not feasibility.feasible and feasibility.per_rater == (50,) * 5
    assert feasibility.short == 150 and feasibility.coverage == {1: 50, 2: 100}
    message = feasibility.problems()
    assert "150 of the 150 counted items would get fewer than 3 raters (50 with 1, 100 with 2)" in message
    assert "each rater 50 counted items instead of about 90" in message
    # Each nearest setting meets the design, and the next one towards the given setting does not.
    assert feasibility.nearest == {"max_versions_per_dialogue": 4, "planned_raters": 9, "raters_per_item": 1}
    assert "max_versions_per_dialogue: 4; planned_raters: 9; raters_per_item: 1" in message
    for key, value in feasibility.nearest.items():
        step = 1 if key == "raters_per_item" else -1
        assert check_feasibility(items, dialogue_of, [], replace(design, **{key: value}), 0).feasible, key
        assert not check_feasibility(items, dialogue_of, [], replace(design, **{key: value + step}), 0).feasible
    assert check_feasibility(items, dialogue_of, [], replace(design, max_versions_per_dialogue=None), 0).feasible


def test_a_rater_added_after_the_planned_ones_gets_the_least_covered_items():
    items, dialogue_of = items_of(30, 30)
    design = Design(raters_per_item=2, planned_raters=3)
    assignments = register(3, items, dialogue_of, design)
    before = {rater: list(assigned) for rater, assigned in assignments.items()}
    assignments["extra"] = assign("extra", 3, items, dialogue_of, assignments, design, seed=0)
    assert {rater: assignments[rater] for rater in before} == before  # nobody else's items change
    assert len(assignments["extra"]) == design.items_per_rater(30) == 20
    assert min(pair_overlaps(assignments).values()) >= 1


def test_designs_that_cannot_work_are_refused():
    with pytest.raises(AssignmentError, match="together"):
        Design(raters_per_item=2)
    with pytest.raises(AssignmentError, match="exceeds planned_raters"):
        Design(raters_per_item=4, planned_raters=3)


def with_design(batch_dir, **assignment) -> None:
    path = batch_dir / "study.yaml"
    protocol = yaml.safe_load(path.read_text())
    protocol["assignment"] = assignment
    path.write_text(yaml.safe_dump(protocol))


def test_raters_registered_at_different_starts_follow_the_design(batch):
    """Through the ratings database: raters added at a later start of the app get the next slots of the design, the
    ones registered before keep their items, and a changed design is refused once raters have items."""
    with_design(batch, raters_per_item=2, planned_raters=3)
    study = open_study(batch)
    counted = set(study.counted)
    study.register(["ann", "ben"])
    first = study.store.assignments()
    later = open_study(batch)
    later.register(["cho"])
    assignments = later.store.assignments()
    assert {rater: assignments[rater] for rater in first} == first
    counts = Counter(item for assigned in assignments.values() for item in assigned if item in counted)
    assert counts == dict.fromkeys(counted, 2) and min(pair_overlaps(assignments).values()) >= 1
    practice, main = rater_items(later, "cho")
    assert practice == [] and {item.item_id for item in main} == set(assignments["cho"])
    with_design(batch, raters_per_item=3, planned_raters=3)
    with pytest.raises(StoreError, match="assignment or checks changed after raters got their items"):
        open_study(batch).register(["dev"])
    assert "dev" not in later.store.raters()
