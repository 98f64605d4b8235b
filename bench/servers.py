"""Start and stop a real local OpenAI-compatible server (`transformers serve`) for tests and benchmarks, and
small stdlib HTTP servers on 127.0.0.1 that stand in for remote APIs (`start_stand_in`, `reply_json`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LocalServer:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def n_chat_requests(self) -> int:
        """Chat completion requests the server has answered (uvicorn's access log, one line each)."""
        return self.log_text().count('"POST /v1/chat/completions HTTP/1.1"')


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def start_transformers_serve(log_path: Path, startup_timeout_s: float = 90.0) -> LocalServer:
    """Run `transformers serve` on a free 127.0.0.1 port in its own process group; return once /health answers."""
    port = free_port()
    executable = Path(sys.executable).parent / "transformers"
    # One torch thread: ~10x faster than the default for tiny models on few cores.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    log_file = open(log_path, "w", encoding="utf-8")  # noqa: SIM115  (kept open for the server's lifetime)
    process = subprocess.Popen(
        [str(executable), "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "info"],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    log_file.close()  # the child holds its own descriptor
    server = LocalServer(process=process, port=port, log_path=log_path)
    deadline = time.monotonic() + startup_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"transformers serve exited with {process.returncode}:\n{server.log_text()[-3000:]}")
        if _healthy(port):
            return server
        time.sleep(0.3)
    stop_server(server)
    raise RuntimeError(f"transformers serve did not answer /health within {startup_timeout_s} s:\n{server.log_text()}")


def stop_server(server: LocalServer, grace_s: float = 10.0) -> None:
    """Terminate the server's process group (uvicorn workers included), killing it if it lingers."""
    if server.process.poll() is not None:
        return
    os.killpg(server.process.pid, signal.SIGTERM)
    try:
        server.process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=grace_s)


def reply_json(handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    """Answer the handler's request with `payload` as JSON."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def start_stand_in(handler_class: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    """Serve `handler_class` on a free 127.0.0.1 port in a daemon thread; (server, 'http://127.0.0.1:<port>').
    Stop it with `server.shutdown(); server.server_close()`."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
