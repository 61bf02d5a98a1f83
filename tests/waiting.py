"""Wait on observable state with a deadline (never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    pass


def wait_for(predicate: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.05,
             what: str = "condition") -> T:
    """Poll ``predicate`` until it returns a truthy value; return it, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the state may not exist yet; keep polling
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise WaitTimeout(f"timed out after {timeout}s waiting for {what}{detail}")
        time.sleep(interval)
