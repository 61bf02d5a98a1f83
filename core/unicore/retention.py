"""Retention: task trees idle longer than a TTL are archived (if an archive is configured) and removed from Redis.

One pass (:meth:`Retention.run`) first finishes the removals a crash interrupted (the journal of
``unicore.store.retention``), then, for each candidate root: reads the whole tree, checks that every task is settled
and the tree's last activity is older than the TTL, writes and verifies the archive (``unicore.archive``), and only
then removes the tree (journal, retire, purge: see ``unicore.store.retention``). An archive that fails deletes
nothing and the tree is tried again by the next pass. Local mode runs a pass with ``unicore gc``
(``unicore_client.local.gc_command``); on Kubernetes the operator runs one every
``UNICORE_RETENTION_INTERVAL_SECONDS`` and marks the AgentTasks Archived.

Fault points (``unicore.faults``, ``UNICORE_FAULTS=kill:<step>``): ``retention after archive``, ``retention after
journal``, ``retention after retire``, ``retention after purge``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from unicore.archive import ArchiveError, ArchiveSink, document, object_name
from unicore.faults import fault_point
from unicore.log import get_logger
from unicore.store import approvals
from unicore.store import retention as state
from unicore.store.client import RedisClient

log = get_logger("retention")

Action = Literal["removed", "kept", "archive-failed", "changed"]


@dataclass
class Outcome:
    """What a pass did with one tree."""

    root: str
    action: Action
    reason: str = ""
    url: str = ""
    archived_at: float = 0.0
    tasks: list[str] = field(default_factory=list)


@dataclass
class Retention:
    """One retention policy over one Redis (``client``: decoded responses)."""

    client: RedisClient
    ttl_seconds: float
    sink: ArchiveSink | None = None
    clock: Callable[[], float] = time.time

    def run(self, roots: Iterable[str], *, failed: Iterable[str] = (), waiting: Iterable[str] = ()) -> list[Outcome]:
        """Finish interrupted removals, then remove every idle tree among ``roots``. ``failed``: tasks the caller
        gave up on (settled whatever is queued); ``waiting``: tasks that must be kept (e.g. waiting for a
        person, or not settled by the caller's own view)."""
        outcomes = self.finish_pending()
        done = {outcome.root for outcome in outcomes}
        now = self.clock()
        failed_ids, waiting_ids = frozenset(failed), frozenset(waiting)
        candidates = [root for root in roots if root not in done]
        for root in state.roots_idle_since(self.client, candidates, now - self.ttl_seconds):
            outcomes.append(self.remove_tree(root, failed=failed_ids, waiting=waiting_ids))
        return outcomes

    def finish_pending(self) -> list[Outcome]:
        return [self._complete(removal) for removal in state.pending_removals(self.client)]

    def remove_tree(self, root: str, *, failed: Iterable[str] = (), waiting: Iterable[str] = ()) -> Outcome:
        tree = state.read_tree(self.client, root)
        if tree is None:
            return Outcome(root, "kept", "no record in Redis")
        waiting_ids = set(waiting) | set(human_waits(self.client, tree.ids))
        now = self.clock()
        reason = tree.not_removable(now=now, ttl=self.ttl_seconds, failed=failed, waiting=waiting_ids)
        if reason:
            return Outcome(root, "kept", reason, tasks=tree.ids)
        url = ""
        if self.sink is not None:
            data, digest = document(tree, now)
            try:
                url = self.sink.write(object_name(root, digest), data)
            except ArchiveError as exc:
                log.warning("tree of %s not removed: %s", root, exc)
                return Outcome(root, "archive-failed", str(exc), tasks=tree.ids)
            log.info("archived the tree of %s (%d tasks, %d bytes) to %s", root, len(tree.tasks), len(data), url)
        fault_point("retention after archive")
        removal = state.Removal(root, url, now, {task.task_id: task.fingerprint() for task in tree.tasks})
        state.begin_removal(self.client, removal)
        fault_point("retention after journal")
        return self._complete(removal)

    def _complete(self, removal: state.Removal) -> Outcome:
        """Steps 2-4 of a journaled removal (idempotent: a repeat after a crash finishes it)."""
        ids = list(removal.tasks)
        answers = {task_id: state.retire(self.client, removal, task_id) for task_id in ids}
        changed = sorted(task_id for task_id, answer in answers.items() if answer == 0)
        if changed:
            for task_id in ids:
                state.unretire(self.client, task_id)
            state.end_removal(self.client, removal.root)
            log.info("tree of %s kept: %s changed after its archive", removal.root, ", ".join(changed))
            return Outcome(removal.root, "changed", f"{', '.join(changed)} changed after the archive", tasks=ids)
        fault_point("retention after retire")
        state.purge(self.client, ids)
        fault_point("retention after purge")
        state.end_removal(self.client, removal.root)
        log.info("removed the tree of %s (%d tasks) from Redis", removal.root, len(ids))
        return Outcome(removal.root, "removed", url=removal.url, archived_at=removal.archived_at, tasks=ids)


def human_waits(client: RedisClient, task_ids: Sequence[str]) -> list[str]:
    """The tasks waiting for a person (an approval, or the answer to an ``ask_user`` question): such a tree is not
    idle, whatever its age: the person decides, not the TTL."""
    return [task_id for task_id in task_ids if approvals.waiting_for(client, task_id)]


__all__ = ["Outcome", "Retention", "human_waits"]
