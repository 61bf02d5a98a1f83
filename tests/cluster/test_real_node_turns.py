"""Turn containers that die on the real node (issue 12 #2), with a host operator and the agent image in real
containers under the kubelet:

- a turn container SIGKILLed from outside Kubernetes (``ctr tasks kill`` on the node's containerd, as a node problem
  or a runtime would) in the middle of its model call: the failed attempt is recorded once, its status, Event and
  retry say the container was killed by SIGKILL, the lease is broken at once and the turn runs again and answers;
- a turn container OOM-killed by the kernel under a low memory limit (``spec.resources``): the status and Event say
  OOMKilled; after the limit is raised the next attempt runs and the task goes Idle.

The Job's own Failed condition says only ``BackoffLimitExceeded``; how the container ended comes from its pod.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.store.gates import open_gate

from tests.cluster.operator_harness import StartOperator, Tasks, operator_factory, stored_messages, task_events
from tests.cluster.real_node import container_id, kill_container
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

OPERATOR_ENV = {
    "UNICORE_WATCHDOG_INTERVAL_SECONDS": "1",
    "UNICORE_PENDING_TIMEOUT_SECONDS": "60",
    "UNICORE_HEARTBEAT_TIMEOUT_SECONDS": "25",
    "UNICORE_WATCHDOG_GRACE_SECONDS": "5",
    "UNICORE_DEFAULT_GPUS": "0",
    # long enough for the OOM test to raise the limit before the next attempt's Job is made
    "UNICORE_TURN_RETRY_BACKOFF_SECONDS": "4",
}
ANSWER = "Answered after the retry."
KILLED = "container turn: Error (exit code 137: killed by SIGKILL)"
OOM = "container turn: OOMKilled (exit code 137)"


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=OPERATOR_ENV, pod_logs=True) as start:
        yield start


def status_of(tasks: Tasks, name: str) -> dict[str, Any]:
    return dict((tasks.get(name) or {}).get("status") or {})


def message_with(tasks: Tasks, name: str, text: str) -> dict[str, Any] | None:
    status = status_of(tasks, name)
    return status if text in str(status.get("message") or "") else None


def settled(tasks: Tasks, name: str) -> dict[str, Any] | None:
    status = status_of(tasks, name)
    return status if status.get("phase") in ("Idle", "Failed") else None


def test_a_turn_container_killed_from_outside_is_recorded_and_the_turn_runs_again(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    start_operator()
    task_id = f"{k8s_namespace}/victim"
    # the first model call waits at a gate: the container is killed inside it; the retry repeats it (nothing was
    # stored) and waits at the same gate until the test saw the failure recorded
    tasks.create("victim", {"prompt": "work", "model": "scripted",
                            "script": {"tasks": {"victim": [{"gate": "killed", "text": ANSWER}]}}})

    def mid_turn() -> Any:
        if not redis_client.exists(f"uc:{{{task_id}}}:lease"):
            return None
        running = [p for p in tasks.pods() if p.status.phase == "Running" and container_id(p)]
        return running[0] if running else None

    pod = wait_for(mid_turn, timeout=90, interval=0.1, what="the turn container running and holding the lease")
    kill_container(crd, container_id(pod))

    [event] = wait_for(lambda: task_events(tasks, "victim", "TurnFailed"), timeout=60,
                       what="the killed attempt's TurnFailed Event")
    assert KILLED in event.message and "victim-t1 failed" in event.message, event.message
    status = wait_for(lambda: message_with(tasks, "victim", KILLED), timeout=30,
                      what="the status naming the killed container while the turn is retried")
    assert status["failedAttempts"] == 1 and "retry 1 after: BackoffLimitExceeded" in status["message"], status
    open_gate(redis_client, task_id, "killed")
    done = wait_for(lambda: settled(tasks, "victim"), timeout=120, what="the retried turn to finish")
    assert done["phase"] == "Idle" and done["turns"] == 1 and done["lastResponse"] == ANSWER, done
    failed = tasks.core.read_namespaced_pod(pod.metadata.name, k8s_namespace).status.container_statuses[0]
    assert (failed.state.terminated.exit_code, failed.state.terminated.reason) == (137, "Error")
    answers = [m for m in stored_messages(redis_client, task_id) if m["role"] == "assistant"]
    assert [block.get("text") for m in answers for block in m["content"]] == [ANSWER]
    assert len(task_events(tasks, "victim", "TurnFailed")) == 1


def test_a_turn_container_oom_killed_under_its_memory_limit_says_so_and_runs_with_a_higher_limit(
    start_operator: StartOperator, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    start_operator()
    # A Python turn process needs far more than 24 MiB: the kernel kills it as it starts.
    tasks.create("hungry", {"prompt": "work", "model": "scripted", "script": {"default": ANSWER},
                            "resources": {"requests": {"memory": "16Mi"}, "limits": {"memory": "24Mi"}}})
    status = wait_for(lambda: message_with(tasks, "hungry", OOM), timeout=90,
                      what="the status saying the turn container was OOMKilled")
    assert status["failedAttempts"] >= 1 and status["phase"] in ("Pending", "Running"), status
    event = wait_for(lambda: task_events(tasks, "hungry", "TurnFailed"), timeout=30, what="a TurnFailed Event")[0]
    assert OOM in event.message, event.message
    [first] = [p for p in tasks.pods() if p.metadata.labels.get("job-name") == "hungry-t1"]
    terminated = first.status.container_statuses[0].state.terminated
    assert (terminated.reason, terminated.exit_code) == ("OOMKilled", 137)
    assert first.spec.containers[0].resources.limits["memory"] == "24Mi"

    tasks.patch("hungry", {"resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "1Gi"}}})
    done = wait_for(lambda: settled(tasks, "hungry"), timeout=150, what="a later attempt to run with the new limit")
    assert done["phase"] == "Idle" and done["turns"] == 1 and done["lastResponse"] == ANSWER, done
    last = max((j for j in tasks.jobs() if j.status.succeeded), key=lambda j: j.metadata.creation_timestamp)
    assert last.spec.template.spec.containers[0].resources.limits["memory"] == "1Gi"
    answers = [m for m in stored_messages(redis_client, f"{k8s_namespace}/hungry") if m["role"] == "assistant"]
    assert [block.get("text") for m in answers for block in m["content"]] == [ANSWER]


def test_a_turn_that_fails_on_its_configuration_says_why_in_the_status_and_event(
    start_operator: StartOperator, tasks: Tasks, k8s_namespace: str,
) -> None:
    """Not just "Error (exit code 1)": the turn's one-line error is its container's termination message (the Job's
    terminationMessagePolicy FallbackToLogsOnError), which the kubelet fills from the log's tail."""
    start_operator()
    # no OpenAI-compatible endpoint is configured for the turn pods: the provider refuses before any call
    tasks.create("misconfigured", {"prompt": "work", "model": "openai:gpt-4o"})
    why = "the openai provider needs OPENAI_BASE_URL"
    status = wait_for(lambda: message_with(tasks, "misconfigured", why), timeout=90,
                      what="the status naming why the turn container failed")
    assert f"container turn: Error (exit code 1): unicore-turn: {k8s_namespace}/misconfigured: " in status["message"]
    event = wait_for(lambda: task_events(tasks, "misconfigured", "TurnFailed"), timeout=30, what="TurnFailed")[0]
    assert why in event.message, event.message
