"""Ended turns (pure parts): which pod events mean a turn process is gone, and the Event every ended Job posts."""

from __future__ import annotations

from typing import Any

from unicore_operator.phases import Phase, TaskObservation, decide_phase
from unicore_operator.turn_ends import (
    container_ends,
    ended_turn_pod,
    existing_job_state,
    job_end_event,
    pod_job,
    pod_moves_phase,
)
from unicore_operator.watchdog.views import PodView, container_end, pod_view


def pod(phase: str, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "demo-t1-abcde", "annotations": {"unicore.dev/task-id": "team/demo"}, **meta},
            "status": {"phase": phase}}


def test_a_pod_that_ended_or_is_gone_names_its_task_and_itself() -> None:
    assert ended_turn_pod(pod("Failed"), "MODIFIED") == (("team", "demo"), "demo-t1-abcde")
    assert ended_turn_pod(pod("Succeeded"), "MODIFIED") == (("team", "demo"), "demo-t1-abcde")
    assert ended_turn_pod(pod("Running"), "DELETED") == (("team", "demo"), "demo-t1-abcde")


def test_a_live_pod_even_one_being_deleted_has_not_ended() -> None:
    # a pod with a deletionTimestamp still runs its process (SIGTERM: the turn stops at a safe point and releases)
    assert ended_turn_pod(pod("Running", deletionTimestamp="2026-01-01T00:00:00Z"), "MODIFIED") is None
    assert ended_turn_pod(pod("Pending"), "ADDED") is None
    assert ended_turn_pod({"metadata": {"name": "x"}, "status": {"phase": "Failed"}}, "MODIFIED") is None


def test_every_ended_job_posts_one_event() -> None:
    assert job_end_event("demo-t1", 1, "succeeded", "", 0, 0, 4) == (
        "Normal", "TurnEnded", "turn 1: Job demo-t1 finished")
    kind, reason, message = job_end_event("demo-t1", 1, "failed", "BackoffLimitExceeded", 2, 2, 4) or ("", "", "")
    assert (kind, reason) == ("Warning", "TurnFailed")
    assert "turn 1: Job demo-t1 failed (BackoffLimitExceeded)" in message and "failure 2 of 4" in message
    kind, reason, message = job_end_event("demo-t1-r1", 1, "deleted", "", 0, 0, 4) or ("", "", "")
    assert (kind, reason) == ("Warning", "TurnJobDeleted") and "deleted before it finished" in message
    # a Job without its turn label (never the operator's own) is named by the Job alone
    assert job_end_event("odd", 0, "succeeded", "", 0, 0, 4) == ("Normal", "TurnEnded", "turn Job odd finished")


def test_a_failed_job_the_watchdog_counted_first_still_posts_its_event_but_a_repeat_does_not() -> None:
    event = job_end_event("demo-t1", 1, "failed", "BackoffLimitExceeded", -2, 1, 4)
    assert event is not None and event[1] == "TurnFailed" and "counted when the watchdog reaped it 1 of 4" in event[2]
    assert job_end_event("demo-t1", 1, "failed", "BackoffLimitExceeded", -1, 1, 4) is None
    assert job_end_event("demo-t1", 1, "succeeded", "", -1, 0, 4) is None


def test_a_job_that_answered_409_runs_only_if_it_has_not_ended() -> None:
    # issue 10 #15: an existing Job of the wanted name that has finished is no running turn
    failed = {"metadata": {"name": "demo-t1"},
              "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}
    complete = {"metadata": {"name": "demo-t1"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert existing_job_state(failed) == "ended"
    assert existing_job_state(complete) == "ended"
    assert existing_job_state({"metadata": {"name": "demo-t1"}, "status": {"active": 1}}) == "running"
    assert existing_job_state({"metadata": {"name": "demo-t1", "deletionTimestamp": "2026-01-01T00:00:00Z"},
                               "status": {}}) == "deleting"
    assert existing_job_state(None) == "gone"


def test_a_turn_pod_names_its_task_and_job() -> None:
    body = {"metadata": {"name": "demo-t1-abcde", "annotations": {"unicore.dev/task-id": "team/demo"},
                         "labels": {"batch.kubernetes.io/job-name": "demo-t1"}}}
    assert pod_job(body) == (("team", "demo"), "demo-t1")
    assert pod_job({"metadata": {"name": "x", "labels": {"job-name": "j"}}}) is None


def test_a_pod_moves_the_phase_when_it_starts_or_starts_waiting_for_resources() -> None:
    waiting = PodView(namespace="team", name="demo-t1-x", job_name="demo-t1", phase="Pending",
                      unschedulable_reason="Unschedulable", unschedulable_message="0/2 nodes are available")
    shown_running = {"phase": "Running", "conditions": [{"type": "Ready", "reason": "TurnRunning"}]}
    shown_waiting = {"phase": "Pending", "conditions": [{"type": "Ready", "reason": "Unschedulable"}]}
    assert pod_moves_phase(waiting, shown_running)
    assert not pod_moves_phase(waiting, shown_waiting)
    started = PodView(namespace="team", name="demo-t1-x", job_name="demo-t1", phase="Running")
    assert pod_moves_phase(started, shown_waiting)
    assert not pod_moves_phase(started, shown_running)


def terminated_pod(job: str, reason: str, code: int) -> dict[str, Any]:
    return {"metadata": {"name": f"{job}-x1y2z", "labels": {"job-name": job}},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "turn", "state": {"terminated": {"reason": reason, "exitCode": code}}}]}}


def test_a_failed_turn_pod_says_how_its_container_ended() -> None:
    """The Job's Failed condition says only BackoffLimitExceeded; the pod says OOMKilled or killed by a signal."""
    assert pod_view(terminated_pod("demo-t1", "OOMKilled", 137)).ended == "container turn: OOMKilled (exit code 137)"
    killed = pod_view(terminated_pod("demo-t1", "Error", 137)).ended
    assert killed == "container turn: Error (exit code 137: killed by SIGKILL)"
    assert pod_view(terminated_pod("demo-t1", "Error", 2)).ended == "container turn: Error (exit code 2)"
    assert pod_view(terminated_pod("demo-t1", "Completed", 0)).ended == ""
    assert container_end({"name": "turn", "state": {"running": {}}}) == ""
    assert container_end({"name": "turn", "state": {"terminated": {"exitCode": 255}}}) == (
        "container turn: Terminated (exit code 255)")


def test_a_failed_container_says_why_in_the_last_line_of_its_termination_message() -> None:
    log_tail = ('{"level": "info", "msg": "turn started"}\n'
                "unicore-turn: team/demo: model error: OPENAI_BASE_URL is not set\n\n")
    ended = container_end({"name": "turn", "state": {"terminated": {"reason": "Error", "exitCode": 1,
                                                                    "message": log_tail}}})
    assert ended == ("container turn: Error (exit code 1): "
                     "unicore-turn: team/demo: model error: OPENAI_BASE_URL is not set")
    hostile = container_end({"name": "turn", "state": {"terminated": {"reason": "Error", "exitCode": 1,
                                                                      "message": "\x1b[2Jboom " + "x" * 1000}}})
    assert "\x1b" not in hostile and hostile.endswith("...") and len(hostile) < 400
    assert container_end({"name": "turn", "state": {"terminated": {"reason": "Error", "exitCode": 1,
                                                                   "message": " \n"}}}) == (
        "container turn: Error (exit code 1)")


def test_the_failure_of_a_job_names_how_its_own_pods_containers_ended() -> None:
    pods = [pod_view(terminated_pod("demo-t1", "OOMKilled", 137)), pod_view(terminated_pod("demo-t1-r1", "Error", 1)),
            PodView(namespace="team", name="demo-t1-r2-a", job_name="demo-t1-r2", phase="Running")]
    assert container_ends(pods, "demo-t1") == "container turn: OOMKilled (exit code 137)"
    assert container_ends(pods, "demo-t1-r1") == "container turn: Error (exit code 1)"
    assert container_ends(pods, "demo-t1-r2") == "" and container_ends(None, "demo-t1") == ""


def test_a_retry_running_says_what_happened_to_the_attempt_before_it() -> None:
    failure = "BackoffLimitExceeded: Job has reached the backoff limit; container turn: OOMKilled (exit code 137)"
    running = TaskObservation(active_job="demo-t1-r1", lease_held=True, failed_attempts=1, last_failure=failure)
    assert decide_phase(running) == (Phase.RUNNING, f"turn Job demo-t1-r1 is running (retry 1 after: {failure})")
    assert decide_phase(TaskObservation(active_job="demo-t1", lease_held=True)) == (
        Phase.RUNNING, "turn Job demo-t1 is running")
