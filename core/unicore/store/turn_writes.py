"""The turn's writes in ``TaskStore``, each fenced by the lease's token (LeaseLost, writing nothing, when the lease
is no longer the caller's): the drain of the inbox into the conversation, the model's answers and their usage (rolled
up onto the tree's root), the end of a turn with the report it owes, and fields of the task's record."""

from __future__ import annotations

import uuid

import redis

from unicore.api.schema import ContentBlock, Message, Role, Usage
from unicore.errors import UniCoreError
from unicore.log import get_logger
from unicore.store import changes, codec, lua
from unicore.store.inbox import build_drain_batch, oldest_queued, queued_trace_links
from unicore.store.records import DrainResult, Lease
from unicore.store.task_store_base import TaskStoreBase, write_time

log = get_logger("state")

_DRAIN_RETRIES = 5


class TurnWrites(TaskStoreBase):
    """What the lease holder writes during a turn."""

    def drain(self, lease: Lease, *, first_drain: bool) -> DrainResult:
        """Move every inbox entry into the conversation, atomically.

        One read of the inbox, then ONE fenced script that re-checks the drained entries are still the inbox's
        head, creates the turn if needed, appends the user messages and trims exactly those entries. Producers
        only RPUSH, so entries pushed meanwhile stay for the next drain.
        """
        keys = self.keys(lease.task_id)
        for _ in range(_DRAIN_RETRIES):
            raw_entries: list[str] = self.redis.lrange(keys.inbox, 0, -1)
            if not raw_entries:
                return DrainResult()
            batch = build_drain_batch(raw_entries)
            now = write_time()
            write_id = uuid.uuid4().hex  # a retry after a lost reply replays the result (lua._replay)
            try:
                turn_number, new_turn, start_seq, turn_first_seq = self._fenced(
                    self._drain,
                    [keys.lease, keys.task, keys.inbox, keys.turns, keys.messages],
                    [
                        lease.fence,
                        len(raw_entries),
                        raw_entries[-1],
                        "1" if first_drain else "0",
                        now,
                        write_id,
                        *(arg for content, ids in batch for arg in (codec.dumps(content), codec.dumps(ids))),
                    ],
                )
            except redis.ResponseError as exc:
                if lua.STALE_INBOX in str(exc):
                    log.warning("inbox of %s changed under the drain; reading it again", lease.task_id)
                    continue
                raise
            lease.last_write = write_id
            if int(new_turn):
                changes.publish_one(self.redis, lease.task_id, "turn")
            messages = [
                Message(
                    role="user",
                    content=content,
                    seq=int(start_seq) + i,
                    turn_number=int(turn_number),
                    message_number=int(start_seq) + i - int(turn_first_seq),
                    timestamp=float(now),
                    inbox_ids=ids,
                )
                for i, (content, ids) in enumerate(batch)
            ]
            return DrainResult(
                drained=len(raw_entries),
                messages=messages,
                turn_number=int(turn_number),
                new_turn=bool(int(new_turn)),
                oldest=oldest_queued(raw_entries),
                trace_links=queued_trace_links(raw_entries),
            )
        raise UniCoreError(f"inbox of {lease.task_id} kept changing under the drain")

    def append_message(
        self, lease: Lease, role: Role, content: list[ContentBlock], *, usage: Usage | None = None
    ) -> Message:
        """Append one message to the current turn (and add the model call's usage), fenced."""
        keys = self.keys(lease.task_id)
        now = write_time()
        content = codec.valid(content)  # what is stored, and returned (store.codec)
        is_assistant = role == "assistant"
        has_tool_use = is_assistant and any("toolUse" in block for block in content)
        used = usage or Usage()
        write_id = uuid.uuid4().hex  # a retry after a lost reply does not store the answer twice
        seq, turn_number, message_number = self._fenced(
            self._append,
            [keys.lease, keys.task, keys.turns, keys.messages],
            [
                lease.fence,
                role,
                codec.dumps(content),
                now,
                int(is_assistant),
                int(has_tool_use),
                used.input_tokens,
                used.output_tokens,
                used.total_tokens,
                write_id,
            ],
        )
        lease.last_write = write_id
        if usage and usage.total_tokens:
            self._roll_up_usage(lease.task_id, usage)
        return Message(
            role=role,
            content=content,
            seq=int(seq),
            turn_number=int(turn_number),
            message_number=int(message_number),
            timestamp=float(now),
        )

    def record_usage(self, lease: Lease, usage: Usage) -> None:
        """Add a model call's usage (e.g. the turn summary) to the task and to its root's tree totals."""
        keys = self.keys(lease.task_id)
        self._fenced(
            self._usage,
            [keys.lease, keys.task],
            [lease.fence, write_time(), usage.input_tokens, usage.output_tokens, usage.total_tokens],
        )
        self._roll_up_usage(lease.task_id, usage)

    def _roll_up_usage(self, task_id: str, usage: Usage) -> None:
        # The root lives in another hash slot, so this is a separate (non-atomic, best effort) increment.
        root = self.redis.hget(self.keys(task_id).task, "root") or task_id
        pipe = self.redis.pipeline(transaction=False)
        root_key = self.keys(root).task
        pipe.hincrby(root_key, "tree_input_tokens", usage.input_tokens)
        pipe.hincrby(root_key, "tree_output_tokens", usage.output_tokens)
        pipe.hincrby(root_key, "tree_total_tokens", usage.total_tokens)
        changes.execute_with_changes(pipe, [(task_id, "tokens")])

    def end_turn(
        self,
        lease: Lease,
        turn_number: int,
        *,
        last_response: str,
        summary: str = "",
        iterations: int = 0,
        note: str = "",
        extra: dict[str, str] | None = None,
        report: tuple[str, str] | None = None,
    ) -> None:
        """Record the turn's end (turnmeta ``<n>:ended_at|summary|iterations|note``) and the task's last response;
        ``report`` = (message id, text) owed to the parent, stored atomically with the end (delivered by
        ``unicore.turn.reports.deliver_report``)."""
        keys = self.keys(lease.task_id)
        now = write_time()
        meta: dict[str, str] = {
            "ended_at": now,
            "summary": summary,
            "iterations": str(iterations),
            "note": note,
        }
        meta.update(extra or {})
        flat = [item for pair in meta.items() for item in pair]
        self._fenced(
            self._end_turn,
            [keys.lease, keys.task, keys.turnmeta],
            [lease.fence, now, turn_number, last_response, *(report or ("", "")), *flat],
        )

    def set_task_fields(self, lease: Lease, fields: dict[str, str]) -> None:
        """Fenced HSET of task record fields (e.g. ``last_error``)."""
        keys = self.keys(lease.task_id)
        flat = [item for pair in fields.items() for item in pair]
        self._fenced(self._set_fields, [keys.lease, keys.task], [lease.fence, write_time(), *flat])
        changes.publish_one(self.redis, lease.task_id, "error" if "last_error" in fields else "updated")

    def record_error(self, lease: Lease, error: str) -> None:
        self.set_task_fields(lease, {"last_error": error[:4000]})


__all__ = ["TurnWrites"]
