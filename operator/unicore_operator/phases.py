"""The AgentTask phase state machine and status summaries, as pure functions (see docs/operator.md).

    Pending   work is queued (inbox not empty, or an interrupted turn to finish) and no turn Job runs yet, or the
              turn Job's pod cannot start yet (FailedCreate, Unschedulable, Queued: Ready's reason says which)
    Running   a turn Job of the task is active
    WaitingForApproval  the last turn ended on a tool call that needs a person's approval (``spec.approval``), no turn
              runs and nothing queued wakes the task: no Job is started until someone approves or denies the call (or
              it times out: denied as expired)
    WaitingForInput  the last turn ended on an ``ask_user`` question, no turn runs and nothing queued wakes the task:
              the next user message is the answer
    WaitingForJobs  the last turn ended, nothing is queued, command Jobs it submitted (``submit_job``) have not ended:
              no turn runs until one's result comes
    Waiting   the last turn ended, nothing is queued, but children are still working
    Idle      nothing queued, no Job, all children settled (Idle or Failed)  -> condition Ready=True
    Suspended spec.suspend is true (the active Job was deleted, none is started)
    Failed    the spec is invalid, or turns failed more than UNICORE_MAX_TURN_RETRIES times in a row
    Archived  retention removed the task's idle tree from Redis (operator/retention.py sets it; never decided here:
              the reconcile leaves a task without a Redis record alone)

Precedence: Failed > Suspended > Running > Pending > WaitingForApproval > WaitingForInput > WaitingForJobs > Waiting >
Idle. Whether
a turn runs (Pending with no Job yet) and whether an owed report is delivered is ``unicore.scheduling``'s decision,
the one local mode takes too; the operator adds its turn Jobs (Running, or Pending while the Job's pod cannot start)
and the children (Waiting).
- A turn that runs, and queued work that wakes the task (a decision's wake-up, a user message answering a question,
  an interrupted turn), come before the wait: the task's turn is what it waits for then, not a person.
- While a task waits for people, other queued messages (a child's report, a message sent while an approval waits)
  do not make it Pending: they wait in the inbox until the decision (``unicore.store.approvals.wakes``), and the
  message says how many wait.
- A person's wait comes before the children's: the task cannot go on without the answer, whatever its children do,
  and it is the one that needs acting on. An approval comes before a question when a turn left both.
- Suspended comes first as before: a decision made meanwhile is kept, and its turn runs once resumed.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from unicore import scheduling
from unicore.api.turn_numbers import shown_turn
from unicore.store.operator_state import LastTurn
from unicore.store.task_views import TaskView

from unicore_operator import names
from unicore_operator.watchdog.views import PodView

LAST_RESPONSE_MAX = 1024
SUMMARY_MAX = 4096


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    WAITING_FOR_APPROVAL = "WaitingForApproval"
    WAITING_FOR_INPUT = "WaitingForInput"
    WAITING_FOR_JOBS = "WaitingForJobs"
    WAITING = "Waiting"
    IDLE = "Idle"
    SUSPENDED = "Suspended"
    FAILED = "Failed"
    ARCHIVED = "Archived"


SETTLED_PHASES = frozenset({Phase.IDLE, Phase.FAILED})
HUMAN_PHASES = frozenset({Phase.WAITING_FOR_APPROVAL, Phase.WAITING_FOR_INPUT})
APPROVAL, INPUT = "approval", "input"  # HumanWait.kind
WAIT_TEXT_MAX = 200  # of a tool input or a question in the status message


@dataclass(frozen=True)
class HumanWait:
    """What a task waits for from a human (``unicore.store.approvals.waiting_for``, in the operator's terms): the
    tool calls awaiting a decision (``kind`` "approval": ``calls`` of them, the first one's ``call_id`` and
    ``tool``), or an ``ask_user`` question (``kind`` "input": its ``call_id`` and ``question``)."""

    kind: str
    call_id: str = ""
    tool: str = ""
    question: str = ""
    calls: int = 1
    since: float = 0.0  # when the (oldest) call started waiting, unix time

    def describe(self, held: int = 0) -> str:
        """One line for the status message and the Ready condition (the model's text is clipped here; the plugin
        escapes it when it prints); ``held``: messages queued meanwhile, which wait for the answer."""
        queued = f"; {held} message(s) queued until then" if held else ""
        if self.kind == INPUT:
            question = truncate(self.question, WAIT_TEXT_MAX) or "(the question is not readable)"
            return f"waiting for an answer (kubectl agenttask send) to: {question}{queued}"
        what = f"tool {self.tool} (call {self.call_id})" if self.call_id else "a tool call"
        more = f" and {self.calls - 1} more call(s)" if self.calls > 1 else ""
        return f"waiting for approval of {what}{more}: kubectl agenttask approve/deny{queued}"

    def status(self) -> dict[str, Any]:
        """``status.waitingFor``: small and bounded (the plugin's tree and describe read it)."""
        out: dict[str, Any] = {"kind": self.kind, "callId": self.call_id}
        if self.kind == INPUT:
            out["question"] = truncate(self.question, WAIT_TEXT_MAX)
        else:
            out["tool"] = self.tool
            out["calls"] = self.calls
        since = _iso(self.since)
        if since:
            out["since"] = since
        return out


@dataclass(frozen=True)
class TaskObservation:
    """Everything the phase depends on, gathered from the indexes and one pipelined Redis read."""

    suspended: bool = False
    invalid_reason: str | None = None
    failed_attempts: int = 0
    max_retries: int = 3
    last_failure: str | None = None
    active_job: str | None = None
    lease_held: bool = False
    pending_messages: int = 0
    unfinished_turn: bool = False  # the record says "running" but no process holds the lease (interrupted turn)
    children_phases: dict[str, str] = field(default_factory=dict)
    # Why the active Job's turn cannot start yet: (reason, message), e.g. ("FailedCreate", "Error creating: ...")
    # from the Job controller's Event on the Job, ("Unschedulable", "0/2 nodes are available: ...") from its pod.
    job_waiting: tuple[str, str] | None = None
    # What the task waits for from a human (a pending approval, an ask_user question), when it does; then
    # ``pending_messages`` counts only queued messages that give it a turn (a decision's wake-up, an answer), and
    # ``held_messages`` the others, which wait in the inbox until then (``unicore.store.approvals.wakes``).
    human: HumanWait | None = None
    held_messages: int = 0
    owes_report: bool = False  # a turn ended with a report for the parent that has not reached it
    jobs_outstanding: int = 0  # command Jobs (submit_job) whose result has not come yet


def scheduling_observation(obs: TaskObservation) -> scheduling.Observation:
    """What ``unicore.scheduling`` reads, from the operator's observation (its turn Jobs and children aside)."""
    return scheduling.Observation(
        failed=bool(obs.invalid_reason) or obs.failed_attempts > obs.max_retries,
        suspended=obs.suspended,
        lease_held=obs.lease_held,
        queued=obs.pending_messages + (obs.held_messages if obs.human is not None else 0),  # held: for people only
        waiting_for=None if obs.human is None else "input" if obs.human.kind == INPUT else "approval",
        queued_wakes=obs.pending_messages > 0,  # the messages queued while it waits that give it a turn
        unfinished_turn=obs.unfinished_turn,
        owes_report=obs.owes_report,
        jobs_outstanding=obs.jobs_outstanding,
    )


def next_action(obs: TaskObservation) -> scheduling.NextAction:
    """The shared decision for this observation: does a turn run now, is an owed report delivered now, and why."""
    return scheduling.next_action(scheduling_observation(obs))


# What a turn Job whose pod does not run yet is doing, by the reason it waits for.
WAITING_TEXT = {"FailedCreate": "cannot create its pod", "Unschedulable": "is waiting to be scheduled",
                "Queued": "is queued"}


def scheduling_wait(job_queued: bool, pods: Iterable[PodView], queue: str = "") -> tuple[str, str] | None:
    """Why the active turn Job's turn is not running yet, from the Job and its pods: (reason, message), or None when
    a pod of it runs (or ran), or nothing says it waits. A queued Job is held suspended by its queue (Kueue keeps
    ``spec.suspend`` true until the LocalQueue ``queue`` admits it; the operator never releases it); a Pending pod
    with PodScheduled=False waits for resources (the scheduler's reason and message)."""
    if job_queued:
        if queue:
            return "Queued", f"the Job is suspended until LocalQueue {queue} admits it"
        return "Queued", "the Job is suspended (spec.suspend) until something outside the operator releases it"
    live = [pod for pod in pods if not pod.deleting]
    if any(pod.phase != "Pending" for pod in live):
        return None
    for pod in live:
        if pod.unschedulable_reason:
            return pod.unschedulable_reason, pod.unschedulable_message or "not scheduled yet"
    return None


def decide_phase(obs: TaskObservation) -> tuple[Phase, str]:
    """(phase, human-readable message) for an observation."""
    action = next_action(obs)
    if action.reason is scheduling.Reason.FAILED:
        if obs.invalid_reason:
            return Phase.FAILED, obs.invalid_reason
        reason = obs.last_failure or "turn failed"
        return Phase.FAILED, f"turn failed {obs.failed_attempts} times in a row; last: {reason}"
    if action.reason is scheduling.Reason.SUSPENDED:
        queued = f"; {obs.pending_messages} message(s) queued" if obs.pending_messages else ""
        return Phase.SUSPENDED, f"suspended{queued}"
    # a retry says what happened to the attempt before it (the Job's failure and how its container ended)
    retry = f" (retry {obs.failed_attempts} after: {obs.last_failure})" if obs.failed_attempts else ""
    if obs.active_job:
        if obs.job_waiting is not None and not obs.lease_held:
            reason, detail = obs.job_waiting
            what = WAITING_TEXT.get(reason, "is waiting for its pod to start")
            return Phase.PENDING, f"turn Job {obs.active_job} {what}: {reason}: {detail}"
        return Phase.RUNNING, f"turn Job {obs.active_job} is running{retry}"
    if action.reason is scheduling.Reason.TURN_RUNNING:
        return Phase.RUNNING, "a turn process holds the task's lease"
    if action.run_turn:
        what = f"{obs.pending_messages} message(s) queued" if obs.pending_messages else "an interrupted turn"
        return Phase.PENDING, f"{what}{retry}"
    if obs.human is not None and action.reason in scheduling.WAITING_FOR_PEOPLE:
        phase = Phase.WAITING_FOR_INPUT if obs.human.kind == INPUT else Phase.WAITING_FOR_APPROVAL
        return phase, obs.human.describe(obs.held_messages)
    if obs.jobs_outstanding and action.reason is scheduling.Reason.WAITING_FOR_JOBS:
        return Phase.WAITING_FOR_JOBS, f"waiting for {obs.jobs_outstanding} command Job(s) (submit_job) to end"
    working = sorted(name for name, phase in obs.children_phases.items() if phase not in SETTLED_PHASES)
    if working:
        return Phase.WAITING, f"waiting for {len(working)} child task(s): {', '.join(working[:5])}"
    return Phase.IDLE, "nothing pending"


def wants_turn_job(obs: TaskObservation) -> bool:
    """May the operator start a turn Job now? (the shared decision runs a turn, and no Job of the task is active)."""
    return next_action(obs).run_turn and not obs.active_job


def delivers_owed_report(obs: TaskObservation) -> bool:
    """Does the operator deliver the task's owed report now? (the shared decision: whenever no turn process holds the
    lease, an active Job whose pod has not taken it included)."""
    return next_action(obs).deliver_report


def ready_reason(obs: TaskObservation) -> str | None:
    """The Ready condition's reason when it is more specific than the phase's: why the active Job's pod does not
    run (e.g. FailedCreate); None = the phase's own reason."""
    if obs.active_job and obs.job_waiting is not None and not obs.lease_held:
        return obs.job_waiting[0]
    return None


# The longest wait before a failed turn's retry, whatever its base (UNICORE_TURN_RETRY_BACKOFF_SECONDS, at most this).
RETRY_DELAY_CAP_SECONDS = 300.0


def retry_delay(failed_attempts: int, base_seconds: float, cap_seconds: float = RETRY_DELAY_CAP_SECONDS) -> float:
    """Exponential backoff before retry ``failed_attempts`` (1 -> base, 2 -> 2*base, ...), capped."""
    if failed_attempts <= 0:
        return 0.0
    # 2**1023 is the largest power of two a float holds: a larger one raised OverflowError (from 1025 failures in a
    # row, which UNICORE_MAX_TURN_RETRIES allows); past it the product is the cap (or inf, capped) anyway
    return float(min(cap_seconds, base_seconds * (2 ** min(failed_attempts - 1, 1023))))


def truncate(text: str | None, limit: int) -> str:
    if not text:
        return ""
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "\u2026"


def _iso(timestamp: Any) -> str | None:
    try:
        value = float(timestamp)
    except (TypeError, ValueError):
        return None
    if value <= 0:
        return None
    return datetime.datetime.fromtimestamp(value, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_condition(phase: Phase, message: str, generation: int | None, previous: list[dict[str, Any]] | None,
                    now: str, reason: str | None = None) -> dict[str, Any]:
    """The `Ready` condition: True when Idle (nothing pending and all children settled). ``reason`` overrides the
    phase's reason (see :func:`ready_reason`)."""
    status = "True" if phase is Phase.IDLE else "False"
    reason = reason or {
        Phase.IDLE: "Idle",
        Phase.PENDING: "TurnPending",
        Phase.RUNNING: "TurnRunning",
        Phase.WAITING_FOR_APPROVAL: "WaitingForApproval",
        Phase.WAITING_FOR_INPUT: "WaitingForInput",
        Phase.WAITING_FOR_JOBS: "WaitingForJobs",
        Phase.WAITING: "WaitingForChildren",
        Phase.SUSPENDED: "Suspended",
        Phase.FAILED: "Failed",
        Phase.ARCHIVED: "Archived",
    }[phase]
    old = next((c for c in previous or [] if c.get("type") == "Ready"), None)
    transition = old.get("lastTransitionTime") if old and old.get("status") == status else now
    condition: dict[str, Any] = {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": truncate(message, 1024),
        "lastTransitionTime": transition or now,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def origin_of(body: dict[str, Any]) -> dict[str, str] | None:
    """What started AgentTask ``body`` when it was neither a person nor its parent (issue 31): an AgentSchedule (its
    scheduled time), an AgentTrigger (the event's id) or an A2A caller (the Agent called, the caller); None
    otherwise. From the labels and annotations their creators set."""
    meta = body.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    found: dict[str, str] = {}
    if labels.get(names.SCHEDULE_LABEL):
        found = {"kind": names.SCHEDULE_KIND, "name": str(labels[names.SCHEDULE_LABEL]),
                 "at": str(annotations.get(names.SCHEDULED_AT_ANNOTATION) or "")}
    elif labels.get(names.TRIGGER_LABEL):
        found = {"kind": names.TRIGGER_KIND, "name": str(labels[names.TRIGGER_LABEL]),
                 "id": str(annotations.get(names.EVENT_ID_ANNOTATION) or "")}
    elif labels.get(names.A2A_AGENT_LABEL):
        found = {"kind": "A2A", "name": str(labels[names.A2A_AGENT_LABEL]),
                 "caller": str(annotations.get(names.A2A_CALLER_ANNOTATION) or "")}
    return {key: value for key, value in found.items() if value} or None


def build_status(
    *,
    phase: Phase,
    message: str,
    record: TaskView | None,
    last_turn: LastTurn | None,
    active_job: str | None,
    children: list[dict[str, str]],
    depth: int,
    tree_path: str,
    failed_attempts: int,
    generation: int | None,
    previous: dict[str, Any] | None,
    now: str,
    reason: str | None = None,
    human: HumanWait | None = None,
    jobs: list[dict[str, Any]] | None = None,
    origin: dict[str, str] | None = None,
    trace: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The whole ``status`` of an AgentTask from its phase and the Redis task record (small, bounded fields);
    ``waitingFor`` says what a task in a human phase waits for (absent otherwise)."""
    rec = record or TaskView(id="", model="")
    status: dict[str, Any] = {
        "phase": str(phase),
        "message": truncate(message, 1024),
        "depth": depth,
        "treePath": tree_path,
        "turns": rec.turns,
        "iterations": rec.iterations,
        "tokens": rec.total_tokens,
        "inputTokens": rec.input_tokens,
        "outputTokens": rec.output_tokens,
        "activeJob": active_job or "",
        "failedAttempts": failed_attempts,
        "lastResponse": truncate(rec.last_response, LAST_RESPONSE_MAX),
        "children": children,
        "conditions": [ready_condition(phase, message, generation, (previous or {}).get("conditions"), now, reason)],
    }
    if origin:
        status["origin"] = origin
    if trace:
        status["trace"] = trace
    if jobs:
        status["jobs"] = jobs
    elif (previous or {}).get("jobs"):
        status["jobs"] = None
    if human is not None and phase in HUMAN_PHASES:
        status["waitingFor"] = human.status()
    elif (previous or {}).get("waitingFor"):
        status["waitingFor"] = None  # the status is merge-patched: null removes the field
    if rec.model:
        status["model"] = rec.model
    if generation is not None:
        status["observedGeneration"] = generation
    if last_turn:
        # As users count turns (the Job <task>-tN, the Events, the transcript), not Redis's index of the turn.
        lt: dict[str, Any] = {"number": shown_turn(last_turn.number)}
        started, ended = _iso(last_turn.started_at), _iso(last_turn.ended_at)
        if started:
            lt["startedAt"] = started
        if ended:
            lt["endedAt"] = ended
        if last_turn.summary:
            lt["summary"] = truncate(last_turn.summary, SUMMARY_MAX)
        status["lastTurn"] = lt
    return status


def status_changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """True when ``new`` differs from ``old`` in anything but condition timestamps."""
    def strip(status: dict[str, Any] | None) -> dict[str, Any]:
        data = {key: value for key, value in (status or {}).items() if key in new}
        data["conditions"] = [
            {k: v for k, v in cond.items() if k != "lastTransitionTime"} for cond in data.get("conditions") or []
        ]
        return data

    return strip(old) != strip(new)
