"""The operator registers one set of Kopf indexes (the watchdog scans those, registering none of its own), and the
watchdog's views built from the operator's index values equal the views it builds from the bodies."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace
from typing import Any, cast

import kopf
from unicore.store.operator_state import TaskSnapshot
from unicore_operator import composition, indexes
from unicore_operator.reconcile import children_of
from unicore_operator.watchdog.adapter import AgentTaskViews
from unicore_operator.watchdog.views import agent_task_view, job_view, pod_view

NS = "team-a"
ANNOTATIONS = {"unicore.dev/task-id": f"{NS}/demo"}
LABELS = {"app.kubernetes.io/managed-by": "unicore-operator", "unicore.dev/task": "demo", "unicore.dev/turn": "3",
          "unicore.dev/attempt": "2"}

TASK: dict[str, Any] = {
    "apiVersion": "unicore.dev/v1alpha1", "kind": "AgentTask",
    "metadata": {"namespace": NS, "name": "demo", "uid": "t-uid", "generation": 4,
                 "labels": {"unicore.dev/root": "root-1"}, "creationTimestamp": "2026-01-01T00:00:00Z",
                 "managedFields": [{"manager": "kubectl"}], "annotations": {"big": "x" * 1000}},
    "spec": {"suspend": True, "agent": "a"},
    "status": {"phase": "Running", "activeJob": "demo-t3", "failedAttempts": 2},
}
JOB: dict[str, Any] = {
    "metadata": {"namespace": NS, "name": "demo-t3-a2", "uid": "j-uid", "labels": LABELS,
                 "annotations": ANNOTATIONS, "creationTimestamp": "2026-01-01T00:00:10Z"},
    "spec": {"activeDeadlineSeconds": 900, "suspend": False, "template": {"metadata": {"annotations": ANNOTATIONS}}},
    "status": {"startTime": "2026-01-01T00:00:11Z", "ready": 1,
               "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                               "message": "too long"}]},
}
POD: dict[str, Any] = {
    "metadata": {"namespace": NS, "name": "demo-t3-a2-xyz", "labels": {**LABELS, "job-name": "demo-t3-a2"},
                 "annotations": ANNOTATIONS, "creationTimestamp": "2026-01-01T00:00:12Z"},
    "spec": {"activeDeadlineSeconds": 600},
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                   "reason": "Unschedulable", "message": "0/2 nodes"}]},
}


def _index_functions() -> dict[str, tuple[str, str]]:
    composition.compose()
    registry = kopf.get_default_registry()
    return {str(h.id): (h.selector.group or "", str(h.selector.plural or h.selector.any_name))
            for h in registry._indexing.get_all_handlers()}


def test_one_index_per_object_kind() -> None:
    """No second index over AgentTasks: a task's children come from its Redis children set (``children_of``)."""
    found = _index_functions()
    assert set(found) == {"agenttask_index", "turnjob_index", "turnpod_index", "mcpserver_index", "agent_index",
                          "commandjob_index", "warmjob_index", "warmpod_index", "trigger_index"}
    kinds = Counter(found.values())
    # two over Jobs, of disjoint sets (label filters): turn Jobs, and command Jobs (submit_job)
    assert indexes.JOB_SELECTOR.keys() == indexes.COMMAND_JOB_SELECTOR.keys()
    assert all(indexes.JOB_SELECTOR[k] != indexes.COMMAND_JOB_SELECTOR[k] for k in indexes.JOB_SELECTOR
               if k != "app.kubernetes.io/managed-by")
    # and warm turn Jobs and pods by pool (issue 30): an assigned one is in the turn indexes too, by its task
    assert indexes.WARM_SELECTOR["unicore.dev/warm-pool"] is kopf.PRESENT
    assert kinds == {("unicore.dev", "agenttasks"): 1, ("batch", "jobs"): 3, ("", "pods"): 2,
                     ("unicore.dev", "mcpservers"): 1, ("unicore.dev", "agents"): 1,
                     ("unicore.dev", "agenttriggers"): 1}


def test_the_watchdog_views_from_the_index_values_equal_those_from_the_bodies() -> None:
    job_entry = asyncio.run(indexes.turnjob_index(body=JOB))  # type: ignore[arg-type]
    pod_entry = asyncio.run(indexes.turnpod_index(body=POD))  # type: ignore[arg-type]
    task_entry = asyncio.run(indexes.agenttask_index(body=TASK, namespace=NS, name="demo"))  # type: ignore[arg-type]
    assert job_entry == {(NS, "demo"): job_view(JOB)}
    assert pod_entry == {(NS, "demo"): pod_view(POD)}
    assert task_entry is not None
    views = AgentTaskViews()({key: [value] for key, value in task_entry.items()})
    assert views == {f"{NS}/demo": (agent_task_view(TASK),)}
    view = job_view(JOB)
    assert (view.task_id, view.turn, view.attempt, view.outcome, view.reason, view.finished, view.ready,
            view.active_deadline_seconds) == (f"{NS}/demo", 3, 2, "failed", "DeadlineExceeded: too long", True, 1,
                                              900)
    assert "managedFields" not in task_entry[(NS, "demo")]["metadata"]  # compact: no full bodies in the index


def test_agent_task_views_are_rebuilt_only_for_changed_bodies() -> None:
    body = indexes.compact_task(TASK)
    views = AgentTaskViews()
    first = views({(NS, "demo"): [body]})[f"{NS}/demo"][0]
    assert views({(NS, "demo"): [body]})[f"{NS}/demo"][0] is first
    changed = indexes.compact_task({**TASK, "status": {"phase": "Idle"}})
    assert views({(NS, "demo"): [changed]})[f"{NS}/demo"][0].phase == "Idle"
    assert views({}) == {}


def test_children_are_the_redis_children_set_with_phases_from_the_agenttask_index() -> None:
    def child(name: str, status: dict[str, Any], parent: str = "p", namespace: str = NS) -> dict[str, Any]:
        return indexes.compact_task({"metadata": {"namespace": namespace, "name": name},
                                     "spec": {"parentRef": {"name": parent}}, "status": status})

    ctx = SimpleNamespace(agenttasks={(NS, "p-b"): [child("p-b", {"phase": "Running"})],
                                      (NS, "p-a"): [child("p-a", {})],
                                      (NS, "other"): [child("other", {"phase": "Idle"}, parent="q")],
                                      ("team-b", "secret"): [child("secret", {"phase": "Idle"}, namespace="team-b")]})
    snap = TaskSnapshot(exists=True, children=(f"{NS}/p-b", f"{NS}/p-a", f"{NS}/p-deleted", "local-child",
                                               f"{NS}/other", "team-b/secret"))
    # Only children whose AgentTask names this task as parent: the Redis children set is writable by the namespace's
    # Redis user (issue 25: another parent's child and another namespace's task were shown as children).
    assert children_of(cast(Any, ctx), (NS, "p"), snap) == [{"name": "p-a", "phase": "Pending"},
                                                            {"name": "p-b", "phase": "Running"}]
