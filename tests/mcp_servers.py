"""Real third-party MCP servers for the tests (issue 17), nobody here wrote them:

- ``@modelcontextprotocol/server-everything`` (npm), from the cache hack/fetch-mcp-servers.sh fills (make test's
  ``mcp-servers`` prerequisite; a cold cache is filled here): stdio, or streamable HTTP as a process of the test;
- ``mcp-server-time`` (PyPI, a dev dependency): ``python -m mcp_server_time``, stdio.

Where the npm server cannot be installed the tests FAIL with the script's own error, never skip.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from tests.model_server import free_port
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
FETCH = REPO / "hack" / "fetch-mcp-servers.sh"
ENTRY = Path("node_modules/@modelcontextprotocol/server-everything/dist/index.js")


@lru_cache(maxsize=1)
def everything_entry() -> Path:
    """server-everything's ``dist/index.js`` (installed first if the cache is cold)."""
    proc = subprocess.run(["bash", str(FETCH)], capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise AssertionError(f"hack/fetch-mcp-servers.sh failed ({proc.returncode}): {proc.stderr.strip()[-600:]}")
    entry = Path(proc.stdout.strip().splitlines()[-1]) / ENTRY
    assert entry.is_file(), f"{entry} missing after hack/fetch-mcp-servers.sh"
    return entry


def document(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "unicore.dev/v1alpha1", "kind": "MCPServer", "metadata": {"name": name}, "spec": spec}


def time_spec(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "Etc/UTC"], **extra}


def everything_stdio_spec(marker: str = "", **extra: Any) -> dict[str, Any]:
    """stdio server-everything; ``marker``: an extra argument (the server ignores it) to find its process by."""
    args = [str(everything_entry()), "stdio", *([f"--unicore-test={marker}"] if marker else [])]
    return {"command": "node", "args": args, **extra}


def write_documents(path: Path, documents: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def pids_with_argument(argument: str) -> list[int]:
    """Processes whose command line holds ``argument`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argument.encode() in args:
            found.append(int(entry.name))
    return found


class EverythingHttp:
    """server-everything over streamable HTTP, a real process on a free port (``url``: its /mcp endpoint)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.marker = uuid.uuid4().hex
        self.process = subprocess.Popen(
            ["node", str(everything_entry()), "streamableHttp", f"--unicore-test={self.marker}"],
            env={**os.environ, "PORT": str(self.port)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        wait_for(self._listening, timeout=30, what=f"server-everything listening on port {self.port}")

    def _listening(self) -> bool:
        assert self.process.poll() is None, f"server-everything exited with {self.process.returncode}"
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def __enter__(self) -> EverythingHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
