"""The operator patches an AgentTask's status once per change, not once per reconcile until its watch event arrives."""

from __future__ import annotations

import asyncio
from typing import Any

from unicore.api.schema import InboxMessage
from unicore.store.operator_state import TaskSnapshot
from unicore.store.records import TaskRecord
from unicore_operator import reconcile
from unicore_operator.context import OperatorContext
from unicore_operator.phases import TaskObservation
from unicore_operator.settings import OperatorSettings


class Kube:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.patches.append(status)

    def post_event(self, body: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        pass


def make_ctx(kube: Kube) -> OperatorContext:
    settings = OperatorSettings(redis_url="redis://unused:6379/0", namespaces=("ns",))
    return OperatorContext(settings=settings, redis=None, kube=kube, store=None)  # type: ignore[arg-type]


def body(status: dict[str, Any], uid: str = "u1", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "t", "namespace": "ns", "uid": uid, "generation": 1}, "spec": spec or {},
            "status": status}


def mirror(ctx: OperatorContext, task: dict[str, Any], active: str | None, turns: int = 0) -> None:
    snap = TaskSnapshot(exists=True, record={"turns": str(turns), "depth": "0"})
    asyncio.run(reconcile._mirror_status(ctx, task, snap, TaskObservation(active_job=active), []))


def test_a_status_is_patched_once_while_its_watch_event_is_on_its_way() -> None:
    kube = Kube()
    ctx = make_ctx(kube)
    stale = body({})
    mirror(ctx, stale, "t-t1")
    mirror(ctx, stale, "t-t1")  # the Job's ADDED event: the index still shows the old status
    assert len(kube.patches) == 1 and kube.patches[0]["phase"] == "Running"
    mirror(ctx, stale, "t-t1", turns=1)  # something did change: patched, still compared with what was written
    assert len(kube.patches) == 2 and kube.patches[1]["turns"] == 1
    caught_up = body(reconcile.merge_patch({}, kube.patches[-1]))
    mirror(ctx, caught_up, "t-t1", turns=1)
    assert len(kube.patches) == 2 and ("ns", "t") not in ctx.written_status  # the index speaks for itself again
    ctx.job_executor.shutdown()


def test_a_status_written_by_someone_else_or_a_new_object_is_compared_as_indexed() -> None:
    kube = Kube()
    ctx = make_ctx(kube)
    mirror(ctx, body({}), "t-t1")
    other = body({**kube.patches[0], "phase": "Idle", "activeJob": ""})
    mirror(ctx, other, "t-t1")  # the index shows a status we did not write: ours is written again
    assert len(kube.patches) == 2
    ctx.written_status.clear()
    mirror(ctx, body({}), "t-t1")
    mirror(ctx, body({}, uid="u2"), "t-t1")  # deleted and created again under the same name
    assert len(kube.patches) == 4
    ctx.job_executor.shutdown()


def test_merge_patch_is_rfc_7386() -> None:
    target = {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]}
    assert reconcile.merge_patch(target, {"b": {"c": None, "x": 1}, "e": [3], "a": None}) == {
        "b": {"d": 3, "x": 1}, "e": [3]}
    assert target == {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]}


class RecordingStore:
    """What ``report_failure`` needs of the store: a child record with a parent; records every queued report."""

    def __init__(self) -> None:
        self.queued: list[tuple[str, str]] = []

    def get_task(self, task_id: str) -> TaskRecord:
        return TaskRecord(id=task_id, name="t", parent="ns/boss", root="ns/boss", depth=1, turns=2)

    def queue_message(self, task_id: str, message: InboxMessage) -> bool:
        self.queued.append((task_id, message.id))
        return True

    def activate(self, task_id: str, reason: str) -> None:
        pass


def test_a_failed_child_is_reported_when_its_status_changes_not_at_every_reconcile() -> None:
    kube, store = Kube(), RecordingStore()
    ctx = make_ctx(kube)
    ctx.store = store  # type: ignore[assignment]
    snap = TaskSnapshot(exists=True, record={"turns": "2", "depth": "1", "parent": "ns/boss"})
    failed = TaskObservation(failed_attempts=4, max_retries=3, last_failure="OOMKilled")

    def reconcile_once(task: dict[str, Any]) -> None:
        asyncio.run(reconcile._mirror_status(ctx, task, snap, failed, []))

    child_spec = {"parentRef": {"name": "boss"}}
    reconcile_once(body({}, spec=child_spec))
    assert store.queued == [("ns/boss", "failed:ns/t:1")] and kube.patches[-1]["phase"] == "Failed"
    caught_up = body(reconcile.merge_patch({}, kube.patches[-1]), spec=child_spec)
    for _ in range(3):  # the periodic resyncs of a task that stays Failed
        reconcile_once(caught_up)
    assert len(store.queued) == 1 and len(kube.patches) == 1
    ctx.job_executor.shutdown()
