"""Turn Jobs that cannot create their pod: the Job controller's FailedCreate Events -> task status.

A turn Job whose pod cannot be created (the namespace has no agent ServiceAccount, a ResourceQuota allows no more
pods, Pod Security admission rejects it) gets no condition for it: the Job controller retries with backoff and
records an Event ``FailedCreate`` on the Job. The operator watches exactly those Events (server-side field selector
``involvedObject.kind=Job,reason=FailedCreate``, in the namespaces it watches; a Kopf watch cannot filter by field,
and every Event of a namespace would stream in) on a thread of its own, remembers the last one per task
(``OperatorContext.create_failures``) and reconciles the task: phase Pending, Ready's reason FailedCreate, the
message quotes the Event. It is forgotten when a pod of that Job appears or the Job ends. When it has lasted
``UNICORE_POD_CREATE_RETRY_SECONDS`` (counted from the Event's first occurrence), reconcile deletes the Job and
records the attempt as failed with the Event's message; the usual rules follow (backoff, the next attempt, Failed
after ``UNICORE_MAX_TURN_RETRIES`` + 1 failures in a row).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from typing import Any

from kubernetes.client.rest import ApiException

from unicore_operator.context import CreateFailure, OperatorContext
from unicore_operator.indexes import job_task_key
from unicore_operator.log import logger
from unicore_operator.turn_ends import existing_job_state
from unicore_operator.watchdog.views import parse_time

FIELD_SELECTOR = "involvedObject.kind=Job,reason=FailedCreate"
WATCH_SECONDS = 240  # server-side timeout of one watch request; the thread starts the next one
RECONNECT_SECONDS = 2.0  # pause after a failed watch request (the thread's stop event cuts it short)


def failed_create(event: Mapping[str, Any]) -> tuple[str, str, str, float | None] | None:
    """(namespace, Job name, "reason: message", first occurrence) of a FailedCreate Event on a Job; None for any
    other Event (pure)."""
    involved = event.get("involvedObject") or {}
    if event.get("reason") != "FailedCreate" or involved.get("kind") != "Job" or not involved.get("name"):
        return None
    namespace = str(involved.get("namespace") or (event.get("metadata") or {}).get("namespace") or "")
    first_seen = parse_time(event.get("firstTimestamp") or event.get("eventTime"))
    return namespace, str(involved["name"]), f"FailedCreate: {event.get('message') or ''}".rstrip(": "), first_seen


async def on_failed_create(ctx: OperatorContext, namespace: str, job_name: str, message: str,
                           first_seen: float | None) -> None:
    """Remember the FailedCreate of a live turn Job on its task and reconcile the task."""
    if not ctx.watches(namespace):
        return
    job = await asyncio.to_thread(ctx.kube.get_job, namespace, job_name)
    key = job_task_key(job) if job is not None else None
    if key is None or existing_job_state(job) != "running":
        return  # not a turn Job, or it ended: its outcome speaks for it
    old = ctx.create_failures.get(key)
    since = old.since if old is not None and old.job == job_name else (first_seen or time.time())
    ctx.create_failures[key] = CreateFailure(job=job_name, message=message, since=since)
    logger.warning("turn Job %s/%s cannot create its pod: %s", namespace, job_name, message)
    ctx.reconciles.request(key, "job-failed-create")


class FailedCreateWatch:
    """One thread per watched namespace (one for all when cluster-wide) streaming FailedCreate Events of Jobs."""

    def __init__(self, ctx: OperatorContext, loop: asyncio.AbstractEventLoop) -> None:
        self.ctx = ctx
        self.loop = loop
        self.core = ctx.kube.core
        self.stopped = threading.Event()
        namespaces: list[str | None] = list(ctx.settings.namespaces) or [None]
        self.threads = [threading.Thread(target=self._run, args=(ns,), daemon=True,
                                         name=f"unicore-failedcreate-{ns or 'all'}") for ns in namespaces]

    def start(self) -> FailedCreateWatch:
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _run(self, namespace: str | None) -> None:
        resource_version: str | None = None
        while not self.stopped.is_set():
            try:
                for event in self.core.watch_events(namespace, field_selector=FIELD_SELECTOR,
                                                    resource_version=resource_version,
                                                    timeout_seconds=WATCH_SECONDS):
                    if self.stopped.is_set():
                        return
                    raw = event.get("object") or {}
                    resource_version = (raw.get("metadata") or {}).get("resourceVersion") or resource_version
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._dispatch(raw)
            except ApiException as exc:
                if exc.status == 410:  # too old: list again from now (replayed Events are handled idempotently)
                    resource_version = None
                    continue
                logger.warning("FailedCreate Event watch (%s) failed: %s; retrying", namespace or "all", exc)
                self.stopped.wait(RECONNECT_SECONDS)
            except Exception as exc:  # connection trouble: reconnect
                logger.warning("FailedCreate Event watch (%s) failed: %s; retrying", namespace or "all", exc)
                self.stopped.wait(RECONNECT_SECONDS)

    def _dispatch(self, raw: Mapping[str, Any]) -> None:
        found = failed_create(raw)
        if found is None or self.loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(on_failed_create(self.ctx, *found), self.loop)
        future.add_done_callback(_log_failure)


def _log_failure(future: Any) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.warning("handling a FailedCreate Event failed: %s", future.exception())
