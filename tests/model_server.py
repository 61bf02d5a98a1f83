"""Start a private, real model server: llama.cpp's llama-server (hack/build-model-server.sh) with the GGUF of
hack/fetch-model.py, on a free port of 127.0.0.1 (the real-model tests and bench/bench_time_to_first_token.py), or
of another address of this host (the real node's turn pods reach it on the node IP).

The set-up is the one docs/models.md documents and ``make model-up`` runs: ``--jinja`` (the GGUF's own chat
template, so tools are offered as the model was trained to see them), greedy sampling (``--temp 0``, fixed seed)
as the server's default, so runs repeat.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "hack" / "build-model-server.sh"
FETCH = REPO / "hack" / "fetch-model.py"
OPT_OUT = "UNICORE_NO_MODEL"
ALIAS = "qwen2.5-coder-0.5b"
TOOL_ALIAS = "qwen2.5-coder-1.5b"  # the smallest one that ends a turn after a tool result (docs/models.md)
CONTEXT = 16384
# One thread: on a shared 2-core machine two llama.cpp threads wait for each other at every barrier and generation
# falls from ~15 to under 1 token/s under load (docs/models.md, "Threads").
THREADS = int(os.environ.get("UNICORE_MODEL_THREADS") or 1)


class ModelUnavailable(RuntimeError):
    """The server or the model could not be built or fetched (the reason is the message)."""


def _last_line(cmd: list[str], timeout: float) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        tail = " ".join(proc.stderr.strip().splitlines()[-3:])
        raise ModelUnavailable(f"{' '.join(cmd)} failed ({proc.returncode}): {tail}")
    return proc.stdout.strip().splitlines()[-1]


def server_binary(timeout: float = 3600) -> Path:
    """llama-server from the cache, built first if missing (make test's model-bins builds it beforehand)."""
    return Path(_last_line(["bash", str(BUILD)], timeout))


def model_file(model: str = ALIAS, timeout: float = 1800) -> Path:
    python = REPO / ".venv" / "bin" / "python"
    return Path(_last_line([str(python if python.exists() else "python3"), str(FETCH), "--model", model], timeout))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ModelServer:
    def __init__(self, *, model: str = ALIAS, context: int = CONTEXT, extra_args: tuple[str, ...] = (),
                 host: str = "127.0.0.1") -> None:
        self.alias = model
        self.host = host
        binary = server_binary()
        gguf = model_file(model)
        self.dir = Path(tempfile.mkdtemp(prefix="unicore-llama-"))
        self.log_path = self.dir / "server.log"
        self.port = free_port(host)
        self.base_url = f"http://{host}:{self.port}/v1"
        self.command = [
            str(binary), "--jinja", "-m", str(gguf), "--host", host, "--port", str(self.port),
            "-c", str(context), "--alias", model, "--temp", "0", "--seed", "42", "--no-webui", "-t", str(THREADS),
            # One slot: each request is evaluated alone, so a greedy answer depends only on its prompt. With the
            # default slots, a child's request batched with its parent's got other logits now and then (CI: a
            # child that was told to use no tool called one), depending on which requests happened to overlap.
            "--parallel", "1",
            *extra_args,
        ]
        start = time.monotonic()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        try:
            wait_for(self._healthy, timeout=180, interval=0.1,
                     what=f"llama-server to answer /health (log: {self.log_path})")
        except BaseException:
            self.stop(keep_log=True)
            raise
        self.ready_seconds = time.monotonic() - start
        self.pid = self.proc.pid

    @classmethod
    def attach(cls, state: dict[str, Any]) -> ModelServer:
        """The server another process of this run started (``shared_server``): same address, its pid to stop."""
        server = cls.__new__(cls)
        server.alias, server.host, server.port = state["alias"], state["host"], int(state["port"])
        server.base_url = f"http://{server.host}:{server.port}/v1"
        server.log_path = Path(state["log_path"])
        server.dir = server.log_path.parent
        server.pid = int(state["pid"])
        server.proc = None
        server.command = []
        server.ready_seconds = 0.0
        return server

    def state(self) -> dict[str, Any]:
        return {"alias": self.alias, "host": self.host, "port": self.port, "log_path": str(self.log_path),
                "pid": self.pid}

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise ModelUnavailable(f"llama-server exited with {self.proc.returncode}: {' | '.join(tail)}")
        with urllib.request.urlopen(f"http://{self.host}:{self.port}/health", timeout=2) as response:
            return response.status == 200

    def env(self) -> dict[str, str]:
        """What a UniCore process needs to reach this server as ``openai:<alias>``."""
        return {"OPENAI_BASE_URL": self.base_url}

    def models(self) -> list[str]:
        with urllib.request.urlopen(f"{self.base_url}/models", timeout=10) as response:
            return [m["id"] for m in json.load(response)["data"]]

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, *, keep_log: bool = False) -> None:
        if self.proc is None:  # attached: another process started it
            _stop_pid(self.pid)
        elif self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not keep_log:
            shutil.rmtree(self.dir, ignore_errors=True)


def _running(pid: int) -> bool:
    """The process runs (a zombie, waiting for its parent to reap it, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _stop_pid(pid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        try:
            wait_for(lambda: not _running(pid), timeout=15, interval=0.1, what=f"llama-server {pid} to exit")
            return
        except AssertionError:
            continue


@contextmanager
def _locked(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON state at ``path``, read and written back under an exclusive lock of ``path``.lock."""
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        yield state
        path.write_text(json.dumps(state))


@contextmanager
def shared_server(path: Path, start: Callable[[], ModelServer]) -> Iterator[ModelServer]:
    """One server for every process of a run that asks for it (pytest-xdist workers): the first starts it with
    ``start``, each counts itself a user in the state file ``path`` while it uses it, and the last to leave stops it
    (whichever process started it)."""
    with _locked(path) as state:
        if state.get("users") and _running(int(state["server"]["pid"])):
            server = ModelServer.attach(state["server"])
            state["users"] += 1
        else:
            server = start()
            state.update(server=server.state(), users=1)
    try:
        yield server
    finally:
        with _locked(path) as state:
            state["users"] -= 1
            if state["users"] == 0:
                server.stop()


def opted_out() -> bool:
    return os.environ.get(OPT_OUT) == "1"
