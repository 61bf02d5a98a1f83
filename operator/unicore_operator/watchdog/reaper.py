"""Carry out reap actions: confirm, fence Redis, account the failure, requeue or fail the task, delete the Job.

Order for a task's stuck turn (every step idempotent; a crash between steps is repaired by the next scan):
1. confirm absence-based reasons with ONE API read of the missing object (caches may lag; never act on a gap), and
   an admission timeout with one read of the Job (still suspended: its queue has not just admitted it);
2. Redis: release the lease if it still holds the reaped turn's token and mark the task idle, recording
   ``last_reap_reason`` (a zombie that wakes up finds its lease gone: every fenced write is refused);
3. account the reap as a failed attempt in the operator's per-task hash (the same counter failed turns use, so
   ``status.failedAttempts`` and the Failed phase come from one place), under the attempt's Job name, where the
   Job's own failure is recorded too: a turn attempt counts once, whoever noticed it first; the
   UNICORE_MAX_REAPS-th failure in a row (as recorded, not as the cache predicted) marks the task as out of
   retries;
4. unless the task fails or is suspended: queue an inbox note that says what happened and activate the task
   (the next turn's history cleanup answers the unanswered tool calls with synthetic errors);
5. delete the Job (propagation Background, precondition on its uid); post Event ``PodReaped``; count
   ``unicore_jobs_reaped_total{reason}``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kubernetes.client.rest import ApiException
from unicore.api import contract
from unicore.api.schema import InboxMessage, reap_message_id
from unicore.store.heartbeats import TurnReset

from unicore_operator.metrics import job_reaped
from unicore_operator.watchdog.log import logger
from unicore_operator.watchdog.scan import ReapAction, ReapReason

EVENT_REASON = "PodReaped"


def attempt_key(action: ReapAction) -> str:
    """The name the reap is recorded under: the turn attempt's Job (the name the Job's own outcome is recorded
    under), else the lease it held, else (nothing known) the reason and the time."""
    if action.attempt or action.job:
        return action.attempt or action.job
    return f"reap-{action.reason.value}-{action.lease_token or int(time.time())}"


def interruption_note(action: ReapAction) -> str:
    return (f"[watchdog] The previous turn was interrupted and its Job was stopped ({action.reason.value}): "
            f"{action.message}. Tool calls that did not return a result were not completed. Continue the task.")


class Reaper:
    def __init__(self, ctx: Any, *, max_reaps: int) -> None:
        self.ctx = ctx
        self.max_reaps = max_reaps
        self._reset = TurnReset(ctx.redis.sync)
        self.done: dict[str, float] = {}  # action keys carried out recently (caches catch up meanwhile)

    @staticmethod
    def key(action: ReapAction) -> str:
        return f"{action.reason.value}:{action.task_id}:{action.job_uid or action.lease_token}"

    async def reap(self, action: ReapAction) -> bool:
        """Carry ``action`` out; False when confirmation showed nothing is stuck (or it was done already)."""
        key = self.key(action)
        if key in self.done:
            return False
        if not await asyncio.to_thread(self._confirmed, action):
            logger.info("not reaping %s (%s): the API shows it is not stuck", action.task_id, action.reason.value)
            return False
        namespace, name = action.task_id.split("/", 1)
        if action.task_exists:
            async with self.ctx.locks[(namespace, name)]:
                await asyncio.to_thread(self._reap_task_state, action)
        if action.job:
            await asyncio.to_thread(self._delete_job, action)
        self.done[key] = time.monotonic()
        job_reaped(action.reason.value)
        if action.task_exists:
            await asyncio.to_thread(self._post_event, action)
        logger.warning("reaped %s: %s: %s", action.task_id, action.reason.value, action.message)
        return True

    def forget_older_than(self, seconds: float) -> None:
        cutoff = time.monotonic() - seconds
        for key in [k for k, at in self.done.items() if at < cutoff]:
            del self.done[key]

    # -- steps (synchronous; run in a worker thread)

    def _confirmed(self, action: ReapAction) -> bool:
        namespace, name = action.task_id.split("/", 1)
        try:
            if action.reason is ReapReason.ORPHAN_JOB:
                return self.ctx.kube.get_agenttask(namespace, name) is None
            if action.reason is ReapReason.LEASE_HOLDER_GONE:
                holder = self.ctx.store.lease_holder(action.task_id) or ""
                pod_name = str(holder).split(":", 1)[0]
                pod = self.ctx.kube.core.read_pod(namespace, pod_name)  # None: gone
                return pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if action.reason is ReapReason.ADMISSION_TIMEOUT:
                job = self.ctx.kube.get_job(namespace, action.job)
                if job is None:
                    return False  # gone: nothing to reap
                held = bool((job.get("spec") or {}).get("suspend"))
                return held and (not action.job_uid or (job.get("metadata") or {}).get("uid") == action.job_uid)
            if action.reason is ReapReason.RUNNING_WITHOUT_JOB:
                jobs = self.ctx.kube.list_jobs(namespace, f"{contract.MANAGED_BY_LABEL}={contract.MANAGED_BY},"
                                                          f"!{contract.COMMAND_JOB_LABEL}")
                for job in jobs:
                    annotations = (job.get("metadata") or {}).get("annotations") or {}
                    status = job.get("status") or {}
                    if annotations.get(contract.TASK_ID_ANNOTATION) == action.task_id and not (
                            status.get("succeeded") or status.get("failed")):
                        return False
        except ApiException as exc:
            logger.warning("cannot confirm %s for %s: %s", action.reason.value, action.task_id, exc)
            return False
        return True

    def _reap_task_state(self, action: ReapAction) -> None:
        ctx, tid = self.ctx, action.task_id
        if action.reset_status or action.lease_token:
            if not self._reset(tid, action.lease_token, time.time(), action.reason.value):
                logger.info("%s: the lease moved on to a new turn; only the Job is reaped", tid)
        reason = f"reaped ({action.reason.value}): {action.message}"
        job_ref = attempt_key(action)
        # -1: this attempt is counted already (its Job's failure, or an earlier reap): not a new failure
        failures = ctx.redis.account_job_end(tid, job_ref, action.turn, "failed", reason, 0.0, source="watchdog")
        fail = failures >= self.max_reaps
        if fail:
            # The operator fails a task when failed > UNICORE_MAX_TURN_RETRIES; make the reap limit count too.
            ceiling = max(failures, ctx.settings.max_turn_retries + 1)
            ctx.redis.set_failures(tid, ceiling, f"reaped {failures} times in a row "
                                                 f"(UNICORE_MAX_REAPS={self.max_reaps}); last: {reason}")
        elif action.activate:
            note = InboxMessage(id=reap_message_id(job_ref), type="user", content=interruption_note(action),
                                sender="watchdog")
            ctx.store.queue_message(tid, note)
        ctx.store.activate(tid, f"watchdog:{action.reason.value}")

    def _delete_job(self, action: ReapAction) -> None:
        try:
            self.ctx.kube.delete_job(action.namespace, action.job, "Background", uid=action.job_uid or None)
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone already / a newer Job of that name: leave it
                raise

    def _post_event(self, action: ReapAction) -> None:
        namespace, name = action.task_id.split("/", 1)
        body = None
        index = self.ctx.agenttasks
        if index is not None and (namespace, name) in index:
            for value in index[(namespace, name)]:
                body = value
                break
        if body is None:
            body = {"metadata": {"namespace": namespace, "name": name}}
        self.ctx.kube.post_event(body, "Warning", EVENT_REASON, f"{action.reason.value}: {action.message}")
