"""Preference pairs from per-aspect ratings: which two spoken responses an item compares, and its labels.

Per item, the candidates are its completions with a spoken clip kept by the filters. `pairs_per_item` pairs
are drawn, seeded and without repetition, from the pairs of candidates that share an engine; each pair is
heard in one engine, drawn among those that kept both clips, so the two responses never differ in voice.
Which completion is "Response 1" is drawn too, so that the position says nothing about quality. Per aspect
rated for both completions:

    label = Tie  if |rating_1 - rating_2| < tie_margin,
            "1"  if rating_1 > rating_2, else "2".

With the default `tie_margin` 1 only equal ratings tie; 2 also ties ratings one point apart.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lalm_judge.core.files import stable_hash
from lalm_judge.core.vocabulary import RESPONSE_1, RESPONSE_2, TIE


@dataclass(frozen=True)
class Candidate:
    """A completion of an item with the engines whose clip of it survived the filters."""

    completion: int
    engines: frozenset[str]


@dataclass(frozen=True)
class Pair:
    item_id: str
    pair: int  # index of the pair within its item
    completions: tuple[int, int]  # (Response 1, Response 2)
    engine: str


def label_of(rating1: int, rating2: int, tie_margin: int) -> str:
    """1, 2 or Tie from two ratings of the same aspect (module docstring)."""
    if abs(rating1 - rating2) < tie_margin:
        return TIE
    return RESPONSE_1 if rating1 > rating2 else RESPONSE_2


def _generator(seed: int, *keys: object) -> np.random.Generator:
    return np.random.default_rng(int(stable_hash([seed, *keys], length=12), 16))


def draw_pairs(item_id: str, candidates: Sequence[Candidate], pairs_per_item: int, seed: int) -> list[Pair]:
    """Up to `pairs_per_item` pairs of the item's candidates (fewer when it has fewer possible pairs)."""
    options = [
        (a, b, sorted(a.engines & b.engines))
        for a, b in itertools.combinations(sorted(candidates, key=lambda c: c.completion), 2)
        if a.engines & b.engines
    ]
    if not options:
        return []
    generator = _generator(seed, "pairs", item_id)
    chosen = generator.permutation(len(options))[:pairs_per_item]
    pairs = []
    for index, option in enumerate(sorted(chosen)):
        first, second, engines = options[option]
        order = (first.completion, second.completion)
        if generator.random() < 0.5:
            order = order[::-1]
        pairs.append(Pair(item_id, index, order, engines[int(generator.integers(len(engines)))]))
    return pairs


ASPECT_WORDS = {
    "helpfulness": "helpfulness",
    "honesty": "honesty",
    "instruction_following": "instruction following",
    "truthfulness": "truthfulness",
}


def template_rationale(aspect: str, label: str, notes: tuple[str, str]) -> str:
    """A comparative rationale for the given label from the annotators' notes on the two responses.

    The first sentence states the comparison (what the label says); the notes, which describe the responses,
    follow without naming a response, so the rationale argues for exactly its label
    (`lalm_judge.pairwise.consistency`). The ratings are never quoted: a judge trained on the rationales is to
    argue from the responses, not to invent scores."""
    words = ASPECT_WORDS.get(aspect, aspect.replace("_", " "))
    if label == TIE:
        first = f"Response 1 and Response 2 are about equally good in {words}."
        notes_text = f"On the first: {_sentence(notes[0])} On the second: {_sentence(notes[1])}"
    else:
        better, worse = (0, 1) if label == RESPONSE_1 else (1, 0)
        first = f"Response {better + 1} is better than Response {worse + 1} in {words}."
        notes_text = f"For the better one: {_sentence(notes[better])} For the other: {_sentence(notes[worse])}"
    return f"{first} {notes_text}".strip()


def _sentence(note: str) -> str:
    note = " ".join(note.split())
    if not note:
        return "no note."
    return note if note[-1] in ".!?" else f"{note}."


def aspect_labels(ratings: Mapping[str, tuple[int | None, int | None]], tie_margin: int) -> dict[str, str]:
    """aspect -> label for the aspects rated for both responses."""
    return {
        aspect: label_of(first, second, tie_margin)
        for aspect, (first, second) in ratings.items()
        if first is not None and second is not None
    }
