"""The fault-injection harness with turns as pods: the operator runs a 3-level scripted tree whose turn pods SIGKILL
themselves at named steps (``UNICORE_FAULTS`` through ``UNICORE_AGENT_EXTRA_ENV``); the tree settles with every
prompt and report delivered exactly once (same checks as local mode: tests/integration/fault_harness.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.cluster.operator_harness import OperatorProcess, Tasks, install_agent_rbac
from tests.integration.fault_harness import check_tree, leafy_tree_script
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def faulty_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Any:
    install_agent_rbac(crd.kubeconfig, k8s_namespace)
    proc = OperatorProcess(
        crd.kubeconfig, redis_url, k8s_namespace, tmp_path / "operator.log",
        UNICORE_AGENT_EXTRA_ENV=json.dumps({"UNICORE_FAULTS": "kill-once:50:3"}),
        UNICORE_MAX_TURN_RETRIES="50",  # every kill is a failed attempt; the retries are the recovery under test
        UNICORE_TURN_RETRY_BACKOFF_SECONDS="0.2",
    ).start()
    yield proc
    proc.stop()
    print(f"--- operator log ({proc.log_path}):\n{proc.log(60)}")


def _settled(tasks: Tasks, expected: int) -> bool:
    phases = tasks.all_phases()
    return len(phases) == expected and all(phase == "Idle" for phase in phases.values())


def test_a_tree_of_pods_killed_at_named_steps_settles_with_every_report_delivered_once(
    faulty_operator: OperatorProcess, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    script = leafy_tree_script(2, 2)
    tasks.create("r", {"prompt": "split the work", "gpus": 0, "script": script})
    wait_for(lambda: _settled(tasks, 1 + 2 + 4), timeout=600, interval=0.5,
             what=f"7 Idle tasks (have {tasks.all_phases()})")
    report = check_tree(redis_client, f"{k8s_namespace}/r", True)
    print(f"\nfault injection (pods, kill-once:50:3): {report}")
    assert report.tasks == 7
    assert report.losses == [] and report.duplicates == [] and report.problems == []
    assert report.kill_points >= 20, report.kills_by_step
    failed_jobs = [job for job in tasks.jobs() if job.status.failed]
    assert failed_jobs, "the kills made turn Jobs fail (and the operator retried them)"
