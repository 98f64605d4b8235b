"""Several sampled answers per request (a judge with `generation.seeds`): their verdicts, the majority verdict and
how much the samples agree. Pure functions on answers: the judge stage records their result in each prediction
row (`sample_columns`).

The majority verdict of n samples is the verdict most of the readable samples give; when two or more verdicts are
given equally often, their signed votes decide (1 counts +1, 2 counts -1, Tie 0; a positive sum is 1, a negative
one 2, zero Tie), as the two presentation orders are combined (`parsing.combine_verdicts`). With no readable
sample there is no majority verdict. The sample agreement is the share of all n samples (unreadable ones
included) that give the most frequent verdict: 1 when every sample says the same, 1/3 for three different
verdicts, 1/2 for two against two.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lalm_judge.core.vocabulary import RESPONSE_1, RESPONSE_2, TIE
from lalm_judge.pairwise.parsing import ParsedVerdict, parse_swapped_verdict, parse_verdict

_VOTE = {RESPONSE_1: 1, RESPONSE_2: -1, TIE: 0}


def majority_verdict(verdicts: Sequence[str | None]) -> tuple[str | None, float | None]:
    """(majority verdict, sample agreement) of the samples' verdicts (None = unreadable); (None, None) without
    samples, (None, 0.0) when none is readable."""
    if not verdicts:
        return None, None
    counts = Counter(v for v in verdicts if v is not None)
    if not counts:
        return None, 0.0
    top = max(counts.values())
    leaders = [verdict for verdict, count in counts.items() if count == top]
    if len(leaders) == 1:
        winner = leaders[0]
    else:
        total = sum(_VOTE[verdict] for verdict in leaders)
        winner = RESPONSE_1 if total > 0 else RESPONSE_2 if total < 0 else TIE
    return winner, top / len(verdicts)


def _order(samples: Sequence[Mapping[str, Any]], parse: Callable[[str | None], ParsedVerdict]) -> dict[str, Any]:
    verdicts = [parse(sample["text"]).label for sample in samples]
    majority, agreement = majority_verdict(verdicts)
    return {"verdicts": verdicts, "majority": majority, "agreement": agreement}


def sample_columns(forward: Sequence[Mapping[str, Any]], swapped: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The prediction row's sample columns from each order's samples (`[{"seed", "text"}]`, as the backends give
    them in `JudgeOutput.extra["samples"]`; empty for a judge that answers once)."""
    if not forward and not swapped:
        return {"n_samples": 1, "samples": None}
    ahead, back = _order(forward, parse_verdict), _order(swapped, parse_swapped_verdict)
    record = [
        {
            "seed": first["seed"],
            "answer": first["text"],
            "answer_swapped": second["text"],
            "verdict": verdict,
            "verdict_swapped": verdict_swapped,
        }
        for first, second, verdict, verdict_swapped in zip(forward, swapped, ahead["verdicts"], back["verdicts"])
    ]
    return {
        "n_samples": len(forward),
        "samples": json.dumps(record, ensure_ascii=False),
        "verdict_majority": ahead["majority"],
        "verdict_majority_swapped": back["majority"],
        "sample_agreement": ahead["agreement"],
        "sample_agreement_swapped": back["agreement"],
    }
