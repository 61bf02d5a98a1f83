"""A turn Job's events reconcile its task when something the reconcile reads of the Job changed, not on each one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from unicore_operator import reconcile
from unicore_operator.context import OperatorContext
from unicore_operator.settings import OperatorSettings

ANNOTATIONS = {"unicore.dev/task-id": "ns/demo"}


def job(status: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "demo-t1", "namespace": "ns", "uid": "j1", "annotations": ANNOTATIONS, **meta},
            "spec": {}, "status": status}


async def replay(ctx: OperatorContext, record_reconcile: Any, events: list[tuple[str, dict[str, Any]]]) -> None:
    """Each event through ``job_changed``, then until the reconcile it asked for (if any) has run."""
    workers = ctx.reconciles.start(record_reconcile, 1)
    for event_type, body in events:
        await reconcile.job_changed(ctx, body, event_type)
        await ctx.reconciles.join()
    for worker in workers:
        worker.cancel()


def test_only_changes_the_reconcile_reads_are_reconciled(monkeypatch: pytest.MonkeyPatch) -> None:
    reconciled: list[str] = []
    recorded: list[str] = []

    async def fake_record(ctx: Any, body: dict[str, Any], deleted: bool) -> str | None:
        outcome = reconcile.job_view(body).outcome
        recorded.append(outcome)
        return None if outcome == "running" and not deleted else ("deleted" if outcome == "running" else outcome)

    async def record_reconcile(key: tuple[str, str], reason: str) -> None:
        reconciled.append(reason)

    monkeypatch.setattr(reconcile, "record_job_end", fake_record)
    ctx = OperatorContext(settings=OperatorSettings(redis_url="redis://unused:6379/0", namespaces=("ns",)),
                          redis=None, kube=None, store=None)  # type: ignore[arg-type]
    ctx.inflight_jobs[("ns", "demo")] = "demo-t1"
    done = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    asyncio.run(replay(ctx, record_reconcile, [
        ("ADDED", job({})),
        ("MODIFIED", job({"active": 1, "startTime": "2026-01-01T00:00:00Z"})),  # nothing the reconcile reads
        ("MODIFIED", job({"active": 1, "ready": 1})),
        ("MODIFIED", job(done)),  # it ended: recorded, reconciled
        ("MODIFIED", job({**done, "completionTime": "2026-01-01T00:00:09Z"})),
        ("MODIFIED", job(done, deletionTimestamp="2026-01-01T00:05:00Z")),  # being deleted
        ("DELETED", job(done, deletionTimestamp="2026-01-01T00:05:00Z")),
    ]))
    assert reconciled == ["job-running", "job-succeeded", "job-succeeded", "job-succeeded"]
    assert recorded == ["running", "succeeded", "succeeded", "succeeded"]
    assert ctx.inflight_jobs == {} and ctx.job_states == {}
    ctx.job_executor.shutdown()


def test_an_end_that_could_not_be_recorded_is_tried_again_on_the_next_event(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    async def failing_record(ctx: Any, body: dict[str, Any], deleted: bool) -> str | None:
        calls.append("record")
        raise ConnectionError("redis is down")

    async def record_reconcile(key: tuple[str, str], reason: str) -> None:
        calls.append(reason)

    monkeypatch.setattr(reconcile, "record_job_end", failing_record)
    ctx = OperatorContext(settings=OperatorSettings(redis_url="redis://unused:6379/0", namespaces=("ns",)),
                          redis=None, kube=None, store=None)  # type: ignore[arg-type]
    done = job({"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]})
    asyncio.run(replay(ctx, record_reconcile, [("MODIFIED", done), ("MODIFIED", done)]))
    assert calls == ["record", "job-unrecorded", "record", "job-unrecorded"]
    ctx.job_executor.shutdown()
