"""Local mode and the operator take the same next action for every state of a task (``unicore.scheduling``).

A stored task (what Redis holds of it: the record's fields, the inbox, the lease, what it waits for from people,
whether its newest turn ended) is turned into local mode's observation as ``TaskStore.next_action`` does
(``unicore.store.scheduling_reads.observation_from``) and into the operator's as its reconcile does (a
``TaskSnapshot`` as ``read_snapshot`` fills it, then ``reconcile.observe``); both must run a turn, and deliver an owed
report, in the same states. tests/integration/test_scheduling_needs_turn.py reads the same states from a real Redis.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from unicore import scheduling
from unicore.scheduling import NextAction, Observation, Reason
from unicore.store import approvals
from unicore.store.approval_records import waiting_from_counters
from unicore.store.command_jobs import outstanding_count, states_of
from unicore.store.operator_state import LastTurn, TaskSnapshot
from unicore.store.scheduling_reads import observation_from
from unicore_operator import phases, reconcile
from unicore_operator.context import OperatorContext
from unicore_operator.phases import Phase, TaskObservation, decide_phase, delivers_owed_report, wants_turn_job
from unicore_operator.settings import OperatorSettings

INBOX_TYPES = ("user", "completion", "tool_result", approvals.WAKEUP_TYPE)
SETTINGS = OperatorSettings(redis_url="redis://unused:6379/0", namespaces=("ns",))
CTX = OperatorContext(settings=SETTINGS, redis=None, kube=None, store=None)  # type: ignore[arg-type]
# What the operator shows for each reason of the shared decision (no turn Job, no child working).
PHASE_OF = {
    Reason.FAILED: Phase.FAILED,
    Reason.SUSPENDED: Phase.SUSPENDED,
    Reason.TURN_RUNNING: Phase.RUNNING,
    Reason.QUEUED: Phase.PENDING,
    Reason.UNFINISHED_TURN: Phase.PENDING,
    Reason.WAITING_FOR_APPROVAL: Phase.WAITING_FOR_APPROVAL,
    Reason.WAITING_FOR_INPUT: Phase.WAITING_FOR_INPUT,
    Reason.WAITING_FOR_JOBS: Phase.WAITING_FOR_JOBS,
    Reason.NOTHING: Phase.IDLE,
}


@dataclass(frozen=True)
class StoredTask:
    """What Redis holds of a task that either side's decision reads."""

    status: str | None = "idle"  # the record's fields (None: absent)
    turns: int = 0
    report_id: str = ""
    suspended: str | None = None  # local mode's flag; on Kubernetes the same fact is spec.suspend
    last_turn_ended: bool = True  # of the newest turn, when there is one
    lease_held: bool = False
    inbox: tuple[str, ...] = ()  # the queued messages' types
    approvals_pending: int = 0  # the counters of what it waits for from people
    questions_pending: int = 0
    jobs: tuple[bool, ...] = ()  # its command Jobs (submit_job): whether each one's result came already

    def job_hashes(self) -> tuple[dict[str, str], dict[str, str]]:
        """``uc:{T}:cmdjobs`` and ``uc:{T}:opcmdjobs`` as HGETALL returns them."""
        requests = {str(n): json.dumps({"n": n, "command": "true"}) for n in range(1, len(self.jobs) + 1)}
        if self.jobs:
            requests["#next"] = str(len(self.jobs))
        done = {f"ended:{n}": "{}" for n, ended in enumerate(self.jobs, 1) if ended}
        return requests, done

    def record(self) -> dict[str, str | None]:
        return {"status": self.status, "turns": str(self.turns), "report_id": self.report_id,
                "suspended": self.suspended}

    def counters(self) -> list[str | None]:
        """As HMGET returns them (a counter never written is None)."""
        return [str(n) if n else None for n in (self.approvals_pending, self.questions_pending)]


stored_tasks = st.builds(
    StoredTask,
    status=st.sampled_from([None, "idle", "running"]),
    turns=st.integers(0, 3),
    report_id=st.sampled_from(["", "completion:ns/t:0"]),
    suspended=st.sampled_from([None, "0", "1"]),
    last_turn_ended=st.booleans(),
    lease_held=st.booleans(),
    inbox=st.lists(st.sampled_from(INBOX_TYPES), max_size=3).map(tuple),
    approvals_pending=st.integers(0, 2),
    questions_pending=st.integers(0, 2),
    jobs=st.lists(st.booleans(), max_size=2).map(tuple),
)


def local_observation(task: StoredTask) -> Observation:
    """As ``TaskStore.next_action`` observes the task (``scheduling_reads.read_observation``'s reads)."""
    requests, done = task.job_hashes()
    return observation_from(task.record(), queued=len(task.inbox), lease_held=task.lease_held,
                            waiting_counters=task.counters(), inbox_types=task.inbox,
                            last_turn_ended=task.last_turn_ended if task.turns else None,
                            jobs_outstanding=outstanding_count(list(requests), list(done)))


def local_action(task: StoredTask) -> NextAction:
    return scheduling.next_action(local_observation(task))


def operator_snapshot(task: StoredTask) -> TaskSnapshot:
    """As ``operator_state.read_snapshot`` fills it from the same keys (HGETALL leaves absent fields out)."""
    waiting = waiting_from_counters(task.counters())
    record = {name: value for name, value in task.record().items() if value is not None}
    last = LastTurn(number=task.turns - 1, started_at=1.0, ended_at=2.0 if task.last_turn_ended else None)
    return TaskSnapshot(
        exists=True, record=record, pending=len(task.inbox), lease_held=task.lease_held, turns=task.turns,
        last_turn=last if task.turns else None, waiting_for=waiting,
        inbox_wakes=approvals.wakes(waiting, task.inbox) if waiting is not None and task.inbox else True,
        command_jobs=tuple(states_of(*task.job_hashes())),
    )


def task_body(task: StoredTask, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "t", "namespace": "ns", "uid": "scheduling-agreement", "generation": 1},
            "spec": {"prompt": "go", "suspend": task.suspended == "1", **(spec or {})}}


def operator_observation(task: StoredTask, snap: TaskSnapshot | None = None, active: str | None = None,
                         children: list[dict[str, str]] | None = None,
                         body: dict[str, Any] | None = None) -> TaskObservation:
    return reconcile.observe(CTX, body or task_body(task), snap or operator_snapshot(task), active, children or [])


@settings(max_examples=600)
@given(stored_tasks)
def test_local_mode_and_the_operator_agree_on_the_turn_and_the_owed_report(task: StoredTask) -> None:
    local = local_action(task)
    obs = operator_observation(task)
    assert wants_turn_job(obs) == local.run_turn
    assert delivers_owed_report(obs) == local.deliver_report
    assert decide_phase(obs)[0] is PHASE_OF[local.reason]
    assert phases.next_action(obs) == local


@settings(max_examples=400)
@given(stored_tasks, st.sampled_from([None, "t-t1"]), st.integers(0, 5), st.booleans(),
       st.sampled_from(["Running", "Idle", "Failed", "WaitingForInput"]))
def test_what_only_the_operator_knows_holds_a_turn_back_and_never_starts_one(
        task: StoredTask, active: str | None, failed_attempts: int, invalid: bool, child_phase: str) -> None:
    """A turn Job already active, turns failed too often, an invalid spec, a child at work: never a turn that local
    mode would not run; an owed report goes whatever they are."""
    snap = dataclasses.replace(operator_snapshot(task), failed_attempts=failed_attempts)
    body = task_body(task, {"prompt": None} if invalid else None)
    obs = operator_observation(task, snap, active, [{"name": "c", "phase": child_phase}], body)
    local = local_action(task)
    if wants_turn_job(obs):
        assert local.run_turn
    assert delivers_owed_report(obs) == local.deliver_report
    if local.run_turn and not wants_turn_job(obs):
        assert active or obs.invalid_reason or failed_attempts > SETTINGS.max_turn_retries


def test_a_suspended_task_delivers_its_owed_report_and_runs_no_turn() -> None:
    """The one state where the two differed: local mode held a suspended task's owed report back until it was
    resumed, the operator delivered it. The report is of a turn that ended, which a crash must not hold back."""
    task = StoredTask(turns=1, report_id="completion:ns/t:0", suspended="1", inbox=("user",))
    assert local_action(task) == NextAction(run_turn=False, deliver_report=True, reason=Reason.SUSPENDED)
    obs = operator_observation(task)
    assert delivers_owed_report(obs) and not wants_turn_job(obs)
    assert decide_phase(obs)[0] is Phase.SUSPENDED


def test_an_owed_report_alone_runs_no_turn_and_a_held_lease_holds_it_back() -> None:
    owed = StoredTask(turns=1, report_id="completion:ns/t:0")
    assert local_action(owed) == NextAction(run_turn=False, deliver_report=True, reason=Reason.NOTHING)
    leased = dataclasses.replace(owed, lease_held=True, status="running")
    assert local_action(leased) == NextAction(run_turn=False, deliver_report=False, reason=Reason.TURN_RUNNING)
    assert not delivers_owed_report(operator_observation(leased))


def test_the_order_of_the_decision() -> None:
    assert scheduling.next_action(Observation(failed=True, suspended=True, queued=1)).reason is Reason.FAILED
    assert scheduling.next_action(Observation(suspended=True, lease_held=True)).reason is Reason.SUSPENDED
    assert scheduling.next_action(Observation(lease_held=True, queued=1)).reason is Reason.TURN_RUNNING
    assert scheduling.next_action(Observation(queued=1, unfinished_turn=True)).reason is Reason.QUEUED
    assert scheduling.next_action(Observation(unfinished_turn=True, waiting_for="approval")).run_turn
    waiting = Observation(queued=2, waiting_for="approval", queued_wakes=False)
    assert scheduling.next_action(waiting) == NextAction(False, False, Reason.WAITING_FOR_APPROVAL)
    assert scheduling.next_action(dataclasses.replace(waiting, queued_wakes=True)).run_turn
    assert scheduling.next_action(Observation(waiting_for="input")).reason is Reason.WAITING_FOR_INPUT
    assert scheduling.next_action(Observation()) == NextAction(False, False, Reason.NOTHING)


def test_messages_that_do_not_answer_a_waiting_task_wait_with_it_on_both_sides() -> None:
    completion = StoredTask(turns=1, inbox=("completion", "user"), approvals_pending=1)
    assert local_action(completion).reason is Reason.WAITING_FOR_APPROVAL
    assert operator_observation(completion).held_messages == 2
    answered = StoredTask(turns=1, inbox=("completion", "user"), questions_pending=1)
    assert local_action(answered).run_turn and wants_turn_job(operator_observation(answered))
