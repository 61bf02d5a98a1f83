"""What a task does next: one pure decision over an observation of the task, for local mode and the operator alike.

Local mode's supervisor (``TaskStore.next_action``, read by ``unicore.store.scheduling_reads``) and the operator's
reconcile (``unicore_operator.phases``, from its snapshot) both ask :func:`next_action` whether a turn runs now and
whether a report the task owes its parent is delivered now, so the two cannot drift apart
(tests/unit/test_scheduling_agreement.py). What only one of them knows stays with it, on top of this answer: the
operator's turn Jobs (one already active, a retry's backoff) and phase names, the supervisor's own processes and its
batching of child completions.

The order (the operator's phases follow it): a task that cannot run (failed) or is suspended runs no turn; a held
lease means a turn runs already; queued work that gives the task a turn (a message, or a turn left unfinished) runs
one; otherwise it waits for people (an approval before a question), for its command Jobs, or has nothing to do.
Queued messages do not wake a task that waits for people unless one of them answers
(``unicore.store.approvals.wakes``): they wait in the inbox.

An owed report (its turn ended, its process died before the report reached the parent) is delivered whenever no
turn process holds the lease, suspended or failed alike: it is the result of a turn that already ended, which a
crash must not hold back, and delivering it is no turn (who carries it out: ``unicore.launch.local``, the
operator's reconcile).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from unicore.store.approval_records import PendingKind


@dataclass(frozen=True)
class Observation:
    """The facts of one task that the decision reads, however they were gathered."""

    failed: bool = False  # it cannot run (operator: invalid spec, or turns failed too often in a row)
    suspended: bool = False
    lease_held: bool = False  # a turn process holds the task's lease
    queued: int = 0  # messages in the inbox
    waiting_for: PendingKind | None = None  # a tool call's approval, or an answer to a question
    queued_wakes: bool = True  # while it waits for people: a queued message answers them (a decision, a reply)
    unfinished_turn: bool = False  # a turn started and never ended (its process died or was stopped)
    owes_report: bool = False  # a turn ended with a report for the parent that has not reached it
    jobs_outstanding: int = 0  # command Jobs it submitted whose result has not come yet (store.command_jobs)


class Reason(StrEnum):
    """Why the task does what :class:`NextAction` says (one per branch of the order above)."""

    FAILED = "failed"
    SUSPENDED = "suspended"
    TURN_RUNNING = "turn-running"
    QUEUED = "queued"
    UNFINISHED_TURN = "unfinished-turn"
    WAITING_FOR_APPROVAL = "waiting-for-approval"
    WAITING_FOR_INPUT = "waiting-for-input"
    WAITING_FOR_JOBS = "waiting-for-jobs"
    NOTHING = "nothing"


WAITING_FOR_PEOPLE = frozenset({Reason.WAITING_FOR_APPROVAL, Reason.WAITING_FOR_INPUT})


@dataclass(frozen=True)
class NextAction:
    """Run a turn now; deliver the owed report now (both may hold: the report goes first); and why."""

    run_turn: bool
    deliver_report: bool
    reason: Reason


def turn_unfinished(status: str | None, last_turn_ended: bool | None) -> bool:
    """A turn started and did not end: the task record's ``status`` still says running (taking the lease sets it,
    letting go of the lease sets it idle), or the newest turn (None: there is none) has no end. Whether a process
    still runs it is the lease's to say."""
    return status == "running" or last_turn_ended is False


def runnable(obs: Observation) -> bool:
    """Queued messages give the task a turn now."""
    return obs.queued > 0 and (obs.waiting_for is None or obs.queued_wakes)


def next_action(obs: Observation) -> NextAction:
    """What the task does next (see the module docstring for the order)."""
    report = obs.owes_report and not obs.lease_held
    if obs.failed:
        return NextAction(False, report, Reason.FAILED)
    if obs.suspended:
        return NextAction(False, report, Reason.SUSPENDED)
    if obs.lease_held:
        return NextAction(False, False, Reason.TURN_RUNNING)
    if runnable(obs):
        return NextAction(True, report, Reason.QUEUED)
    if obs.unfinished_turn:
        return NextAction(True, report, Reason.UNFINISHED_TURN)
    if obs.waiting_for == "approval":
        return NextAction(False, report, Reason.WAITING_FOR_APPROVAL)
    if obs.waiting_for == "input":
        return NextAction(False, report, Reason.WAITING_FOR_INPUT)
    if obs.jobs_outstanding:
        return NextAction(False, report, Reason.WAITING_FOR_JOBS)
    return NextAction(False, report, Reason.NOTHING)


__all__ = ["WAITING_FOR_PEOPLE", "NextAction", "Observation", "Reason", "next_action", "runnable", "turn_unfinished"]
