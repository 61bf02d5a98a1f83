"""The turn's instrumentation hooks: where it tells its heartbeat how far it got, and where the fault-injection
harness may kill it. The turn's steps call these at their boundaries instead of reaching for either mechanism.

- Progress marks (``unicore.turn.progress``): the heartbeat renews the lease only while the current step (model
  call, tool call, drain) has run at most ``UNICORE_STALL_SECONDS``, so a hung turn stops beating and the watchdog
  reaps it. A step that overran the limit and then returned proves the lease is still ours before the turn writes
  again: meanwhile the watchdog may have reaped the turn, and a zombie must not write.
- Named fault points (``unicore.faults``): ``UNICORE_FAULTS`` kills the process at a named step, the way an OOM
  kill or a node loss would, to prove that no message or report is lost or duplicated. The names are the harness's
  contract (``unicore.faults.STEPS``); each is reached at the same place of every turn.
"""

from __future__ import annotations

from collections.abc import Callable

from unicore.faults import fault_point, set_scope
from unicore.log import get_logger
from unicore.turn.progress import Progress

log = get_logger("turn")


class Checkpoints:
    """Progress marks and fault points of one turn of ``task_id``; ``confirm_lease`` renews the lease (LeaseLost if
    it is not ours any more), called when a step that overran the stall limit returns."""

    def __init__(self, task_id: str, stall_seconds: float, confirm_lease: Callable[[], None]) -> None:
        self.task_id = task_id
        self.progress = Progress(stall_seconds)
        self._confirm_lease = confirm_lease
        self._stall_reported = False

    @property
    def stall_seconds(self) -> float:
        return self.progress.stall_seconds

    def begin(self, step: str) -> None:
        """A step boundary: ``step`` begins now."""
        self.progress.mark(step)

    def end(self, next_step: str) -> None:
        """The end of a step that may have stalled (a model or tool call): ``next_step`` begins, once the lease is
        proven ours if the step overran the stall limit."""
        overdue = self.progress.stalled()
        self.progress.mark(next_step)
        if overdue:
            self._confirm_lease()

    def fault_point(self, step: str) -> None:
        """The named fault point ``step`` (``unicore.faults``): the harness may kill the process here."""
        fault_point(step)

    def scope(self, turn_number: int) -> None:
        """Name the turn the fault points are reached in (``kill-once`` kills once per task, turn and step)."""
        set_scope(f"{self.task_id}#{turn_number}")

    def making_progress(self) -> bool:
        """Heartbeat gate: False while the current step has run longer than the stall limit."""
        step, age = self.progress.current()
        if age <= self.progress.stall_seconds:
            self._stall_reported = False
            return True
        if not self._stall_reported:
            self._stall_reported = True
            log.error(
                "task %s: step %r has run %.0fs (> UNICORE_STALL_SECONDS=%.0f): the turn looks hung; "
                "heartbeat stopped, the lease expires and the watchdog reaps the turn",
                self.task_id,
                step,
                age,
                self.progress.stall_seconds,
            )
        return False
