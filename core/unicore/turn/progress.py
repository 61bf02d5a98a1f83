"""Progress of the turn's main thread, so the heartbeat beats only while the turn really makes progress.

The heartbeat is a background thread: on its own it would keep renewing the lease while the main thread hangs
in a model call that never returns or a deadlocked tool, and the watchdog's stale-heartbeat rule would never
fire. The turn marks a step boundary (before and after every model call, tool call and drain); the heartbeat
renews the lease only while the current step has run at most ``UNICORE_STALL_SECONDS`` (default 900: longer
than any sane model call or tool). A stalled turn stops beating: its lease expires on its TTL and the watchdog
reaps the Job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from unicore.settings import RuntimeSettings

STALL_ENV = RuntimeSettings.env_var("stall_seconds")
DEFAULT_STALL_SECONDS = float(RuntimeSettings.model_fields["stall_seconds"].default)


def stall_seconds_from_env(environ: Mapping[str, str] | None = None) -> float:
    """``$UNICORE_STALL_SECONDS`` (default 900); ConfigError unless it is a positive number."""
    return RuntimeSettings.from_env(environ, only={"stall_seconds"}).stall_seconds


class Progress:
    """The step the main thread is in and when it began (thread-safe; read by the heartbeat thread)."""

    def __init__(self, stall_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if stall_seconds <= 0:
            raise ValueError("stall_seconds must be positive")
        self.stall_seconds = stall_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._step = "start"
        self._since = clock()

    def mark(self, step: str) -> None:
        """A step boundary: ``step`` begins now."""
        with self._lock:
            self._step, self._since = step, self._clock()

    def current(self) -> tuple[str, float]:
        """(step, seconds it has been running)."""
        with self._lock:
            return self._step, self._clock() - self._since

    def stalled(self) -> bool:
        """The current step has run longer than the stall limit."""
        return self.current()[1] > self.stall_seconds
