"""Turn Jobs held suspended by a queue controller (issue 12 #3, Kueue's way: ``spec.suspend`` stays true until the
workload is admitted): the Job's view, the task's status (Pending, Ready reason ``Queued``, the Job and queue named),
and the watchdog (never the Pending or heartbeat rules; only the admission timeout, off by default)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from unicore_operator.phases import Phase, TaskObservation, decide_phase, ready_reason, scheduling_wait, wants_turn_job
from unicore_operator.settings import OperatorSettings
from unicore_operator.watchdog.adapter import thresholds_from
from unicore_operator.watchdog.reaper import Reaper
from unicore_operator.watchdog.scan import ReapReason, Snapshot, Thresholds, plan_redis_reads, scan
from unicore_operator.watchdog.views import AgentTaskView, JobView, PodView, job_view

NOW = 1_000_000.0
NS = "team"
T = Thresholds(heartbeat_timeout=120, pending_timeout=300, max_reaps=3, deadline_grace=30, absence_grace=30)


def hour() -> Thresholds:
    """T with an admission timeout of an hour."""
    return Thresholds(heartbeat_timeout=120, pending_timeout=300, max_reaps=3, deadline_grace=30, absence_grace=30,
                      admission_timeout=3600)


def stamp(seconds_ago: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(NOW - seconds_ago, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_body(*, suspend: bool | None = None, condition: tuple[str, float] | None = None, queue: str = "team-a",
             created_ago: float = 5000, start_ago: float | None = None) -> dict[str, Any]:
    """A turn Job as the API server shows it; ``condition`` = the Job controller's Suspended condition
    (status, seconds ago it changed)."""
    labels = {"unicore.dev/task": "demo", "unicore.dev/turn": "1"}
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    status: dict[str, Any] = {}
    if condition is not None:
        status["conditions"] = [{"type": "Suspended", "status": condition[0], "lastTransitionTime": stamp(condition[1]),
                                 "reason": "JobSuspended" if condition[0] == "True" else "JobResumed"}]
    if start_ago is not None:
        status["startTime"] = stamp(start_ago)
    spec: dict[str, Any] = {"activeDeadlineSeconds": 3900}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"metadata": {"namespace": NS, "name": "demo-t1", "uid": "uid-1", "labels": labels,
                         "annotations": {"unicore.dev/task-id": f"{NS}/demo"}, "creationTimestamp": stamp(created_ago)},
            "spec": spec, "status": status}


def snap(jobs: list[JobView], pods: list[PodView] = ()) -> Snapshot:  # type: ignore[assignment]
    tasks = {f"{NS}/demo": AgentTaskView(namespace=NS, name="demo", phase="Pending", active_job="demo-t1")}
    return Snapshot(tasks=tasks, jobs=jobs, pods=list(pods))


# ------------------------------------------------------------------------------------------------- the Job's view
def test_the_view_reads_the_queue_and_the_job_controllers_suspended_condition() -> None:
    held = job_view(job_body(suspend=True, condition=("True", 4990)))
    assert held.queued and held.queue == "team-a" and held.queued_since == NOW - 4990
    # created suspended, the Job controller has not written its condition yet: held since its creation
    fresh = job_view(job_body(suspend=True))
    assert fresh.queued and fresh.queued_since == NOW - 5000
    # released by the queue, the Job controller has not started it yet: still queued (no pod can exist)
    releasing = job_view(job_body(suspend=False, condition=("True", 4990)))
    assert releasing.queued and not releasing.suspended
    # started: no longer queued; the wait for a pod counts from the release, not from the Job's creation
    resumed = job_view(job_body(suspend=False, condition=("False", 2), start_ago=2))
    assert not resumed.queued and resumed.waiting_since == NOW - 2
    # a Job never suspended
    plain = job_view(job_body(queue="", created_ago=60, start_ago=60))
    assert not plain.queued and plain.waiting_since == NOW - 60 and plain.queue == ""


# ------------------------------------------------------------------------------------------------------ status
def test_a_queued_job_shows_as_queued_naming_the_job_and_its_queue() -> None:
    waiting = scheduling_wait(True, [], "team-a")
    assert waiting == ("Queued", "the Job is suspended until LocalQueue team-a admits it")
    obs = TaskObservation(active_job="demo-t1", pending_messages=1, job_waiting=waiting)
    assert decide_phase(obs) == (
        Phase.PENDING, "turn Job demo-t1 is queued: Queued: the Job is suspended until LocalQueue team-a admits it")
    assert ready_reason(obs) == "Queued" and not wants_turn_job(obs)  # never a second Job
    # suspended by something else than a queue (no queue label): still queued, and the message says so
    other = scheduling_wait(True, [])
    assert other is not None and other[0] == "Queued" and "spec.suspend" in other[1]
    # released and running: the pods speak again
    assert scheduling_wait(False, [PodView(namespace=NS, name="demo-t1-x", job_name="demo-t1", phase="Running")],
                           "team-a") is None


# ---------------------------------------------------------------------------------------------------- watchdog
def test_a_job_held_longer_than_the_pending_threshold_is_not_reaped() -> None:
    held = job_view(job_body(suspend=True, condition=("True", 1000), created_ago=1001))
    assert scan(snap([held]), NOW, T) == [] and scan(snap([held]), NOW, hour()) == []
    assert plan_redis_reads(snap([held]), NOW, T).read == frozenset()


def test_a_released_job_is_not_reaped_for_having_had_no_pod_since_its_creation() -> None:
    """Kueue admits a Job created 5000 s ago: until the Job controller made its pod, the Job has none; the no-pod
    clock starts at the release (before: ``pending_timeout``, "has had no pod for 5000s")."""
    releasing = job_view(job_body(suspend=False, condition=("True", 4990)))
    assert scan(snap([releasing]), NOW, T) == []
    resumed = job_view(job_body(suspend=False, condition=("False", 2), start_ago=2))
    assert scan(snap([resumed]), NOW, T) == []
    assert plan_redis_reads(snap([resumed]), NOW, T).read == frozenset()
    # still no pod 301 s after the release: that is stuck again
    late = job_view(job_body(suspend=False, condition=("False", 301), start_ago=301))
    [action] = scan(snap([late]), NOW, T)
    assert action.reason is ReapReason.PENDING_TIMEOUT and "has had no pod for 301s" in action.message


def test_the_admission_timeout_reaps_a_job_held_too_long_as_a_failed_attempt() -> None:
    inside = job_view(job_body(suspend=True, condition=("True", 3599)))
    assert scan(snap([inside]), NOW, hour()) == []
    held = job_view(job_body(suspend=True, condition=("True", 3601), created_ago=3605))
    [action] = scan(snap([held]), NOW, hour())
    assert action.reason is ReapReason.ADMISSION_TIMEOUT
    assert (action.job, action.job_uid, action.attempt, action.attempts) == ("demo-t1", "uid-1", "demo-t1", 1)
    assert action.message == ("turn Job demo-t1 was held suspended for 3601s without being admitted by LocalQueue "
                              "team-a (admission timeout 3600s)")
    assert action.activate and not action.fail_task
    assert plan_redis_reads(snap([held]), NOW, hour()).read == {f"{NS}/demo"}
    # 0 (the default): as long as the queue holds it
    assert scan(snap([held]), NOW, T) == [] and T.admission_timeout == 0


def test_the_setting_reaches_the_watchdog() -> None:
    settings = OperatorSettings(redis_url="redis://r")
    assert settings.admission_timeout_seconds == 0 and thresholds_from(settings).admission_timeout == 0
    assert thresholds_from(settings.model_copy(update={"admission_timeout_seconds": 7200})).admission_timeout == 7200


class ApiShowingJob:
    """What the API answers for the Job the reaper reads back (a pure unit test of ``_confirmed``)."""

    def __init__(self, suspend: bool, uid: str = "uid-1") -> None:
        self.job = {"metadata": {"name": "demo-t1", "uid": uid}, "spec": {"suspend": suspend}}

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        return self.job


def test_the_reaper_confirms_the_job_is_still_held_before_reaping() -> None:
    """The cache may lag: a Job its queue has just admitted (the API shows suspend false) is not reaped."""
    [action] = scan(snap([job_view(job_body(suspend=True, condition=("True", 3601)))]), NOW, hour())
    reaper = Reaper.__new__(Reaper)
    reaper.ctx = SimpleNamespace(kube=ApiShowingJob(suspend=True))  # type: ignore[assignment]
    assert reaper._confirmed(action)
    reaper.ctx = SimpleNamespace(kube=ApiShowingJob(suspend=False))  # type: ignore[assignment]
    assert not reaper._confirmed(action)
    reaper.ctx = SimpleNamespace(kube=ApiShowingJob(suspend=True, uid="a-newer-job"))  # type: ignore[assignment]
    assert not reaper._confirmed(action)
