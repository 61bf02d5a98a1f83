"""A task's command Jobs (submit_job) changed: reconcile the task, whose reconcile creates and collects them
(``unicore_operator.command_jobs``)."""

from __future__ import annotations

from typing import Any

import kopf

from unicore_operator.context import OperatorContext
from unicore_operator.indexes import COMMAND_JOB_SELECTOR, job_task_key


@kopf.on.event("batch", "v1", "jobs", labels=COMMAND_JOB_SELECTOR)
async def command_job_event(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    ctx: OperatorContext | None = memo.get("ctx")
    if ctx is None:
        return
    key = job_task_key(dict(body))
    if key is not None and ctx.watches(key[0]):
        ctx.reconciles.request(key, "command-job")
