"""AgentSchedules on the real local control plane (issue 31): a schedule every minute with ``Forbid``, run by a
host-process operator whose turns run on the pod runner.

The operator is SIGKILLed right after it created the first run's AgentTask and before the schedule's status recorded
the run (``UNICORE_FAULTS=kill:after scheduled task created``, at the minute boundary); the next operator finds the
run due again and creates nothing twice (the task's name is the schedule's and the minute's). That run's turn waits
at a gate past the next minute: the next run waits (an Event says so) and starts, once, when the first is Idle."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client
from unicore.store.gates import open_gate

from tests.cluster.operator_harness import GROUP, VERSION, StartOperator, Tasks, operator_factory
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

SCHEDULES = "agentschedules"


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env={"UNICORE_DEFAULT_GPUS": "0"}) as start:
        yield start


def schedule_events(tasks: Tasks, reason: str) -> list[Any]:
    found = tasks.core.list_namespaced_event(tasks.namespace, field_selector="involvedObject.name=minutely").items
    return [event for event in found if event.reason == reason]


def runs(tasks: Tasks) -> list[dict[str, Any]]:
    return sorted((task for task in tasks.all() if (task["metadata"].get("labels") or {}).get("unicore.dev/schedule")
                   == "minutely"), key=lambda task: task["metadata"]["name"])


def phase(task: dict[str, Any]) -> str:
    return str((task.get("status") or {}).get("phase") or "")


def test_a_minutely_forbid_schedule_runs_once_per_minute_across_an_operator_killed_at_the_boundary(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    first = start_operator(UNICORE_FAULTS="kill:after scheduled task created")
    schedule = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentSchedule", "metadata": {"name": "minutely"},
                "spec": {"schedule": "* * * * *", "concurrencyPolicy": "Forbid", "taskTemplate": {"spec": {
                    "prompt": "Write the report.", "model": "scripted", "gpus": 0,
                    "script": {"tasks": {"minutely-*": [{"gate": "go", "timeout": 280, "text": "Report done."}]}}}}}}
    custom = client.CustomObjectsApi(crd.api_client())
    created = custom.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, SCHEDULES, schedule)
    assert (created["spec"]["successfulTasksHistoryLimit"], created["spec"]["suspend"]) == (3, False)  # defaults

    assert first.proc is not None
    wait_for(lambda: first.proc is not None and first.proc.poll() is not None, timeout=90,
             what="the operator to die right after it created the first run's task")
    (run_1,) = runs(tasks)
    status = custom.get_namespaced_custom_object(GROUP, VERSION, k8s_namespace, SCHEDULES, "minutely").get("status")
    assert not (status or {}).get("lastScheduleTime")  # it died before recording the run

    start_operator()  # the same run is due again: its create is a 409, nothing twice
    name_1 = run_1["metadata"]["name"]
    scheduled_1 = datetime.datetime.fromtimestamp(int(name_1.rsplit("-", 1)[1]) * 60, datetime.UTC)

    def recorded() -> dict[str, Any] | None:
        found = custom.get_namespaced_custom_object(GROUP, VERSION, k8s_namespace, SCHEDULES, "minutely")
        st = found.get("status") or {}
        return st if st.get("lastScheduleTime") == scheduled_1.strftime("%Y-%m-%dT%H:%M:%SZ") else None

    st = wait_for(recorded, timeout=30, interval=0.2, what="the restarted operator to record the first run")
    assert st["lastStartedTask"] == name_1 and st["active"] == [name_1] and st["activeCount"] == 1
    assert [task["metadata"]["name"] for task in runs(tasks)] == [name_1]

    # the next minute comes while the first run's turn waits at its gate: Forbid holds the next run
    wait_for(lambda: schedule_events(tasks, "Waiting"), timeout=90, interval=0.5,
             what="the next run to wait for the active one (an Event)")
    assert [task["metadata"]["name"] for task in runs(tasks)] == [name_1]
    open_gate(redis_client, f"{k8s_namespace}/{name_1}", "go")
    later = wait_for(lambda: (found := runs(tasks)) and len(found) == 2 and found, timeout=90, interval=0.2,
                     what="the held run to start once the first one is Idle")
    done = next(task for task in later if task["metadata"]["name"] == name_1)
    assert phase(done) == "Idle"
    assert done["status"]["origin"] == {"kind": "AgentSchedule", "name": "minutely",
                                        "at": scheduled_1.strftime("%Y-%m-%dT%H:%M:%SZ")}
    name_2 = later[1]["metadata"]["name"]
    assert int(name_2.rsplit("-", 1)[1]) == int(name_1.rsplit("-", 1)[1]) + 1  # the next minute's run, late
    assert (later[1]["metadata"]["ownerReferences"][0]["kind"], later[1]["metadata"]["annotations"][
        "unicore.dev/scheduled-at"]) == ("AgentSchedule", (scheduled_1 + datetime.timedelta(minutes=1)).strftime(
            "%Y-%m-%dT%H:%M:%SZ"))
    assert len(schedule_events(tasks, "Started")) >= 1 and len({e.message for e in schedule_events(
        tasks, "Waiting")}) == 1  # one Event for the held run
