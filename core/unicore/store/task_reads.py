"""The reads of ``TaskStore``: a task's record, its children and tree, its conversation, its agent's definition, and
the pipelined reads over many tasks of a tree (``tree_reads``) with the tree's spawn slots (``slots``), so a holder of
a store asks the store and never its client."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from unicore.agents import AgentDefinition
from unicore.api.contract import same_namespace
from unicore.api.schema import Message
from unicore.errors import TaskNotFound
from unicore.store import tree_reads
from unicore.store.agents import read_agent
from unicore.store.compactions import Compaction, read_compactions
from unicore.store.keys import TASKS_INDEX
from unicore.store.messages import load_message
from unicore.store.records import TaskRecord, Turn, TurnMeta, turn_meta_field
from unicore.store.slots import SpawnSlots
from unicore.store.task_store_base import TaskStoreBase
from unicore.store.tree_reads import TaskActivity, TreeNode


class TaskReads(TaskStoreBase):
    """Reads of tasks, their trees and their conversations."""

    # ------------------------------------------------------------------ tasks

    def exists(self, task_id: str) -> bool:
        return bool(self.redis.exists(self.keys(task_id).task))

    def get_task(self, task_id: str) -> TaskRecord:
        data = self.redis.hgetall(self.keys(task_id).task)
        if not data:
            raise TaskNotFound(f"no task {task_id!r}")
        return TaskRecord.from_hash(data)

    def list_tasks(self) -> list[str]:
        """All task ids, oldest first."""
        return list(self.redis.zrange(TASKS_INDEX, 0, -1))

    def children(self, task_id: str) -> list[str]:
        """Child ids, oldest first; only those of the task's own namespace (the children set is writable by the
        namespace's Redis user, so a link to another namespace's task is never followed)."""
        return [child for child in self.redis.zrange(self.keys(task_id).children, 0, -1)
                if same_namespace(task_id, child)]

    def tree(self, root_id: str) -> list[tuple[int, TaskRecord]]:
        """(depth below root, record) in depth-first order, children oldest first."""
        out: list[tuple[int, TaskRecord]] = []

        def walk(task_id: str, level: int) -> None:
            out.append((level, self.get_task(task_id)))
            for child in self.children(task_id):
                walk(child, level + 1)

        walk(root_id, 0)
        return out

    def read_agent(self, agent_id: str) -> AgentDefinition | None:
        """``unicore.store.agents.read_agent``: the stored definition, None when there is none (AgentInvalid)."""
        return read_agent(self.redis, agent_id)

    # ------------------------------------------------------------------ many tasks of a tree (``tree_reads``)

    def descendants(self, top: str, *, max_levels: int = tree_reads.DEFAULT_MAX_LEVELS,
                    limit: int = tree_reads.DEFAULT_LIMIT) -> list[TreeNode]:
        """Breadth-first descendants of ``top`` (not ``top`` itself), one round trip per level
        (``tree_reads.descendants``)."""
        return tree_reads.descendants(self.redis, top, max_levels=max_levels, limit=limit)

    def child_count(self, task_id: str) -> int:
        """How many children the task's children set holds (``tree_reads.child_count``)."""
        return tree_reads.child_count(self.redis, task_id)

    def tree_tokens(self, task_ids: Iterable[str]) -> int:
        """Sum of ``total_tokens`` of the given tasks, in one round trip (``tree_reads.tree_tokens``)."""
        return tree_reads.tree_tokens(self.redis, task_ids)

    def tail_messages(self, task_id: str, count: int) -> tuple[list[dict[str, Any]], int]:
        """The last ``count`` stored messages (oldest first) and the number stored (``tree_reads.tail_messages``)."""
        return tree_reads.tail_messages(self.redis, task_id, count)

    def task_hashes(self, task_ids: Sequence[str]) -> list[dict[Any, Any]]:
        """The record hash of each task (``{}`` for a missing one), in one round trip (``tree_reads.task_hashes``)."""
        return tree_reads.task_hashes(self.redis, task_ids)

    def read_activity(self, task_ids: Sequence[str], *,
                      tail: int = tree_reads.DEFAULT_TAIL) -> list[TaskActivity | None]:
        """Record, heartbeat, lease, inbox length and last messages of many tasks in one round trip
        (``tree_reads.read_activity``)."""
        return tree_reads.read_activity(self.redis, task_ids, tail=tail)

    def spawn_slots(self) -> SpawnSlots:
        """The child and tree slots of this store's tasks (``unicore.store.slots``): a spawner reserves them before
        it creates a child."""
        return SpawnSlots(self.redis)

    # ------------------------------------------------------------------ the conversation

    def load_history(self, task_id: str) -> list[Turn]:
        """All turns with their messages: one round trip (LRANGE turns + LRANGE messages + HGETALL turnmeta)."""
        keys = self.keys(task_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(keys.turns, 0, -1)
        pipe.lrange(keys.messages, 0, -1)
        pipe.hgetall(keys.turnmeta)
        raw_turns, raw_messages, meta = pipe.execute()
        return assemble_history(raw_turns, raw_messages, meta)

    def messages(self, task_id: str) -> list[Message]:
        return [load_message(raw) for raw in self.redis.lrange(self.keys(task_id).messages, 0, -1)]

    def last_message(self, task_id: str) -> Message | None:
        raw = self.redis.lindex(self.keys(task_id).messages, -1)
        return load_message(raw) if raw else None

    def message_count(self, task_id: str) -> int:
        return int(self.redis.llen(self.keys(task_id).messages))

    def compactions(self, task_id: str) -> list[Compaction]:
        """Where the conversation was compacted: every readable record, oldest first (``compactions``)."""
        return read_compactions(self.redis, task_id)

    def turn_meta(self, task_id: str, turn_number: int) -> dict[str, str]:
        prefix = turn_meta_field(turn_number, "")
        meta = self.redis.hgetall(self.keys(task_id).turnmeta)
        return {k[len(prefix) :]: v for k, v in meta.items() if k.startswith(prefix)}


def assemble_history(
    raw_turns: Iterable[str], raw_messages: Iterable[str], meta: dict[str, str]
) -> list[Turn]:
    turns: list[Turn] = []
    for raw in raw_turns:
        header = json.loads(raw)
        n = header["turn_number"]
        end = TurnMeta.of(meta, n)
        turns.append(
            Turn(
                turn_number=n,
                started_at=header["started_at"],
                first_seq=header["first_seq"],
                summary=end.summary,
                ended_at=end.ended_at,
                iterations=end.iterations,
                note=end.note,
            )
        )
    by_number = {turn.turn_number: turn for turn in turns}
    for raw in raw_messages:
        message = load_message(raw)  # an undecodable message is quarantined, never a failed load
        turn = by_number.get(message.turn_number)
        if turn is None:  # cannot happen with the fenced scripts; keep the message visible anyway
            turn = Turn(turn_number=message.turn_number, started_at=message.timestamp, first_seq=message.seq)
            by_number[turn.turn_number] = turn
            turns.append(turn)
        turn.messages.append(message)
    return turns


def history_messages(turns: Iterable[Turn]) -> list[Message]:
    return [message for turn in turns for message in turn.messages]


__all__ = ["TaskReads", "assemble_history", "history_messages"]
