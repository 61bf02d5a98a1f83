"""Signals of the one-turn process: SIGTERM/SIGINT set the turn's cancel event (stop at the next safe point)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

from unicore.log import get_logger

log = get_logger("turn")


def install_cancel_handlers(cancel: threading.Event) -> None:
    """Route SIGTERM and SIGINT to ``cancel`` (main thread only)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        log.warning("received %s: stopping the turn at the next safe point", signal.Signals(signum).name)
        cancel.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


class Heartbeat:
    """A daemon thread calling ``beat()`` every ``interval`` seconds until stopped or ``beat`` raises.

    ``healthy`` (optional) is asked before every beat: while it answers False the beat is skipped (a stalled
    turn must not keep its lease alive; see ``unicore.turn.progress``); beating resumes once it answers True.
    """

    def __init__(
        self,
        beat: Callable[[], None],
        interval: float,
        on_failure: Callable[[BaseException], None],
        healthy: Callable[[], bool] | None = None,
    ) -> None:
        self._beat = beat
        self._interval = interval
        self._on_failure = on_failure
        self._healthy = healthy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="unicore-heartbeat", daemon=True)
        self.beats = 0
        self.skipped = 0

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                if self._healthy is not None and not self._healthy():
                    self.skipped += 1
                    continue
                self._beat()
                self.beats += 1
            except BaseException as exc:  # noqa: BLE001 - reported to the turn, which decides
                self._on_failure(exc)
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
