"""The AgentTask phase state machine and status summaries (pure functions)."""

from __future__ import annotations

import pytest
from unicore.api.spec import LimitsSpec, SpecInvalid, parse_spec, to_task_spec
from unicore.store.operator_state import LastTurn
from unicore.store.task_views import view_from_mapping
from unicore_operator.indexes import job_outcome
from unicore_operator.phases import (
    RETRY_DELAY_CAP_SECONDS,
    Phase,
    TaskObservation,
    build_status,
    decide_phase,
    ready_reason,
    retry_delay,
    scheduling_wait,
    status_changed,
    wants_turn_job,
)
from unicore_operator.watchdog.views import PodView


def test_precedence() -> None:
    assert decide_phase(TaskObservation(invalid_reason="bad", suspended=True))[0] is Phase.FAILED
    assert decide_phase(TaskObservation(failed_attempts=4, max_retries=3, suspended=True))[0] is Phase.FAILED
    assert decide_phase(TaskObservation(failed_attempts=3, max_retries=3, pending_messages=1))[0] is Phase.PENDING
    assert decide_phase(TaskObservation(suspended=True, active_job="j", pending_messages=2))[0] is Phase.SUSPENDED
    assert decide_phase(TaskObservation(active_job="j", pending_messages=2))[0] is Phase.RUNNING
    assert decide_phase(TaskObservation(lease_held=True))[0] is Phase.RUNNING
    assert decide_phase(TaskObservation(pending_messages=1, children_phases={"c": "Running"}))[0] is Phase.PENDING
    assert decide_phase(TaskObservation(children_phases={"c": "Running", "d": "Idle"}))[0] is Phase.WAITING
    assert decide_phase(TaskObservation(children_phases={"c": "Failed", "d": "Idle"}))[0] is Phase.IDLE
    assert decide_phase(TaskObservation())[0] is Phase.IDLE


def test_failed_message_names_the_reason() -> None:
    phase, message = decide_phase(TaskObservation(failed_attempts=2, max_retries=1, last_failure="DeadlineExceeded"))
    assert phase is Phase.FAILED and "DeadlineExceeded" in message and "2 times" in message


def test_turn_job_only_when_pending() -> None:
    assert wants_turn_job(TaskObservation(pending_messages=1))
    assert not wants_turn_job(TaskObservation(pending_messages=1, suspended=True))
    assert not wants_turn_job(TaskObservation(pending_messages=1, active_job="j"))
    assert not wants_turn_job(TaskObservation(pending_messages=1, lease_held=True))
    assert not wants_turn_job(TaskObservation(pending_messages=1, invalid_reason="x"))
    assert not wants_turn_job(TaskObservation())


def test_retry_delay_backs_off_and_caps() -> None:
    assert [retry_delay(n, 5) for n in range(5)] == [0, 5, 10, 20, 40]
    assert retry_delay(20, 5, cap_seconds=60) == 60


def test_ready_condition_and_bounded_fields() -> None:
    record = view_from_mapping({"id": "demo", "turns": "2", "iterations": "5", "total_tokens": "120",
                                "input_tokens": "100", "output_tokens": "20", "last_response": "x" * 5000,
                                "model": "scripted"})
    status = build_status(phase=Phase.IDLE, message="nothing pending", record=record,
                          last_turn=LastTurn(number=2, started_at=1.7e9, ended_at=1700000005.5, summary="s"),
                          active_job=None, children=[{"name": "c", "phase": "Idle"}], depth=0, tree_path="demo",
                          failed_attempts=0, generation=3, previous=None, now="2026-01-01T00:00:00Z")
    assert status["turns"] == 2 and status["tokens"] == 120 and status["iterations"] == 5
    assert len(status["lastResponse"]) == 1024
    # Redis's turn 2 (the third) is shown as turn 3, the number of its Job <task>-t3
    assert status["lastTurn"]["number"] == 3 and status["lastTurn"]["endedAt"].endswith("Z")
    ready = status["conditions"][0]
    assert ready["type"] == "Ready" and ready["status"] == "True" and ready["observedGeneration"] == 3
    running = build_status(phase=Phase.RUNNING, message="m", record=record, last_turn=None, active_job="j",
                           children=[], depth=0, tree_path="demo", failed_attempts=0, generation=3,
                           previous=status, now="2026-01-01T00:01:00Z")
    assert running["conditions"][0]["status"] == "False"
    assert running["conditions"][0]["reason"] == "TurnRunning"
    assert running["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:01:00Z"
    again = build_status(phase=Phase.IDLE, message="nothing pending", record=record,
                         last_turn=LastTurn(number=2, started_at=1.7e9, ended_at=1700000005.5, summary="s"),
                         active_job=None, children=[{"name": "c", "phase": "Idle"}], depth=0, tree_path="demo",
                         failed_attempts=0, generation=3, previous=status, now="2026-01-01T00:09:00Z")
    assert again["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert not status_changed(status, again)
    assert status_changed(status, running)


def test_job_outcome() -> None:
    assert job_outcome({}) == ("running", "")
    assert job_outcome({"conditions": [{"type": "Complete", "status": "True"}]}) == ("succeeded", "")
    outcome, reason = job_outcome({"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                                                  "message": "too slow"}]})
    assert outcome == "failed" and reason == "DeadlineExceeded: too slow"
    assert job_outcome({"conditions": [{"type": "Failed", "status": "False"}]}) == ("running", "")


def test_spec_validation_beyond_cel() -> None:
    with pytest.raises(SpecInvalid, match="prompt is required"):
        parse_spec({"model": "scripted"})
    with pytest.raises(SpecInvalid, match="script"):
        parse_spec({"prompt": "x", "script": {"tasks": {"demo": [{"bogus": 1}]}}})
    assert parse_spec({"parentRef": {"name": "p"}}).parent_ref is not None


def test_child_inherits_model_script_and_limits_from_the_parent_record() -> None:
    parent = view_from_mapping({"id": "ns/demo", "model": "bedrock:claude", "script": '{"default": "ok"}',
                                "limits": '{"max_depth": 5, "max_children": 2}'})
    spec = parse_spec({"parentRef": {"name": "demo"}, "prompt": "do", "limits": {"maxChildren": 1}})
    task_spec = to_task_spec("ns", "demo-a", spec, parent)
    assert task_spec.parent == "ns/demo"
    assert task_spec.model == "bedrock:claude"
    assert task_spec.script == {"default": "ok"}
    assert task_spec.limits.max_depth == 5 and task_spec.limits.max_children == 1
    assert LimitsSpec().set_fields() == {}


def test_an_interrupted_turn_is_work_to_do() -> None:
    assert decide_phase(TaskObservation(unfinished_turn=True))[0] is Phase.PENDING
    assert wants_turn_job(TaskObservation(unfinished_turn=True))
    assert not wants_turn_job(TaskObservation(unfinished_turn=True, suspended=True))


def test_a_job_that_cannot_create_its_pod_is_pending_with_the_events_reason() -> None:
    # issue 10 #19: not "Running: turn Job X is running" while the Job controller fails to create the pod
    message = 'Error creating: pods "demo-t1-x" is forbidden: error looking up service account team/unicore-agent'
    obs = TaskObservation(active_job="demo-t1", pending_messages=1, job_waiting=("FailedCreate", message))
    phase, text = decide_phase(obs)
    assert phase is Phase.PENDING
    assert text == f"turn Job demo-t1 cannot create its pod: FailedCreate: {message}"
    assert not wants_turn_job(obs)  # a Job exists: no second one
    assert ready_reason(obs) == "FailedCreate"
    status = build_status(phase=phase, message=text, record=None, last_turn=None, active_job="demo-t1", children=[],
                          depth=0, tree_path="demo", failed_attempts=0, generation=1, previous=None,
                          now="2026-01-01T00:00:00Z", reason=ready_reason(obs))
    assert status["conditions"][0]["reason"] == "FailedCreate" and message in status["conditions"][0]["message"]
    # once a turn process holds the lease, the turn runs whatever an old Event said
    running = TaskObservation(active_job="demo-t1", lease_held=True, job_waiting=("FailedCreate", message))
    assert decide_phase(running)[0] is Phase.RUNNING and ready_reason(running) is None


def test_a_turn_waiting_for_a_gpu_is_pending_with_the_schedulers_reason_not_running() -> None:
    # issue 10 #16: the scheduler's PodScheduled=False reason/message, not "turn Job X is running"
    reason = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint."
    waiting = PodView(namespace="team", name="demo-t1-x", job_name="demo-t1", phase="Pending",
                      unschedulable_reason="Unschedulable", unschedulable_message=reason)
    assert scheduling_wait(False, [waiting]) == ("Unschedulable", reason)
    obs = TaskObservation(active_job="demo-t1", job_waiting=scheduling_wait(False, [waiting]))
    assert decide_phase(obs) == (Phase.PENDING, f"turn Job demo-t1 is waiting to be scheduled: Unschedulable: {reason}")
    assert ready_reason(obs) == "Unschedulable" and not wants_turn_job(obs)
    # a Job held by its queue (Kueue suspends it) is queued
    queued = scheduling_wait(True, [])
    assert queued is not None and queued[0] == "Queued"
    assert decide_phase(TaskObservation(active_job="demo-t1", job_waiting=queued))[1].startswith(
        "turn Job demo-t1 is queued: Queued: ")
    # scheduled (a pod runs), or no reason reported yet: the turn is running
    started = PodView(namespace="team", name="demo-t1-x", job_name="demo-t1", phase="Running")
    assert scheduling_wait(False, [started]) is None
    assert scheduling_wait(False, [PodView(namespace="team", name="demo-t1-x", job_name="demo-t1")]) is None


def test_the_retry_delay_of_a_very_long_failure_chain_is_the_cap() -> None:
    """Failure counts past 1025 made 2**(n-1) too large for a float (OverflowError in the reconcile)."""
    for failures in (1025, 1026, 5000):
        assert retry_delay(failures, 5.0) == RETRY_DELAY_CAP_SECONDS
    assert retry_delay(5000, 0.0) == 0.0
