"""Retention's side of the Redis layout: read a whole task tree (every key of every task), decide whether it is
idle, and remove it in steps that a crash at any point leaves for the next pass to finish (``unicore.retention``
runs the pass; docs/architecture.md "Retention").

Removing a tree, after its archive was written and verified:

1. ``begin_removal``: the tree's entry in the journal ``uc:retention:removing`` (root -> archive URL, time, and each
   task's fingerprint as archived);
2. ``retire`` each task, one script per task (one hash tag): if nothing changed since the archive (same
   ``updated_at``, message, inbox and child counts, no lease), RENAME its record ``task`` -> ``retired`` and write
   the tombstone ``archived`` (URL, time, root). From then on the task does not exist for a turn, a producer or a
   reader (every write script checks the record), so no half-removed task can run. If a task did change, every
   task of the tree is restored (``unretire``) and the journal entry dropped: the tree is active, nothing is lost;
3. ``purge`` each task: every other key of it (``TaskKeys.all``, the tombstone kept) and its entries in the global
   indexes;
4. ``end_removal``: drop the journal entry.

``pending_removals`` lists the journal: a pass repeats steps 2-4 for each entry (all of them are idempotent).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from unicore.store import changes
from unicore.store.client import RedisClient, RedisPipeline
from unicore.store.codec import text, text_hash, to_float, to_int
from unicore.store.keys import HEARTBEATS_INDEX, RETENTION_JOURNAL, TASKS_INDEX, TaskKeys
from unicore.store.records import turn_meta_field
from unicore.store.tasks import TaskStore
from unicore.store.tree_reads import descendants

# Keys not archived: the live token stream is a view of answers that are stored anyway (and expires on its own);
# a tombstone or a retired record belongs to the removal itself.
NOT_ARCHIVED = frozenset({"tokens", "retired", "archived"})


def part_of(key: str) -> str:
    """The part of a task key after its hash tag: ``uc:{T}:messages`` -> ``messages``."""
    return key.rsplit("}:", 1)[-1]


@dataclass(frozen=True)
class Fingerprint:
    """What must not change between a task's archive and its removal."""

    updated_at: str
    messages: int
    inbox: int
    children: int


@dataclass
class TaskDump:
    """Every key of one task as stored: ``keys`` maps the key's part to ``{"type": ..., "value": ...}``."""

    task_id: str
    keys: dict[str, dict[str, Any]] = field(default_factory=dict)

    def _value(self, part: str) -> Any:
        return (self.keys.get(part) or {}).get("value")

    @property
    def record(self) -> dict[str, str]:
        return dict(self._value("task") or {})

    @property
    def lease_held(self) -> bool:
        return "lease" in self.keys

    def count(self, part: str) -> int:
        value = self._value(part)
        return len(value) if isinstance(value, list) else 0

    def fingerprint(self) -> Fingerprint:
        return Fingerprint(self.record.get("updated_at", ""), self.count("messages"), self.count("inbox"),
                           self.count("children"))

    def turn_ended(self) -> bool:
        """The last turn (if any) has its end recorded."""
        last = to_int(self.record.get("turns")) - 1
        meta = self._value("turnmeta") or {}
        return last < 0 or bool(meta.get(turn_meta_field(last, "ended_at")))

    def last_activity(self) -> float:
        """The newest of the record's times, the heartbeat and the last stored message's time."""
        record = self.record
        times = [to_float(record.get("updated_at")), to_float(record.get("created_at")),
                 to_float(self._value("heartbeat"))]
        messages = self._value("messages") or []
        if messages:
            try:
                times.append(float(json.loads(messages[-1]).get("timestamp") or 0))
            except (ValueError, AttributeError, TypeError):
                pass
        return max(times)

    def unsettled(self, *, failed: bool = False) -> str | None:
        """Why the task is not settled, or None. A ``failed`` task (the operator gave up on it) may keep queued
        messages and an interrupted turn; a lease (a live turn) always counts."""
        record = self.record
        if self.lease_held:
            return "a turn holds its lease"
        if failed:
            return None
        if record.get("status") == "running" or not self.turn_ended():
            return "a turn has not ended"
        if self.count("inbox"):
            return f"{self.count('inbox')} message(s) queued"
        if record.get("report_id"):
            return "a report to its parent is owed"
        return None


@dataclass
class TreeDump:
    root: str
    tasks: list[TaskDump]  # the root first, then its descendants breadth-first

    @property
    def ids(self) -> list[str]:
        return [task.task_id for task in self.tasks]

    def last_activity(self) -> float:
        return max(task.last_activity() for task in self.tasks)

    def not_removable(self, *, now: float, ttl: float, failed: Iterable[str] = (),
                      waiting: Iterable[str] = ()) -> str | None:
        """Why the tree may not be removed yet, or None: every task settled, none ``waiting`` (for a person, or
        anything the caller knows of), and the last activity older than ``ttl`` seconds."""
        failed_ids, waiting_ids = set(failed), set(waiting)
        for task in self.tasks:
            if task.task_id in waiting_ids:
                return f"{task.task_id} is not settled (waiting)"
            reason = task.unsettled(failed=task.task_id in failed_ids)
            if reason:
                return f"{task.task_id} is not settled ({reason})"
        idle = now - self.last_activity()
        if idle < ttl:
            return f"idle for {idle:.0f}s, under the TTL of {ttl:.0f}s"
        return None


def _read_value(pipe: RedisPipeline, key: str, kind: str) -> bool:
    """Queue the read of ``key`` by its type; False for a type that is not read (a stream, none)."""
    if kind == "string":
        pipe.get(key)
    elif kind == "hash":
        pipe.hgetall(key)
    elif kind == "list":
        pipe.lrange(key, 0, -1)
    elif kind == "set":
        pipe.smembers(key)
    elif kind == "zset":
        pipe.zrange(key, 0, -1, withscores=True)
    else:
        return False
    return True


def _plain(kind: str, value: Any) -> Any:
    if kind == "string":
        return text(value)
    if kind == "hash":
        return text_hash(value)
    if kind == "list":
        return [text(item) for item in value]
    if kind == "set":
        return sorted(text(item) for item in value)
    return [[text(member), score] for member, score in value]  # zset


def read_tasks(client: RedisClient, task_ids: Sequence[str]) -> list[TaskDump]:
    """Every key of each task (``TaskKeys.all``, as stored): two round trips for any number of tasks."""
    wanted = [(task_id, key) for task_id in task_ids for key in TaskKeys(task_id).all()
              if part_of(key) not in NOT_ARCHIVED]
    pipe = client.pipeline(transaction=False)
    for _task_id, key in wanted:
        pipe.type(key)
    kinds = [text(kind) for kind in pipe.execute()]
    pipe = client.pipeline(transaction=False)
    read = [(task_id, key, kind) for (task_id, key), kind in zip(wanted, kinds, strict=True)
            if _read_value(pipe, key, kind)]
    values = pipe.execute() if read else []
    dumps = {task_id: TaskDump(task_id) for task_id in task_ids}
    for (task_id, key, kind), value in zip(read, values, strict=True):
        dumps[task_id].keys[part_of(key)] = {"type": kind, "value": _plain(kind, value)}
    return [dumps[task_id] for task_id in task_ids]


def read_tree(client: RedisClient, root: str) -> TreeDump | None:
    """The tree under ``root`` (None when the root has no record)."""
    ids = [root] + [node.id for node in descendants(client, root)]
    tasks = read_tasks(client, ids)
    if not tasks[0].record:
        return None
    return TreeDump(root, [task for task in tasks if task.record])


def roots_idle_since(client: RedisClient, roots: Sequence[str], cutoff: float) -> list[str]:
    """Of ``roots``, those with a record not updated since ``cutoff`` (a cheap first filter: a tree's last activity
    is at least its root's); one round trip."""
    pipe = client.pipeline(transaction=False)
    for root in roots:
        pipe.hmget(TaskKeys(root).task, ["updated_at", "created_at"])
    found = []
    for root, (updated, created) in zip(roots, pipe.execute(), strict=True):
        if (updated or created) and max(to_float(updated), to_float(created)) < cutoff:
            found.append(root)
    return found


def local_roots(client: RedisClient) -> list[str]:
    """The root tasks of local mode (bare ids, no parent) in ``uc:tasks``."""
    ids = [text(task_id) for task_id in client.zrange(TASKS_INDEX, 0, -1) if "/" not in text(task_id)]
    pipe = client.pipeline(transaction=False)
    for task_id in ids:
        pipe.hget(TaskKeys(task_id).task, "parent")
    return [task_id for task_id, parent in zip(ids, pipe.execute(), strict=True) if not parent]


# ------------------------------------------------------------------ removal


@dataclass(frozen=True)
class Removal:
    """A journal entry: a tree whose archive is written and whose removal began."""

    root: str
    url: str
    archived_at: float
    tasks: dict[str, Fingerprint]

    def encode(self) -> str:
        return json.dumps({"url": self.url, "archived_at": self.archived_at,
                           "tasks": {task_id: asdict(fp) for task_id, fp in self.tasks.items()}})

    @classmethod
    def decode(cls, root: str, raw: str) -> Removal:
        data = json.loads(raw)
        return cls(root, str(data.get("url") or ""), float(data.get("archived_at") or 0),
                   {task_id: Fingerprint(**fp) for task_id, fp in (data.get("tasks") or {}).items()})


# KEYS: task, retired, archived, lease, messages, inbox, children
# ARGV: updated_at, messages, inbox, children, url, archived_at, root
# Returns 1 retired now, 2 already retired (a repeat), 3 gone (deleted meanwhile), 0 changed since the archive.
RETIRE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  if redis.call('EXISTS', KEYS[2]) == 1 then return 2 end
  return 3
end
if redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
if (redis.call('HGET', KEYS[1], 'updated_at') or '') ~= ARGV[1] then return 0 end
if redis.call('LLEN', KEYS[5]) ~= tonumber(ARGV[2]) then return 0 end
if redis.call('LLEN', KEYS[6]) ~= tonumber(ARGV[3]) then return 0 end
if redis.call('ZCARD', KEYS[7]) ~= tonumber(ARGV[4]) then return 0 end
redis.call('RENAME', KEYS[1], KEYS[2])
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'url', ARGV[5], 'archived_at', ARGV[6], 'root', ARGV[7])
return 1
"""

# KEYS: task, retired, archived. Puts a retired record back (the tree was not idle after all).
UNRETIRE = """
if redis.call('EXISTS', KEYS[2]) == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('RENAME', KEYS[2], KEYS[1])
end
redis.call('DEL', KEYS[3])
return 1
"""


def begin_removal(client: RedisClient, removal: Removal) -> None:
    client.hset(RETENTION_JOURNAL, removal.root, removal.encode())


def end_removal(client: RedisClient, root: str) -> None:
    client.hdel(RETENTION_JOURNAL, root)


def pending_removals(client: RedisClient) -> list[Removal]:
    return [Removal.decode(text(root), text(raw)) for root, raw in (client.hgetall(RETENTION_JOURNAL) or {}).items()]


def retire(client: RedisClient, removal: Removal, task_id: str) -> int:
    """Step 2 for one task (see the module docstring); the script's answer."""
    keys = TaskKeys(task_id)
    fp = removal.tasks[task_id]
    result = int(client.eval(RETIRE, 7, keys.task, keys.retired, keys.archived, keys.lease, keys.messages,
                             keys.inbox, keys.children, fp.updated_at, fp.messages, fp.inbox, fp.children,
                             removal.url, repr(removal.archived_at), removal.root))
    if result == 1:  # gone from the tree (state.changes)
        changes.publish_one(client, task_id, "archived")
    return result


def unretire(client: RedisClient, task_id: str) -> None:
    keys = TaskKeys(task_id)
    client.eval(UNRETIRE, 3, keys.task, keys.retired, keys.archived)
    changes.publish_one(client, task_id, "restored")


def purge(client: RedisClient, task_ids: Sequence[str]) -> None:
    """Step 3: every key of the retired tasks but their tombstones, and their global index entries (one DEL per
    key: a cluster pipeline has no multi-key DEL)."""
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        keys = TaskKeys(task_id)
        for key in keys.all():
            if key != keys.archived:
                pipe.delete(key)
        pipe.zrem(TASKS_INDEX, task_id)
        pipe.zrem(HEARTBEATS_INDEX, task_id)
    changes.execute_with_changes(pipe, [(task_id, "removed") for task_id in task_ids])


@dataclass(frozen=True)
class ArchivedNote:
    """A removed task's tombstone."""

    task_id: str
    url: str
    archived_at: float
    root: str

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.archived_at))
        where = f"archived to {self.url}" if self.url else "removed (no archive was configured)"
        return (f"task {self.task_id} was idle past the retention TTL: its conversation was {where} at {when} "
                "and is no longer in Redis")


def _note(task_id: str, data: Mapping[str, str]) -> ArchivedNote | None:
    if not data:
        return None
    return ArchivedNote(task_id, data.get("url", ""), to_float(data.get("archived_at")), data.get("root", ""))


def archived_notes(client: RedisClient, task_ids: Sequence[str]) -> dict[str, ArchivedNote]:
    """The tombstones of those of ``task_ids`` that retention removed (and that have no record again): one round
    trip."""
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.hgetall(TaskKeys(task_id).archived)
        pipe.exists(TaskKeys(task_id).task)
    replies = pipe.execute()
    found = {}
    for index, task_id in enumerate(task_ids):
        note = _note(task_id, text_hash(replies[2 * index]))
        if note is not None and not replies[2 * index + 1]:
            found[task_id] = note
    return found


def archived_note(store: TaskStore, task_id: str) -> ArchivedNote | None:
    """The task's tombstone when retention removed it (and no task of that id exists again): what a caller that
    holds the store (the task API, the CLI) says of a task it did not find."""
    return archived_notes(store.redis, [task_id]).get(task_id)


__all__ = ["ArchivedNote", "Fingerprint", "Removal", "TaskDump", "TreeDump", "archived_note", "archived_notes",
           "begin_removal", "end_removal", "local_roots", "pending_removals", "purge", "read_tasks", "read_tree",
           "retire", "roots_idle_since", "unretire"]
