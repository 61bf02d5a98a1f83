"""Turn Job events -> outcome accounting, AgentTask status, and the next turn."""

from __future__ import annotations

from typing import Any

import kopf

from unicore_operator.context import OperatorContext
from unicore_operator.indexes import JOB_SELECTOR
from unicore_operator.reconcile import job_changed


@kopf.on.event("batch", "v1", "jobs", labels=JOB_SELECTOR)
async def turn_job_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    ctx: OperatorContext | None = memo.get("ctx")
    if ctx is None:
        return
    await job_changed(ctx, dict(body), event.get("type"))
