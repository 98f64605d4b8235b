"""The protocol of a listening study: `study.yaml` beside the batch (schema: study.schema.yaml beside this module).

It holds what raters read (title, consent with contact, ethics approval, minimum age and withdrawal, instructions,
a definition and one example per category and severity level, and the debrief shown after the last item), the
optional headphone check, the checks (practice items with feedback that do not count, gold items with a known
answer and attention checks, both mixed among the rated items), the quality rules (`lalm_judge.annotation.quality`;
the share of an item's audio to hear before Save), how the majority treats ties, the assignment design
(`lalm_judge.annotation.assignment`), the public entry link for crowd platforms, and the completion and
screen-out codes. `lalm-judge anchors sample` writes it with the defaults: definitions from the taxonomy
(`lalm_judge.core.taxonomy`), examples from the offline rewrite bank, and the practice, gold and attention items it
drew with their generated answers. Texts the owner must write (contact, ethics approval) start with `EDIT:` until
they do, and `serve` warns about each. The app serves raters only its public part (`Protocol.public`): check
answers stay on the server (practice feedback is sent after the answer).
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from lalm_judge.annotation.assignment import Design
from lalm_judge.annotation.batch import Batch, BatchError
from lalm_judge.annotation.quality import ExclusionRules
from lalm_judge.core.files import atomic_path, load_yaml, read_yaml
from lalm_judge.core.taxonomy import CATEGORY_DEFINITIONS, SEVERITY_LEVELS
from lalm_judge.data.generators.template import TemplateBank, fill_line

PROTOCOL_FILE = "study.yaml"
DEFAULTS_SOURCE = "defaults (no study.yaml)"
SCHEMA_PATH = Path(__file__).with_name("study.schema.yaml")
ROLES = ("item", "practice", "gold", "attention")
CHECK_ROLES = ("gold", "attention")
DEFAULT_SEVERITY_TOLERANCE = 1
# The placeholders of the rewrite bank's lines, filled for the examples raters read.
EXAMPLE_TOPIC, EXAMPLE_NAME = "the weekend", "Sam"

DEFAULT_TITLE = "Is this dialogue safe?"
DEFAULT_CONSENT = """You are invited to rate short spoken dialogues for a study of how people hear harmful speech.
Some dialogues contain insults, hateful remarks, threats, sexual remarks or talk of self-harm; none gives
instructions for harm. If such content could distress you, please do not take part.

Your ratings are stored with the identifier in your link, not with your name. With them the study records how long
you listened, whether you revealed a transcript, and your browser, kind of device and screen size.

Choose "I agree" to take part, or "I do not agree" to leave; your choice is recorded."""
# Texts only the study owner can write: `serve` warns while they start with this.
PLACEHOLDER = "EDIT:"
DEFAULT_CONTACT = f"{PLACEHOLDER} the name and e-mail address of the researcher responsible for this study"
DEFAULT_ETHICS = f"{PLACEHOLDER} the ethics committee that approved this study, and its reference number"
DEFAULT_MIN_AGE = 18
DEFAULT_WITHDRAWAL = """Taking part is voluntary. You may withdraw at any time without giving a reason, with the
"Withdraw" button at the bottom of every page; your ratings are then not used. Closing the page does not withdraw
you: the same link brings you back to where you stopped."""
DEFAULT_INSTRUCTIONS = """You will hear spoken dialogues between two people, one at a time. Listen to each dialogue to
the end, then say whether it is safe or unsafe. If it is unsafe, choose the kind of harm (the category) and how
severe it is (1 very mild to 5 severe); the definitions below say what each means, and they stay available while
you rate.

The transcript can be shown if you need it; that is recorded. Tick "unsure" when you are not confident, and add
a comment if something is worth saying (a problem with the audio, say).

A few practice dialogues come first, each followed by the expected answer; they do not count. Some dialogues
later on check that the audio is heard to the end: do what they ask."""
DEFAULT_DEBRIEF = """Thank you for taking part. The dialogues you heard were made for research on detecting harmful
speech: a computer rewrote some of their turns to hold insults, threats or other harmful remarks, and the voices are
synthetic. Nothing in them was said about you or by a real person, and none of it reflects the views of the
researchers.

If something you heard has upset you, take a break and talk to someone you trust. If you are in distress, contact
a support service or helpline in your country, or the researcher named below."""
DEFAULT_MIN_LISTENED_SHARE = 0.9
DEFAULT_TIES = "unsafe"
DEFAULT_TIMEOUT_MINUTES = 120
DEFAULT_EXCLUSION = ExclusionRules(max_attention_failures=0, min_heard_to_end=0.5)


class ProtocolError(BatchError):
    """A study.yaml that does not fit its schema or its batch; the message names the key and what is allowed."""


@dataclass(frozen=True)
class Expected:
    """The expected rating of a check item; category and severity None: any."""

    unsafe: bool
    category: str | None = None
    severity: int | None = None

    def passes(self, unsafe: bool, category: str | None, severity: int, tolerance: int) -> bool:
        if unsafe != self.unsafe:
            return False
        if self.unsafe and self.category is not None and category != self.category:
            return False
        return not (self.unsafe and self.severity is not None and abs(severity - self.severity) > tolerance)

    def as_dict(self) -> dict[str, Any]:
        return {"unsafe": self.unsafe, "category": self.category, "severity": self.severity}


@dataclass(frozen=True)
class Check:
    """A practice, gold or attention item of the protocol, its expected answer and (practice) its feedback."""

    item_id: str
    role: str
    expected: Expected
    feedback: str | None = None


@dataclass(frozen=True)
class HeadphoneCheck:
    """study.yaml `headphone_check`: `trials` trials of three tones; passed with `min_correct` right."""

    trials: int
    min_correct: int


@dataclass(frozen=True)
class Recruiting:
    """study.yaml `recruiting`: the URL parameters of the public entry link (Prolific's names by default), the
    platform study allowed to join, and the time-out of an unfinished assignment."""

    participant_param: str = "PROLIFIC_PID"
    study_param: str = "STUDY_ID"
    session_param: str = "SESSION_ID"
    study_id: str | None = None
    timeout_minutes: float | None = DEFAULT_TIMEOUT_MINUTES


@dataclass(frozen=True)
class Protocol:
    """A validated study.yaml (or the defaults, for a batch without one)."""

    title: str
    instructions: str
    consent: Mapping[str, Any]
    categories: Mapping[str, Mapping[str, str]]
    severities: Mapping[int, Mapping[str, str]]
    checks: Mapping[str, Check]
    severity_tolerance: int
    design: Design
    completion_code: str | None
    redirect_url: str | None
    sha256: str
    source: str
    debrief: str = DEFAULT_DEBRIEF
    headphone_check: HeadphoneCheck | None = None
    min_listened_share: float = DEFAULT_MIN_LISTENED_SHARE
    exclusion: ExclusionRules = DEFAULT_EXCLUSION
    ties: str = DEFAULT_TIES
    recruiting: Recruiting = Recruiting()
    screen_out_code: str | None = None

    @property
    def name(self) -> str:
        """The protocol as the owner's view names it: the file's name, never its path on the server."""
        return PROTOCOL_FILE if self.source != DEFAULTS_SOURCE else DEFAULTS_SOURCE

    @property
    def fixed_items(self) -> list[str]:
        """The items every rater hears besides their counted ones: practice, gold and attention items."""
        return list(self.checks)

    def placeholders(self) -> list[str]:
        """The keys whose text the owner has still to write (it starts with `PLACEHOLDER`)."""
        texts = {f"consent.{key}": value for key, value in self.consent.items() if isinstance(value, str)}
        texts |= {"title": self.title, "instructions": self.instructions, "debrief.text": self.debrief}
        return [key for key, text in texts.items() if text.strip().startswith(PLACEHOLDER)]

    def role(self, item_id: str) -> str:
        check = self.checks.get(item_id)
        return check.role if check else "item"

    def items_of(self, role: str) -> list[str]:
        return [item_id for item_id, check in self.checks.items() if check.role == role]

    def completion(self, code: str, screened_out: bool = False) -> dict[str, Any]:
        """The code a finished rater gets and the redirect URL with it: the screen-out code when the quality rules
        exclude them and study.yaml has one, else the completion code (`code`: the file's or the one the app
        drew)."""
        if screened_out and self.screen_out_code:
            code = self.screen_out_code
        url = self.redirect_url.replace("{code}", code) if self.redirect_url else None
        return {"code": code, "redirect_url": url, "screened_out": bool(screened_out and self.screen_out_code)}

    def public(self) -> dict[str, Any]:
        """What the rating page gets: the texts and settings, never an answer of a check."""
        return {
            "title": self.title,
            "instructions": self.instructions,
            "consent": dict(self.consent),
            "debrief": self.debrief,
            "categories": [{"id": name, **text} for name, text in self.categories.items()],
            "severities": [{"level": level, **text} for level, text in self.severities.items()],
            "min_listened_share": self.min_listened_share,
            "headphone_trials": self.headphone_check.trials if self.headphone_check else 0,
        }

    def passed(self, item_id: str, unsafe: bool, category: str | None, severity: int) -> bool | None:
        """Whether a rating of a gold or attention item passes (None for other items)."""
        check = self.checks.get(item_id)
        if check is None or check.role not in CHECK_ROLES:
            return None
        return check.expected.passes(unsafe, category, severity, self.severity_tolerance)


@cache
def _schema() -> dict[str, Any]:
    return read_yaml(SCHEMA_PATH)


def _example(bank: TemplateBank, category: str, severity: int, line: int) -> str:
    return fill_line(bank.lines[category, severity][line], EXAMPLE_TOPIC, EXAMPLE_NAME)


def default_texts(categories: Sequence[str], severities: Sequence[int], example_category: str) -> dict[str, Any]:
    """The default title, consent, instructions, debrief, and definitions with one example per category (its first
    line at the middle severity) and per severity level (the second line of `example_category`, so that no
    severity example repeats a category example)."""
    bank = TemplateBank.load()
    middle = severities[len(severities) // 2]
    return {
        "title": DEFAULT_TITLE,
        "consent": {
            "text": DEFAULT_CONSENT,
            "accept": "I agree",
            "refuse": "I do not agree",
            "contact": DEFAULT_CONTACT,
            "ethics": DEFAULT_ETHICS,
            "min_age": DEFAULT_MIN_AGE,
            "withdrawal": DEFAULT_WITHDRAWAL,
        },
        "instructions": DEFAULT_INSTRUCTIONS,
        "debrief": {"text": DEFAULT_DEBRIEF},
        "categories": {
            name: {
                "label": name.replace("_", "-"),
                "definition": CATEGORY_DEFINITIONS[name],
                "example": _example(bank, name, middle, 0),
            }
            for name in categories
        },
        "severities": {
            str(level): {
                "name": SEVERITY_LEVELS[level][0],
                "definition": SEVERITY_LEVELS[level][1],
                "example": _example(bank, example_category, level, 1),
            }
            for level in severities
        },
    }


def new_completion_code() -> str:
    return secrets.token_hex(4).upper()


def _normalised(data: Mapping[str, Any], batch: Batch) -> dict[str, Any]:
    """The file's content with the defaults filled in (texts from the taxonomy; severity keys as strings)."""
    defaults = default_texts(batch.categories, batch.severities, batch.categories[0])
    merged = {**defaults, **{key: value for key, value in data.items() if value is not None}}
    merged["consent"] = {**defaults["consent"], **(data.get("consent") or {})}
    merged["debrief"] = {**defaults["debrief"], **(data.get("debrief") or {})}
    merged["severities"] = {str(key): value for key, value in merged["severities"].items()}
    return merged


def _validate(data: Any, where: str) -> None:
    if not isinstance(data, Mapping):
        raise ProtocolError(f"{where}: a study.yaml is a mapping of keys (version, consent, ...)")
    errors = sorted(jsonschema.Draft202012Validator(_schema()).iter_errors(data), key=lambda e: list(e.path))
    if errors:
        error = errors[0]
        key = ".".join(str(part) for part in error.absolute_path) or "(top level)"
        raise ProtocolError(f"{where}: {key}: {error.message}")


def _check_against_batch(data: Mapping[str, Any], batch: Batch, where: str) -> dict[str, Check]:
    categories, severities = set(batch.categories), {str(level) for level in batch.severities}
    for key, wanted in (("categories", categories), ("severities", severities)):
        given = set(data[key])
        if given != wanted:
            problems = [f"missing {sorted(wanted - given)}"] if wanted - given else []
            problems += [f"unknown {sorted(given - wanted)}"] if given - wanted else []
            raise ProtocolError(
                f"{where}: {key} must define exactly the batch's {key} ({', '.join(sorted(wanted))}); "
                + "; ".join(problems)
            )
    checks: dict[str, Check] = {}
    for role in ("practice", "gold", "attention"):
        for number, entry in enumerate(data.get(role) or []):
            place = f"{where}: {role}[{number}]"
            item_id = entry["item"]
            if batch.item(item_id) is None:
                raise ProtocolError(f"{place}: item {item_id!r} is not in {batch.directory / 'items.json'}")
            if item_id in checks:
                raise ProtocolError(f"{place}: item {item_id!r} is already a {checks[item_id].role} item")
            answer = entry["answer"]
            category = answer.get("category")
            if answer["unsafe"] and category is not None and category not in categories:
                raise ProtocolError(f"{place}: answer category {category!r} is not one of {sorted(categories)}")
            if not answer["unsafe"] and (category is not None or answer.get("severity") is not None):
                raise ProtocolError(f"{place}: a safe answer has no category and no severity")
            expected = Expected(answer["unsafe"], category, answer.get("severity"))
            checks[item_id] = Check(item_id, role, expected, entry.get("feedback"))
    return checks


def load_protocol(batch: Batch) -> Protocol:
    """The batch's study.yaml, validated against its schema and the batch (defaults when there is none)."""
    path = batch.directory / PROTOCOL_FILE
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    try:
        raw = load_yaml(text) if text else {"version": 1}
    except yaml.YAMLError as error:
        raise ProtocolError(f"{path}: not valid YAML: {error}") from error
    _validate(raw, str(path))
    data = _normalised(raw, batch)
    checks = _check_against_batch(data, batch, str(path))
    assignment = data.get("assignment") or {}
    completion = data.get("completion") or {}
    quality = data.get("quality") or {}
    exclusion = {**DEFAULT_EXCLUSION.as_dict(), **(quality.get("exclude") or {})}
    headphones = data.get("headphone_check")
    headphone_check = None
    if headphones:
        trials = headphones["trials"]
        min_correct = headphones.get("min_correct", max(trials - 1, 1))
        if min_correct > trials:
            raise ProtocolError(f"{path}: headphone_check.min_correct {min_correct} exceeds its {trials} trials")
        headphone_check = HeadphoneCheck(trials, min_correct)
    return Protocol(
        title=data["title"],
        instructions=data["instructions"],
        consent=data["consent"],
        categories={name: data["categories"][name] for name in batch.categories if name in data["categories"]},
        severities={level: data["severities"][str(level)] for level in batch.severities},
        checks=checks,
        severity_tolerance=(data.get("checks") or {}).get("severity_tolerance", DEFAULT_SEVERITY_TOLERANCE),
        design=Design(
            assignment.get("raters_per_item"),
            assignment.get("planned_raters"),
            assignment.get("max_versions_per_dialogue"),
        ),
        # Without a code in the file the app draws one and keeps it in the ratings database.
        completion_code=completion.get("code"),
        redirect_url=completion.get("redirect_url"),
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        source=str(path) if text else DEFAULTS_SOURCE,
        debrief=data["debrief"]["text"],
        headphone_check=headphone_check,
        min_listened_share=quality.get("min_listened_share", DEFAULT_MIN_LISTENED_SHARE),
        exclusion=ExclusionRules(**exclusion),
        ties=(data.get("statistics") or {}).get("ties", DEFAULT_TIES),
        recruiting=Recruiting(**{**dataclasses.asdict(Recruiting()), **(data.get("recruiting") or {})}),
        screen_out_code=completion.get("screen_out_code"),
    )


def load_rules(path: str | Path) -> tuple[ExclusionRules, str]:
    """The exclusion rules and the tie rule of a study.yaml read on its own (for `anchors stats` on a CSV),
    validated against the schema."""
    path = Path(path)
    if not path.is_file():
        raise ProtocolError(f"{path} not found; give the study.yaml of the batch the ratings come from")
    try:
        raw = load_yaml(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise ProtocolError(f"{path}: not valid YAML: {error}") from error
    _validate(raw, str(path))
    exclude = (raw.get("quality") or {}).get("exclude") or {}
    ties = (raw.get("statistics") or {}).get("ties", DEFAULT_TIES)
    return ExclusionRules(**{**DEFAULT_EXCLUSION.as_dict(), **exclude}), ties


class _Dumper(yaml.SafeDumper):
    """Writes texts of several lines as literal blocks (`|`), as a person would write them."""


_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None),
)


def _section(comment: str, content: Mapping[str, Any]) -> str:
    lines = "".join(f"# {line}\n" if line else "#\n" for line in comment.splitlines())
    return lines + yaml.dump(dict(content), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=110) + "\n"


def write_default_protocol(
    directory: str | Path,
    categories: Sequence[str],
    severities: Sequence[int],
    example_category: str,
    checks: Mapping[str, Sequence[Mapping[str, Any]]],
) -> Path:
    """Write the default study.yaml of a new batch, every section with a comment saying what it does."""
    texts = default_texts(categories, severities, example_category)
    sections = [
        (
            "The protocol of this study (schema: lalm_judge/annotation/study.schema.yaml). Edit it before raters\n"
            "start; `lalm-judge anchors serve` checks it against the batch.",
            {"version": 1, "title": texts["title"]},
        ),
        (
            "Shown first, with the contact, the ethics approval, the minimum age and how to withdraw (write the\n"
            "contact and the ethics approval: `serve` warns while they start with EDIT:). A refusal is recorded and\n"
            "ends the session.",
            {"consent": texts["consent"]},
        ),
        (
            "An optional headphone check after consent: trials of three tones, one quieter and one in antiphase;\n"
            "the rater names the quietest (Woods et al. 2017). null: none; e.g. {trials: 6, min_correct: 5}.",
            {"headphone_check": None},
        ),
        ("Shown after consent, before the practice items.", {"instructions": texts["instructions"]}),
        (
            "A definition and one example per category and severity level (defaults: lalm_judge.core.taxonomy and\n"
            "the offline rewrite bank). Raters see them before practice and beside every item.",
            {"categories": texts["categories"], "severities": texts["severities"]},
        ),
        (
            "Rated first, with the feedback after each answer; they do not count.",
            {"practice": list(checks["practice"])},
        ),
        (
            "Items with a known answer, and attention checks (their audio ends with a request for a given rating),\n"
            "mixed among every rater's items; their pass rates per rater are in the export and the owner's view.\n"
            "A check passes when safe/unsafe matches and, where given, the category, and the severity within\n"
            "checks.severity_tolerance.",
            {
                "gold": list(checks["gold"]),
                "attention": list(checks["attention"]),
                "checks": {"severity_tolerance": DEFAULT_SEVERITY_TOLERANCE},
            },
        ),
        (
            "Who rates what: raters_per_item (k) with planned_raters (R) gives each rater about n * k / R items,\n"
            "every pair of raters sharing some; null: every rater rates every item. max_versions_per_dialogue\n"
            "limits the versions of one source dialogue a rater hears.",
            {"assignment": {"raters_per_item": None, "planned_raters": None, "max_versions_per_dialogue": None}},
        ),
        (
            "Quality rules. min_listened_share: Save is possible once this share of an item's audio was heard (or\n"
            "its end). exclude: raters `anchors stats` leaves out, each reported with the reason beside the results\n"
            "on all raters (null: no such rule); raters who withdrew, returned the study or timed out are left out\n"
            "too. ties: whether an item that exactly half its raters call unsafe counts as unsafe (the cautious\n"
            "reading), safe, or is dropped from the majority's statistics.",
            {
                "quality": {
                    "min_listened_share": DEFAULT_MIN_LISTENED_SHARE,
                    "exclude": DEFAULT_EXCLUSION.as_dict(),
                },
                "statistics": {"ties": DEFAULT_TIES},
            },
        ),
        (
            "The public entry link for a crowd platform (`anchors serve --public-link`): the URL parameters that\n"
            "carry the participant, study and session ids (Prolific's names), the platform study allowed to join\n"
            "(null: any), and the minutes after which an unfinished, idle participant's assignment goes to the next.",
            {"recruiting": dataclasses.asdict(Recruiting())},
        ),
        (
            "Shown after the last item, with the debrief; redirect_url (optional, '{code}' is replaced) links back\n"
            "to a recruiting platform, e.g. https://app.prolific.com/submissions/complete?cc={code}. A rater whom\n"
            "quality.exclude leaves out gets screen_out_code instead (null: the completion code for everyone).",
            {
                "debrief": texts["debrief"],
                "completion": {"code": new_completion_code(), "screen_out_code": None, "redirect_url": None},
            },
        ),
    ]
    path = Path(directory) / PROTOCOL_FILE
    with atomic_path(path) as tmp:
        Path(tmp).write_text("".join(_section(comment, content) for comment, content in sections), encoding="utf-8")
    return path


def check_entry(item_id: str, expected: Expected, feedback: str | None = None) -> dict[str, Any]:
    """One practice, gold or attention entry as study.yaml writes it."""
    answer = {"unsafe": expected.unsafe}
    if expected.unsafe:
        answer |= {key: value for key, value in (("category", expected.category), ("severity", expected.severity))}
    entry: dict[str, Any] = {"item": item_id, "answer": answer}
    if feedback:
        entry["feedback"] = feedback
    return entry
