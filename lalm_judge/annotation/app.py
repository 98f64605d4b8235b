"""`lalm-judge anchors serve`: the local web app in which raters listen to and rate a batch (FastAPI + uvicorn),
and the study owner follows it.

Every page, API call and audio file of a rater lives under `/rate/<rater>/<token>/`, the owner's view under
`/owner/<token>/`. The token is checked from the path before anything else happens to a request: an unknown rater
or a wrong token gets 403 before the request body is read. A request body is limited to `MAX_BODY_BYTES`
(FastAPI's `max_body_size`: a larger Content-Length is refused with 413 before any of the body is read, a body
without one as soon as it passes the limit), and no error repeats what the request sent (422 says which field is
wrong and why, never its value). Raters get the public item table, their own items' audio and the public part of
the protocol (`study.yaml`, `lalm_judge.annotation.protocol`): never a generated label or a check's answer
(practice feedback comes after the answer). The hidden labels stay on the server: the app reads them for the
assignment design (source dialogues) and the owner's agreement figures. The pages and their scripts are packaged
resources (`static/`), and a Content-Security-Policy of 'self' keeps the browser from loading anything from
elsewhere, so the app works offline.

Rater API (JSON, relative to a rater's base URL):
- `GET api/state`: the public protocol, the consent answer, the rater's practice items and items in their order,
  their current ratings and revealed transcripts (and the completion code once every item is rated).
- `POST api/consent {accept}`: records the consent answer; items need an accepted consent (else 409).
- `POST api/event {item_id, kind: open|play}`: the item was shown on a visible page / its audio started.
- `POST api/transcript {item_id}`: reveals (and records) the transcript.
- `POST api/rate {item_id, unsafe, category, severity, unsure, comment, listened_s, heard_to_end}`: stores the
  rating, answered only once committed; a practice answer is answered with its feedback.
An item outside the rater's assignment, or a malformed answer (e.g. severity outside 1-5), gets 422.

Owner API: `GET api/summary` (progress per rater, time per item, check pass rates, the design achieved and the
agreement so far, with n) and `GET export.csv` (the export of `lalm-judge anchors export`).
"""

from __future__ import annotations

import math
import random
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import polars as pl
import uvicorn
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator
from starlette.responses import FileResponse

from lalm_judge.annotation import export as exporting
from lalm_judge.annotation.assignment import assign, design_summary
from lalm_judge.annotation.batch import RATINGS_DB, Batch, BatchItem, HiddenLabel, load_labels
from lalm_judge.annotation.protocol import Protocol, load_protocol, new_completion_code
from lalm_judge.annotation.store import MAX_COMMENT_CHARS, Answer, RatingStore, StoreError, validate_rater_id
from lalm_judge.core.spreadsheets import csv_bytes

MAX_BODY_BYTES = 16 * 1024
MAX_LISTENED_S = 24 * 3600.0
STATIC_FILES = {"app.js": "text/javascript", "app.css": "text/css", "owner.js": "text/javascript"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
_RATER_PATH = re.compile(r"^/rate/([^/]*)/([^/]*)(/|$)")
_OWNER_PATH = re.compile(r"^/owner/([^/]*)(/|$)")

# A summary of the ratings so far (the cli injects the anchor statistics: annotation does not import analysis).
Statistics = Callable[[pl.DataFrame], dict[str, Any]]


class ItemRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item_id: Annotated[StrictStr, Field(max_length=64)]


class EventRequest(ItemRequest):
    # Transcript reveals go through api/transcript, which records them and returns the text.
    kind: Literal["open", "play"]


class ConsentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accept: StrictBool


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


KNOWN_FIELDS = {"body", *RatingRequest.model_fields, *EventRequest.model_fields, *ConsentRequest.model_fields}


def _error_location(loc: Sequence[Any]) -> list[Any]:
    """An error location without the request's own words: unknown keys become '(unknown field)'."""
    return [part if isinstance(part, int) or part in KNOWN_FIELDS else "(unknown field)" for part in loc]


@dataclass
class Study:
    """What the app serves: the batch, its protocol and hidden labels, the ratings database."""

    batch: Batch
    protocol: Protocol
    labels: Sequence[HiddenLabel]
    store: RatingStore
    statistics: Statistics | None = None

    @property
    def counted(self) -> list[str]:
        return [item.item_id for item in self.batch.items if self.protocol.role(item.item_id) == "item"]

    def completion_code(self) -> str:
        if self.protocol.completion_code:
            return self.protocol.completion_code
        self.store.set_meta_once("completion_code", new_completion_code())
        return self.store.meta("completion_code")

    def plan(self, rater_id: str, slot: int, existing: dict[str, list[str]]) -> list[str]:
        """A new rater's items: the practice items, then their counted items and every check, shuffled."""
        counted = set(self.counted)
        dialogue_of = {label.item_id: label.dialogue_id for label in self.labels}
        before = {rater: [item for item in items if item in counted] for rater, items in existing.items()}
        mine = assign(rater_id, slot, self.counted, dialogue_of, before, self.protocol.design, self.batch.seed)
        main = mine + self.protocol.items_of("gold") + self.protocol.items_of("attention")
        return self.protocol.items_of("practice") + random.Random(f"{self.batch.seed}:{rater_id}").sample(
            main, len(main)
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


def rater_items(study: Study, rater_id: str) -> tuple[list[BatchItem], list[BatchItem]]:
    """A rater's practice items and their other items (counted items and checks), in their order."""
    assigned = study.store.assignments(rater_id).get(rater_id, [])
    practice = [study.batch.item(i) for i in assigned if study.protocol.role(i) == "practice"]
    main = [study.batch.item(i) for i in assigned if study.protocol.role(i) != "practice"]
    return practice, main


def _rater(rater_id: str) -> str:
    """The rater of a request under /rate/<rater>/<token>/ (authenticated by the middleware, from the path)."""
    return rater_id


def _consented(request: Request, rater_id: str) -> str:
    """The rater, who must have accepted the consent (else 409)."""
    if request.app.state.study.store.consents().get(rater_id) is not True:
        raise HTTPException(409, "consent is needed first: accept it on the first page")
    return rater_id


Rater = Annotated[str, Depends(_rater)]
Consented = Annotated[str, Depends(_consented)]


def _static(name: str) -> bytes:
    return resources.files("lalm_judge.annotation").joinpath("static", name).read_bytes()


def _forbidden() -> JSONResponse:
    return JSONResponse({"detail": "unknown rater or wrong token"}, status_code=403, headers=SECURITY_HEADERS)


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
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        details = [{"loc": _error_location(e["loc"]), "msg": e["msg"]} for e in error.errors()]
        return JSONResponse({"detail": details}, status_code=422)


def _add_public_routes(app: FastAPI, study: Study) -> None:
    assets = {name: (_static(name), media_type) for name, media_type in STATIC_FILES.items()}

    @app.get("/health")
    def health() -> dict[str, object]:
        return {"status": "ok", "batch_id": study.batch.batch_id, "n_items": len(study.batch.items)}

    @app.get("/favicon.ico")
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in assets:
            raise HTTPException(404, "no such static file")
        content, media_type = assets[name]
        return Response(content, media_type=media_type)


def _rater_router(study: Study) -> APIRouter:
    page = _static("index.html")
    store, protocol = study.store, study.protocol
    router = APIRouter(prefix="/rate/{rater_id}/{token}")

    def own_item(rater_id: str, item_id: str) -> BatchItem:
        if item_id not in store.assignments(rater_id).get(rater_id, []):
            raise HTTPException(422, [{"loc": ["body", "item_id"], "msg": "not one of this rater's items"}])
        return study.batch.item(item_id)

    @router.get("/", response_class=HTMLResponse)
    def rating_page(rater_id: Rater) -> HTMLResponse:
        return HTMLResponse(page)

    @router.get("/api/state")
    def state(rater_id: Rater) -> dict[str, object]:
        return _state(study, rater_id)

    @router.post("/api/consent")
    def consent(rater_id: Rater, request: ConsentRequest) -> dict[str, bool]:
        store.record_consent(rater_id, request.accept, protocol.sha256)
        return {"accepted": request.accept}

    @router.post("/api/event")
    def event(rater_id: Consented, request: EventRequest) -> dict[str, bool]:
        own_item(rater_id, request.item_id)
        store.record(rater_id, request.item_id, request.kind)
        return {"recorded": True}

    @router.post("/api/transcript")
    def transcript(rater_id: Consented, request: ItemRequest) -> dict[str, object]:
        item = own_item(rater_id, request.item_id)
        store.record(rater_id, item.item_id, "transcript")
        return {"item_id": item.item_id, "turns": [{"speaker": t.speaker, "text": t.text} for t in item.turns]}

    @router.post("/api/rate")
    def rate(rater_id: Consented, request: RatingRequest) -> dict[str, object]:
        own_item(rater_id, request.item_id)
        if request.unsafe and request.category not in study.batch.categories:
            raise HTTPException(422, [{"loc": ["body", "category"], "msg": f"one of {list(study.batch.categories)}"}])
        store.submit(rater_id, request.item_id, _answer(request))
        return _rated(study, rater_id, request)

    @router.get("/audio/{item_id}.wav")
    def audio(rater_id: Consented, item_id: str) -> FileResponse:
        if item_id not in store.assignments(rater_id).get(rater_id, []):
            raise HTTPException(404, "no such audio")
        return FileResponse(study.batch.directory / study.batch.item(item_id).audio, media_type="audio/wav")

    return router


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
    return {
        "rater_id": rater_id,
        "batch_id": study.batch.batch_id,
        "protocol": study.protocol.public(),
        "consent": study.store.consents().get(rater_id),
        "categories": list(study.batch.categories),
        "severities": list(study.batch.severities),
        "practice": [{"item_id": item.item_id, "duration_s": item.duration_s} for item in practice],
        "items": [{"item_id": item.item_id, "duration_s": item.duration_s} for item in main],
        "ratings": ratings,
        "revealed": sorted(study.store.revealed(rater_id)),
        "completion": study.protocol.completion(study.completion_code()) if done else None,
    }


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
        answer["completion"] = study.protocol.completion(study.completion_code())
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


def owner_summary(study: Study) -> dict[str, object]:
    """The owner's view: progress per rater, time per item, check pass rates, the design achieved and the
    agreement so far (the anchor statistics' Table 1 without intervals, each with its n)."""
    ratings = exporting.ratings_table(study.batch, study.labels, study.store, study.protocol)
    raters = exporting.rater_summary(study.store, study.protocol, ratings)
    assignments = study.store.assignments()
    counted = set(study.counted)
    design = design_summary(
        study.counted,
        {rater: [item for item in items if item in counted] for rater, items in assignments.items()},
        study.protocol.design,
    )
    agreement = None
    if study.statistics is not None:
        agreement = study.statistics(ratings)
    return {
        "batch_id": study.batch.batch_id,
        "protocol": study.protocol.source,
        "n_items": len(counted),
        "design": design,
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


def serve(
    batch_dir: str | Path,
    *,
    host: str,
    port: int,
    raters: Sequence[str],
    new_tokens: Sequence[str] = (),
    new_owner_token: bool = False,
    statistics: Statistics | None = None,
    echo: Callable[[str], None] = print,
) -> None:
    """Bind the port, then register the raters and print each new rater's URL (its token is shown only now), and
    serve until stopped. Nothing is registered unless the port could be bound, and every registered rater's URL is
    printed right after their registration."""
    study = open_study(batch_dir, statistics)
    for rater_id in [*raters, *new_tokens]:
        validate_rater_id(rater_id)
    unknown = sorted(set(new_tokens) - set(study.store.raters()) - set(raters))
    if unknown:
        raise StoreError(f"--new-token {', '.join(unknown)}: not registered; add them with --raters")
    if not raters and not study.store.raters():
        raise StoreError("no raters: pass --raters a,b,c or --raters-file FILE")
    study.check_design()
    app = create_app(study)
    sock = _bind(host, port)
    try:
        tokens = study.register(raters)
        tokens.update({rater_id: study.store.issue_token(rater_id) for rater_id in new_tokens})
        owner = study.store.owner_token(renew=new_owner_token)
    except BaseException:
        sock.close()
        raise
    base = _url(host, sock.getsockname()[1])
    _print_urls(study, base, tokens, owner, host, echo)
    # No access log: request paths carry the raters' tokens.
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


def _print_urls(
    study: Study, base: str, tokens: dict[str, str], owner: str | None, host: str, echo: Callable[[str], None]
) -> None:
    if host in ("0.0.0.0", "::"):
        echo(f"warning: listening on every interface ({host}); tokens travel unencrypted over plain HTTP")
    for rater_id in study.store.raters():
        if rater_id in tokens:
            echo(f"rater {rater_id}: {base}/rate/{rater_id}/{tokens[rater_id]}/")
        else:
            echo(f"rater {rater_id}: registered earlier, keeps the URL printed then (new URL: --new-token {rater_id})")
    if owner:
        echo(f"owner: {base}/owner/{owner}/")
    else:
        echo("owner: the URL printed at the first start (new URL: --new-owner-token)")
    echo(f"protocol: {study.protocol.source}")
    design, n_counted = study.protocol.design, len(study.counted)
    limit = design.max_versions_per_dialogue
    per_dialogue = f", at most {limit} version(s) of a source dialogue" if limit else ""
    if design.raters_per_item:
        echo(
            f"assignment: {design.raters_per_item} raters per item for {design.planned_raters} planned raters, "
            f"about {design.items_per_rater(n_counted)} of the {n_counted} counted items each{per_dialogue}"
        )
    else:
        echo(f"assignment: every rater rates the {n_counted} counted items{per_dialogue}")
    batch, database = study.batch, study.store.path
    echo(f"serving batch {batch.batch_id} ({len(batch.items)} items) on {base}; ratings in {database}; Ctrl-C stops")
