"""Retention on Kubernetes: every ``UNICORE_RETENTION_INTERVAL_SECONDS`` one pass (``unicore.retention``) archives and
removes the task trees idle longer than ``UNICORE_RETENTION_TTL_SECONDS``, then marks their AgentTasks; then the
shared conversations of the watched namespaces idle as long (``unicore.conversation_retention``; logged: they have
no object of their own).

Why one loop and not a ``kopf.timer`` per root: a timer is an asyncio task per AgentTask and one Redis read each;
the loop reads the operator's AgentTask index (no API call) and each candidate root's record in one pipelined round
trip, and reads whole trees only for roots whose own record is older than the TTL.

A tree is removable when every task of it is Idle or Failed in its AgentTask's status (not Pending, Running,
Waiting, Suspended, or waiting for a person: WaitingForApproval, WaitingForInput; a task being deleted is kept to
its finalizer) and settled in Redis (``unicore.store.retention``). A Failed task may keep queued messages: they go
into the archive with it.

What the AgentTasks then say: phase ``Archived``, ``status.archive`` {url, archivedAt}, condition ``Archived=True``
(reason ``Archived``, or ``Removed`` without an archive) and ``Ready=False`` (reason ``Archived``), an Event
``Archived`` on the root. The objects stay until their users delete them; the reconcile leaves a task without a
Redis record alone, and the task API answers a message to it with 410 Gone. An archive that fails removes nothing:
a Warning Event ``ArchiveFailed`` on the root, and the next pass tries again. A pass that crashed (or an operator
that restarted) after removing a tree but before marking it: the next pass marks every Idle or Failed AgentTask
whose record is gone and whose tombstone says it was removed.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from unicore.api import contract
from unicore.api.spec import task_spec_of
from unicore.archive import sink_for
from unicore.conversation_retention import ConversationOutcome, ConversationRetention
from unicore.retention import Outcome, Retention
from unicore.store import conversation_retention as conversation_state
from unicore.store.retention import ArchivedNote, archived_notes

from unicore_operator import events, names
from unicore_operator.context import OperatorContext
from unicore_operator.indexes import TaskKey, active_job, first
from unicore_operator.log import logger
from unicore_operator.phases import SETTLED_PHASES, Phase
from unicore_operator.reconcile import jobs_of

ARCHIVED = str(Phase.ARCHIVED)  # the phase, the condition type and the Event reason
ARCHIVE_FAILED = "ArchiveFailed"
SETTLED = frozenset(str(phase) for phase in SETTLED_PHASES)
MAX_DEPTH = 64  # parentRef hops followed to a task's root


def _iso(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def archived_status(note: ArchivedNote, ttl: float, previous: dict[str, Any]) -> dict[str, Any]:
    """The status patch of an AgentTask whose conversation retention removed (pure)."""
    at = _iso(note.archived_at)
    where = f"archived to {note.url}" if note.url else "not archived (no archive configured)"
    message = f"idle for more than {ttl:g}s: the conversation was {where} and removed from Redis at {at}"
    kept = [c for c in previous.get("conditions") or [] if c.get("type") not in ("Ready", ARCHIVED)]
    return {
        "phase": ARCHIVED,
        "message": message,
        "activeJob": "",
        "archive": {"url": note.url, "archivedAt": at},
        "conditions": [
            *kept,
            {"type": "Ready", "status": "False", "reason": ARCHIVED, "message": message, "lastTransitionTime": at},
            {"type": ARCHIVED, "status": "True", "reason": ARCHIVED if note.url else "Removed", "message": message,
             "lastTransitionTime": at},
        ],
    }


class RetentionLoop:
    """The operator's retention pass and what it writes to the AgentTasks."""

    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx = ctx
        settings = ctx.settings
        url = settings.retention_archive_url
        self.ttl = settings.retention_ttl_seconds
        sink = sink_for(url) if url else None
        self.retention = Retention(ctx.redis.sync, self.ttl, sink)
        self.conversations = ConversationRetention(ctx.redis.sync, self.ttl, sink)

    def view(self) -> tuple[list[str], set[str], set[str], list[str]]:
        """(roots, failed, kept, settled) task ids from the AgentTask index: ``kept`` may not be removed (not
        settled, being deleted, or running a Job), ``settled`` are Idle or Failed (the ones to check for a
        tombstone)."""
        roots: list[str] = []
        failed: set[str] = set()
        kept: set[str] = set()
        settled: list[str] = []
        index = self.ctx.agenttasks
        for key in list(index.keys()) if index is not None else []:
            body = first(index.get(key))
            if body is None or not self.ctx.watches(key[0]):
                continue
            task_id = names.task_id(*key)
            phase = (body.get("status") or {}).get("phase")
            if phase == ARCHIVED:
                continue
            busy = body["metadata"].get("deletionTimestamp") or active_job(jobs_of(self.ctx, key)) is not None
            spec = task_spec_of(body)
            if phase not in SETTLED or busy or spec.suspend:
                kept.add(task_id)
                kept.add(self.root_of(key, body))  # also a child that has no Redis record yet keeps its tree
            else:
                settled.append(task_id)
                if phase == "Failed":
                    failed.add(task_id)
            if spec.parent_ref is None:
                roots.append(task_id)
        return roots, failed, kept, settled

    def root_of(self, key: TaskKey, body: dict[str, Any]) -> str:
        """The task id of the root of ``body``'s tree, along the parentRefs in the index (a parent not indexed:
        the root label the spawner sets, else the last ancestor found)."""
        namespace, name = key
        for _ in range(MAX_DEPTH):
            ref = task_spec_of(body).parent_ref
            parent = ref.name if ref is not None else ""
            parent_body = self.ctx.indexed_task(namespace, parent) if parent else None
            if parent_body is None:
                label = (body["metadata"].get("labels") or {}).get(names.ROOT_LABEL) if parent else None
                return names.task_id(namespace, label or parent or name)
            body, name = parent_body, str(parent)
        return names.task_id(namespace, name)

    async def run_pass(self) -> list[Outcome]:
        roots, failed, kept, settled = self.view()
        outcomes = await asyncio.to_thread(self.retention.run, [r for r in roots if r not in kept],
                                           failed=failed, waiting=kept)
        for outcome in outcomes:
            await self.report(outcome)
        unmarked = await asyncio.to_thread(archived_notes, self.ctx.redis.sync, settled)
        for task_id, note in unmarked.items():
            await self.mark(task_id, note)
        await self.run_conversations()
        return outcomes

    async def run_conversations(self) -> list[ConversationOutcome]:
        """The same pass over the shared conversations of the namespaces this operator watches."""
        ids = await asyncio.to_thread(conversation_state.conversation_ids, self.ctx.redis.sync)
        mine = [c for c in ids if (key := contract.split_task_id(c)) is not None and self.ctx.watches(key[0])]
        outcomes = await asyncio.to_thread(self.conversations.run, mine)
        for outcome in outcomes:
            if outcome.action == "archive-failed":
                logger.warning("retention kept conversation %s: %s", outcome.conversation, outcome.reason)
            elif outcome.action == "removed":
                where = f"archived to {outcome.url}" if outcome.url else "not archived (no archive configured)"
                logger.info("conversation %s idle for more than %gs: %d post(s) %s and removed from Redis",
                            outcome.conversation, self.ttl, outcome.posts, where)
        return outcomes

    async def report(self, outcome: Outcome) -> None:
        root = self.body(outcome.root)
        if outcome.action == "archive-failed":
            logger.warning("retention kept the tree of %s: %s", outcome.root, outcome.reason)
            if root is not None:
                events.post(self.ctx, root, events.WARNING, ARCHIVE_FAILED,
                            f"the tree was not removed (the next pass retries): {outcome.reason}")
            return
        if outcome.action != "removed":
            return
        for task_id in outcome.tasks:
            await self.mark(task_id, ArchivedNote(task_id, outcome.url, outcome.archived_at, outcome.root))
        if root is not None:
            where = f"archived to {outcome.url}" if outcome.url else "not archived (no archive configured)"
            events.post(self.ctx, root, events.NORMAL, ARCHIVED, f"idle for more than {self.ttl:g}s: "
                        f"{len(outcome.tasks)} task(s) {where} and removed from Redis")

    def body(self, task_id: str) -> dict[str, Any] | None:
        key = contract.split_task_id(task_id)
        return self.ctx.indexed_task(*key) if key is not None else None

    async def mark(self, task_id: str, note: ArchivedNote) -> None:
        key: TaskKey | None = contract.split_task_id(task_id)
        body = self.body(task_id)
        if key is None or body is None:
            return
        async with self.ctx.locks[key]:
            status = archived_status(note, self.ttl, body.get("status") or {})
            await asyncio.to_thread(self.ctx.kube.patch_status, key[0], key[1], status)
            self.ctx.written_status.pop(key, None)
        logger.info("AgentTask %s/%s marked Archived (%s)", key[0], key[1], note.url or "no archive")

    async def run_forever(self) -> None:
        await self.ctx.ready.wait()
        while True:
            try:
                await self.run_pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("retention pass failed; the next one in %.0fs",
                                 self.ctx.settings.retention_interval_seconds)
            await asyncio.sleep(self.ctx.settings.retention_interval_seconds)


async def start_retention(ctx: Any) -> None:
    """Startup hook: the retention loop as a background task of the operator, when a TTL is set."""
    if ctx.settings.retention_ttl_seconds <= 0:
        return
    loop = RetentionLoop(ctx)
    ctx.background.append(asyncio.get_running_loop().create_task(loop.run_forever(), name="unicore-retention"))
    logger.info("retention on: trees idle for %gs are %s", ctx.settings.retention_ttl_seconds,
                f"archived to {ctx.settings.retention_archive_url} and removed"
                if ctx.settings.retention_archive_url else "removed (no archive)")


__all__ = ["ARCHIVED", "RetentionLoop", "archived_status", "start_retention"]
