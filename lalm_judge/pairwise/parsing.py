"""Reading a pairwise verdict from a judge's answer, the swap of the presentation order, and the combination
of both orders.

Every pairwise prompt asks for the verdict (`1`, `2` or `Tie`) on the first line and the rationale below
it, as SageLM's records do. Two documented rules read an answer (`pairwise.verdict_rule`, recorded per row;
docs/metrics.md has the table of examples the tests check):

`sagelm` (the default): SageLM's evaluator (`judge-eval/eval_compare_1_aspect_with_args.py` of its LLaMA-Factory
fork) takes the first character of the answer: `1`, `2` or `T` (Tie); anything else is a wrong format. Here:
1. Empty or whitespace-only answer -> `missing`.
2. The answer, leading whitespace removed, starts with `1` or `2` (not followed by another digit or by a decimal
   point and a digit: `12`, `1.5 s`) or with the word `Tie` (any case): that is the verdict, and the rest of the
   answer (separators after the verdict dropped) is the rationale. Two deviations from SageLM's script, both
   on answers it would misread: a `T` that does not begin the word `Tie` ("The first response ...") is not a
   Tie, and a first line naming two verdicts (`1 or 2`, `Tie/2`) is `ambiguous`. On answers of SageLM's format
   (label, line break, rationale) the two read the same.
3. Anything else -> `refusal` when the answer declines the task (`lalm_judge.core.refusals`), else `malformed`:
   markdown around the label (`**2**`), a prefix (`Verdict: 1`), an echo of the prompt's scaffold
   (`### Response 1:` and the echoed response) are not verdicts under this rule.

`lenient`: for judges that decorate their answers; it reads more, never an echo of the scaffold.
1. Empty or whitespace-only answer -> `missing`.
2. A first line naming two verdicts (`1 or 2`) -> `ambiguous`.
3. The first non-empty line is a verdict: the label alone, optionally in markdown/brackets/quotes, after a
   prefix such as `Verdict:`, `Answer:`, `Better response:` or `Response`, and followed by nothing or by
   punctuation (`1.`, `**Tie**`, `[[2]]`, `Verdict: Response 1 -`). The rationale is the rest of the
   answer. A first line `Response 1:` / `### Response 2:` / `Instruction:` is the prompt's own heading echoed,
   not a verdict (a colon right after `Response N` makes it a heading).
4. Labelled statements anywhere (`verdict: 2`, `final answer = Tie`, `better response: Response 1`): the
   LAST one decides (answers often think aloud before concluding). The rationale is the whole answer.
   Labelled statements whose value is not a label (`Verdict: both`, `Answer: 3`) -> `malformed`.
5. The answer declines the task (`I can't compare audio`) -> `refusal`.
6. An answer that opens with an echo of the scaffold -> `malformed`; anything else -> `missing`. Words such as
   "Response 1 is better" in free prose are not read: they are too often half of a comparison ("... but
   Response 2 is better overall").

Both rules take the completion status (`finish_reason`, as the backend normalized it): `content_filter` ->
`filtered`; `length` (cut at the token limit) -> `truncated`, unless the verdict line was complete before the
cut: the verdict came from the first line and a line break follows it (a verdict from a labelled statement, or
a first line still being written, is `truncated`).

Labels are case-insensitive on input (`tie`, `TIE`) and spelled `1`, `2`, `Tie` on output. Only `ok`
carries a label; every other status has label None, and a missing label counts as wrong in the metrics.

Both orders: with the responses shown swapped, the judge's `1` names the item's response 2; `swap_verdict`
maps it back. `combine_verdicts` is the documented rule for the final label of the two orders: each order
votes +1 (response 1), -1 (response 2) or 0 (Tie); the sum decides (> 0: `1`, < 0: `2`, 0: `Tie`). So two
agreeing orders keep their label, a win against a Tie keeps the win, and opposite wins (the judge followed
the position, not the response) become `Tie`. A combined verdict needs both orders: if either failed, the
combined status is that failure (the forward order's first).

Several samples per request (a judge with `generation.seeds`, `lalm_judge.pairwise.samples`): each sample is read
as an answer is, with the rule and its own completion status (`sample_finish_reasons`), and the majority verdict
is the one most readable samples give (`majority_verdict`; the same signed votes break a tie in counts). A sample
without a verdict does not vote; with none readable there is no majority verdict.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lalm_judge.core.refusals import states_refusal
from lalm_judge.core.vocabulary import (
    FINISH_CONTENT_FILTER,
    FINISH_LENGTH,
    RESPONSE_1,
    RESPONSE_2,
    SAGELM_RULE,
    TIE,
    VERDICT_RULES,
    VERDICTS,
    ParseStatus,
)

DEFAULT_VERDICT_RULE = SAGELM_RULE

_LABEL = r"(?P<label>1|2|tie)"
_PREFIX = (
    r"(?:(?:final\s+|overall\s+)?(?:verdict|answer|judge?ment|decision|label|choice|result|winner|output|"
    r"better\s+response|preferred\s+response|preference)\s*(?:is)?\s*[:=\-]?\s*)?"
)
_RESPONSE_WORD = r"(?:(?:response|audio|answer)\s*#?\s*)?"
# A first line that is only a verdict: the label then nothing, or a separator before any further text.
_VERDICT_LINE = re.compile(rf"^{_PREFIX}{_RESPONSE_WORD}{_LABEL}(?:$|\s*[.:;,)\]!\-–—](?:\s+(?P<rest>.*))?$)", re.I)
# The prompts' own headings ("### Response 1:", "Instruction:"), echoed by a judge that continues the prompt.
_SCAFFOLD_HEADING = re.compile(r"^(?:(?:response|audio|answer)\s*#?\s*[12]\s*:|instruction\s*:)", re.I)
# A first line naming two verdicts: a hedge, not a verdict.
_TWO_VERDICTS = re.compile(r"^\W*(?:1|2|tie)\s*(?:or|/|and|vs\.?|,|-|–)\s*(?:1|2|tie)\b", re.I)
_SAGELM_VERDICT = re.compile(r"^(?:(?P<digit>[12])(?!\d|[.,]\d)|(?P<tie>tie)(?![a-z]))", re.I)
_LEADING_SEPARATORS = re.compile(r"^[\s.:;,)\]!\-–—]*")
_DECORATION = re.compile(r"[*_`#>\"'\[\](){}]+")
_STATEMENT = re.compile(
    r"\b(?:final\s+)?(?:verdict|answer|judge?ment|decision|label|choice|winner|better\s+response|"
    r"preferred\s+response)\s*(?:is)?\s*[:=]\s*[*_\"'\[(]*\s*(?P<value>[^\s*_\"'\])]+(?:\s+[12])?)",
    re.I,
)
_STATEMENT_VALUE = re.compile(rf"^{_RESPONSE_WORD}{_LABEL}[.,;:!]?$", re.I)


@dataclass(frozen=True)
class ParsedVerdict:
    """A verdict in {'1', '2', 'Tie'} (None unless status is ok), the rationale text and the parse status."""

    label: str | None
    rationale: str | None
    status: ParseStatus

    @property
    def ok(self) -> bool:
        return self.status == ParseStatus.OK


@dataclass(frozen=True)
class _Reading:
    verdict: ParsedVerdict
    # The verdict came from a first line that a line break ends (so a cut after it did not touch it).
    complete: bool = False


def _canonical_label(text: str) -> str:
    return TIE if text.lower() == "tie" else text


def _rationale(text: str) -> str | None:
    text = text.strip()
    return text or None


def _failed(answer: str, status: ParseStatus) -> _Reading:
    return _Reading(ParsedVerdict(None, _rationale(answer), status))


def _read_sagelm(answer: str) -> _Reading:
    text = answer.lstrip()
    first_line = text.split("\n", 1)[0]
    if _TWO_VERDICTS.match(first_line):
        return _failed(answer, ParseStatus.AMBIGUOUS)
    match = _SAGELM_VERDICT.match(text)
    if match is None:
        return _failed(answer, ParseStatus.REFUSAL if states_refusal(answer) else ParseStatus.MALFORMED)
    label = match["digit"] or TIE
    rest = _LEADING_SEPARATORS.sub("", text[match.end() :])
    return _Reading(ParsedVerdict(label, _rationale(rest), ParseStatus.OK), complete="\n" in text)


def _read_lenient(answer: str) -> _Reading:
    lines = answer.strip().splitlines()
    first = _DECORATION.sub(" ", lines[0]).strip()
    if _TWO_VERDICTS.match(first):
        return _failed(answer, ParseStatus.AMBIGUOUS)
    echo = bool(_SCAFFOLD_HEADING.match(first))
    match = None if echo else _VERDICT_LINE.match(first)
    if match:
        rest = "\n".join([match.group("rest") or "", *lines[1:]])
        verdict = ParsedVerdict(_canonical_label(match.group("label")), _rationale(rest), ParseStatus.OK)
        return _Reading(verdict, complete=len(lines) > 1)
    statements = [m.group("value") for m in _STATEMENT.finditer(answer)]
    if statements:
        values = [_STATEMENT_VALUE.match(_DECORATION.sub(" ", value).strip()) for value in statements]
        readable = [value for value in values if value]
        if readable:
            label = _canonical_label(readable[-1].group("label"))
            return _Reading(ParsedVerdict(label, _rationale(answer), ParseStatus.OK))
        return _failed(answer, ParseStatus.MALFORMED)
    if states_refusal(answer):
        return _failed(answer, ParseStatus.REFUSAL)
    return _failed(answer, ParseStatus.MALFORMED if echo else ParseStatus.MISSING)


_READERS = {"sagelm": _read_sagelm, "lenient": _read_lenient}


def check_verdict_rule(rule: str) -> str:
    if rule not in VERDICT_RULES:
        raise ValueError(f"unknown verdict rule {rule!r}; use one of {VERDICT_RULES} (docs/metrics.md)")
    return rule


def parse_verdict(
    answer: str | None, rule: str = DEFAULT_VERDICT_RULE, finish_reason: str | None = None
) -> ParsedVerdict:
    """The verdict, rationale and status of one answer under `rule`, given why its generation stopped (rules in
    the module docstring)."""
    reader = _READERS[check_verdict_rule(rule)]
    text = answer or ""
    if finish_reason == FINISH_CONTENT_FILTER:
        return _failed(text, ParseStatus.FILTERED).verdict
    if not text.strip():
        return ParsedVerdict(
            None, None, ParseStatus.TRUNCATED if finish_reason == FINISH_LENGTH else ParseStatus.MISSING
        )
    reading = reader(text)
    if finish_reason == FINISH_LENGTH and not reading.complete:
        return _failed(text, ParseStatus.TRUNCATED).verdict
    return reading.verdict


def swap_verdict(label: str | None) -> str | None:
    """A verdict given with the responses swapped, in the item's numbering: 1 <-> 2, Tie stays."""
    if label is None:
        return None
    if label not in VERDICTS:
        raise ValueError(f"not a pairwise verdict: {label!r}; use one of {VERDICTS}")
    return {RESPONSE_1: RESPONSE_2, RESPONSE_2: RESPONSE_1}.get(label, TIE)


def parse_swapped_verdict(
    answer: str | None, rule: str = DEFAULT_VERDICT_RULE, finish_reason: str | None = None
) -> ParsedVerdict:
    """The verdict of an answer given with the responses swapped, in the item's numbering."""
    parsed = parse_verdict(answer, rule, finish_reason)
    return ParsedVerdict(swap_verdict(parsed.label), parsed.rationale, parsed.status)


# Columns of a predictions table that say how its answers are read (optional: a table without them is read with
# the default rule, every answer taken as finished).
VERDICT_READING_COLUMNS = ("verdict_rule", "finish_reason", "finish_reason_swapped")


def row_verdicts(row: Mapping[str, Any]) -> tuple[ParsedVerdict, ParsedVerdict | None]:
    """The forward and swapped-back verdicts of one predictions row (`prediction`, optional `prediction_swapped`),
    read with the row's own `verdict_rule` and finish reasons (`finish_reason`, `finish_reason_swapped`) where the
    table records them, else with the default rule."""
    rule = row.get("verdict_rule") or DEFAULT_VERDICT_RULE
    forward = parse_verdict(row["prediction"], rule, row.get("finish_reason"))
    if "prediction_swapped" not in row:
        return forward, None
    return forward, parse_swapped_verdict(row["prediction_swapped"], rule, row.get("finish_reason_swapped"))


_VOTE = {RESPONSE_1: 1, RESPONSE_2: -1, TIE: 0}


def _signed_winner(verdicts: Sequence[str]) -> str:
    total = sum(_VOTE[verdict] for verdict in verdicts)
    return RESPONSE_1 if total > 0 else RESPONSE_2 if total < 0 else TIE


def combine_verdicts(forward: ParsedVerdict, swapped_back: ParsedVerdict) -> tuple[str | None, ParseStatus]:
    """(label, status) of both orders; `swapped_back` is the swapped order's verdict already mapped back
    (`swap_verdict`). Signed votes summed; a failed order fails the combination (module docstring)."""
    for verdict in (forward, swapped_back):
        if not verdict.ok:
            return None, verdict.status
    return _signed_winner([forward.label, swapped_back.label]), ParseStatus.OK  # type: ignore[list-item]


def majority_verdict(verdicts: Sequence[str | None]) -> tuple[str | None, float | None]:
    """(majority verdict, sample agreement) of the samples' verdicts (None = no verdict, which does not vote):
    the verdict most readable samples give, a tie in counts broken by the signed votes; the agreement is the
    share of all samples giving it. (None, None) without samples, (None, 0.0) when none is readable."""
    if not verdicts:
        return None, None
    counts = Counter(v for v in verdicts if v is not None)
    if not counts:
        return None, 0.0
    top = max(counts.values())
    leaders = [verdict for verdict, count in counts.items() if count == top]
    return (leaders[0] if len(leaders) == 1 else _signed_winner(leaders)), top / len(verdicts)


def sample_finish_reasons(
    samples: Sequence[Mapping[str, Any]], request_finish_reason: str | None, key: str = "finish_reason"
) -> list[str | None]:
    """Each sample's finish reason: its own (`key`) where recorded; the first sample's answer is the request's,
    so without its own it has the request's."""
    reasons = [sample.get(key) for sample in samples]
    if reasons and reasons[0] is None:
        reasons[0] = request_finish_reason
    return reasons


@dataclass(frozen=True)
class SampleVerdict:
    """One sample's seed and its forward verdict."""

    seed: int | None
    verdict: ParsedVerdict


def row_sample_verdicts(row: Mapping[str, Any]) -> list[SampleVerdict]:
    """The forward verdict of every sample of one predictions row (its `samples` JSON as the judge stage writes
    it; [] without one), read afresh with the row's `verdict_rule` and each sample's finish reason (the first
    sample's: the row's `finish_reason` when the record has none), so a cut sample never votes."""
    text = row.get("samples")
    if not text:
        return []
    samples = json.loads(text)
    rule = row.get("verdict_rule") or DEFAULT_VERDICT_RULE
    reasons = sample_finish_reasons(samples, row.get("finish_reason"))
    return [
        SampleVerdict(sample.get("seed"), parse_verdict(sample.get("answer"), rule, reason))
        for sample, reason in zip(samples, reasons)
    ]


def agreement(prediction: str | None, label: str) -> float:
    """SageLM's agreement: 1 when equal, 0.5 when exactly one side is Tie, 0 when opposite or no prediction."""
    if prediction is None:
        return 0.0
    if prediction == label:
        return 1.0
    return 0.5 if TIE in (prediction, label) else 0.0


def normalize_label(value: object, where: str) -> str:
    """A gold label as '1', '2' or 'Tie' (ints 1/2 and any case of 'tie' accepted); raise naming `where`."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: label {value!r} is not 1, 2 or Tie")
    text = str(value).strip() if isinstance(value, str | int) else None
    if text is not None and text.lower() == "tie":
        return TIE
    if text in (RESPONSE_1, RESPONSE_2):
        return text
    raise ValueError(f"{where}: label {value!r} is not 1, 2 or Tie")
