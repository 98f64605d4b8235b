"""Several sampled answers per request (a judge with `generation.seeds`): their verdicts, the majority verdict and
how much the samples agree, recorded by the judge stage in each prediction row (`sample_columns`).

Each sample is read as the row's answers are: with the cell's verdict rule and the sample's completion status
(`finish_reason`), so a sample cut at the token limit before its verdict line ended, or withheld by a filter, has
no verdict and does not vote. A sample's status is its own `finish_reason` where the backend records one per
sample; the first sample's answer is the request's answer, so without its own it has the request's
(`parsing.sample_finish_reasons`).

The majority verdict of n samples is the verdict most of the readable samples give; when two or more verdicts are
given equally often, their signed votes decide (1 counts +1, 2 counts -1, Tie 0; a positive sum is 1, a negative
one 2, zero Tie), as the two presentation orders are combined (`parsing.combine_verdicts`). With no readable
sample (every answer truncated, say) there is no majority verdict. The sample agreement is the share of all n
samples (unreadable ones included) that give the most frequent verdict: 1 when every sample says the same, 1/3 for
three different verdicts, 1/2 for two against two, 0 with none readable (`parsing.majority_verdict`). The metrics
read every sample back from the record (`parsing.row_sample_verdicts`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from lalm_judge.pairwise.parsing import (
    DEFAULT_VERDICT_RULE,
    majority_verdict,
    parse_swapped_verdict,
    parse_verdict,
    sample_finish_reasons,
)

__all__ = ["majority_verdict", "sample_columns"]


def sample_columns(
    forward: Sequence[Mapping[str, Any]],
    swapped: Sequence[Mapping[str, Any]],
    rule: str = DEFAULT_VERDICT_RULE,
    finish_reasons: tuple[str | None, str | None] = (None, None),
) -> dict[str, Any]:
    """The prediction row's sample columns from each order's samples (`[{"seed", "text"[, "finish_reason"]}]`, as
    the backends give them in `JudgeOutput.extra["samples"]`; empty for a judge that answers once), read with the
    cell's verdict `rule`; `finish_reasons` are the two requests' (forward, swapped)."""
    if not forward and not swapped:
        return {"n_samples": 1, "samples": None}
    reasons = sample_finish_reasons(forward, finish_reasons[0]), sample_finish_reasons(swapped, finish_reasons[1])
    ahead = [parse_verdict(s["text"], rule, reason).label for s, reason in zip(forward, reasons[0])]
    back = [parse_swapped_verdict(s["text"], rule, reason).label for s, reason in zip(swapped, reasons[1])]
    record = [
        {
            "seed": first["seed"],
            "answer": first["text"],
            "answer_swapped": second["text"],
            "finish_reason": reason,
            "finish_reason_swapped": reason_swapped,
            "verdict": verdict,
            "verdict_swapped": verdict_swapped,
        }
        for first, second, reason, reason_swapped, verdict, verdict_swapped in zip(
            forward, swapped, *reasons, ahead, back
        )
    ]
    majority, agreement = majority_verdict(ahead)
    majority_swapped, agreement_swapped = majority_verdict(back)
    return {
        "n_samples": len(forward),
        "samples": json.dumps(record, ensure_ascii=False),
        "verdict_majority": majority,
        "verdict_majority_swapped": majority_swapped,
        "sample_agreement": agreement,
        "sample_agreement_swapped": agreement_swapped,
    }
