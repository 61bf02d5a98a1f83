"""A turn pod's end is checked against the task's lease once, not on each of its later watch events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from unicore_operator.context import OperatorContext
from unicore_operator.handlers import jobs
from unicore_operator.settings import OperatorSettings

META = {"namespace": "ns", "annotations": {"unicore.dev/task-id": "ns/demo"},
        "labels": {"batch.kubernetes.io/job-name": "demo-t1"}}


def pod(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {**META, "name": name, "uid": f"uid-{name}"}, "status": {"phase": phase}}


def test_the_lease_is_checked_once_per_ended_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[tuple[str, str | None]] = []

    async def fake_break(ctx: Any, body: dict[str, Any], event_type: str | None) -> None:
        checked.append((body["metadata"]["name"], event_type))

    monkeypatch.setattr(jobs, "break_dead_lease", fake_break)
    ctx = OperatorContext(settings=OperatorSettings(redis_url="redis://unused:6379/0", namespaces=("ns",)),
                          redis=None, kube=None, store=None)  # type: ignore[arg-type]
    handler: Any = jobs.turn_pod_event
    for event_type, body in [("MODIFIED", pod("a", "Running")), ("MODIFIED", pod("a", "Succeeded")),
                             ("MODIFIED", pod("a", "Succeeded")), ("DELETED", pod("a", "Succeeded")),
                             ("MODIFIED", pod("b", "Running")), ("DELETED", pod("b", "Running"))]:
        asyncio.run(handler(event={"type": event_type}, body=body, memo={"ctx": ctx}))
    assert checked == [("a", "MODIFIED"), ("a", "MODIFIED"), ("b", "MODIFIED"), ("b", "DELETED")]
    assert ctx.ended_pods == set()  # forgotten with the pod
    ctx.job_executor.shutdown()
