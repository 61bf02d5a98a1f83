"""What a command run gives back (``CommandResult``), the capped tails of its output (``OutputTail``) and the one
interface both runners implement (``CommandRunner``): the local runner (``commands.local_runner``) and the workbench's
exec server client (``commands.exec_client``). Pure: no process, no socket here."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

TAIL_BYTES = 16 * 1024
"""How much of each stream's end a result keeps (stdout and stderr each)."""

STDOUT, STDERR = "stdout", "stderr"

OutputSink = Callable[[str, str], None]
"""Called with (stream, text) as output arrives, for live views; best effort, never for the model."""


class OutputTail:
    """The last ``limit`` bytes of a stream, and how many bytes it had in all."""

    def __init__(self, limit: int = TAIL_BYTES) -> None:
        self.limit = limit
        self.total = 0
        self._buf = bytearray()

    def add(self, data: bytes) -> None:
        self.total += len(data)
        self._buf += data
        if len(self._buf) > 2 * self.limit:
            del self._buf[: len(self._buf) - self.limit]

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def text(self) -> str:
        """The kept bytes as text (a multi-byte character cut at the start, or invalid UTF-8, becomes U+FFFD)."""
        return bytes(self._buf[-self.limit:]).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class CommandResult:
    """One command's end. ``exit_code`` None: killed by ``signal`` (a timeout's or a cancellation's kill, or another
    one's)."""

    exit_code: int | None
    duration_seconds: float
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    timed_out: bool = False
    cancelled: bool = False
    signal: str | None = None
    tail_bytes: int = TAIL_BYTES

    @property
    def outcome(self) -> str:
        """``ok`` (exit 0), ``failed`` (another exit code or a signal), ``timed_out`` or ``cancelled``: the metric's
        label."""
        if self.cancelled:
            return "cancelled"
        if self.timed_out:
            return "timed_out"
        return "ok" if self.exit_code == 0 else "failed"

    def for_model(self) -> dict[str, Any]:
        """The tool result the model reads: exit code, duration, the tails, and what was cut or killed."""
        out: dict[str, Any] = {"exit_code": self.exit_code, "duration_seconds": round(self.duration_seconds, 3)}
        if self.signal:
            out["signal"] = self.signal
        if self.timed_out:
            out["timed_out"] = True
        if self.cancelled:
            out["cancelled"] = True
        for name, text, total in ((STDOUT, self.stdout, self.stdout_bytes), (STDERR, self.stderr, self.stderr_bytes)):
            out[name] = text
            if total > self.tail_bytes:
                out[f"{name}_truncated"] = (f"only the last {self.tail_bytes // 1024} KiB of {total:,} bytes are "
                                            "shown")
        return out


class CommandRunner(Protocol):
    """Runs one shell command line (``/bin/sh -c``) and waits for its end; the whole process group is killed when
    ``timeout_seconds`` pass or ``cancel`` is set (the result says which). Raises ``unicore.errors.ToolError`` when
    the command could not be started at all (no such workdir, the exec server gone), with the reason."""

    def run(self, command: str, *, workdir: str, timeout_seconds: float, cancel: threading.Event,
            on_output: OutputSink | None = None) -> CommandResult:
        ...


__all__ = ["STDERR", "STDOUT", "TAIL_BYTES", "CommandResult", "CommandRunner", "OutputSink", "OutputTail"]


def result_lines(body: object) -> list[str] | None:
    """A stored ``run_command`` result (the JSON ``CommandResult.for_model`` gave) as lines for people: how it ended,
    then each stream's tail line by line; None for any other JSON (not escaped: the caller escapes each line)."""
    if not isinstance(body, dict) or not {"exit_code", "duration_seconds", STDOUT, STDERR} <= set(body):
        return None
    code = body.get("exit_code")
    how = f"exit code {code}" if code is not None else f"killed ({body.get('signal') or 'signal'})"
    flags = [word for word, key in (("timed out", "timed_out"), ("cancelled", "cancelled")) if body.get(key)]
    lines = [", ".join([how, f"{body.get('duration_seconds')} s", *flags])]
    for name in (STDOUT, STDERR):
        text = str(body.get(name) or "")
        if not text:
            continue
        note = body.get(f"{name}_truncated")
        lines.append(f"{name}" + (f" ({note})" if note else "") + ":")
        lines += [f"  | {line}" for line in text.splitlines()]
    return lines
