"""AgentSchedules on the real local control plane (issue 31): a schedule every minute with ``Forbid``, run by a
host-process operator whose turns run on the pod runner.

An earlier run of the schedule is still active at the minute: Forbid holds the minute's run (an Event says so) until
the earlier one is Idle; the held run then starts late, and the operator is SIGKILLed right after it created the
run's AgentTask, before the schedule's status recorded the run (``UNICORE_FAULTS=kill:after scheduled task
created``). The next operator finds the run due again and creates nothing twice (the task's name is the schedule's
and the minute's). One minute boundary: the test takes about 30 s plus the operator's start-ups."""

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


def test_a_minutely_forbid_schedule_holds_its_run_for_an_active_one_then_starts_it_once_across_an_operator_kill(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    script = {"tasks": {"minutely-*": [{"gate": "go", "timeout": 280, "text": "Report done."}]}}
    # an earlier run of the schedule, still active: its turn waits at its gate
    custom = client.CustomObjectsApi(crd.api_client())
    custom.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, "agenttasks", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentTask",
        "metadata": {"name": "minutely-1", "labels": {"unicore.dev/schedule": "minutely"}},
        "spec": {"prompt": "Write the report.", "model": "scripted", "gpus": 0, "script": script}})
    first = start_operator(UNICORE_FAULTS="kill:after scheduled task created")
    schedule = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentSchedule", "metadata": {"name": "minutely"},
                "spec": {"schedule": "* * * * *", "concurrencyPolicy": "Forbid", "taskTemplate": {"spec": {
                    "prompt": "Write the report.", "model": "scripted", "gpus": 0, "script": script}}}}
    created = custom.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, SCHEDULES, schedule)
    assert (created["spec"]["successfulTasksHistoryLimit"], created["spec"]["suspend"]) == (3, False)  # defaults

    # the next minute comes while the earlier run works: Forbid holds this minute's run
    wait_for(lambda: schedule_events(tasks, "Waiting"), timeout=90, interval=0.5,
             what="the minute's run to wait for the active one (an Event)")
    assert [task["metadata"]["name"] for task in runs(tasks)] == ["minutely-1"]
    open_gate(redis_client, f"{k8s_namespace}/minutely-1", "go")

    # the earlier run ends: the held run starts late, and the operator dies right after creating its task
    assert first.proc is not None
    wait_for(lambda: first.proc is not None and first.proc.poll() is not None, timeout=90,
             what="the operator to die right after it created the held run's task")
    (held,) = [task for task in runs(tasks) if task["metadata"]["name"] != "minutely-1"]
    name = held["metadata"]["name"]
    scheduled = datetime.datetime.fromtimestamp(int(name.rsplit("-", 1)[1]) * 60, datetime.UTC)
    stamp = scheduled.strftime("%Y-%m-%dT%H:%M:%SZ")
    status = custom.get_namespaced_custom_object(GROUP, VERSION, k8s_namespace, SCHEDULES, "minutely").get("status")
    assert (status or {}).get("lastScheduleTime") != stamp  # it died before recording the run

    start_operator()  # the same run is due again: its create is a 409, nothing twice

    def recorded() -> dict[str, Any] | None:
        found = custom.get_namespaced_custom_object(GROUP, VERSION, k8s_namespace, SCHEDULES, "minutely")
        st = found.get("status") or {}
        return st if st.get("lastScheduleTime") == stamp else None

    st = wait_for(recorded, timeout=30, interval=0.2, what="the restarted operator to record the run")
    assert st["lastStartedTask"] == name
    assert sorted(task["metadata"]["name"] for task in runs(tasks)) == sorted(["minutely-1", name])  # once
    assert (held["metadata"]["ownerReferences"][0]["kind"], held["metadata"]["annotations"][
        "unicore.dev/scheduled-at"]) == ("AgentSchedule", stamp)
    open_gate(redis_client, f"{k8s_namespace}/{name}", "go")
    done = wait_for(lambda: (task := tasks.get(name)) and phase(task) == "Idle" and task, timeout=120,
                    interval=0.2, what="the run answered")
    assert done["status"]["origin"] == {"kind": "AgentSchedule", "name": "minutely", "at": stamp}
    assert len({event.message for event in schedule_events(tasks, "Waiting")}) == 1  # one Event for the held run
