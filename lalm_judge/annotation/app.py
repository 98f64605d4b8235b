"""`lalm-judge anchors serve`: the local web app in which raters listen to and rate a batch (FastAPI + uvicorn),
the public entry link of a crowd platform, and the study owner's view.

Every page, API call and audio file of a rater lives under `/rate/<rater>/<token>/`, the owner's view under
`/owner/<token>/`, the public link under `/join/<token>/`. The token is checked from the path before anything else
happens to a request: an unknown rater or a wrong token gets 403 before the request body is read. A request body is
limited to `MAX_BODY_BYTES` (FastAPI's `max_body_size`: a larger Content-Length is refused with 413 before any of
the body is read, a body without one as soon as it passes the limit), and no error repeats what the request sent
(422 says which field is wrong and why, never its value). Raters get the public item table, their own items' audio
and the public part of the protocol (`study.yaml`, `lalm_judge.annotation.protocol`): never a generated label or a
check's answer (practice feedback comes after the answer). The hidden labels stay on the server: the app reads
them for the assignment design (source dialogues) and the owner's agreement figures. The pages and their scripts
are packaged resources (`static/`), and a Content-Security-Policy of 'self' keeps the browser from loading anything
from elsewhere, so the app works offline. No page shows a path on the server; `/health` says only that the app
runs.

The public link (`serve --public-link`) takes the platform's participant, study and session ids from its URL
(study.yaml `recruiting`), gives a new participant the lowest free slot of the design with its items (the study is
full when every planned slot is held) and sends them to their own rater URL; the same participant in the same
session resumes (with a new URL), in another session is turned away (one assignment per participant). An
assignment is freed when its participant withdraws, refuses consent, is marked returned (`anchors free`) or times
out (no activity for `recruiting.timeout_minutes` before finishing); the next participant takes its slot.

Rater API (JSON, relative to a rater's base URL):
- `GET api/state`: the public protocol, the rater's status, consent answer and headphone check, their practice
  items and items in their order, their current ratings and revealed transcripts (and the completion or screen-out
  code once every item is rated).
- `POST api/consent {accept, device}`: records the consent answer with the device (viewport, pointer; the browser
  from the User-Agent); items need an accepted consent (else 409).
- `GET headphones/<n>.wav`, `POST api/headphones {answers}`: the headphone check (once).
- `POST api/event {item_id, kind: open|play}`: the item was shown on a visible page / its audio started.
- `POST api/transcript {item_id}`: reveals (and records) the transcript, speakers named readably.
- `POST api/rate {item_id, unsafe, category, severity, unsure, comment, listened_s, heard_to_end}`: stores the
  rating, answered only once committed, once the rater heard study.yaml's `quality.min_listened_share` of the item
  (or its end; else 422); a practice answer is answered with its feedback.
- `POST api/withdraw`: withdraws the rater (their assignment is freed, their ratings left out of the statistics).
An item outside the rater's assignment, or a malformed answer (e.g. severity outside 1-5), gets 422; any call but
`api/state` of a rater whose assignment was freed gets 409.

Owner API: `GET api/summary` (progress per rater with their status, device and exclusions, time per item, check
pass rates, the ratings each item has against the design and whether the study can still finish as configured,
and the agreement so far, with n) and `GET export.csv` (the export of `lalm-judge anchors export`).
"""

from __future__ import annotations

import html
import math
import random
import re
import socket
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import polars as pl
import uvicorn
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator
from starlette.responses import FileResponse

from lalm_judge.annotation import export as exporting
from lalm_judge.annotation import headphones
from lalm_judge.annotation.assignment import (
    AssignmentError,
    Feasibility,
    assign,
    check_feasibility,
    design_summary,
    plan_slots,
)
from lalm_judge.annotation.batch import RATINGS_DB, Batch, BatchItem, HiddenLabel, Turn, load_labels
from lalm_judge.annotation.protocol import Protocol, load_protocol, new_completion_code
from lalm_judge.annotation.quality import ACTIVE, exclusions
from lalm_judge.annotation.store import (
    MAX_COMMENT_CHARS,
    RATER_ID,
    Answer,
    Device,
    RatingStore,
    StoreError,
    validate_rater_id,
)
from lalm_judge.core.spreadsheets import csv_bytes

MAX_BODY_BYTES = 16 * 1024
MAX_LISTENED_S = 24 * 3600.0
# A rating may fall this short of the share to hear (the page counts whole playback steps).
LISTENED_SLACK_S = 0.25
STATIC_FILES = {"app.js": "text/javascript", "app.css": "text/css", "owner.js": "text/javascript"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
_RATER_PATH = re.compile(r"^/rate/([^/]*)/([^/]*)(/|$)")
_OWNER_PATH = re.compile(r"^/owner/([^/]*)(/|$)")
_JOIN_PATH = re.compile(r"^/join/([^/]*)(/|$)")
# A speaker label that names a person ("Sam"); others ("LLM1", "A", "user") are read as "Speaker 1", ...
_PERSONAL_NAME = re.compile(r"^[A-Z][a-z]+$")
_ROLE_WORDS = frozenset({"Speaker", "User", "Assistant", "Agent", "System", "Host", "Guest", "Bot"})

# The anchor statistics of the counted ratings (the cli injects them: annotation does not import analysis), given
# the raters to leave out (with why) and how the majority counts ties.
Statistics = Callable[[pl.DataFrame, Mapping[str, Sequence[str]], str], dict[str, Any]]


class ItemRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item_id: Annotated[StrictStr, Field(max_length=64)]


class EventRequest(ItemRequest):
    # Transcript reveals go through api/transcript, which records them and returns the text.
    kind: Literal["open", "play"]


class DeviceReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    viewport: Annotated[StrictStr, Field(pattern=r"^\d{1,5}x\d{1,5}$")] | None = None
    pointer: Literal["coarse", "fine", "none"] | None = None


class ConsentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accept: StrictBool
    device: DeviceReport | None = None


class HeadphonesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    answers: Annotated[list[Annotated[StrictInt, Field(ge=1, le=3)]], Field(max_length=12)]


class RatingRequest(ItemRequest):
    unsafe: StrictBool
    category: Annotated[StrictStr, Field(max_length=64)] | None = None
    severity: Annotated[StrictInt, Field(ge=1, le=5)] | None = None
    unsure: StrictBool = False
    comment: Annotated[StrictStr, Field(max_length=MAX_COMMENT_CHARS)] = ""
    listened_s: Annotated[float, Field(ge=0, le=MAX_LISTENED_S, allow_inf_nan=False)] | None = None
    heard_to_end: StrictBool | None = None

    @model_validator(mode="after")
    def _consistent(self) -> RatingRequest:
        if self.unsafe and (self.category is None or self.severity is None):
            raise ValueError("an unsafe rating needs a category and a severity 1-5")
        if not self.unsafe and (self.category is not None or self.severity is not None):
            raise ValueError("a safe rating has no category and no severity")
        return self


KNOWN_FIELDS = {
    "body",
    *RatingRequest.model_fields,
    *EventRequest.model_fields,
    *ConsentRequest.model_fields,
    *DeviceReport.model_fields,
    *HeadphonesRequest.model_fields,
}


def _error_location(loc: Sequence[Any]) -> list[Any]:
    """An error location without the request's own words: unknown keys become '(unknown field)'."""
    return [part if isinstance(part, int) or part in KNOWN_FIELDS else "(unknown field)" for part in loc]


def readable_speakers(turns: Sequence[Turn]) -> list[str]:
    """The speaker of each turn as raters read it: a personal name as the corpus gives it, any other label
    ("LLM1", "A", "user") as "Speaker 1", "Speaker 2", ... in the order the dialogue introduces them."""
    numbers: dict[str, int] = {}
    names = []
    for turn in turns:
        label = turn.speaker.strip()
        if _PERSONAL_NAME.match(label) and label not in _ROLE_WORDS:
            names.append(label)
        else:
            names.append(f"Speaker {numbers.setdefault(label, len(numbers) + 1)}")
    return names


@dataclass
class Study:
    """What the app serves: the batch, its protocol and hidden labels, the ratings database."""

    batch: Batch
    protocol: Protocol
    labels: Sequence[HiddenLabel]
    store: RatingStore
    statistics: Statistics | None = None
    # The source dialogue of every item (from the hidden labels), for the per-dialogue limit.
    dialogue_of: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.dialogue_of = {label.item_id: label.dialogue_id for label in self.labels}

    @property
    def counted(self) -> list[str]:
        return [item.item_id for item in self.batch.items if self.protocol.role(item.item_id) == "item"]

    def completion_code(self) -> str:
        if self.protocol.completion_code:
            return self.protocol.completion_code
        self.store.set_meta_once("completion_code", new_completion_code())
        return self.store.meta("completion_code")

    def plan(self, rater_id: str, slot: int, existing: Mapping[str, Sequence[str]]) -> list[str]:
        """A new rater's items: the practice items, then their counted items and every check, shuffled."""
        counted = set(self.counted)
        before = {rater: [item for item in items if item in counted] for rater, items in existing.items()}
        protocol = self.protocol
        design, seed = protocol.design, self.batch.seed
        mine = assign(rater_id, slot, self.counted, self.dialogue_of, before, design, seed, protocol.fixed_items)
        main = mine + protocol.items_of("gold") + protocol.items_of("attention")
        return protocol.items_of("practice") + random.Random(f"{self.batch.seed}:{rater_id}").sample(main, len(main))

    def feasibility(self) -> Feasibility:
        """The design's plan computed up front: whether every counted item can get its raters."""
        return check_feasibility(
            self.counted, self.dialogue_of, self.protocol.fixed_items, self.protocol.design, self.batch.seed
        )

    def design_key(self) -> str:
        """What decides raters' items: the assignment design and which items are practice, gold and attention."""
        roles = {role: self.protocol.items_of(role) for role in ("practice", "gold", "attention")}
        return f"{self.protocol.design!r} {roles}"

    def check_design(self) -> None:
        """Refuse a study.yaml whose assignment or checks changed after raters got their items (theirs would not
        change); its texts may change at any time."""
        design, before = self.design_key(), self.store.meta("assignment_design")
        if before not in (None, design) and self.store.assignments():
            raise StoreError(
                f"study.yaml's assignment or checks changed after raters got their items (was {before}, now "
                f"{design}); restore them, or start a new batch for the new design"
            )

    def register(self, rater_ids: Sequence[str]) -> dict[str, str]:
        """Register raters (and give raters registered without items theirs); refuses a changed design."""
        self.check_design()
        self.store.set_meta_once("assignment_design", self.design_key(), replace=True)
        return self.store.register(rater_ids, self.plan)

    def expire(self) -> None:
        """Free the idle, unfinished assignments of link participants (study.yaml `recruiting.timeout_minutes`)."""
        timeout = self.protocol.recruiting.timeout_minutes
        if timeout is not None:
            self.store.expire(self.protocol.items_of("practice"), timeout)

    def excluded(self, ratings: pl.DataFrame) -> dict[str, list[str]]:
        return exporting.rater_exclusions(self.store, self.protocol, ratings)

    def screened_out(self, rater_id: str) -> bool:
        """Whether the quality rules leave this rater out (they get the screen-out code)."""
        if not self.protocol.screen_out_code:
            return False
        ratings = exporting.ratings_table(self.batch, self.labels, self.store, self.protocol, rater_id)
        failed = frozenset(r for r, (_, _, passed) in self.store.headphones().items() if r == rater_id and not passed)
        return bool(exclusions(ratings, self.protocol.exclusion, {rater_id: ACTIVE}, failed))


def rater_items(study: Study, rater_id: str) -> tuple[list[BatchItem], list[BatchItem]]:
    """A rater's practice items and their other items (counted items and checks), in their order."""
    assigned = study.store.assignments(rater_id).get(rater_id, [])
    practice = [study.batch.item(i) for i in assigned if study.protocol.role(i) == "practice"]
    main = [study.batch.item(i) for i in assigned if study.protocol.role(i) != "practice"]
    return practice, main


def _rater(rater_id: str) -> str:
    """The rater of a request under /rate/<rater>/<token>/ (authenticated by the middleware, from the path)."""
    return rater_id


def _active(request: Request, rater_id: str) -> str:
    """The rater, whose assignment must not have been freed (else 409)."""
    status = request.app.state.study.store.statuses().get(rater_id)
    if status != ACTIVE:
        raise HTTPException(409, f"this assignment has ended ({status}); nothing more is recorded")
    return rater_id


def _consented(request: Request, rater_id: str) -> str:
    """The active rater, who must have accepted the consent (else 409)."""
    _active(request, rater_id)
    if request.app.state.study.store.consents().get(rater_id) is not True:
        raise HTTPException(409, "consent is needed first: accept it on the first page")
    return rater_id


Rater = Annotated[str, Depends(_rater)]
Active = Annotated[str, Depends(_active)]
Consented = Annotated[str, Depends(_consented)]


def _static(name: str) -> bytes:
    return resources.files("lalm_judge.annotation").joinpath("static", name).read_bytes()


def _forbidden() -> JSONResponse:
    return JSONResponse({"detail": "unknown rater or wrong token"}, status_code=403, headers=SECURITY_HEADERS)


def _message_page(title: str, text: str, status_code: int) -> HTMLResponse:
    """A page that says one thing (the public link's answers); never with what the request sent."""
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{html.escape(title)}</title><link rel="stylesheet" href="/static/app.css"></head>'
        f"<body><main><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p></main></body></html>"
    )
    return HTMLResponse(page, status_code=status_code)


def create_app(study: Study) -> FastAPI:
    """The app of one study."""
    app = FastAPI(
        title="lalm-judge annotation",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        max_body_size=MAX_BODY_BYTES,
    )
    app.state.study = study
    _add_guards(app, study)
    _add_public_routes(app, study)
    app.include_router(_rater_router(study))
    app.include_router(_owner_router(study))
    return app


def _add_guards(app: FastAPI, study: Study) -> None:
    @app.middleware("http")
    async def authenticate_then_secure(request: Request, call_next: Callable) -> Response:
        # From the path alone, before the route reads the body.
        path = request.url.path
        if (match := _RATER_PATH.match(path)) and not study.store.authenticate(match[1], match[2]):
            return _forbidden()
        if (match := _OWNER_PATH.match(path)) and not study.store.authenticate_owner(match[1]):
            return _forbidden()
        if (match := _JOIN_PATH.match(path)) and not study.store.authenticate_link(match[1]):
            return _forbidden()
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        details = [{"loc": _error_location(e["loc"]), "msg": e["msg"]} for e in error.errors()]
        return JSONResponse({"detail": details}, status_code=422)


JOIN_ANSWERS = {
    "taken_part": (
        409,
        "You have taken part already",
        "This study takes each participant once, and your place in it has been used or has ended. Thank you.",
    ),
    "owner_rater": (409, "This id is taken", "This participant id belongs to another rater of the study."),
    "full": (
        409,
        "The study is full",
        "Every place in this study is taken at the moment. Please return the study on the platform; you may try "
        "again later, when a place is freed.",
    ),
}


def _add_public_routes(app: FastAPI, study: Study) -> None:
    assets = {name: (_static(name), media_type) for name, media_type in STATIC_FILES.items()}
    recruiting = study.protocol.recruiting

    @app.get("/health")
    def health() -> dict[str, object]:
        return {"status": "ok"}

    @app.get("/favicon.ico")
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in assets:
            raise HTTPException(404, "no such static file")
        content, media_type = assets[name]
        return Response(content, media_type=media_type)

    @app.get("/join/{token}/")
    def join(request: Request) -> Response:
        params = request.query_params
        ids = [params.get(name, "") for name in (recruiting.participant_param, recruiting.study_param)]
        ids.append(params.get(recruiting.session_param, ""))
        if not all(RATER_ID.match(value) for value in ids):
            names = ", ".join((recruiting.participant_param, recruiting.study_param, recruiting.session_param))
            return _message_page(
                "This link is incomplete",
                f"Open the study from the recruiting platform: its link carries your {names}.",
                400,
            )
        participant, study_id, session_id = ids
        if recruiting.study_id is not None and study_id != recruiting.study_id:
            return _message_page("This link belongs to another study", "Open the study from its own link.", 403)
        design = study.protocol.design
        study.check_design()
        study.store.set_meta_once("assignment_design", study.design_key(), replace=True)
        joined = study.store.join(
            participant,
            study_id,
            session_id,
            study.plan,
            places=design.planned_raters if design.raters_per_item else None,
            practice=study.protocol.items_of("practice"),
            timeout_minutes=recruiting.timeout_minutes,
        )
        if joined.token is None:
            status_code, title, text = JOIN_ANSWERS[joined.outcome]
            return _message_page(title, text, status_code)
        return RedirectResponse(f"/rate/{participant}/{joined.token}/", status_code=303)


def _rater_router(study: Study) -> APIRouter:
    page = _static("index.html")
    store, protocol = study.store, study.protocol
    router = APIRouter(prefix="/rate/{rater_id}/{token}")
    check = protocol.headphone_check

    def own_item(rater_id: str, item_id: str) -> BatchItem:
        if item_id not in store.assignments(rater_id).get(rater_id, []):
            raise HTTPException(422, [{"loc": ["body", "item_id"], "msg": "not one of this rater's items"}])
        return study.batch.item(item_id)

    def trial_orders(rater_id: str) -> list[tuple[str, ...]]:
        if check is None:
            raise HTTPException(404, "this study has no headphone check")
        return headphones.trial_orders(study.batch.seed, rater_id, check.trials)

    @router.get("/", response_class=HTMLResponse)
    def rating_page(rater_id: Rater) -> HTMLResponse:
        return HTMLResponse(page)

    @router.get("/api/state")
    def state(rater_id: Rater) -> dict[str, object]:
        return _state(study, rater_id)

    @router.post("/api/consent")
    def consent(rater_id: Active, request: ConsentRequest, http: Request) -> dict[str, bool]:
        reported = request.device or DeviceReport()
        device = Device(http.headers.get("user-agent"), reported.viewport, reported.pointer)
        link = store.raters_info()[rater_id]["source"] == "link"
        store.record_consent(rater_id, request.accept, protocol.sha256, device, free=link)
        return {"accepted": request.accept}

    @router.get("/headphones/{trial}.wav")
    def headphone_trial(rater_id: Consented, trial: int) -> Response:
        orders = trial_orders(rater_id)
        if not 1 <= trial <= len(orders):
            raise HTTPException(404, "no such trial")
        return Response(headphones.trial_wav(orders[trial - 1]), media_type="audio/wav")

    @router.post("/api/headphones")
    def headphone_answers(rater_id: Consented, request: HeadphonesRequest) -> dict[str, object]:
        expected = headphones.answers(trial_orders(rater_id))
        if rater_id in store.headphones():
            raise HTTPException(409, "the headphone check is done already")
        if len(request.answers) != len(expected):
            raise HTTPException(422, [{"loc": ["body", "answers"], "msg": f"one answer per trial ({len(expected)})"}])
        correct = sum(given == right for given, right in zip(request.answers, expected))
        passed = correct >= check.min_correct
        store.record_headphones(rater_id, len(expected), correct, passed)
        return {"passed": passed, "n_correct": correct, "n_trials": len(expected)}

    @router.post("/api/event")
    def event(rater_id: Consented, request: EventRequest) -> dict[str, bool]:
        own_item(rater_id, request.item_id)
        store.record(rater_id, request.item_id, request.kind)
        return {"recorded": True}

    @router.post("/api/transcript")
    def transcript(rater_id: Consented, request: ItemRequest) -> dict[str, object]:
        item = own_item(rater_id, request.item_id)
        store.record(rater_id, item.item_id, "transcript")
        speakers = readable_speakers(item.turns)
        turns = [{"speaker": speaker, "text": turn.text} for speaker, turn in zip(speakers, item.turns)]
        return {"item_id": item.item_id, "turns": turns}

    @router.post("/api/rate")
    def rate(rater_id: Consented, request: RatingRequest) -> dict[str, object]:
        item = own_item(rater_id, request.item_id)
        if request.unsafe and request.category not in study.batch.categories:
            raise HTTPException(422, [{"loc": ["body", "category"], "msg": f"one of {list(study.batch.categories)}"}])
        if not _heard_enough(study, rater_id, item, request):
            share = f"{protocol.min_listened_share:.0%}"
            message = f"listen to at least {share} of the dialogue (or to its end) before saving"
            raise HTTPException(422, [{"loc": ["body", "listened_s"], "msg": message}])
        store.submit(rater_id, request.item_id, _answer(request))
        return _rated(study, rater_id, request)

    @router.post("/api/withdraw")
    def withdraw(rater_id: Active) -> dict[str, str]:
        store.free([rater_id], "withdrawn")
        return {"status": "withdrawn"}

    @router.get("/audio/{item_id}.wav")
    def audio(rater_id: Consented, item_id: str) -> FileResponse:
        if item_id not in store.assignments(rater_id).get(rater_id, []):
            raise HTTPException(404, "no such audio")
        return FileResponse(study.batch.directory / study.batch.item(item_id).audio, media_type="audio/wav")

    return router


def _heard_enough(study: Study, rater_id: str, item: BatchItem, request: RatingRequest) -> bool:
    """Whether the rater heard study.yaml's share of the item (or its end), now or for an earlier rating of it."""
    needed = study.protocol.min_listened_share * item.duration_s - LISTENED_SLACK_S
    if request.heard_to_end or (request.listened_s or 0.0) >= needed:
        return True
    return any(
        rating.item_id == item.item_id and (rating.heard_to_end or (rating.listened_s or 0.0) >= needed)
        for rating in study.store.ratings(rater_id)
    )


def _answer(request: RatingRequest) -> Answer:
    return Answer(
        unsafe=request.unsafe,
        category=request.category,
        severity=request.severity or 0,
        unsure=request.unsure,
        comment=request.comment,
        listened_s=request.listened_s,
        heard_to_end=request.heard_to_end,
    )


def _state(study: Study, rater_id: str) -> dict[str, object]:
    practice, main = rater_items(study, rater_id)
    ratings = {
        rating.item_id: {
            "unsafe": bool(rating.unsafe),
            "category": rating.category,
            "severity": rating.severity or None,
            "unsure": bool(rating.unsure),
            "comment": rating.comment,
            "transcript_shown": bool(rating.transcript_shown),
        }
        for rating in study.store.ratings(rater_id)
    }
    done = bool(main) and all(item.item_id in ratings for item in main)
    check = study.store.headphones().get(rater_id)
    return {
        "rater_id": rater_id,
        "status": study.store.statuses().get(rater_id),
        "protocol": study.protocol.public(),
        "consent": study.store.consents().get(rater_id),
        "headphones": None if check is None else {"n_correct": check[0], "n_trials": check[1], "passed": check[2]},
        "categories": list(study.batch.categories),
        "severities": list(study.batch.severities),
        "practice": [{"item_id": item.item_id, "duration_s": item.duration_s} for item in practice],
        "items": [{"item_id": item.item_id, "duration_s": item.duration_s} for item in main],
        "ratings": ratings,
        "revealed": sorted(study.store.revealed(rater_id)),
        "completion": _completion(study, rater_id) if done else None,
    }


def _completion(study: Study, rater_id: str) -> dict[str, Any]:
    return study.protocol.completion(study.completion_code(), screened_out=study.screened_out(rater_id))


def _rated(study: Study, rater_id: str, request: RatingRequest) -> dict[str, object]:
    _, main = rater_items(study, rater_id)
    rated = {rating.item_id for rating in study.store.ratings(rater_id)}
    n_rated = sum(item.item_id in rated for item in main)
    answer: dict[str, object] = {"saved": True, "item_id": request.item_id, "n_rated": n_rated, "n_items": len(main)}
    check = study.protocol.checks.get(request.item_id)
    if check is not None and check.role == "practice":
        correct = check.expected.passes(
            request.unsafe, request.category, request.severity or 0, study.protocol.severity_tolerance
        )
        answer["feedback"] = {"correct": correct, "expected": check.expected.as_dict(), "text": check.feedback}
    if n_rated == len(main):
        answer["completion"] = _completion(study, rater_id)
    return answer


def _owner_router(study: Study) -> APIRouter:
    page = _static("owner.html")
    router = APIRouter(prefix="/owner/{token}")

    @router.get("/", response_class=HTMLResponse)
    def owner_page() -> HTMLResponse:
        return HTMLResponse(page)

    @router.get("/api/summary")
    def summary() -> dict[str, object]:
        return owner_summary(study)

    @router.get("/export.csv")
    def export_csv() -> Response:
        ratings = exporting.ratings_table(study.batch, study.labels, study.store, study.protocol)
        headers = {"Content-Disposition": f'attachment; filename="ratings-{study.batch.batch_id}.csv"'}
        return Response(csv_bytes(ratings), media_type="text/csv", headers=headers)

    return router


def _progress(study: Study, ratings: pl.DataFrame, excluded: Mapping[str, Sequence[str]]) -> dict[str, object]:
    """The design against the ratings so far: ratings per counted item from the raters who count, and whether
    every item can still reach k ratings (the raters who hold items owe them; planned slots nobody holds yet will
    bring theirs)."""
    counted = set(study.counted)
    statuses = study.store.statuses()
    active = {rater: items for rater, items in study.store.assignments().items() if statuses.get(rater) == ACTIVE}
    holding = {rater: [i for i in items if i in counted] for rater, items in active.items() if rater not in excluded}
    counts = ratings.filter((pl.col("role") == "item") & ~pl.col("rater_id").is_in(list(excluded)))
    rated = Counter(counts["item_id"].to_list())
    design = study.protocol.design
    unheld: Counter[str] = Counter()
    if design.raters_per_item is not None:
        held = {info["slot"] for rater, info in study.store.raters_info().items() if rater in active}
        slots = plan_slots(study.counted, study.dialogue_of, design, study.batch.seed, study.protocol.fixed_items)
        unheld.update(item for slot, items in enumerate(slots) if slot not in held for item in items)
    return design_summary(study.counted, holding, design, rated, unheld)


def owner_summary(study: Study) -> dict[str, object]:
    """The owner's view: progress per rater, time per item, check pass rates, exclusions, the design against the
    ratings so far and the agreement so far (the anchor statistics' Table 1 without intervals, each with its n)."""
    study.expire()
    ratings = exporting.ratings_table(study.batch, study.labels, study.store, study.protocol)
    raters = exporting.rater_summary(study.store, study.protocol, ratings)
    excluded = study.excluded(ratings)
    agreement = None
    if study.statistics is not None:
        agreement = study.statistics(ratings, excluded, study.protocol.ties)
    return {
        "batch_id": study.batch.batch_id,
        "protocol": study.protocol.name,
        "n_items": len(study.counted),
        "design": _progress(study, ratings, excluded),
        "raters": [_jsonable(row) for row in raters.iter_rows(named=True)],
        "agreement": agreement,
    }


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {key: None if isinstance(value, float) and not math.isfinite(value) else value for key, value in row.items()}


def _bind(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    # A restart right after a crash must not wait for the old connections' TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise StoreError(
            f"cannot listen on {host}:{port}: {error.strerror}; choose another --port (no rater was registered)"
        ) from error
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def open_study(batch_dir: str | Path, statistics: Statistics | None = None) -> Study:
    """The batch, its protocol and labels, and its ratings database, checked against each other."""
    batch = Batch.load(batch_dir)
    protocol = load_protocol(batch)
    labels_batch, labels = load_labels(batch_dir)
    if labels_batch != batch.batch_id:
        raise StoreError(f"{batch_dir}: labels.json belongs to batch {labels_batch}, items.json to {batch.batch_id}")
    store = RatingStore(batch.directory / RATINGS_DB, batch.batch_id)
    return Study(batch, protocol, labels, store, statistics)


def checked_design(study: Study, allow_shortfall: bool, echo: Callable[[str], None]) -> Feasibility:
    """The design's plan computed up front; one that cannot be met is refused (AssignmentError, with the numbers
    and the nearest feasible settings) unless `allow_shortfall`, which prints it as a warning."""
    feasibility = study.feasibility()
    if not feasibility.feasible:
        if not allow_shortfall:
            raise AssignmentError(
                f"{feasibility.problems()}. Change study.yaml, or pass --allow-shortfall to serve it as it is"
            )
        echo(f"warning: {feasibility.problems()}; served as it is (--allow-shortfall)")
    return feasibility


def serve(
    batch_dir: str | Path,
    *,
    host: str,
    port: int,
    raters: Sequence[str],
    new_tokens: Sequence[str] = (),
    new_owner_token: bool = False,
    public_link: bool = False,
    new_public_link: bool = False,
    allow_shortfall: bool = False,
    statistics: Statistics | None = None,
    echo: Callable[[str], None] = print,
) -> None:
    """Check the design, bind the port, then register the raters and print each new rater's URL (its token is
    shown only now), the owner's and the public link, and serve until stopped. Nothing is registered unless the
    design can be met (or `allow_shortfall`) and the port could be bound, and every registered rater's URL is
    printed right after their registration."""
    study = open_study(batch_dir, statistics)
    for rater_id in [*raters, *new_tokens]:
        validate_rater_id(rater_id)
    unknown = sorted(set(new_tokens) - set(study.store.raters()) - set(raters))
    if unknown:
        raise StoreError(f"--new-token {', '.join(unknown)}: not registered; add them with --raters")
    if not raters and not study.store.raters() and not public_link:
        raise StoreError("no raters: pass --raters a,b,c or --raters-file FILE, or open a --public-link")
    study.check_design()
    feasibility = checked_design(study, allow_shortfall, echo)
    app = create_app(study)
    sock = _bind(host, port)
    try:
        tokens = study.register(raters)
        tokens.update({rater_id: study.store.issue_token(rater_id) for rater_id in new_tokens})
        owner = study.store.owner_token(renew=new_owner_token)
        link = study.store.link_token(renew=new_public_link) if public_link or new_public_link else None
    except BaseException:
        sock.close()
        raise
    base = _url(host, sock.getsockname()[1])
    _print_urls(study, base, tokens, owner, host, echo)
    _print_link(study, base, link, public_link or new_public_link, echo)
    _print_design(study, feasibility, echo)
    batch, database = study.batch, study.store.path
    echo(f"serving batch {batch.batch_id} ({len(batch.items)} items) on {base}; ratings in {database}; Ctrl-C stops")
    # No access log: request paths carry the raters' tokens.
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


def _print_urls(
    study: Study, base: str, tokens: dict[str, str], owner: str | None, host: str, echo: Callable[[str], None]
) -> None:
    if host in ("0.0.0.0", "::"):
        echo(f"warning: listening on every interface ({host}); tokens travel unencrypted over plain HTTP")
    info = study.store.raters_info()
    for rater_id in study.store.raters():
        if info[rater_id]["source"] == "link":
            continue
        if rater_id in tokens:
            echo(f"rater {rater_id}: {base}/rate/{rater_id}/{tokens[rater_id]}/")
        else:
            echo(f"rater {rater_id}: registered earlier, keeps the URL printed then (new URL: --new-token {rater_id})")
    if owner:
        echo(f"owner: {base}/owner/{owner}/")
    else:
        echo("owner: the URL printed at the first start (new URL: --new-owner-token)")
    echo(f"protocol: {study.protocol.source}")
    for key in study.protocol.placeholders():
        echo(f"warning: study.yaml {key} still reads 'EDIT: ...': write it before raters start")


def _print_link(study: Study, base: str, link: str | None, wanted: bool, echo: Callable[[str], None]) -> None:
    if not wanted:
        return
    if link is None:
        echo("public link: the URL printed at the first start (new URL: --new-public-link)")
        return
    recruiting = study.protocol.recruiting
    params = "&".join(
        f"{name}={{{{%{name}%}}}}"
        for name in (recruiting.participant_param, recruiting.study_param, recruiting.session_param)
    )
    echo(f"public link: {base}/join/{link}/?{params}")


def _print_design(study: Study, feasibility: Feasibility, echo: Callable[[str], None]) -> None:
    design, n_counted, n_fixed = study.protocol.design, len(study.counted), len(study.protocol.fixed_items)
    limit = design.max_versions_per_dialogue
    per_dialogue = f", at most {limit} version(s) of a source dialogue" if limit else ""
    checks = f" and the {n_fixed} practice, gold and attention items" if n_fixed else ""
    if design.raters_per_item:
        lowest, highest = min(feasibility.per_rater), max(feasibility.per_rater)
        each = f"{lowest}" if lowest == highest else f"{lowest}-{highest}"
        echo(
            f"assignment: {design.raters_per_item} raters per item for {design.planned_raters} planned raters: "
            f"{each} of the {n_counted} counted items each{checks}{per_dialogue}"
        )
    else:
        echo(f"assignment: every rater rates the {n_counted} counted items{checks}{per_dialogue}")
