"""A stand-in for a paid OpenAI-compatible chat API (GPT-4o, Gemini), which cannot be reached from the test
machine: a stdlib HTTP server on 127.0.0.1 answering `/v1/chat/completions` as the API does (a chat completion,
or an HTTP error with an error body), scripted per request cell. It counts the requests, those per cell and the
largest number in flight. Clients talk to it through the real `openai` client; the contract it follows is the
chat-completions response shape (`choices[0].message.content`, `refusal`, `finish_reason`)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """What the stand-in answers: a chat completion with `content`, or an HTTP error `status`.

    `content` may be any JSON value (the API's is a string; some servers answer a list of parts). `model` is the
    served model the completion names (default: the requested one). `trickle_s` > 0 sends the body one byte at
    a time, that many seconds apart (a server that keeps a connection busy without ever finishing its answer)."""

    content: Any = None
    status: int = 200
    delay_s: float = 0.02
    finish_reason: str = "stop"
    refusal: str | None = None
    error_body: dict = field(default_factory=dict)
    model: str | None = None
    trickle_s: float = 0.0
    headers: dict = field(default_factory=dict)  # extra response headers (e.g. Retry-After)
    raw_body: bytes | None = None  # sent instead of the JSON payload (a 200 that is not a chat completion)


class StandInServer:
    """`cell(body)` names the request's cell (a tuple); `script(*cell, nth)` answers the nth request of it."""

    def __init__(self, cell: Callable[[dict], tuple[Hashable, ...]]) -> None:
        self.cell = cell
        self.script: Callable[..., Reply] = lambda *args: Reply("{}")
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        self.per_cell: Counter = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.auth_headers: set[str] = set()
        self.headers: list[dict[str, str]] = []  # every request's headers, in arrival order
        self.base_url = ""
        # Answers whose client left before the whole body was sent (a trickled body given up on).
        self.abandoned = 0

    @property
    def total(self) -> int:
        return len(self.requests)

    def handle(self, body: dict, authorization: str) -> Reply:
        cell = self.cell(body)
        with self.lock:
            self.requests.append(body)
            self.auth_headers.add(authorization)
            self.per_cell[cell] += 1
            nth = self.per_cell[cell]
        return self.script(*cell, nth)


def _handler(server: StandInServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with server.lock:
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            try:
                with server.lock:
                    server.headers.append(dict(self.headers))
                reply = server.handle(body, self.headers.get("Authorization", ""))
                time.sleep(reply.delay_s)
            finally:
                with server.lock:
                    server.in_flight -= 1
            if reply.status != 200:
                payload = {"error": {"message": f"scripted {reply.status}", "type": "x", **reply.error_body}}
            else:
                message = {"role": "assistant", "content": reply.content, "refusal": reply.refusal}
                payload = {
                    "id": "chatcmpl-standin",
                    "object": "chat.completion",
                    "created": 0,
                    "model": reply.model or body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            data = json.dumps(payload).encode() if reply.raw_body is None else reply.raw_body
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self._write(data, reply.trickle_s)
            except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                with server.lock:
                    server.abandoned += 1

        def _write(self, data: bytes, trickle_s: float) -> None:
            if not trickle_s:
                self.wfile.write(data)
                return
            for byte in data:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(trickle_s)

    return Handler


@contextmanager
def serving(stand_in: StandInServer) -> Iterator[StandInServer]:
    """Serve `stand_in` on a free port of 127.0.0.1 (its `base_url` set) until the block ends."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stand_in))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    stand_in.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield stand_in
    finally:
        httpd.shutdown()
        httpd.server_close()
