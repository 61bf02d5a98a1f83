"""scan() on hand-made snapshots: every reap reason, the negatives next to each, and the N-reaps -> Failed rule."""

from __future__ import annotations

from unicore_operator.watchdog.scan import (
    ReapReason,
    Snapshot,
    Thresholds,
    pending_cause,
    plan_redis_reads,
    scan,
)
from unicore_operator.watchdog.views import (
    AgentTaskView,
    JobView,
    PodView,
    RedisTaskState,
    agent_task_view,
    job_view,
    pod_view,
)

NOW = 1_000_000.0
T = Thresholds(heartbeat_timeout=120, pending_timeout=300, max_reaps=3, deadline_grace=30, absence_grace=30)
NS = "team"


def task(name: str = "demo", **kw: object) -> AgentTaskView:
    return AgentTaskView(namespace=NS, name=name, **kw)  # type: ignore[arg-type]


def job(name: str = "demo-t1", task_name: str = "demo", **kw: object) -> JobView:
    fields: dict[str, object] = {"created_at": NOW - 60, "start_time": NOW - 60, "uid": f"uid-{name}"}
    fields.update(kw)
    return JobView(namespace=NS, name=name, task_id=f"{NS}/{task_name}", **fields)  # type: ignore[arg-type]


def pod(name: str = "demo-t1-abcde", job_name: str = "demo-t1", **kw: object) -> PodView:
    fields: dict[str, object] = {"phase": "Running", "created_at": NOW - 60, "start_time": NOW - 59}
    fields.update(kw)
    return PodView(namespace=NS, name=name, job_name=job_name, **fields)  # type: ignore[arg-type]


def snap(tasks: list[AgentTaskView], jobs: list[JobView] = (), pods: list[PodView] = (),  # type: ignore[assignment]
         redis: dict[str, RedisTaskState] | None = None) -> Snapshot:
    return Snapshot(tasks={t.task_id: t for t in tasks}, jobs=list(jobs), pods=list(pods), redis=redis or {})


def running(heartbeat_age: float | None = 5.0, **kw: object) -> RedisTaskState:
    fields: dict[str, object] = {
        "status": "running", "updated_at": NOW - 60, "lease_holder": "demo-t1-abcde:7", "lease_token": "4",
        "lease_acquired_at": NOW - 58, "heartbeat_at": None if heartbeat_age is None else NOW - heartbeat_age,
    }
    fields.update(kw)
    return RedisTaskState(**fields)  # type: ignore[arg-type]


def test_healthy_running_turn_is_left_alone() -> None:
    s = snap([task()], [job()], [pod()], {f"{NS}/demo": running()})
    assert scan(s, NOW, T) == []


def test_stale_heartbeat_is_reaped_with_job_lease_and_status() -> None:
    s = snap([task()], [job()], [pod(start_time=NOW - 900)], {f"{NS}/demo": running(heartbeat_age=121)})
    [action] = scan(s, NOW, T)
    assert action.reason is ReapReason.HEARTBEAT_STALE
    assert (action.task_id, action.job, action.job_uid, action.pod) == (f"{NS}/demo", "demo-t1", "uid-demo-t1",
                                                                        "demo-t1-abcde")
    assert action.lease_token == "4" and action.reset_status and action.activate and not action.fail_task
    assert action.attempts == 1
    assert "last heartbeat 121s ago" in action.message


def test_heartbeat_just_inside_threshold_is_not_reaped() -> None:
    s = snap([task()], [job()], [pod(start_time=NOW - 900)], {f"{NS}/demo": running(heartbeat_age=119)})
    assert scan(s, NOW, T) == []


def test_heartbeat_from_an_earlier_turn_does_not_count_against_a_fresh_pod() -> None:
    # The heartbeat key is 2 hours old (last turn), but this pod started 10 s ago: not hung yet.
    s = snap([task()], [job()], [pod(start_time=NOW - 10)], {f"{NS}/demo": running(heartbeat_age=7200)})
    assert scan(s, NOW, T) == []


def test_running_pod_that_never_heartbeats_is_reaped_after_the_threshold() -> None:
    s = snap([task()], [job()], [pod(start_time=NOW - 200)], {f"{NS}/demo": running(heartbeat_age=None)})
    [action] = scan(s, NOW, T)
    assert action.reason is ReapReason.HEARTBEAT_STALE
    assert "no heartbeat since the pod started" in action.message


def released(released_age: float) -> RedisTaskState:
    """A turn that released its lease ``released_age`` seconds ago (status idle; its last heartbeat is gone)."""
    return RedisTaskState(status="idle", updated_at=NOW - released_age, released_at=NOW - released_age)


def test_a_pod_whose_turn_just_released_the_lease_is_exiting_not_hung() -> None:
    # the pod started long ago and the heartbeat stopped with the release: the process is on its way out
    s = snap([task()], [job()], [pod(start_time=NOW - 900)], {f"{NS}/demo": released(1)})
    assert scan(s, NOW, T) == []


def test_a_pod_lingering_past_the_threshold_after_its_turn_released_the_lease_is_reaped() -> None:
    s = snap([task()], [job()], [pod(start_time=NOW - 900)], {f"{NS}/demo": released(121)})
    [action] = scan(s, NOW, T)
    assert action.reason is ReapReason.HEARTBEAT_STALE and action.job == "demo-t1"
    assert "still running 121s after its turn released the lease" in action.message


def test_a_release_before_the_pod_started_is_an_earlier_turns_and_does_not_count() -> None:
    # idle since a turn that ended before this pod started: this pod never took the lease
    s = snap([task()], [job()], [pod(start_time=NOW - 200)], {f"{NS}/demo": released(500)})
    [action] = scan(s, NOW, T)
    assert "no heartbeat since the pod started 200s ago" in action.message


def test_a_warm_pod_given_a_turn_is_judged_from_its_assignment_not_its_start() -> None:
    # a warm pod started 600 s ago, waited, and was given turn 2 a second ago; the task's turn 1 released the lease
    # 300 s ago (after this pod started) and turn 2 has not taken it yet: neither hung nor lingering
    warm = pod(start_time=NOW - 600, assigned_at=NOW - 1)
    assert scan(snap([task()], [job()], [warm], {f"{NS}/demo": released(300)}), NOW, T) == []
    assert scan(snap([task()], [job()], [warm], {f"{NS}/demo": running(heartbeat_age=None)}), NOW, T) == []
    # the same pod silent for longer than the threshold since its assignment is hung
    late = pod(start_time=NOW - 600, assigned_at=NOW - 121)
    [action] = scan(snap([task()], [job()], [late], {f"{NS}/demo": running(heartbeat_age=None)}), NOW, T)
    assert action.reason is ReapReason.HEARTBEAT_STALE and "121s ago" in action.message


def test_a_pods_assignment_time_is_read_from_its_annotation() -> None:
    body = {"metadata": {"name": "greeter-warm-x1", "namespace": NS, "labels": {"job-name": "greeter-warm-x"},
                         "annotations": {"unicore.dev/assigned-at": "1970-01-12T13:46:40.500+00:00"}},
            "status": {"phase": "Running", "startTime": "1970-01-12T13:36:40Z"}}
    view = pod_view(body)
    assert (view.assigned_at, view.start_time) == (NOW + 0.5, NOW - 600)


def test_activity_after_the_pod_started_is_not_a_release() -> None:
    # a message bumped updated_at, but no turn of this pod ever took (and released) the lease
    s = snap([task()], [job()], [pod(start_time=NOW - 200)], {f"{NS}/demo": RedisTaskState(status="idle",
                                                                                           updated_at=NOW - 1)})
    [action] = scan(s, NOW, T)
    assert "no heartbeat since the pod started 200s ago" in action.message


def test_pending_pod_past_threshold_copies_the_schedulers_reason() -> None:
    msg = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint."
    p = pod(phase="Pending", created_at=NOW - 301, start_time=None, unschedulable_reason="Unschedulable",
            unschedulable_message=msg)
    [action] = scan(snap([task()], [job(start_time=None)], [p]), NOW, T)
    assert action.reason is ReapReason.PENDING_TIMEOUT
    assert f"FailedScheduling: {msg}" in action.message
    assert "Pending for 301s" in action.message


def test_pending_pod_inside_threshold_is_left_alone() -> None:
    p = pod(phase="Pending", created_at=NOW - 299, unschedulable_reason="Unschedulable", unschedulable_message="x")
    assert scan(snap([task()], [job()], [p]), NOW, T) == []


def test_image_pull_backoff_reason_is_reported() -> None:
    p = pod(phase="Pending", created_at=NOW - 400, waiting_reason="ImagePullBackOff",
            waiting_message='Back-off pulling image "nope:1"')
    [action] = scan(snap([task()], [job()], [p]), NOW, T)
    assert action.reason is ReapReason.PENDING_TIMEOUT
    assert 'ImagePullBackOff: Back-off pulling image "nope:1"' in action.message


def test_job_without_any_pod_for_too_long_is_pending_timeout() -> None:
    [action] = scan(snap([task()], [job(created_at=NOW - 301, start_time=None)], []), NOW, T)
    assert action.reason is ReapReason.PENDING_TIMEOUT
    assert "no pod was created" in action.message


def test_suspended_job_is_queued_not_stuck() -> None:
    assert scan(snap([task()], [job(created_at=NOW - 5000, start_time=None, suspended=True)], []), NOW, T) == []


def test_job_past_deadline_and_grace_is_reaped() -> None:
    j = job(start_time=NOW - 700, active_deadline_seconds=600)
    [action] = scan(snap([task()], [j], [pod()], {f"{NS}/demo": running()}), NOW, T)
    assert action.reason is ReapReason.DEADLINE_EXCEEDED
    assert "activeDeadlineSeconds=600" in action.message and action.job == "demo-t1"


def test_job_past_deadline_inside_grace_or_finished_is_left_alone() -> None:
    inside = job(start_time=NOW - 620, active_deadline_seconds=600)
    assert scan(snap([task()], [inside], [pod()], {f"{NS}/demo": running()}), NOW, T) == []
    finished = job(start_time=NOW - 7000, active_deadline_seconds=600, finished=True)
    assert scan(snap([task()], [finished], []), NOW, T) == []


def test_orphan_job_is_deleted_but_nothing_is_recorded_on_a_task() -> None:
    j = job(name="gone-t3", task_name="gone", created_at=NOW - 31)
    [action] = scan(snap([task()], [j], []), NOW, T)
    assert action.reason is ReapReason.ORPHAN_JOB
    assert action.job == "gone-t3" and not action.task_exists and not action.activate and not action.fail_task


def test_young_or_deleting_orphan_job_is_left_alone() -> None:
    young = job(name="gone-t3", task_name="gone", created_at=NOW - 5)
    deleting = job(name="gone-t4", task_name="gone", created_at=NOW - 500, deleting=True)
    assert scan(snap([task()], [young, deleting], []), NOW, T) == []


def test_lease_whose_holder_pod_is_gone_is_released() -> None:
    state = running(lease_holder="demo-t1-zzzzz:12", lease_acquired_at=NOW - 45)
    [action] = scan(snap([task()], [], [], {f"{NS}/demo": state}), NOW, T)
    assert action.reason is ReapReason.LEASE_HOLDER_GONE
    assert action.lease_token == "4" and action.reset_status and action.job == ""
    assert "demo-t1-zzzzz:12" in action.message and "is gone" in action.message


def test_lease_whose_holder_pod_has_terminated_is_released() -> None:
    state = running(lease_holder="demo-t1-abcde:7", lease_acquired_at=NOW - 45)
    done = pod(phase="Failed")
    [action] = scan(snap([task()], [job(finished=True)], [done], {f"{NS}/demo": state}), NOW, T)
    assert action.reason is ReapReason.LEASE_HOLDER_GONE and "has failed" in action.message


def test_fresh_lease_or_lease_of_a_live_job_is_left_alone() -> None:
    fresh = running(lease_holder="other-pod:1", lease_acquired_at=NOW - 3)
    assert scan(snap([task()], [], [], {f"{NS}/demo": fresh}), NOW, T) == []
    # holder name unknown (e.g. a machine hostname), but the task has a live Job: the heartbeat check covers it
    odd = running(lease_holder="some-host:99", lease_acquired_at=NOW - 500)
    assert scan(snap([task()], [job()], [pod()], {f"{NS}/demo": odd}), NOW, T) == []


def test_running_status_without_lease_or_job_is_reset() -> None:
    state = RedisTaskState(status="running", updated_at=NOW - 31)
    [action] = scan(snap([task()], [], [], {f"{NS}/demo": state}), NOW, T)
    assert action.reason is ReapReason.RUNNING_WITHOUT_JOB
    assert action.reset_status and action.lease_token == "" and action.activate


def test_running_status_recently_updated_or_idle_is_left_alone() -> None:
    recent = RedisTaskState(status="running", updated_at=NOW - 10)
    idle = RedisTaskState(status="idle", updated_at=NOW - 9999)
    assert scan(snap([task("a"), task("b")], [], [], {f"{NS}/a": recent, f"{NS}/b": idle}), NOW, T) == []


def test_redis_state_of_unknown_tasks_is_ignored() -> None:
    state = RedisTaskState(status="running", updated_at=NOW - 999)
    assert scan(snap([task()], [], [], {"localtask": state, f"{NS}/deleted": state}), NOW, T) == []


def test_max_reaps_in_a_row_predicts_failing_the_task() -> None:
    s = snap([task(failed_attempts=2)], [job()], [pod(start_time=NOW - 900)],
             {f"{NS}/demo": running(heartbeat_age=500)})
    [action] = scan(s, NOW, T)
    # the reaper fails the task on the count it records (activate = queue the note unless that count fails it)
    assert action.fail_task and action.activate and action.attempts == 3
    assert "reaped 3 times in a row" in action.message
    below = snap([task(failed_attempts=1)], [job()], [pod(start_time=NOW - 900)],
                 {f"{NS}/demo": running(heartbeat_age=500)})
    [again] = scan(below, NOW, T)
    assert not again.fail_task and again.activate and again.attempts == 2


def test_suspended_task_is_cleaned_up_but_not_activated() -> None:
    state = RedisTaskState(status="running", updated_at=NOW - 100)
    [action] = scan(snap([task(suspend=True)], [], [], {f"{NS}/demo": state}), NOW, T)
    assert action.reason is ReapReason.RUNNING_WITHOUT_JOB and not action.activate


def test_one_action_per_task_even_with_several_stuck_signals() -> None:
    # deadline passed AND heartbeat stale AND a second pending pod: one action, the most specific reason
    j = job(start_time=NOW - 5000, active_deadline_seconds=600)
    pods = [pod(start_time=NOW - 5000), pod(name="demo-t1-p2", phase="Pending", created_at=NOW - 4000)]
    actions = scan(snap([task()], [j], pods, {f"{NS}/demo": running(heartbeat_age=4000)}), NOW, T)
    assert [a.reason for a in actions] == [ReapReason.DEADLINE_EXCEEDED]


def test_pending_cause_without_reason() -> None:
    assert pending_cause(pod(phase="Pending")) == "not scheduled yet (no reason reported)"


def test_views_from_kubernetes_bodies() -> None:
    t = agent_task_view({"metadata": {"namespace": NS, "name": "demo", "labels": {"unicore.dev/root": "demo"}},
                   "spec": {"suspend": True}, "status": {"phase": "Running", "activeJob": "demo-t1",
                                                         "failedAttempts": 2}})
    assert (t.task_id, t.phase, t.active_job, t.suspend, t.failed_attempts, t.root) == (
        f"{NS}/demo", "Running", "demo-t1", True, 2, "demo")
    j = job_view({"metadata": {"namespace": NS, "name": "demo-t1", "uid": "u1",
                               "creationTimestamp": "2026-01-01T00:00:00Z",
                               "annotations": {"unicore.dev/task-id": f"{NS}/demo"}},
                  "spec": {"activeDeadlineSeconds": 600},
                  "status": {"startTime": "2026-01-01T00:00:05Z",
                             "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}})
    assert (j.task_id, j.uid, j.active_deadline_seconds, j.finished) == (f"{NS}/demo", "u1", 600, True)
    assert j.start_time is not None and j.start_time - j.created_at == 5
    p = pod_view({"metadata": {"namespace": NS, "name": "demo-t1-x", "labels": {"job-name": "demo-t1"},
                               "creationTimestamp": "2026-01-01T00:00:01Z"},
                  "status": {"phase": "Pending",
                             "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                             "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}]}})
    assert (p.job_key, p.phase, p.unschedulable_reason) == (f"{NS}/demo-t1", "Pending", "Unschedulable")
    assert "Insufficient nvidia.com/gpu" in pending_cause(p)
    w = pod_view({"metadata": {"namespace": NS, "name": "x", "ownerReferences": [{"kind": "Job", "name": "j"}]},
                  "status": {"containerStatuses": [
                      {"state": {"waiting": {"reason": "ErrImagePull", "message": "m"}}}]}})
    assert (w.job_name, w.waiting_reason, w.phase) == ("j", "ErrImagePull", "Pending")


def test_a_beating_task_is_not_heartbeat_stale_but_still_past_its_deadline() -> None:
    old_pod = pod(start_time=NOW - 900)
    s = Snapshot(tasks={f"{NS}/demo": task()}, jobs=[job()], pods=[old_pod], beating=frozenset({f"{NS}/demo"}))
    assert scan(s, NOW, T) == []
    late = job(start_time=NOW - 4000, active_deadline_seconds=3600)
    s = Snapshot(tasks={f"{NS}/demo": task()}, jobs=[late], pods=[old_pod], beating=frozenset({f"{NS}/demo"}))
    assert [a.reason for a in scan(s, NOW, T)] == [ReapReason.DEADLINE_EXCEEDED]


def test_plan_reads_only_the_tasks_whose_redis_state_can_change_the_result() -> None:
    names = ["young", "old", "pending", "late", "nopod", "queued", "lost", "idle", "done"]
    tasks = [task(n, phase="Running") for n in names[:7]] + [task("idle", phase="Idle"), task("done", phase="Idle")]
    jobs = [job(f"{n}-t1", n) for n in names[:6]] + [job("done-t1", "done", finished=True), job("orphan-t1", "gone")]
    jobs[3] = job("late-t1", "late", start_time=NOW - 4000, active_deadline_seconds=3600)
    jobs[4] = job("nopod-t1", "nopod", created_at=NOW - 400)
    jobs[5] = job("queued-t1", "queued", suspended=True, created_at=NOW - 4000)
    pods = [pod("young-p", "young-t1"), pod("old-p", "old-t1", start_time=NOW - 121),
            pod("pending-p", "pending-t1", phase="Pending", created_at=NOW - 301, start_time=None),
            pod("late-p", "late-t1", start_time=NOW - 4000)]
    plan = plan_redis_reads(snap(tasks, jobs, pods), NOW, T)
    assert plan.beat_check == {f"{NS}/old"}
    assert plan.read == {f"{NS}/pending", f"{NS}/late", f"{NS}/nopod", f"{NS}/lost"}


def test_a_dead_turns_lease_is_reaped_as_the_attempt_its_job_already_counted() -> None:
    # issue 10 #13: the killed turn's Job shows its failure (the operator counts it); the reap of its lease is the
    # same attempt, recorded under the Job's name, and predicts no further failure
    state = running(lease_holder="demo-t1-r1-abcde:7", lease_acquired_at=NOW - 45)
    failed_job = job("demo-t1-r1", finished=True, turn=1)
    dead = pod("demo-t1-r1-abcde", "demo-t1-r1", phase="Failed", turn=1)
    [action] = scan(snap([task(failed_attempts=2)], [failed_job], [dead], {f"{NS}/demo": state}), NOW, T)
    assert action.reason is ReapReason.LEASE_HOLDER_GONE
    assert (action.attempt, action.turn, action.job) == ("demo-t1-r1", 1, "")
    assert action.attempts == 2 and not action.fail_task and action.activate


def test_the_attempt_of_a_lease_whose_pod_is_gone_comes_from_the_jobs_name() -> None:
    state = running(lease_holder="demo-t2-xyzab:9", lease_acquired_at=NOW - 45)
    [action] = scan(snap([task()], [job("demo-t2", finished=True, turn=2)], [], {f"{NS}/demo": state}), NOW, T)
    assert (action.attempt, action.turn, action.attempts) == ("demo-t2", 2, 0)
    # neither pod nor Job known: no attempt, so the reap counts as a new failure (keyed by the lease token)
    [unknown] = scan(snap([task()], [], [], {f"{NS}/demo": state}), NOW, T)
    assert (unknown.attempt, unknown.turn, unknown.attempts) == ("", 0, 1)


def test_running_without_job_names_the_attempt_of_the_records_last_holder() -> None:
    state = RedisTaskState(status="running", updated_at=NOW - 31, turn_holder="demo-t1-abcde:7")
    dead = pod(phase="Failed", turn=1)
    [action] = scan(snap([task()], [job(finished=True, turn=1)], [dead], {f"{NS}/demo": state}), NOW, T)
    assert action.reason is ReapReason.RUNNING_WITHOUT_JOB
    assert (action.attempt, action.turn, action.attempts) == ("demo-t1", 1, 0)


def test_job_reasons_reap_the_jobs_own_attempt() -> None:
    s = snap([task()], [job(turn=3)], [pod(start_time=NOW - 900)], {f"{NS}/demo": running(heartbeat_age=500)})
    [action] = scan(s, NOW, T)
    assert (action.attempt, action.job, action.turn) == ("demo-t1", "demo-t1", 3)


def test_pod_view_reads_the_turn_label() -> None:
    p = pod_view({"metadata": {"namespace": NS, "name": "demo-t4-x",
                               "labels": {"job-name": "demo-t4", "unicore.dev/turn": "4"}}, "status": {}})
    assert (p.job_name, p.turn) == ("demo-t4", 4)


def test_the_turn_timeout_counts_from_the_pods_start_not_from_the_jobs() -> None:
    # issue 10 #16: the pod waited 283 s for a GPU, then ran 17 s of its 20 s turn: not overdue
    waited = pod(created_at=NOW - 300, start_time=NOW - 17, active_deadline_seconds=20)
    j = job(created_at=NOW - 300, start_time=NOW - 300, active_deadline_seconds=20 + 300)
    s = snap([task()], [j], [waited], {f"{NS}/demo": running()})
    assert scan(s, NOW, T) == []
    # the same pod 20 s + grace after its start: reaped for its turn timeout
    late = pod(created_at=NOW - 400, start_time=NOW - 51, active_deadline_seconds=20)
    s = snap([task()], [j], [late], {f"{NS}/demo": running()})
    [action] = scan(s, NOW, T)
    assert action.reason is ReapReason.DEADLINE_EXCEEDED and action.job == "demo-t1"
    assert "31s past its turn timeout (activeDeadlineSeconds=20 from the pod's start)" in action.message
    assert plan_redis_reads(snap([task(phase="Running")], [j], [late]), NOW, T).read == {f"{NS}/demo"}
    assert plan_redis_reads(snap([task(phase="Running")], [j], [waited]), NOW, T).read == frozenset()


def test_pod_view_reads_the_pods_deadline() -> None:
    p = pod_view({"metadata": {"namespace": NS, "name": "demo-t1-x", "labels": {"job-name": "demo-t1"}},
                  "spec": {"activeDeadlineSeconds": 20}, "status": {"phase": "Running"}})
    assert p.active_deadline_seconds == 20


def test_a_failed_workbench_is_reaped_at_once_with_its_one_line() -> None:
    body = {"metadata": {"name": "demo-t1-abcde", "namespace": NS, "labels": {"job-name": "demo-t1"}},
            "status": {"phase": "Running", "initContainerStatuses": [
                {"name": "exec-server-install", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "workbench", "restartCount": 1,
                 "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
                 "lastState": {"terminated": {"exitCode": 3, "reason": "Error", "message":
                                              "workbench image cannot run /bin/sh as uid 65532: permission denied\n"}}},
            ], "containerStatuses": [{"name": "turn", "state": {"running": {}}}]}}
    failed = pod_view(body)
    assert failed.workbench_failed == ("container workbench: Error (exit code 3): workbench image cannot run /bin/sh "
                                       "as uid 65532: permission denied")
    s = snap([task()], [job()], [pod(workbench_failed=failed.workbench_failed)], {f"{NS}/demo": running()})
    assert plan_redis_reads(s, NOW, T).read == {f"{NS}/demo"}
    [action] = scan(s, NOW, T)
    assert action.reason is ReapReason.WORKBENCH_FAILED and action.lease_token == "4"
    assert action.message.endswith("the workbench failed: " + failed.workbench_failed)
    # a workbench that ended well (the turn ended, the kubelet stopped it) is no failure
    body["status"]["initContainerStatuses"][1] = {"name": "workbench", "state": {"terminated": {"exitCode": 0}}}
    assert pod_view(body).workbench_failed == ""
