"""Poll observable state with a deadline (never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """The awaited state did not appear before the deadline."""


def wait_until(
    predicate: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    max_interval: float = 0.5,
) -> T:
    """Call ``predicate`` until it returns a truthy value and return it; raise WaitTimeout after
    ``timeout`` s.

    Exceptions raised by ``predicate`` count as "not yet" (the state may not exist yet); the last one is
    reported.
    The poll interval grows from ``interval`` to ``max_interval``.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    delay = interval
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - polled state may not exist yet
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {what}{detail}")
        time.sleep(delay)
        delay = min(max_interval, delay * 1.5)
