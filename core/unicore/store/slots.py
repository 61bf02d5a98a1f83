"""Child and descendant slots: ``max_children`` and ``max_descendants`` checked and reserved in one atomic step.

The policy check (``unicore.tools.policy.check_spawn``) counts children and descendants with reads, so two
siblings spawning at once could both see room for one more child (8 siblings made 16 descendants under
``maxDescendants: 10``). The spawners therefore reserve a slot BEFORE they create anything:

1. on the parent's hash tag: ``uc:{parent}:childslots`` (child ids), at most ``max_children`` members;
2. on the root's hash tag: ``uc:{root}:treeslots`` (descendant ids), at most ``max_descendants`` members.

Each step is one Lua script (check + add), so concurrent spawns cannot both take the last slot. The two sets live
in different hash slots (Redis Cluster), so step 2 refused means step 1 is undone; a spawn whose create fails
releases both. Reserving is idempotent by child id: a spawn that died after reserving left a slot that the next
spawn of the same name reuses. Each script first adds the ids the caller already counted (the tree's existing
children/descendants), so trees created before the slots existed are counted too. Deleting a task frees its
slots (``TaskStore.delete_task``).

A spawner killed between reserving and creating (a turn pod evicted, a local turn process killed) whose retried
turn picks another name would leave a slot held by a child that never appears. When a set is full, the script
therefore frees reservations older than ``STALE_RESERVATION_SECONDS`` whose id is not among the ids the caller
counted (every existing child or descendant): a real child is always counted, so only such ghosts go. The grace
covers the time from reserving to the child's record (on a cluster, until the operator's create handler ran).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from unicore.errors import LimitExceeded
from unicore.store.client import RedisClient
from unicore.store.keys import TaskKeys

STALE_RESERVATION_SECONDS = 600.0

# KEYS: slots zset   ARGV: member, limit, now, stale before (a time), known member...
# Returns 1 when ``member`` holds a slot (newly or already), 0 when the set is full.
RESERVE_SLOT = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
for i = 5, #ARGV do redis.call('ZADD', KEYS[1], 'NX', ARGV[3], ARGV[i]) end
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  local known = {}
  for i = 5, #ARGV do known[ARGV[i]] = true end
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[4])) do
    if not known[old] then redis.call('ZREM', KEYS[1], old) end
  end
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
"""


class SpawnSlots:
    """Reserve and release child/descendant slots (see the module docstring)."""

    def __init__(self, client: RedisClient, clock: Callable[[], float] = time.time) -> None:
        self.redis = client
        self.clock = clock
        self._reserve = client.register_script(RESERVE_SLOT)

    def _take(self, key: str, member: str, limit: int, known: Sequence[str]) -> bool:
        now = self.clock()
        args = [member, limit, repr(now), repr(now - STALE_RESERVATION_SECONDS), *known]
        return bool(int(self._reserve(keys=[key], args=args)))

    def reserve(
        self,
        *,
        parent_id: str,
        root_id: str,
        child_id: str,
        max_children: int,
        max_descendants: int,
        known_children: Sequence[str] = (),
        known_descendants: Sequence[str] = (),
    ) -> None:
        """Take a child slot of ``parent_id`` and a tree slot of ``root_id`` for ``child_id``, or raise
        LimitExceeded having taken neither."""
        parent_slots = TaskKeys(parent_id).child_slots
        if not self._take(parent_slots, child_id, max_children, known_children):
            raise LimitExceeded(
                f"maximum children reached: {parent_id} already has {max_children} child task(s) "
                f"(limits.max_children = {max_children}). Reuse an existing child by spawning it again with the "
                "same name (it gets your prompt as a new message)."
            )
        if not self._take(TaskKeys(root_id).tree_slots, child_id, max_descendants, known_descendants):
            self.redis.zrem(parent_slots, child_id)
            raise LimitExceeded(
                f"maximum task tree size reached: {root_id} already has {max_descendants} descendant task(s) "
                f"(limits.max_descendants = {max_descendants})"
            )

    def room(
        self, *, parent_id: str, root_id: str, child_id: str, max_children: int, max_descendants: int
    ) -> str | None:
        """Read only: why ``child_id`` could not take its slots now (what ``reserve`` would say), or None when it
        could (it holds them already, or there is room). The admission webhook asks; the create handler reserves.
        Counts only reserved slots (a tree older than the slot sets is counted exactly when ``reserve`` seeds it)."""
        parent_slots, tree_slots = TaskKeys(parent_id).child_slots, TaskKeys(root_id).tree_slots
        pipe = self.redis.pipeline(transaction=False)
        pipe.zscore(parent_slots, child_id)
        pipe.zcard(parent_slots)
        pipe.zscore(tree_slots, child_id)
        pipe.zcard(tree_slots)
        child_held, children, tree_held, descendants = pipe.execute()
        if child_held is None and int(children) >= max_children:
            return (
                f"maximum children reached: {parent_id} already has {int(children)} child task(s) "
                f"(limits.max_children = {max_children})"
            )
        if tree_held is None and int(descendants) >= max_descendants:
            return (
                f"maximum task tree size reached: {root_id} already has {int(descendants)} descendant task(s) "
                f"(limits.max_descendants = {max_descendants})"
            )
        return None

    def release(self, *, parent_id: str, root_id: str, child_id: str) -> None:
        """Free the slots of a child that was not (or is no longer) created."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(TaskKeys(parent_id).child_slots, child_id)
        pipe.zrem(TaskKeys(root_id).tree_slots, child_id)
        pipe.execute()

    def held(self, task_id: str) -> dict[str, Any]:
        """Slot counts of ``task_id`` (as parent and as root), for status and tests."""
        keys = TaskKeys(task_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(keys.child_slots)
        pipe.zcard(keys.tree_slots)
        children, descendants = pipe.execute()
        return {"children": int(children), "descendants": int(descendants)}


__all__ = ["SpawnSlots", "RESERVE_SLOT", "STALE_RESERVATION_SECONDS"]
