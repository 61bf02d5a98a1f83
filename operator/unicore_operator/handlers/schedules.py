"""AgentSchedules (``unicore_operator.schedules``): a timer per schedule checks what is due."""

from __future__ import annotations

from typing import Any

import kopf

from unicore_operator import names, schedules
from unicore_operator.context import OperatorContext


def _ctx(memo: kopf.Memo) -> OperatorContext | None:
    ctx: OperatorContext | None = memo.get("ctx")
    return ctx if ctx is not None and ctx.ready.is_set() else None


@kopf.timer(names.GROUP, names.VERSION, names.SCHEDULE_PLURAL, interval=schedules.SCHEDULE_CHECK_SECONDS,
            id="schedule")
async def check_schedule(*, body: kopf.Body, namespace: str | None, patch: kopf.Patch, memo: kopf.Memo,
                         **_: Any) -> None:
    ctx = _ctx(memo)
    if ctx is None or namespace is None or not ctx.watches(namespace):
        return  # not started yet: the next tick
    if (body.get("metadata") or {}).get("deletionTimestamp"):
        return
    status: dict[str, Any] = {}
    await schedules.check(ctx, dict(body), status)
    current = dict(body.get("status") or {})
    changed = {key: value for key, value in status.items() if current.get(key) != value}
    if changed:
        patch.status.update(changed)


@kopf.on.delete(names.GROUP, names.VERSION, names.SCHEDULE_PLURAL, id="forget-schedule", optional=True)
async def schedule_deleted(*, namespace: str | None, name: str, **_: Any) -> None:
    if namespace is not None:
        schedules.forget(namespace, name)
