"""The watchdog and /metrics on the real local control plane (real operator process, real turn processes, Redis).
The turn pods are real containers on the real node (marker real_node), except in the hung-tool test: its hanging tool
is test code (unicore_devcluster.fixture_tools) that the agent image does not hold, so it runs on the pod runner.

- a turn pod asking for 8 GPUs on the 4-GPU node is reaped after the Pending threshold, the status says why, and
  after UNICORE_MAX_REAPS reaps the task is Failed;
- a hung turn (a custom tool, loaded through UNICORE_EXTRA_TOOLS, that blocks longer than UNICORE_STALL_SECONDS:
  the turn's progress-aware heartbeat stops, nothing is frozen from outside) is reaped; the task continues in a new
  turn whose model request holds the watchdog's note and a synthetic error result for the unanswered tool call, and
  the hung process, woken by SIGTERM, writes nothing;
- the operator SIGKILLed while a turn Job runs: after the restart (watchdog on) no duplicate Job, no reap, and a
  consistent status;
- /metrics after those runs: every metric the dashboards use is exported, and counters match what happened.
"""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from unicore.store.gates import open_gate
from unicore.turn.history import INTERRUPTED_TEXT
from unicore_devcluster.fixture_tools import SPEC as SLOW_TOOLS

from tests.cluster.operator_harness import (
    GATE,
    OperatorProcess,
    StartOperator,
    Tasks,
    gated_script,
    operator_factory,
    running_pods,
    stored_messages,
    task_events,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

WATCHDOG_ENV = {
    "UNICORE_WATCHDOG_INTERVAL_SECONDS": "1",
    "UNICORE_PENDING_TIMEOUT_SECONDS": "8",  # well above scheduling + pod start on a loaded 2-core machine
    "UNICORE_HEARTBEAT_TIMEOUT_SECONDS": "25",  # above the runtime's heartbeat interval (lease TTL / 3)
    "UNICORE_WATCHDOG_GRACE_SECONDS": "5",
    "UNICORE_MAX_REAPS": "2",
    "UNICORE_DEFAULT_GPUS": "1",
}
# Turn pods of the hang test: a step longer than 3 s counts as hung, and the slow_step fixture tool is known (the pod
# runner starts turn processes from the repo's venv, where unicore_devcluster is importable; no host path in env;
# the agent image has no unicore_devcluster, hence the pod runner for this test).
HANG_ENV = {
    "UNICORE_STALL_SECONDS": "3",
    "UNICORE_AGENT_EXTRA_ENV": json.dumps({"UNICORE_EXTRA_TOOLS": SLOW_TOOLS}),
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path, port: int,
                   ) -> Iterator[StartOperator]:
    """Start the operator (WATCHDOG_ENV + ``extra``, /metrics on ``port``); stopped and its log and the turn pods'
    logs printed at teardown."""
    env = {"UNICORE_HTTP_PORT": str(port), **WATCHDOG_ENV}
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env, pod_logs=True) as start:
        yield start


@pytest.fixture
def operator(start_operator: StartOperator) -> OperatorProcess:
    return start_operator()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def exported_names(port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            if kind == "info":
                names.add(f"{name}_info")
        elif line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.mark.real_node
def test_unschedulable_gpu_pod_is_reaped_with_the_schedulers_reason_then_fails(
    operator: OperatorProcess, tasks: Tasks, port: int,
) -> None:
    wait_for(lambda: scrape(port), timeout=60, what="the operator's /metrics")
    before = scrape(port)
    tasks.create("greedy", {"prompt": "hi", "model": "scripted", "gpus": 8, "script": {"default": "ok"}})

    def reaped_message() -> str | None:
        status = (tasks.get("greedy") or {}).get("status") or {}
        message = str(status.get("message") or "")
        return message if "pending_timeout" in message else None

    message = wait_for(reaped_message, timeout=90, what="status.message naming the Pending reap")
    assert "Insufficient nvidia.com/gpu" in message, message
    assert "FailedScheduling" in message, message

    def failed() -> dict[str, Any] | None:
        status = (tasks.get("greedy") or {}).get("status") or {}
        return status if status.get("phase") == "Failed" else None

    status = wait_for(failed, timeout=120, what="phase Failed after UNICORE_MAX_REAPS=2 reaps")
    assert "reaped 2 times in a row" in status["message"] and "Insufficient nvidia.com/gpu" in status["message"]
    assert status.get("failedAttempts", 0) >= 2
    # the reaper records the status first and posts the Event last: wait for the second reap's Event
    def reap_events() -> list[Any] | None:
        found = task_events(tasks, "greedy", "PodReaped")
        return found if len(found) >= 2 else None

    events = wait_for(reap_events, timeout=30, what="a PodReaped event for each of the 2 reaps")
    assert all("pending_timeout" in event.message for event in events)
    assert wait_for(lambda: not [j for j in tasks.jobs() if j.metadata.deletion_timestamp is None
                                 and not (j.status.succeeded or j.status.failed)],
                    timeout=60, what="no live turn Job of the failed task")
    after = scrape(port)
    reaped = value(after, "unicore_jobs_reaped_total", reason="pending_timeout") - value(
        before, "unicore_jobs_reaped_total", reason="pending_timeout")
    assert reaped == 2
    assert value(after, "unicore_watchdog_scan_duration_seconds_count") > value(
        before, "unicore_watchdog_scan_duration_seconds_count")


def texts_of(message: dict[str, Any]) -> list[str]:
    return [block["text"] for block in message["content"] if "text" in block]


def test_hung_tool_stops_the_heartbeat_is_reaped_and_the_next_turn_gets_synthetic_results(
    start_operator: StartOperator, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str, port: int,
) -> None:
    start_operator(**HANG_ENV)
    task_id = f"{k8s_namespace}/sleepy"
    script = {"default": "ok", "tasks": {"sleepy": [
        {"tool_use": [{"name": "slow_step", "input": {"seconds": 3600}}]},  # hangs far past the stall limit
        # The scripted model picks steps by the number of assistant messages in the request: the new turn's
        # request repeats the unanswered call, so this step answers with the note and the results it was sent.
        {"echo": True, "echo_results": True},
    ]}}
    wait_for(lambda: scrape(port), timeout=60, what="the operator's /metrics")
    before = scrape(port)
    tasks.create("sleepy", {"prompt": "work", "model": "scripted", "tools": ["slow_step"], "script": script})

    def hung_call() -> dict[str, Any] | None:
        calls = [b["toolUse"] for m in stored_messages(redis_client, task_id) for b in m["content"] if "toolUse" in b]
        return calls[0] if calls else None

    call = wait_for(hung_call, timeout=90, what="the first turn's slow_step call")
    assert call["name"] == "slow_step"
    hung_pods = wait_for(lambda: running_pods(tasks), timeout=30, what="the hung turn's pod")
    hung_jobs = {j.metadata.name for j in tasks.jobs()}
    [event] = wait_for(lambda: task_events(tasks, "sleepy", "PodReaped"), timeout=120,
                       what="a PodReaped event for the hung turn")
    assert "heartbeat_stale" in event.message, event.message
    assert redis_client.hget(f"uc:{{{task_id}}}:task", "last_reap_reason") == "heartbeat_stale"

    synthetic = f"[error] {call['toolUseId']}: {INTERRUPTED_TEXT}"

    def answer() -> dict[str, Any] | None:
        found = [m for m in stored_messages(redis_client, task_id)
                 if m["role"] == "assistant" and any(synthetic in t for t in texts_of(m))]
        return found[0] if found else None

    answered = wait_for(answer, timeout=120, what="the new turn's answer showing the synthetic result")
    [text] = texts_of(answered)
    # what the new turn's model was sent: the watchdog's note (echo) and one synthetic error result (echo_results)
    assert "[watchdog] The previous turn was interrupted and its Job was stopped (heartbeat_stale)" in text, text
    assert text.splitlines()[-1] == synthetic, text
    messages = stored_messages(redis_client, task_id)
    notes = [i for i, m in enumerate(messages) if m["role"] == "user"
             and any(t.startswith("[watchdog] The previous turn was interrupted") for t in texts_of(m))]
    assert len(notes) == 1 and notes[0] < messages.index(answered)  # the interruption is recorded in history
    wait_for(lambda: tasks.phase("sleepy") == "Idle", timeout=60, what="sleepy Idle")
    jobs = {j.metadata.name for j in tasks.jobs()
            if (j.metadata.annotations or {}).get("unicore.dev/task-id") == task_id}
    assert jobs and not jobs & hung_jobs, (jobs, hung_jobs)  # the hung Job was deleted; a new one answered
    hung_pod_names = {pod.metadata.name for pod in hung_pods}
    wait_for(lambda: not hung_pod_names & {pod.metadata.name for pod in tasks.pods()}, timeout=90,
             what="the hung pod to be gone")
    # the hung process, woken by SIGTERM, found its lease gone and wrote nothing: no late result, empty inbox
    results = [b["toolResult"] for m in stored_messages(redis_client, task_id) for b in m["content"]
               if "toolResult" in b]
    assert results == [] and redis_client.llen(f"uc:{{{task_id}}}:inbox") == 0
    after = scrape(port)
    assert value(after, "unicore_jobs_reaped_total", reason="heartbeat_stale") - value(
        before, "unicore_jobs_reaped_total", reason="heartbeat_stale") == 1


@pytest.mark.real_node
def test_operator_sigkill_while_a_job_runs_then_restart_with_the_watchdog_on(
    start_operator: StartOperator, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str, port: int,
) -> None:
    operator = start_operator()
    task_id = f"{k8s_namespace}/steady"
    # its model call lasts until the gate opens, after the restarted operator's checks below
    tasks.create("steady", {"prompt": "count", "model": "scripted", "gpus": 0, "script": gated_script("steady")})
    wait_for(lambda: running_pods(tasks) and redis_client.exists(f"uc:{{{task_id}}}:lease"), timeout=60,
             what="the turn process to run")
    [job] = tasks.jobs()
    operator.kill()
    restarted = start_operator()
    assert restarted is not operator

    def scanned_while_running() -> bool:
        samples = scrape(port)
        return value(samples, "unicore_watchdog_scan_duration_seconds_count") >= 3

    wait_for(scanned_while_running, timeout=60, what="three watchdog scans by the restarted operator")
    assert [(j.metadata.name, j.metadata.uid) for j in tasks.jobs()] == [(job.metadata.name, job.metadata.uid)]
    assert not (tasks.jobs()[0].status.succeeded or tasks.jobs()[0].status.failed), "the turn ended too early"
    open_gate(redis_client, task_id, GATE)

    def idle() -> dict[str, Any] | None:
        status = (tasks.get("steady") or {}).get("status") or {}
        return status if status.get("phase") == "Idle" and status.get("turns") == 1 else None

    status = wait_for(idle, timeout=120, what=f"the turn to finish ({tasks.get('steady')})")
    assert status["activeJob"] == "" and status["failedAttempts"] == 0, status
    assert [(j.metadata.name, j.metadata.uid) for j in tasks.jobs()] == [(job.metadata.name, job.metadata.uid)]
    assert tasks.jobs()[0].status.succeeded == 1
    assert not task_events(tasks, "steady", "PodReaped")
    assert [m["role"] for m in stored_messages(redis_client, task_id)] == ["user", "assistant"]
    assert redis_client.hget(f"uc:{{{task_id}}}:task", "last_reap_reason") is None
    after = scrape(port)  # the restarted process created no Job and reaped nothing
    assert value(after, "unicore_jobs_created_total") == 0
    assert not [k for k, v in after.items() if k[0] == "unicore_jobs_reaped_total" and v]


@pytest.mark.real_node
def test_metrics_match_what_happened_and_cover_every_dashboard_metric(
    operator: OperatorProcess, tasks: Tasks, port: int,
) -> None:
    from tests.unit.test_dashboards import all_dashboard_metrics

    wait_for(lambda: scrape(port), timeout=60, what="the operator's /metrics")
    before = scrape(port)
    script = {"default": "done"}
    for name in ("m1", "m2", "m3"):
        tasks.create(name, {"prompt": "hi", "model": "scripted", "script": script})
    wait_for(lambda: all(tasks.phase(n) == "Idle" for n in ("m1", "m2", "m3")), timeout=120, what="3 Idle tasks")

    def counted() -> dict[Any, float] | None:
        after = scrape(port)
        finished = value(after, "unicore_turns_finished_total") - value(before, "unicore_turns_finished_total")
        return after if finished >= 3 else None

    after = wait_for(counted, timeout=30, what="3 finished turns on /metrics")
    assert value(after, "unicore_turns_finished_total") - value(before, "unicore_turns_finished_total") == 3
    assert value(after, "unicore_turns_started_total") - value(before, "unicore_turns_started_total") == 3
    durations = "unicore_turn_duration_seconds_count"
    assert value(after, durations) - value(before, durations) == 3
    assert value(after, "unicore_tasks", namespace=tasks.namespace, phase="Idle") == 3
    names = exported_names(port)
    missing = {name: where for name, where in all_dashboard_metrics().items() if name not in names}
    assert not missing, f"dashboards use metrics /metrics does not export: {missing}"
