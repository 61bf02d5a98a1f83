"""The fault-injection harness with turns as pods: the operator runs a 3-level scripted tree whose turn pods SIGKILL
themselves at named steps (``UNICORE_FAULTS`` through ``UNICORE_AGENT_EXTRA_ENV``); the tree settles with every
prompt and report delivered exactly once (same checks as local mode: tests/integration/fault_harness.py)."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.api.contract import TASK_LABEL
from unicore_operator.phases import retry_delay

from tests.cluster.operator_harness import OperatorProcess, Tasks, install_agent_rbac
from tests.integration.fault_harness import check_tree, leafy_tree_script
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

# UNICORE_TURN_RETRY_BACKOFF_SECONDS: the wait before retry n of a failed turn Job is this x 2^(n-1) (the operator's
# default base is 5 s). The kills and retries are what is tested, not the wait, so the base is short here. Almost every
# Job of this tree is killed (a turn's last process dies late, after its work), so a task fails 9-11 times in a row:
# with a base of 0.2 s the backoff scheduled was 125 s (summed over the tasks, whose waits overlap) and the tree
# settled in 117 s; 0.01 s: 23 s, settled in 41 s; 0.001 s: 0.3 s, settled in 20 s; 38-42 kills each time (the
# printed RetryTimings).
BACKOFF_SECONDS = 0.001


@pytest.fixture
def faulty_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Any:
    install_agent_rbac(crd.kubeconfig, k8s_namespace)
    proc = OperatorProcess(
        crd.kubeconfig, redis_url, k8s_namespace, tmp_path / "operator.log",
        UNICORE_AGENT_EXTRA_ENV=json.dumps({"UNICORE_FAULTS": "kill-once:50:3"}),
        UNICORE_MAX_TURN_RETRIES="50",  # every kill is a failed attempt; the retries are the recovery under test
        UNICORE_TURN_RETRY_BACKOFF_SECONDS=str(BACKOFF_SECONDS),
    ).start()
    yield proc
    proc.stop()
    print(f"--- operator log ({proc.log_path}):\n{proc.log(60)}")


@dataclass
class RetryTimings:
    """Where the turn Jobs' time went, summed over the tasks (their Jobs overlap, so the sums exceed the wall time):
    each Job from its creation to its end (of which its pod's wait to start), and each failed Job's end to its
    task's next Job's creation (the retry: the backoff the operator scheduled, base x 2^(n-1) for failure n in a
    row, plus its reaction). From the API server's timestamps (whole seconds)."""

    jobs: int
    failed: int
    most_failures_in_a_row: int
    job_seconds: float
    pod_start_seconds: float
    retry_wait_seconds: float
    backoff_scheduled_seconds: float


def _ended(job: Any) -> tuple[bool, datetime] | None:
    """(failed, when) of a turn Job that ended; None while it runs."""
    for condition in job.status.conditions or []:
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return condition.type == "Failed", condition.last_transition_time
    return None


def retry_timings(jobs: list[Any], pods: list[Any], base: float) -> RetryTimings:
    pod_started = {(pod.metadata.labels or {}).get("batch.kubernetes.io/job-name"): pod.status.start_time
                   for pod in pods if pod.status and pod.status.start_time}
    by_task: dict[str, list[Any]] = defaultdict(list)
    for job in jobs:
        by_task[job.metadata.labels[TASK_LABEL]].append(job)
    timings = RetryTimings(len(jobs), 0, 0, 0.0, 0.0, 0.0, 0.0)
    for task_jobs in by_task.values():
        task_jobs.sort(key=lambda job: (job.metadata.creation_timestamp, job.metadata.name))
        in_a_row = 0
        for job, after in zip(task_jobs, [*task_jobs[1:], None], strict=True):
            ended = _ended(job)
            if ended is None:
                continue
            failed, at = ended
            timings.job_seconds += (at - job.metadata.creation_timestamp).total_seconds()
            if job.metadata.name in pod_started:
                timings.pod_start_seconds += (pod_started[job.metadata.name] - job.metadata.creation_timestamp
                                              ).total_seconds()
            in_a_row = in_a_row + 1 if failed else 0
            timings.failed += failed
            timings.most_failures_in_a_row = max(timings.most_failures_in_a_row, in_a_row)
            if failed and after is not None:
                timings.retry_wait_seconds += (after.metadata.creation_timestamp - at).total_seconds()
                timings.backoff_scheduled_seconds += retry_delay(in_a_row, base)
    return timings


def _settled(tasks: Tasks, expected: int) -> bool:
    phases = tasks.all_phases()
    return len(phases) == expected and all(phase == "Idle" for phase in phases.values())


def test_a_tree_of_pods_killed_at_named_steps_settles_with_every_report_delivered_once(
    faulty_operator: OperatorProcess, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    script = leafy_tree_script(2, 2)
    started = time.monotonic()
    tasks.create("r", {"prompt": "split the work", "gpus": 0, "script": script})
    wait_for(lambda: _settled(tasks, 1 + 2 + 4), timeout=600, interval=0.5,
             what=f"7 Idle tasks (have {tasks.all_phases()})")
    settle_seconds = time.monotonic() - started
    report = check_tree(redis_client, f"{k8s_namespace}/r", True)
    print(f"\nfault injection (pods, kill-once:50:3): {report}")
    timings = retry_timings(tasks.jobs(), tasks.pods(), BACKOFF_SECONDS)
    print(f"settled in {settle_seconds:.1f} s with a retry backoff of {BACKOFF_SECONDS} s: {timings}")
    assert report.tasks == 7
    assert report.losses == [] and report.duplicates == [] and report.problems == []
    assert report.kill_points >= 20, report.kills_by_step
    failed_jobs = [job for job in tasks.jobs() if job.status.failed]
    assert failed_jobs, "the kills made turn Jobs fail (and the operator retried them)"
