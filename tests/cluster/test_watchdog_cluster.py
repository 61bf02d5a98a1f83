"""The watchdog and /metrics on the real local control plane (real operator process, real turn processes, Redis).

- a turn pod asking for 8 GPUs on the 4-GPU node is reaped after the Pending threshold, the status says why, and
  after UNICORE_MAX_REAPS reaps the task is Failed;
- a hung turn (the turn process group is SIGSTOPped while the scripted model sleeps, so its heartbeat thread stops
  too: a frozen process, which is what a stale heartbeat means) is reaped and the task continues in a new turn
  that sees the watchdog's interruption note;
- /metrics after those runs: every metric the dashboards use is exported, and counters match what happened.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.operator_harness import OperatorProcess, Tasks, install_agent_rbac, install_crd
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

WATCHDOG_ENV = {
    "UNICORE_WATCHDOG_INTERVAL_SECONDS": "1",
    "UNICORE_PENDING_TIMEOUT_SECONDS": "4",
    "UNICORE_HEARTBEAT_TIMEOUT_SECONDS": "25",  # above the runtime's heartbeat interval (lease TTL / 3)
    "UNICORE_WATCHDOG_GRACE_SECONDS": "5",
    "UNICORE_MAX_REAPS": "2",
    "UNICORE_DEFAULT_GPUS": "1",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def crd(control_plane: Any) -> Any:
    install_crd(control_plane.kubeconfig)
    return control_plane


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path, port: int) -> Iterator[OperatorProcess]:
    install_agent_rbac(crd.kubeconfig, k8s_namespace)
    proc = OperatorProcess(crd.kubeconfig, redis_url, k8s_namespace, tmp_path / "operator.log",
                           UNICORE_HTTP_PORT=str(port), **WATCHDOG_ENV).start()
    yield proc
    proc.stop()
    print(f"--- operator log ({proc.log_path}):\n{proc.log(200)}")


@pytest.fixture
def tasks(crd: Any, k8s_namespace: str) -> Iterator[Tasks]:
    api = crd.api_client()
    yield Tasks(api, k8s_namespace)
    api.close()


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


def events(tasks: Tasks, name: str, reason: str) -> list[Any]:
    found = tasks.core.list_namespaced_event(tasks.namespace, field_selector=f"involvedObject.name={name}").items
    return [e for e in found if e.reason == reason]


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
    assert len(events(tasks, "greedy", "PodReaped")) >= 2
    assert wait_for(lambda: not [j for j in tasks.jobs() if j.metadata.deletion_timestamp is None
                                 and not (j.status.succeeded or j.status.failed)],
                    timeout=60, what="no live turn Job of the failed task")
    after = scrape(port)
    reaped = value(after, "unicore_jobs_reaped_total", reason="pending_timeout") - value(
        before, "unicore_jobs_reaped_total", reason="pending_timeout")
    assert reaped == 2
    assert value(after, "unicore_watchdog_scan_duration_seconds_count") > value(
        before, "unicore_watchdog_scan_duration_seconds_count")


def turn_processes(task_id: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.endswith(b"unicore-turn") for arg in argv) and task_id.encode() in argv:
            pids.append(int(entry.name))
    return pids


def test_hung_turn_is_reaped_and_the_task_continues_in_a_new_turn(
    operator: OperatorProcess, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str, port: int,
) -> None:
    task_id = f"{k8s_namespace}/sleepy"
    script = {"default": "ok", "tasks": {"sleepy": [
        {"tool_use": [{"name": "task_status", "input": {}}]},
        # The scripted model picks steps by the number of assistant messages: the frozen turn never answered, so
        # the new turn replays this step (20 s, heartbeating normally this time) and answers.
        {"sleep": 20, "text": "resumed after the interruption"},
    ]}}
    wait_for(lambda: scrape(port), timeout=60, what="the operator's /metrics")
    before = scrape(port)
    tasks.create("sleepy", {"prompt": "work", "model": "scripted", "script": script})
    wait_for(lambda: redis_client.llen(f"uc:{{{task_id}}}:messages") >= 3, timeout=90,
             what="the first turn's tool call and result")
    pids = wait_for(lambda: turn_processes(task_id), timeout=30, what="the turn process")
    groups = {os.getpgid(pid) for pid in pids}
    hung_jobs = {j.metadata.name for j in tasks.jobs()}
    try:
        for group in groups:
            os.killpg(group, signal.SIGSTOP)  # the whole turn (model sleep + heartbeat thread) freezes

        def reaped() -> list[Any]:
            return events(tasks, "sleepy", "PodReaped")

        [event] = wait_for(reaped, timeout=120, what="a PodReaped event for the hung turn")
        assert "heartbeat_stale" in event.message
    finally:
        for group in groups:
            try:
                os.killpg(group, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def answered() -> list[str] | None:
        texts = []
        for raw in redis_client.lrange(f"uc:{{{task_id}}}:messages", 0, -1):
            message = json.loads(raw)
            texts += [(message["role"], message["turn_number"], b.get("text", "")) for b in message["content"]
                      if "text" in b]
        done = [t for t in texts if t[2] == "resumed after the interruption"]
        return texts if done else None

    texts = wait_for(answered, timeout=120, what="the task to continue in a new turn")
    notes = [t for t in texts if t[0] == "user" and "[watchdog] The previous turn was interrupted" in t[2]]
    assert notes, texts
    resumed = next(i for i, t in enumerate(texts) if t[2] == "resumed after the interruption")
    assert texts.index(notes[0]) < resumed  # the new Job drained the note, then the model answered
    # (the interrupted turn was never ended, so the runtime continues it: same turn number, a new Job)
    jobs = {j.metadata.name for j in tasks.jobs() if (j.metadata.annotations or {}).get("unicore.dev/task-id") == task_id}
    assert jobs and not jobs & hung_jobs, (jobs, hung_jobs)  # the hung Job was deleted; a new one answered
    wait_for(lambda: tasks.phase("sleepy") == "Idle", timeout=60, what="sleepy Idle")
    after = scrape(port)
    assert value(after, "unicore_jobs_reaped_total", reason="heartbeat_stale") - value(
        before, "unicore_jobs_reaped_total", reason="heartbeat_stale") == 1


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
    assert value(after, "unicore_turn_duration_seconds_count") - value(before, "unicore_turn_duration_seconds_count") == 3
    assert value(after, "unicore_tasks", namespace=tasks.namespace, phase="Idle") == 3
    names = exported_names(port)
    missing = {name: where for name, where in all_dashboard_metrics().items() if name not in names}
    assert not missing, f"dashboards use metrics /metrics does not export: {missing}"
