"""Retention: task trees idle longer than a TTL are archived (if an archive is configured) and removed from Redis.

One pass (:meth:`Retention.run`) first finishes the removals a crash interrupted (the journal of
``unicore.store.retention``), then, for each candidate root: reads the whole tree, checks that every task is settled
and the tree's last activity is older than the TTL, writes and verifies the archive (``unicore.archive``), and only
then removes the tree (journal, retire, purge: see ``unicore.store.retention``). An archive that fails deletes
nothing and the tree is tried again by the next pass. Local mode runs a pass with ``unicore gc``; on Kubernetes the
operator runs one every ``UNICORE_RETENTION_INTERVAL_SECONDS`` and marks the AgentTasks Archived.

Fault points (``unicore.faults``, ``UNICORE_FAULTS=kill:<step>``): ``retention after archive``, ``retention after
journal``, ``retention after retire``, ``retention after purge``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from unicore.archive import ArchiveError, ArchiveSink, check_archive_url, document, object_name, sink_for
from unicore.faults import fault_point
from unicore.log import get_logger
from unicore.settings import EnvSettings
from unicore.store import approvals
from unicore.store import retention as state

log = get_logger("retention")

Action = Literal["removed", "kept", "archive-failed", "changed"]


class RetentionSettings(EnvSettings):
    """Local mode's retention variables (the operator has the same two in its own settings)."""

    what: ClassVar[str] = "retention settings"

    ttl_seconds: float = Field(0.0, ge=0, allow_inf_nan=False, validation_alias="UNICORE_RETENTION_TTL_SECONDS")
    archive_url: str | None = Field(None, validation_alias="UNICORE_RETENTION_ARCHIVE_URL")

    @field_validator("archive_url", mode="before")
    @classmethod
    def _url(cls, value: object) -> object:
        if isinstance(value, str):
            return check_archive_url(value) if value.strip() else None
        return value


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

    client: Any
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


def human_waits(client: Any, task_ids: Sequence[str]) -> list[str]:
    """The tasks waiting for a person (an approval, or the answer to an ``ask_user`` question): such a tree is not
    idle, whatever its age: the person decides, not the TTL."""
    return [task_id for task_id in task_ids if approvals.waiting_for(client, task_id)]


# --------------------------------------------------------------------------- unicore gc


def add_gc_command(sub: Any) -> None:
    """``unicore gc``: one retention pass over local mode's trees."""
    gc = sub.add_parser("gc", help="archive and remove task trees idle longer than the retention TTL")
    gc.add_argument("--ttl", type=_seconds, help="idle seconds (default: $UNICORE_RETENTION_TTL_SECONDS)")
    gc.add_argument("--archive", type=_url, help="file:///path or s3://bucket/prefix "
                                                 "(default: $UNICORE_RETENTION_ARCHIVE_URL; none: not archived)")
    gc.add_argument("--dry-run", action="store_true", help="say which trees would go; change nothing")
    gc.set_defaults(func=cmd_gc)


def _seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r}: give a positive number of seconds")
    return number


def _url(value: str) -> str:
    try:
        return check_archive_url(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_gc(args: argparse.Namespace) -> int:
    from unicore_client.arguments import UsageError

    from unicore.launch.embedded_redis import redis_url
    from unicore.store.tasks import connect

    settings = RetentionSettings.from_env()
    ttl = args.ttl if args.ttl is not None else settings.ttl_seconds
    if not ttl:
        raise UsageError("retention is off: give --ttl SECONDS or set UNICORE_RETENTION_TTL_SECONDS")
    url = args.archive or settings.archive_url
    client = connect(redis_url())
    roots = state.local_roots(client)
    if args.dry_run:
        now = time.time()
        for root in state.roots_idle_since(client, roots, now - ttl):
            tree = state.read_tree(client, root)
            reason = tree.not_removable(now=now, ttl=ttl) if tree else "no record"
            print(f"{root}: {'kept: ' + reason if reason else 'would be removed'}")
        return 0
    outcomes = Retention(client, ttl, sink_for(url) if url else None).run(roots)
    code = 0
    for outcome in outcomes:
        if outcome.action == "removed":
            where = f"archived to {outcome.url}" if outcome.url else "not archived"
            print(f"{outcome.root}: removed {len(outcome.tasks)} task(s), {where}")
        elif outcome.action == "archive-failed":
            print(f"{outcome.root}: kept: {outcome.reason}", file=sys.stderr)
            code = 1
        elif outcome.action == "changed":
            print(f"{outcome.root}: kept: {outcome.reason}")
    return code


__all__ = ["Outcome", "Retention", "RetentionSettings", "add_gc_command", "cmd_gc", "human_waits"]
