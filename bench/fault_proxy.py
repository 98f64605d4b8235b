"""A fault-injecting OpenAI-compatible server on 127.0.0.1, for the reliability tests and the API load benchmark.

`FaultProxy` answers `POST .../chat/completions` either by forwarding the request to a real upstream server
(`upstream=`: `transformers serve`, `bench.servers.start_transformers_serve`) or with canned answers
(`answer=`: a function of the request body giving the assistant message text, or of the body and the request's
Authorization header, for a server that quotes the key back in its answers), and in between injects faults
at a configurable rate:

- `rate_limit`: HTTP 429 with a `Retry-After` header (seconds, `retry_after_s`);
- `server_error` / `unavailable`: HTTP 500 / 503 with an OpenAI-style error body;
- `timeout`: no answer; the connection is held until the client gives up (or `hang_s` passes);
- `reset`: the connection is reset (TCP RST) before any answer;
- `truncated`: a 200 whose body stops halfway (the connection closes before Content-Length bytes);
- `malformed`: a complete 200 whose JSON body does not parse;
- `empty_choices`: a well-formed chat completion with `choices: []`;
- `bad_request` (only when named in `faults`, it is not transient): HTTP 400, a request the server rejects.

`error_detail(body, authorization)` adds text to every error body, e.g. the key quoted back as some servers do.

Whether an attempt fails is decided by a hash of (seed, request body, attempt number), so which attempts fail
does not depend on the order in which concurrent requests arrive; the faults take the kinds of `faults` in turn,
so every kind occurs once as many faults as kinds were injected. `max_faults_per_request` caps the faults one
request body meets, which makes "0 items lost" a guarantee for clients retrying at least that often rather than
a matter of luck. The proxy records what it saw: attempts per request body (its `identity`), the bodies it
answered, the faults it injected, the largest number of requests in flight (a timed-out request stops counting
when its client disconnects) and the Authorization headers it received (`seen_authorization`).

The shape of what it sends is the chat completions contract of the OpenAI API (`id`, `object`, `created`,
`model`, `choices[].message.content`, `finish_reason`, `usage`), which the real `openai` client parses.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import inspect
import json
import random
import select
import socket
import struct
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# The transient faults: a client that retries them often enough loses nothing.
FAULTS = ("rate_limit", "server_error", "unavailable", "timeout", "reset", "truncated", "malformed", "empty_choices")
ERROR_STATUS = {"rate_limit": 429, "server_error": 500, "unavailable": 503, "bad_request": 400}


def identity(body: dict[str, Any]) -> str:
    """A request body's identity: two attempts of the same request have the same one."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


@dataclass
class Attempt:
    identity: str
    fault: str | None  # None: answered (forwarded or canned)
    status: int | None  # the HTTP status sent, None when no status line was sent
    started: float
    body: dict[str, Any]


@dataclass
class ProxyLog:
    attempts: list[Attempt] = field(default_factory=list)
    faults: Counter = field(default_factory=Counter)
    attempts_per_request: Counter = field(default_factory=Counter)
    answered: set[str] = field(default_factory=set)
    seen_authorization: set[str] = field(default_factory=set)
    in_flight: int = 0
    max_in_flight: int = 0

    @property
    def total(self) -> int:
        return len(self.attempts)


def chat_completion(model: str, content: str, finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-fault-proxy",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class FaultProxy:
    """Serve on a free 127.0.0.1 port (`with FaultProxy(...) as proxy: proxy.base_url`); `fault_rate` may be
    changed while it runs (e.g. to 0 for 'the endpoint recovered')."""

    def __init__(
        self,
        *,
        upstream: str | None = None,
        answer: Callable[..., str] | None = None,
        fault_rate: float = 0.0,
        faults: Sequence[str] = FAULTS,
        seed: int = 0,
        retry_after_s: float = 0.05,
        hang_s: float = 30.0,
        max_faults_per_request: int | None = None,
        delay_s: float = 0.0,
        error_detail: Callable[[dict[str, Any], str], str] | None = None,
    ):
        if (upstream is None) == (answer is None):
            raise ValueError("give exactly one of upstream= (a base URL) and answer= (canned answers)")
        unknown = sorted(set(faults) - {*FAULTS, "bad_request"})
        if unknown:
            raise ValueError(f"unknown faults {unknown}; known: {FAULTS}")
        self.upstream = urllib.parse.urlsplit(upstream) if upstream else None
        self.answer = answer
        self._answer_reads_key = answer is not None and len(inspect.signature(answer).parameters) == 2
        self.fault_rate = fault_rate
        self.faults = tuple(faults)
        self.seed = seed
        self.retry_after_s = retry_after_s
        self.hang_s = hang_s
        self.max_faults_per_request = max_faults_per_request
        self.delay_s = delay_s
        self.error_detail = error_detail
        self.log = ProxyLog()
        self.lock = threading.Lock()
        self._faults_per_request: Counter = Counter()
        self._httpd: ThreadingHTTPServer | None = None

    # --- lifecycle -------------------------------------------------------------------------------------------
    def __enter__(self) -> FaultProxy:
        handler = _handler(self)
        self._httpd = _Server(("127.0.0.1", 0), handler)
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "use the proxy as a context manager"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    # --- decisions -------------------------------------------------------------------------------------------
    def decide(self, ident: str) -> str | None:
        """The fault of this attempt of request `ident`, or None; also counts the attempt."""
        with self.lock:
            self.log.attempts_per_request[ident] += 1
            nth = self.log.attempts_per_request[ident]
            capped = (
                self.max_faults_per_request is not None
                and self._faults_per_request[ident] >= self.max_faults_per_request
            )
            rng = random.Random(f"{self.seed}:{ident}:{nth}")
            if capped or rng.random() >= self.fault_rate:
                return None
            fault = self.faults[sum(self.log.faults.values()) % len(self.faults)]
            self._faults_per_request[ident] += 1
            self.log.faults[fault] += 1
            return fault

    def record(self, attempt: Attempt) -> None:
        with self.lock:
            self.log.attempts.append(attempt)
            if attempt.fault is None and attempt.status == 200:
                self.log.answered.add(attempt.identity)

    def forward(self, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        assert self.upstream is not None
        connection = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=600)
        try:
            upstream_path = self.upstream.path.rstrip("/") + path.removeprefix("/v1")
            connection.request("POST", upstream_path, body=raw, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Clients open up to `concurrency` connections at once; the default backlog of 5 would refuse some.
    request_queue_size = 256


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        _counted = False  # this request counts in `in_flight`

        def log_message(self, *args: Any) -> None:  # the log is kept in `proxy.log`
            pass

        def do_GET(self) -> None:  # /health and /v1/models, for clients that probe
            self._send(200, b'{"status": "ok"}')

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.loads(raw)
            ident = identity(body)
            started = time.monotonic()
            with proxy.lock:
                proxy.log.in_flight += 1
                proxy.log.max_in_flight = max(proxy.log.max_in_flight, proxy.log.in_flight)
                proxy.log.seen_authorization.add(self.headers.get("Authorization", ""))
            self._counted = True
            status: int | None = None
            fault = proxy.decide(ident)
            try:
                if proxy.delay_s:
                    time.sleep(proxy.delay_s)
                status = self._respond(fault, body, raw)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up and left
                pass
            finally:
                self._done()
                proxy.record(Attempt(ident, fault, status, started, body))

        def _done(self) -> None:
            """The request stops counting as in flight; called before its last byte leaves (the client may send
            its next request as soon as it has the answer) or once its client has left."""
            if self._counted:
                self._counted = False
                with proxy.lock:
                    proxy.log.in_flight -= 1

        def _respond(self, fault: str | None, body: dict[str, Any], raw: bytes) -> int | None:
            if fault is None:
                if proxy.upstream is not None:
                    headers = {"Content-Type": "application/json"}
                    if self.headers.get("Authorization"):
                        headers["Authorization"] = self.headers["Authorization"]
                    status, payload = proxy.forward(self.path, raw, headers)
                    return self._send(status, payload)
                assert proxy.answer is not None
                key = [self.headers.get("Authorization", "")] if proxy._answer_reads_key else []
                return self._send(200, json.dumps(chat_completion(body["model"], proxy.answer(body, *key))).encode())
            if fault in ERROR_STATUS:
                status = ERROR_STATUS[fault]
                message = f"injected {fault}"
                if proxy.error_detail is not None:
                    message += f": {proxy.error_detail(body, self.headers.get('Authorization', ''))}"
                payload = json.dumps({"error": {"message": message, "type": fault, "code": None}}).encode()
                extra = {"Retry-After": f"{proxy.retry_after_s:g}"} if fault == "rate_limit" else {}
                return self._send(status, payload, extra)
            if fault == "timeout":
                self._hold_until_client_leaves()
                return None
            if fault == "reset":
                self._reset()
                return None
            completion = chat_completion(body["model"], "SAFETY_SCORE: 0.5")
            if fault == "truncated":
                payload = json.dumps(completion).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                self._done()
                self._reset()
                return 200
            if fault == "malformed":
                return self._send(200, b'{"id": "chatcmpl-fault-proxy", "object": "chat.completion", "choices": [{')
            completion["choices"] = []  # empty_choices
            return self._send(200, json.dumps(completion).encode())

        def _send(self, status: int, payload: bytes, extra_headers: dict[str, str] | None = None) -> int:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (extra_headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self._done()
            self.wfile.write(payload)
            return status

        def _hold_until_client_leaves(self) -> None:
            # Blocks until the client closes the connection (EOF makes the socket readable), so the request
            # stops counting as in flight as soon as the client has given up on it.
            readable, _, _ = select.select([self.connection], [], [], proxy.hang_s)
            if readable:
                self.connection.recv(1, socket.MSG_PEEK)
            self._done()
            self.close_connection = True

        def _reset(self) -> None:
            self._done()
            # SO_LINGER with a zero timeout makes close() send a TCP RST instead of a FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True

        def finish(self) -> None:
            with contextlib.suppress(OSError):  # the socket was reset on purpose, or the client left
                super().finish()

    return Handler
