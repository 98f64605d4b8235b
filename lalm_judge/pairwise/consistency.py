"""Label-rationale consistency of pairwise judgements: does a rationale argue for the verdict it comes with?

The SageLM study found the rationales of its GRPO-trained judge contradicting the judge's own label in 39 % of
100 audited outputs. This reads the verdict a rationale argues for, with documented rules (docs/metrics.md,
"Label-rationale consistency"), and compares it with the label given. It works on the numbering the judge saw:
for an answer given with the responses swapped, compare the rationale with the verdict as the judge wrote it,
before mapping it back.

The rules, per clause (the text is cut at `.`, `;`, `!`, `?`, newlines and at "but", "while", "whereas",
"however", "although", "in contrast"):
- A response is named as "Response 1" / "Response 2" (also "response one", "the first/second response",
  "the first/second one").
- What follows a name up to the next name is its predicate. Its first cue decides: a **superiority** cue
  ("better", "best", "superior", "preferred", "preferable", "stronger", "outperforms", "excels", "wins",
  "more <quality>", "less <flaw>", "does a better job") votes for that response; an **inferiority** cue
  ("worse", "inferior", "weaker", "falls short", "fails", "lacks", "misses", "less <quality>",
  "more <flaw>", "incorrect", "inaccurate") votes for the other one. A negation ("not", "n't", "never") at
  most one word before the cue turns the vote round ("is not better", "isn't any more helpful").
- A choice verb right before a name ("prefer", "choose", "pick", "favour", "recommend", "select") votes for it.
- A clause without votes that says the two are equal ("equally", "both ... the same/similar/comparable",
  "neither ... better", "no clear winner", "a tie", "on par", "indistinguishable") is a tie claim.
The rationale argues for the response with more votes; for Tie when it has tie claims and no votes; for
nothing (undetermined) when it has neither, or as many votes for each response. A rationale contradicts its
label when it argues for a verdict and that verdict is not the label. Undetermined rationales are counted
apart (`n_determined` is the denominator of the rate), never as consistent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from lalm_judge.core.vocabulary import RESPONSE_1, RESPONSE_2, TIE, VERDICTS

_CLAUSE_BREAK = re.compile(
    r"[.;!?\n]+(?:\s|$)|,?\s+\b(?:but|while|whereas|however|although|though|in contrast)\b",
    re.IGNORECASE,
)
_NAME = re.compile(
    r"\bresponse\s*(?P<digit>[12])\b|\bresponse\s+(?P<word>one|two)\b"
    r"|\bthe\s+(?P<ordinal>first|second)\s+(?:response|one|answer|audio)\b",
    re.IGNORECASE,
)
_NAME_NUMBER = {"1": RESPONSE_1, "2": RESPONSE_2, "one": RESPONSE_1, "two": RESPONSE_2}
_ORDINAL_NUMBER = {"first": RESPONSE_1, "second": RESPONSE_2}

# Qualities whose "more" is a flaw (and whose "less" is a merit).
_FLAWS = (
    r"verbose|wordy|confusing|misleading|repetitive|vague|generic|convoluted|harmful|redundant|robotic|"
    r"monotonous|unclear|ambiguous|inaccurate|incorrect|irrelevant|error-prone|problematic|awkward|unnatural"
)
_SUPERIOR = re.compile(
    r"\b(?:better|best|superior|preferred|preferable|stronger|outperforms?|excels?|wins?|winner)\b"
    rf"|\bmore\s+(?!(?:{_FLAWS})\b)[a-z-]+|\bless\s+(?:{_FLAWS})\b",
    re.IGNORECASE,
)
_INFERIOR = re.compile(
    r"\b(?:worse|worst|inferior|weaker|falls?\s+short|fails?|lacks?|lacking|misses|incorrect(?:ly)?|inaccurate)\b"
    rf"|\bless\s+(?!(?:{_FLAWS})\b)[a-z-]+|\bmore\s+(?:{_FLAWS})\b",
    re.IGNORECASE,
)
# A negation at most one word before the cue: "is not better", "isn't any more helpful".
_NEGATION = re.compile(r"(?:\b(?:not|never)|n't)\s+(?:[a-z]+\s+)?$", re.IGNORECASE)
_CHOICE_BEFORE = re.compile(
    r"\b(?:prefer|preferring|choose|choosing|pick|favou?r|recommend|select)(?:s|ed)?\s+(?:the\s+)?$", re.IGNORECASE
)
_TIE = re.compile(
    r"\bequally\b|\bboth\b.*\b(?:the\s+same|similar(?:ly)?|comparable|equal)\b|\bneither\b.*\b(?:better|worse)\b"
    r"|\bno\s+(?:clear\s+)?(?:winner|difference|preference)\b|\ba\s+tie\b|\bon\s+par\b|\bindistinguishable\b",
    re.IGNORECASE,
)


def _other(response: str) -> str:
    return RESPONSE_2 if response == RESPONSE_1 else RESPONSE_1


def _number(match: re.Match[str]) -> str:
    if match.group("ordinal"):
        return _ORDINAL_NUMBER[match.group("ordinal").lower()]
    return _NAME_NUMBER[(match.group("digit") or match.group("word")).lower()]


def _clause_votes(clause: str) -> tuple[list[str], bool]:
    """(the responses this clause votes for, whether it claims a tie)."""
    names = list(_NAME.finditer(clause))
    votes = []
    for index, name in enumerate(names):
        response = _number(name)
        before = clause[names[index - 1].end() if index else 0 : name.start()]
        if _CHOICE_BEFORE.search(before):
            votes.append(response)
            continue
        predicate = clause[name.end() : names[index + 1].start() if index + 1 < len(names) else len(clause)]
        superior, inferior = _SUPERIOR.search(predicate), _INFERIOR.search(predicate)
        cues = [cue for cue in (superior, inferior) if cue is not None]
        if not cues:
            continue
        first = min(cues, key=lambda cue: cue.start())
        favoured = response if first is superior else _other(response)
        if _NEGATION.search(predicate[: first.start()]):
            favoured = _other(favoured)
        votes.append(favoured)
    return votes, not votes and bool(_TIE.search(clause))


def rationale_verdict(rationale: str | None) -> str | None:
    """The verdict (1, 2 or Tie) a rationale argues for by the module's rules; None when undetermined."""
    if not rationale:
        return None
    votes, ties = [], 0
    for clause in _CLAUSE_BREAK.split(rationale):
        clause_votes, tie = _clause_votes(clause)
        votes += clause_votes
        ties += tie
    ones, twos = votes.count(RESPONSE_1), votes.count(RESPONSE_2)
    if ones != twos:
        return RESPONSE_1 if ones > twos else RESPONSE_2
    if not votes and ties:
        return TIE
    return None


def contradicts(label: str, rationale: str | None) -> bool | None:
    """True when the rationale argues for another verdict than `label`, False when for `label`, None when it
    argues for none (undetermined)."""
    if label not in VERDICTS:
        raise ValueError(f"label must be one of {VERDICTS}, got {label!r}")
    argued = rationale_verdict(rationale)
    return None if argued is None else argued != label


@dataclass(frozen=True)
class Consistency:
    """Label-rationale consistency of a set of answers: `rate` = n_contradicting / n_determined (None if 0)."""

    n: int
    n_determined: int
    n_contradicting: int

    @property
    def rate(self) -> float | None:
        return self.n_contradicting / self.n_determined if self.n_determined else None

    @property
    def coverage(self) -> float | None:
        """Share of the answers whose rationale argues for a verdict the rules can read."""
        return self.n_determined / self.n if self.n else None

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "n": self.n,
            "n_determined": self.n_determined,
            "n_contradicting": self.n_contradicting,
            "contradiction_rate": self.rate,
            "coverage": self.coverage,
        }


def consistency(answers: Iterable[tuple[str, str | None]]) -> Consistency:
    """Consistency of (label, rationale) pairs: answers whose label could be read, each with its rationale."""
    results = [contradicts(label, rationale) for label, rationale in answers]
    determined = [result for result in results if result is not None]
    return Consistency(n=len(results), n_determined=len(determined), n_contradicting=sum(determined))
