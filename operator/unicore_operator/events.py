"""Event reasons posted on AgentTasks, and the one helper that posts them. The watchdog adds PodReaped."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from unicore_operator.context import OperatorContext

TURN_STARTED = "TurnStarted"
TURN_ENDED = "TurnEnded"
TURN_FAILED = "TurnFailed"
TURN_JOB_DELETED = "TurnJobDeleted"
CHILD_SPAWNED = "ChildSpawned"
SUSPENDED = "Suspended"
RESUMED = "Resumed"
INVALID_SPEC = "InvalidSpec"
CHILD_REFUSED = "ChildRefused"  # a child that widens its parent or does not fit its tree (admission.py)
RETRIES_EXHAUSTED = "RetriesExhausted"
JOB_SUBMITTED = "JobSubmitted"  # a command Job (submit_job) was created (command_jobs.py)
JOB_ENDED = "JobEnded"  # its result was delivered to the task

NORMAL = "Normal"
WARNING = "Warning"


def post(ctx: OperatorContext, body: dict[str, Any], event_type: str, reason: str, message: str) -> None:
    """Post an Event on the AgentTask ``body`` without waiting for it (best effort, see ``KubeClients.post_event``)."""
    task = asyncio.get_running_loop().create_task(
        asyncio.to_thread(ctx.kube.post_event, body, event_type, reason, message)
    )
    ctx.background.append(task)
    task.add_done_callback(lambda t: ctx.background.remove(t) if t in ctx.background else None)
