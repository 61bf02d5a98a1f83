"""What one turn came to (``TurnOutcome``) and the exit codes of ``unicore-turn`` (``TurnOutcome.exit_code``):

  0   the turn ended (text-only answer, max_iterations or token budget), or there was nothing to do
  1   the turn failed (model error, bad model/script, unexpected error); ``last_error`` is set on the task
  2   bad command line
  3   another live turn holds the task's lease (nothing done)
  4   no such task
  5   the lease was lost mid-turn (a newer turn owns the task); nothing more was written
  143 cancelled by SIGTERM at a safe point; unanswered tool calls of the last answer got "Cancelled" results
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BUSY = 3
EXIT_NOT_FOUND = 4
EXIT_LEASE_LOST = 5
EXIT_CANCELLED = 143


@dataclass
class TurnOutcome:
    task_id: str
    exit_code: int
    turn_number: int | None = None
    iterations: int = 0  # model calls made by this process in the turn
    final_text: str = ""
    note: str = ""
    error: str = ""
    tool_calls: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def exit_reason(code: int) -> str:
    """The ``reason`` label of ``turns_failed_total`` for a failed turn's exit code."""
    return {EXIT_FAILED: "failed", EXIT_LEASE_LOST: "lease_lost", EXIT_CANCELLED: "cancelled"}.get(
        code, str(code)
    )


__all__ = [
    "EXIT_BUSY",
    "EXIT_CANCELLED",
    "EXIT_FAILED",
    "EXIT_LEASE_LOST",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "TurnOutcome",
    "exit_reason",
]
