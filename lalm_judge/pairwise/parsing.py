"""Reading a pairwise verdict from a judge's answer, the swap of the presentation order, and the combination
of both orders.

Every pairwise prompt asks for the verdict (`1`, `2` or `Tie`) on the first line and the rationale below
it, as SageLM's records do. `parse_verdict` reads an answer with these rules, first match wins:

1. Empty or whitespace-only answer -> `missing`.
2. The first non-empty line is a verdict: the label alone, optionally in markdown/brackets/quotes, after a
   prefix such as `Verdict:`, `Answer:`, `Better response:` or `Response`, and followed by nothing or by
   punctuation (`1.`, `**Tie**`, `[[2]]`, `Verdict: Response 1 -`). The rationale is the rest of the
   answer. (SageLM's own evaluator reads only the first character; on answers of its format both agree.)
3. Labelled statements anywhere (`verdict: 2`, `final answer = Tie`, `better response: Response 1`): the
   LAST one decides (answers often think aloud before concluding). The rationale is the whole answer.
   Labelled statements whose value is not a label (`Verdict: both`, `Answer: 3`) -> `malformed`.
4. The answer declines the task (`I can't compare audio`) -> `refusal`.
5. Anything else -> `missing`. Words such as "Response 1 is better" in free prose are not read: they are
   too often half of a comparison ("... but Response 2 is better overall").

Labels are case-insensitive on input (`tie`, `TIE`) and spelled `1`, `2`, `Tie` on output. Only `ok`
carries a label; every other status has label None, and a missing label counts as wrong in the metrics.

Both orders: with the responses shown swapped, the judge's `1` names the item's response 2; `swap_verdict`
maps it back. `combine_verdicts` is the documented rule for the final label of the two orders: each order
votes +1 (response 1), -1 (response 2) or 0 (Tie); the sum decides (> 0: `1`, < 0: `2`, 0: `Tie`). So two
agreeing orders keep their label, a win against a Tie keeps the win, and opposite wins (the judge followed
the position, not the response) become `Tie`. A combined verdict needs both orders: if either failed, the
combined status is that failure (the forward order's first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lalm_judge.core.vocabulary import RESPONSE_1, RESPONSE_2, TIE, VERDICTS, ParseStatus

_LABEL = r"(?P<label>1|2|tie)"
_PREFIX = (
    r"(?:(?:final\s+|overall\s+)?(?:verdict|answer|judge?ment|decision|label|choice|result|winner|output|"
    r"better\s+response|preferred\s+response|preference)\s*(?:is)?\s*[:=\-]?\s*)?"
)
_RESPONSE_WORD = r"(?:(?:response|audio|answer)\s*#?\s*)?"
# A first line that is only a verdict: the label then nothing, or a separator before any further text.
_VERDICT_LINE = re.compile(rf"^{_PREFIX}{_RESPONSE_WORD}{_LABEL}(?:$|\s*[.:;,)\]!\-–—](?:\s+(?P<rest>.*))?$)", re.I)
_DECORATION = re.compile(r"[*_`#>\"'\[\](){}]+")
_STATEMENT = re.compile(
    r"\b(?:final\s+)?(?:verdict|answer|judge?ment|decision|label|choice|winner|better\s+response|"
    r"preferred\s+response)\s*(?:is)?\s*[:=]\s*[*_\"'\[(]*\s*(?P<value>[^\s*_\"'\])]+(?:\s+[12])?)",
    re.I,
)
_STATEMENT_VALUE = re.compile(rf"^{_RESPONSE_WORD}{_LABEL}[.,;:!]?$", re.I)
_REFUSAL = re.compile(
    r"\b(?:I\s*(?:can(?:'|’)?t|cannot|can\s+not|won(?:'|’)?t|am\s+(?:not\s+able|unable)|'m\s+(?:not\s+able|unable))"
    r"\s+(?:to\s+)?(?:compare|judge|evaluate|determine|decide|choose|listen|hear|access|process|help|assist|"
    r"provide|play)|as\s+an\s+AI\b[^.\n]{0,40}\b(?:cannot|can't|unable)|sorry,?\s+(?:but\s+)?I\s+(?:can(?:'|’)?t|cannot))",
    re.I,
)


@dataclass(frozen=True)
class ParsedVerdict:
    """A verdict in {'1', '2', 'Tie'} (None unless status is ok), the rationale text and the parse status."""

    label: str | None
    rationale: str | None
    status: ParseStatus

    @property
    def ok(self) -> bool:
        return self.status == ParseStatus.OK


def _canonical_label(text: str) -> str:
    return TIE if text.lower() == "tie" else text


def _rationale(text: str) -> str | None:
    text = text.strip()
    return text or None


def parse_verdict(answer: str | None) -> ParsedVerdict:
    """The verdict, rationale and status of one answer (rules in the module docstring)."""
    if answer is None or not answer.strip():
        return ParsedVerdict(None, None, ParseStatus.MISSING)
    lines = answer.strip().splitlines()
    first = _DECORATION.sub(" ", lines[0]).strip()
    match = _VERDICT_LINE.match(first)
    if match:
        rest = "\n".join([match.group("rest") or "", *lines[1:]])
        return ParsedVerdict(_canonical_label(match.group("label")), _rationale(rest), ParseStatus.OK)
    statements = [m.group("value") for m in _STATEMENT.finditer(answer)]
    if statements:
        values = [_STATEMENT_VALUE.match(_DECORATION.sub(" ", value).strip()) for value in statements]
        readable = [value for value in values if value]
        if readable:
            return ParsedVerdict(_canonical_label(readable[-1].group("label")), _rationale(answer), ParseStatus.OK)
        return ParsedVerdict(None, _rationale(answer), ParseStatus.MALFORMED)
    if _REFUSAL.search(answer):
        return ParsedVerdict(None, _rationale(answer), ParseStatus.REFUSAL)
    return ParsedVerdict(None, _rationale(answer), ParseStatus.MISSING)


def swap_verdict(label: str | None) -> str | None:
    """A verdict given with the responses swapped, in the item's numbering: 1 <-> 2, Tie stays."""
    if label is None:
        return None
    if label not in VERDICTS:
        raise ValueError(f"not a pairwise verdict: {label!r}; use one of {VERDICTS}")
    return {RESPONSE_1: RESPONSE_2, RESPONSE_2: RESPONSE_1}.get(label, TIE)


def parse_swapped_verdict(answer: str | None) -> ParsedVerdict:
    """The verdict of an answer given with the responses swapped, in the item's numbering."""
    parsed = parse_verdict(answer)
    return ParsedVerdict(swap_verdict(parsed.label), parsed.rationale, parsed.status)


_VOTE = {RESPONSE_1: 1, RESPONSE_2: -1, TIE: 0}


def combine_verdicts(forward: ParsedVerdict, swapped_back: ParsedVerdict) -> tuple[str | None, ParseStatus]:
    """(label, status) of both orders; `swapped_back` is the swapped order's verdict already mapped back
    (`swap_verdict`). Signed votes summed; a failed order fails the combination (module docstring)."""
    for verdict in (forward, swapped_back):
        if not verdict.ok:
            return None, verdict.status
    total = _VOTE[forward.label] + _VOTE[swapped_back.label]  # type: ignore[index]
    return (RESPONSE_1 if total > 0 else RESPONSE_2 if total < 0 else TIE), ParseStatus.OK


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
