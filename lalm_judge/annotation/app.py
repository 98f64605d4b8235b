"""`lalm-judge anchors serve`: the local web app in which raters listen to and rate a batch (FastAPI + uvicorn).

Every page, API call and audio file of a rater lives under `/rate/<rater>/<token>/`; an unknown rater or a
wrong token gets 403. The app serves the public item table and audio only: the hidden labels file is never
read. The page and its script are packaged resources (`static/`), and a Content-Security-Policy of 'self'
keeps the browser from loading anything from elsewhere, so the app works offline.

API (JSON, relative to a rater's base URL):
- `GET api/state`: the rater's items in their order, their current ratings and revealed transcripts.
- `POST api/event {item_id, kind: open|play}`: the item was shown / its audio started.
- `POST api/transcript {item_id}`: reveals (and records) the transcript.
- `POST api/rate {item_id, unsafe, category, severity}`: stores the rating; answered only once committed.
A malformed answer (e.g. severity outside 1-5) or an unknown item gets 422.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator

from lalm_judge.annotation.batch import RATINGS_DB, Batch, BatchItem
from lalm_judge.annotation.store import Answer, RatingStore, StoreError

STATIC_FILES = {"app.js": "text/javascript", "app.css": "text/css"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


class ItemRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item_id: StrictStr


class EventRequest(ItemRequest):
    # Transcript reveals go through api/transcript, which records them and returns the text.
    kind: Literal["open", "play"]


class RatingRequest(ItemRequest):
    unsafe: StrictBool
    category: StrictStr | None = None
    severity: Annotated[StrictInt, Field(ge=1, le=5)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> RatingRequest:
        if self.unsafe and (self.category is None or self.severity is None):
            raise ValueError("an unsafe rating needs a category and a severity 1-5")
        if not self.unsafe and (self.category is not None or self.severity is not None):
            raise ValueError("a safe rating has no category and no severity")
        return self


def rater_order(batch: Batch, rater_id: str) -> list[BatchItem]:
    """The rater's own order of the items: a shuffle seeded by the batch seed and the rater id."""
    return random.Random(f"{batch.seed}:{rater_id}").sample(list(batch.items), len(batch.items))


def _authenticated(request: Request, rater_id: str, token: str) -> str:
    """The rater id of a request whose path carries a registered rater and their token; else 403."""
    store: RatingStore = request.app.state.store
    if not store.authenticate(rater_id, token):
        raise HTTPException(403, "unknown rater or wrong token")
    return rater_id


Rater = Annotated[str, Depends(_authenticated)]


def _static(name: str) -> bytes:
    return resources.files("lalm_judge.annotation").joinpath("static", name).read_bytes()


def create_app(batch: Batch, store: RatingStore) -> FastAPI:
    """The app of one batch; ratings go to `store`."""
    page = _static("index.html")
    assets = {name: (_static(name), media_type) for name, media_type in STATIC_FILES.items()}
    app = FastAPI(title="lalm-judge annotation", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.store = store

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Callable) -> Response:
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.get("/health")
    def health() -> dict[str, object]:
        return {"status": "ok", "batch_id": batch.batch_id, "n_items": len(batch.items)}

    @app.get("/favicon.ico")
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in assets:
            raise HTTPException(404, f"no static file {name!r}")
        content, media_type = assets[name]
        return Response(content, media_type=media_type)

    def known_item(item_id: str) -> BatchItem:
        item = batch.item(item_id)
        if item is None:
            raise HTTPException(422, f"unknown item {item_id!r} in batch {batch.batch_id}")
        return item

    rater = APIRouter(prefix="/rate/{rater_id}/{token}")

    @rater.get("/", response_class=HTMLResponse)
    def rating_page(rater_id: Rater) -> HTMLResponse:
        return HTMLResponse(page)

    @rater.get("/api/state")
    def state(rater_id: Rater) -> dict[str, object]:
        ratings = {
            rating.item_id: {
                "unsafe": bool(rating.unsafe),
                "category": rating.category,
                "severity": rating.severity or None,
                "transcript_shown": bool(rating.transcript_shown),
            }
            for rating in store.ratings(rater_id)
        }
        return {
            "rater_id": rater_id,
            "batch_id": batch.batch_id,
            "categories": list(batch.categories),
            "severities": list(batch.severities),
            "items": [
                {"item_id": item.item_id, "duration_s": item.duration_s} for item in rater_order(batch, rater_id)
            ],
            "ratings": ratings,
            "revealed": sorted(store.revealed(rater_id)),
        }

    @rater.post("/api/event")
    def event(rater_id: Rater, request: EventRequest) -> dict[str, bool]:
        known_item(request.item_id)
        store.record(rater_id, request.item_id, request.kind)
        return {"recorded": True}

    @rater.post("/api/transcript")
    def transcript(rater_id: Rater, request: ItemRequest) -> dict[str, object]:
        item = known_item(request.item_id)
        store.record(rater_id, item.item_id, "transcript")
        return {"item_id": item.item_id, "turns": [{"speaker": t.speaker, "text": t.text} for t in item.turns]}

    @rater.post("/api/rate")
    def rate(rater_id: Rater, request: RatingRequest) -> dict[str, object]:
        known_item(request.item_id)
        if request.unsafe and request.category not in batch.categories:
            raise HTTPException(422, f"unknown category {request.category!r}; one of {list(batch.categories)}")
        answer = Answer(unsafe=request.unsafe, category=request.category, severity=request.severity or 0)
        n_rated = store.submit(rater_id, request.item_id, answer)
        return {"saved": True, "item_id": request.item_id, "n_rated": n_rated, "n_items": len(batch.items)}

    @rater.get("/audio/{item_id}.wav")
    def audio(rater_id: Rater, item_id: str) -> FileResponse:
        item = batch.item(item_id)
        if item is None:
            raise HTTPException(404, f"no audio for item {item_id!r}")
        return FileResponse(batch.directory / item.audio, media_type="audio/wav")

    app.include_router(rater)
    return app


def _bind(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    # A restart right after a crash must not wait for the old connections' TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise StoreError(f"cannot listen on {host}:{port}: {error.strerror}; choose another --port") from error
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    batch_dir: str | Path,
    *,
    host: str,
    port: int,
    raters: Sequence[str],
    new_tokens: Sequence[str] = (),
    echo: Callable[[str], None] = print,
) -> None:
    """Register the raters, print each new rater's URL (its token is shown only now) and serve until stopped."""
    batch = Batch.load(batch_dir)
    store = RatingStore(batch.directory / RATINGS_DB, batch.batch_id)
    tokens = {rater_id: token for rater_id in raters if (token := store.add_rater(rater_id))}
    tokens.update({rater_id: store.issue_token(rater_id) for rater_id in new_tokens})
    registered = store.raters()
    if not registered:
        raise StoreError("no raters: pass --raters a,b,c or --raters-file FILE")
    sock = _bind(host, port)
    base = _url(host, sock.getsockname()[1])
    if host in ("0.0.0.0", "::"):
        echo(f"warning: listening on every interface ({host}); tokens travel unencrypted over plain HTTP")
    for rater_id in registered:
        if rater_id in tokens:
            echo(f"rater {rater_id}: {base}/rate/{rater_id}/{tokens[rater_id]}/")
        else:
            echo(f"rater {rater_id}: registered earlier, keeps the URL printed then (new URL: --new-token {rater_id})")
    echo(f"serving batch {batch.batch_id} ({len(batch.items)} items) on {base}; ratings in {store.path}; Ctrl-C stops")
    # No access log: request paths carry the raters' tokens.
    config = uvicorn.Config(create_app(batch, store), log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
