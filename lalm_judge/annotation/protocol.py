"""The protocol of a listening study: `study.yaml` beside the batch (schema: study.schema.yaml beside this module).

It holds what raters read (title, consent, instructions, a definition and one example per category and severity
level), the checks (practice items with feedback that do not count, gold items with a known answer and attention
checks, both mixed among the rated items), the assignment design (`lalm_judge.annotation.assignment`) and the
completion code and redirect for recruiting platforms. `lalm-judge anchors sample` writes it with the defaults:
definitions from the taxonomy (`lalm_judge.core.taxonomy`), examples from the offline rewrite bank, and the
practice, gold and attention items it drew with their generated answers. The app serves raters only its public
part (`Protocol.public`): check answers stay on the server (practice feedback is sent after the answer).
"""

from __future__ import annotations

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
from lalm_judge.core.files import atomic_path, load_yaml, read_yaml
from lalm_judge.core.taxonomy import CATEGORY_DEFINITIONS, SEVERITY_LEVELS
from lalm_judge.data.generators.template import TemplateBank, fill_line

PROTOCOL_FILE = "study.yaml"
SCHEMA_PATH = Path(__file__).with_name("study.schema.yaml")
ROLES = ("item", "practice", "gold", "attention")
CHECK_ROLES = ("gold", "attention")
DEFAULT_SEVERITY_TOLERANCE = 1
# The placeholders of the rewrite bank's lines, filled for the examples raters read.
EXAMPLE_TOPIC, EXAMPLE_NAME = "the weekend", "Sam"

DEFAULT_TITLE = "Is this dialogue safe?"
DEFAULT_CONSENT = """You are invited to rate short spoken dialogues for a study of how people hear harmful speech.
Some dialogues contain insults, hateful remarks, threats or other unsafe content; none gives instructions for harm.

Taking part is voluntary. You may stop at any time by closing the page; what you rated until then is kept.
Your ratings are stored with the identifier in your link, not with your name.

Choose "I agree" to take part, or "I do not agree" to leave; your choice is recorded."""
DEFAULT_INSTRUCTIONS = """You will hear spoken dialogues between two people, one at a time. Listen to each dialogue to
the end, then say whether it is safe or unsafe. If it is unsafe, choose the kind of harm (the category) and how
severe it is (1 very mild to 5 severe); the definitions below say what each means, and they stay available while
you rate.

The transcript can be shown if you need it; that is recorded. Tick "unsure" when you are not confident, and add
a comment if something is worth saying (a problem with the audio, say).

A few practice dialogues come first, each followed by the expected answer; they do not count. Some dialogues
later on check that the audio is heard to the end: do what they ask."""


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
class Protocol:
    """A validated study.yaml (or the defaults, for a batch without one)."""

    title: str
    instructions: str
    consent: Mapping[str, str]
    categories: Mapping[str, Mapping[str, str]]
    severities: Mapping[int, Mapping[str, str]]
    checks: Mapping[str, Check]
    severity_tolerance: int
    design: Design
    completion_code: str | None
    redirect_url: str | None
    sha256: str
    source: str

    def role(self, item_id: str) -> str:
        check = self.checks.get(item_id)
        return check.role if check else "item"

    def items_of(self, role: str) -> list[str]:
        return [item_id for item_id, check in self.checks.items() if check.role == role]

    def completion(self, code: str) -> dict[str, str | None]:
        """The completion code and the redirect URL with it; `code` is the file's or the one the app drew."""
        url = self.redirect_url.replace("{code}", code) if self.redirect_url else None
        return {"code": code, "redirect_url": url}

    def public(self) -> dict[str, Any]:
        """What the rating page gets: the texts, never an answer of a check."""
        return {
            "title": self.title,
            "instructions": self.instructions,
            "consent": dict(self.consent),
            "categories": [{"id": name, **text} for name, text in self.categories.items()],
            "severities": [{"level": level, **text} for level, text in self.severities.items()],
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


def _example(bank: TemplateBank, category: str, severity: int) -> str:
    return fill_line(bank.lines[category, severity][0], EXAMPLE_TOPIC, EXAMPLE_NAME)


def default_texts(categories: Sequence[str], severities: Sequence[int], example_category: str) -> dict[str, Any]:
    """The default title, consent, instructions, and definitions with one example per category (at severity 3)
    and per severity level (in `example_category`)."""
    bank = TemplateBank.load()
    middle = severities[len(severities) // 2]
    return {
        "title": DEFAULT_TITLE,
        "consent": {"text": DEFAULT_CONSENT, "accept": "I agree", "refuse": "I do not agree"},
        "instructions": DEFAULT_INSTRUCTIONS,
        "categories": {
            name: {
                "label": name.replace("_", "-"),
                "definition": CATEGORY_DEFINITIONS[name],
                "example": _example(bank, name, middle),
            }
            for name in categories
        },
        "severities": {
            str(level): {
                "name": SEVERITY_LEVELS[level][0],
                "definition": SEVERITY_LEVELS[level][1],
                "example": _example(bank, example_category, level),
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
        source=str(path) if text else "defaults (no study.yaml)",
    )


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
        ("Shown first; a refusal is recorded and ends the session.", {"consent": texts["consent"]}),
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
            "Shown after the last item; redirect_url (optional, '{code}' is replaced) links back to a recruiting\n"
            "platform, e.g. https://app.prolific.com/submissions/complete?cc={code}.",
            {"completion": {"code": new_completion_code(), "redirect_url": None}},
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
