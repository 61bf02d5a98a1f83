"""The turn container's side of the workbench: ``ExecServerRunner`` runs a command through the exec server
(``unicore-exec serve``, exec-server/ at the repository's top) on its unix socket.

One connection is one command: the request line ``{"command", "workdir", "timeout_seconds", "tail_bytes"}``, then
the server's ``output`` lines while it runs (passed to ``on_output``), then one ``exit`` line (the result) or one
``error`` line (it could not start: ``ToolError``). Setting ``cancel`` sends ``{"type": "cancel"}``: the server
kills the command's process group and answers with a cancelled result. The server does the timeout (SIGTERM to the
group, SIGKILL 2 s later); this client only waits for its answer.
"""

from __future__ import annotations

import json
import logging
import selectors
import socket
import threading
import time
from pathlib import Path
from typing import Any

from unicore.commands.result import STDERR, STDOUT, TAIL_BYTES, CommandResult, OutputSink
from unicore.errors import ToolError

log = logging.getLogger(__name__)

CANCEL_POLL_SECONDS = 0.05
"""How often a waiting run looks at its cancel event (the socket wakes it at once for output)."""
CONNECT_RETRY_SECONDS = 0.05
FAILED_FILE = "failed"
"""Written next to the socket by a server whose self-check failed: the one-line reason."""
GONE = "the workbench's exec server went away mid-command (the workbench container ended?)"


class ExecServerRunner:
    """A ``CommandRunner`` that runs commands in the workbench container through its exec server's socket.

    ``connect_timeout``: how long a run waits for the socket to appear and accept (the workbench sidecar may still be
    starting when the turn begins)."""

    def __init__(self, socket_path: str | Path, connect_timeout: float = 10.0) -> None:
        self.socket_path = Path(socket_path)
        self.connect_timeout = connect_timeout

    def run(self, command: str, *, workdir: str, timeout_seconds: float, cancel: threading.Event,
            on_output: OutputSink | None = None) -> CommandResult:
        began = time.monotonic()
        sock = self._connect(cancel)
        if sock is None:  # cancelled before the server answered
            return CommandResult(exit_code=None, duration_seconds=time.monotonic() - began, stdout="", stderr="",
                                 stdout_bytes=0, stderr_bytes=0, cancelled=True)
        with sock:
            request = {"command": command, "workdir": workdir, "timeout_seconds": timeout_seconds,
                       "tail_bytes": TAIL_BYTES}
            try:
                sock.sendall(_line(request))
            except OSError as exc:
                raise ToolError(f"{GONE}: {exc.strerror or exc}") from exc
            return self._answer(sock, cancel, on_output)

    def _connect(self, cancel: threading.Event) -> socket.socket | None:
        """A connected socket; None when ``cancel`` was set while waiting for the server."""
        deadline = time.monotonic() + self.connect_timeout
        failed = self.socket_path.parent / FAILED_FILE
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(self.socket_path))
                return sock
            except OSError as exc:  # no socket yet, or bound but not listening yet, or its server is gone
                sock.close()
                why = exc.strerror or str(exc)
            if failed.is_file():
                reason = failed.read_text(errors="replace").strip().splitlines()
                raise ToolError(f"workbench unusable: {reason[0] if reason else '(no reason given)'}")
            if time.monotonic() >= deadline:
                raise ToolError(f"the workbench's exec server is not reachable at {self.socket_path}: {why}")
            if cancel.wait(CONNECT_RETRY_SECONDS):
                return None

    def _answer(self, sock: socket.socket, cancel: threading.Event,
                on_output: OutputSink | None) -> CommandResult:
        """Read the server's lines until the exit (or error) line, sending a cancel once ``cancel`` is set."""
        buffer = bytearray()
        cancel_sent = False
        with selectors.DefaultSelector() as selector:
            selector.register(sock, selectors.EVENT_READ)
            while True:
                if cancel.is_set() and not cancel_sent:
                    cancel_sent = True
                    try:
                        sock.sendall(_line({"type": "cancel"}))
                    except OSError:
                        pass  # the server is gone or ended the command already: the read below says which
                if not selector.select(CANCEL_POLL_SECONDS):
                    continue
                try:
                    data = sock.recv(1 << 16)
                except OSError as exc:
                    raise ToolError(f"{GONE}: {exc.strerror or exc}") from exc
                if not data:
                    raise ToolError(GONE)
                buffer += data
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    result = self._message(line, on_output)
                    if result is not None:
                        return result

    @staticmethod
    def _message(line: bytes, on_output: OutputSink | None) -> CommandResult | None:
        try:
            message: dict[str, Any] = json.loads(line)
            kind = message["type"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ToolError(f"the workbench's exec server sent a line that is not its protocol: {line[:200]!r}") \
                from exc
        if kind == "output":
            if on_output is not None and message.get("stream") in (STDOUT, STDERR):
                try:
                    on_output(message["stream"], str(message.get("data", "")))
                except Exception:  # live views are best effort; the command goes on
                    log.exception("an output sink failed")
            return None
        if kind == "error":
            raise ToolError(str(message.get("message") or "the workbench's exec server refused the command"))
        if kind == "exit":
            return CommandResult(
                exit_code=message.get("exit_code"),
                duration_seconds=float(message.get("duration_seconds", 0.0)),
                stdout=message.get("stdout", ""),
                stderr=message.get("stderr", ""),
                stdout_bytes=int(message.get("stdout_bytes", 0)),
                stderr_bytes=int(message.get("stderr_bytes", 0)),
                timed_out=bool(message.get("timed_out")),
                cancelled=bool(message.get("cancelled")),
                signal=message.get("signal"),
                tail_bytes=TAIL_BYTES,
            )
        return None  # a newer server's line this client does not know


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode() + b"\n"


__all__ = ["ExecServerRunner"]
