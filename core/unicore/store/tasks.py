"""TaskStore: every read and write of task state in Redis (schema version 1).

Data flows inbox -> turn -> history -> status:
- producers ``queue_message`` (idempotent by message id) and ``activate`` the task;
- the lease holder ``drain``s the inbox into the conversation (one fenced Lua script), ``append_message``s the
  model's answers, ``end_turn``s and ``release``s;
- readers ``load_history`` / ``get_task`` / ``list_tasks`` / ``tree``.

Every method costs a constant number of round trips, whatever the history length.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster

from unicore.agents import AgentDefinition, AgentNotFound, effective_spec, own_settings
from unicore.api import pod_env
from unicore.api.contract import same_namespace
from unicore.api.schema import (
    DEFAULT_MESSAGE_CAP_BYTES,
    SCHEMA_VERSION,
    Approval,
    ContentBlock,
    InboxMessage,
    Message,
    Role,
    TaskSpec,
    Usage,
    prompt_message_id,
    task_name,
    text_block,
)
from unicore.errors import ConfigError, LeaseBusy, LeaseLost, MessageTooLarge, TaskNotFound, UniCoreError
from unicore.log import get_logger
from unicore.scheduling import NextAction, next_action
from unicore.store import approvals, changes, codec, lua
from unicore.store.activations import write_activation
from unicore.store.agents import read_agent
from unicore.store.approval_records import PendingCall, PendingKind
from unicore.store.client import RedisClient, build_client
from unicore.store.compactions import Compaction, read_compactions
from unicore.store.keys import HEARTBEATS_INDEX, TASKS_INDEX, TaskKeys
from unicore.store.messages import load_message
from unicore.store.records import DrainResult, Lease, TaskRecord, Turn, TurnMeta, turn_meta_field
from unicore.store.scheduling_reads import read_observation

log = get_logger("state")

DEFAULT_LEASE_TTL_MS = 30_000
_DRAIN_RETRIES = 5


def connect(url: str | None = None) -> RedisClient:
    """A client that decodes responses to str (what TaskStore expects). ``url`` defaults to ``$REDIS_URL``.

    It retries through connection blips (resets, restarts, failovers) for ``UNICORE_REDIS_RETRY_SECONDS``; see
    ``unicore.store.client``.
    """
    chosen = url or os.environ.get(pod_env.REDIS_URL)
    if not chosen:
        raise ConfigError(f"{pod_env.REDIS_URL} is not set")
    return build_client(chosen, decode_responses=True)


def _now() -> str:
    return repr(time.time())


def _holder_id() -> str:
    """``<pod name>:<pid>``: the watchdog matches the part before ':' against turn pods (the Job sets
    UNICORE_POD_NAME from the downward API; outside Kubernetes the host name stands in)."""
    return f"{os.environ.get(pod_env.POD_NAME) or socket.gethostname()}:{os.getpid()}"


def inbox_entry_to_content(entry: dict[str, Any]) -> tuple[str, Any]:
    """("tool_result", toolResult block) or ("text", str) for one decoded inbox entry."""
    if entry.get("type") == "tool_result":
        block = entry.get("content")
        if isinstance(block, dict) and "toolResult" in block:
            return "tool_result", block
        if isinstance(block, dict) and "toolUseId" in block:
            return "tool_result", {"toolResult": block}
    content = entry.get("content")
    return "text", content if isinstance(content, str) else codec.dumps(content)


def inherited_approval(own: Approval | None, parent: Approval | None) -> Approval | None:
    """A child's approval setting: what its parent's gates stays gated (a child only narrows what runs unasked);
    its own tools join; its own timeout, else the parent's."""
    if parent is None or not parent.tools:
        return own
    if own is None:
        return parent
    tools = list(dict.fromkeys([*parent.tools, *own.tools]))
    return Approval(tools=tools, timeout_seconds=own.timeout_seconds)


def build_drain_messages(raw_entries: Sequence[str]) -> list[list[ContentBlock]]:
    """Seed 000 batching: all tool results first, in ONE user message; then one user message per text entry."""
    return [content for content, _ids in build_drain_batch(raw_entries)]


def build_drain_batch(raw_entries: Sequence[str]) -> list[tuple[list[ContentBlock], list[str]]]:
    """``build_drain_messages`` with, per message, the ids of the ``user`` inbox entries (a send, a prompt, a
    parent's message) it holds: what ``unicore.turn.history.answer_to`` finds a request's answer by. Completions and
    tool results are not requests and carry no ids."""
    tool_results: list[ContentBlock] = []
    result_ids: list[str] = []
    texts: list[tuple[list[ContentBlock], list[str]]] = []
    for raw in raw_entries:
        try:
            entry = json.loads(raw)
            if not isinstance(entry, dict):
                raise ValueError("not an object")
        except ValueError:
            log.warning("unreadable inbox entry kept as text: %.200s", raw)
            texts.append(([text_block(f"[unreadable inbox entry] {raw}")], []))
            continue
        if entry.get("type") == "decision":  # a wake-up after people decided (state.approvals): no message
            continue
        ids = [entry["id"]] if entry.get("type") == "user" and isinstance(entry.get("id"), str) else []
        kind, content = inbox_entry_to_content(entry)
        if kind == "tool_result":
            tool_results.append(content)
            if isinstance(entry.get("answers"), str):  # a person's answer to ask_user: a request, like a send
                result_ids.append(entry["answers"])
        else:
            texts.append(([text_block(content)], ids))
    return ([(tool_results, result_ids)] if tool_results else []) + texts


class TaskStore:
    """All task state operations. ``client`` must decode responses (``connect()`` makes such a client)."""

    def __init__(self, client: RedisClient, *, message_cap_bytes: int = DEFAULT_MESSAGE_CAP_BYTES) -> None:
        if not client.get_encoder().decode_responses:  # Redis and RedisCluster alike (the latter has no pool)
            raise ConfigError("TaskStore needs a Redis client created with decode_responses=True")
        self.redis = client
        self.message_cap_bytes = message_cap_bytes
        self._create = client.register_script(lua.CREATE_TASK)
        self._queue = client.register_script(lua.QUEUE_MESSAGE)
        self._queue_own = client.register_script(lua.QUEUE_OWN_RESULT)
        self._acquire = client.register_script(lua.ACQUIRE_LEASE)
        self._renew = client.register_script(lua.RENEW_LEASE)
        self._release = client.register_script(lua.RELEASE_LEASE)
        self._drain = client.register_script(lua.DRAIN)
        self._append = client.register_script(lua.APPEND_MESSAGE)
        self._usage = client.register_script(lua.RECORD_USAGE)
        self._end_turn = client.register_script(lua.END_TURN)
        self._set_fields = client.register_script(lua.SET_FIELDS)

    @classmethod
    def from_url(cls, url: str | None = None) -> TaskStore:
        return cls(connect(url))

    @staticmethod
    def keys(task_id: str) -> TaskKeys:
        return TaskKeys(task_id)

    # ------------------------------------------------------------------ tasks

    def create_task(self, spec: TaskSpec, *, root: str | None = None, depth: int | None = None) -> bool:
        """Create the task (and queue its prompt). Returns False, writing nothing, if the task already exists:
        an existing conversation is never overwritten (a create repeated after a crash must not lose it). ``root``
        and ``depth``: the task's place in its tree as the caller knows it from elsewhere (the operator: the AgentTask
        chain, since a namespace's Redis user may write its parent's record; ``unicore_operator.parent_view``);
        default: from the parent's record."""
        parent: TaskRecord | None = None
        if spec.parent:
            parent = self.get_task(spec.parent)
        now = time.time()
        own: dict[str, Any] | None = None
        agents: list[str] | None = None
        if spec.agent is not None:  # the agent's definition, narrowed by what the creator set (unicore.agents)
            own = own_settings(spec)
            approval = inherited_approval(spec.approval, parent.approval if parent else None)
            if approval is not None:  # the parent's gates stay gated whatever the agent says
                own["approval"] = approval.model_dump(mode="json")
            definition = self.read_agent(spec.agent)
            if definition is None:
                raise AgentNotFound(f"no agent {spec.agent!r}: apply its definition first")
            agents = list(definition.agents)
            spec = effective_spec(TaskSpec.model_validate({"id": spec.id, **own}), definition).model_copy(
                update={"prompt": spec.prompt, "parent": spec.parent, "script": spec.script, "agent": spec.agent,
                        "mcp_definitions": spec.mcp_definitions})
        record = TaskRecord(
            id=spec.id,
            name=task_name(spec.id),
            parent=spec.parent,
            root=root if root is not None else (parent.root if parent else spec.id),
            depth=depth if depth is not None else (parent.depth + 1 if parent else 0),
            model=spec.model,
            system_prompt=spec.system_prompt,
            tools=spec.tools,
            child_tools=spec.child_tools,
            limits=spec.limits,
            script=spec.script,
            approval=inherited_approval(spec.approval, parent.approval if parent else None),
            suspended=parent.suspended if parent else False,  # spawned while its parent was stopped: stays still
            mcp_servers=spec.mcp_servers,
            mcp_definitions=spec.mcp_definitions,
            agent=spec.agent,
            own_spec=own,
            agents=agents,
            created_at=now,
            updated_at=now,
            schema_version=SCHEMA_VERSION,
        )
        prompt_id, prompt_entry = "", ""
        if spec.prompt is not None:
            message = InboxMessage(
                id=prompt_message_id(spec.id), type="user", content=spec.prompt, sender="user", timestamp=now
            )
            prompt_entry = self._encode_entry(message)
            prompt_id = message.id
        keys = self.keys(spec.id)
        fields = [item for pair in record.to_hash().items() for item in pair]
        created = bool(
            self._create(
                keys=[keys.task, keys.inbox, keys.seen], args=[repr(now), prompt_id, prompt_entry, *fields]
            )
        )
        if not created:
            log.info("task %s already exists; its conversation is kept", spec.id)
            return False
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(TASKS_INDEX, {spec.id: now}, nx=True)
        if spec.parent:
            pipe.zadd(self.keys(spec.parent).children, {spec.id: now}, nx=True)
        changes.execute_with_changes(pipe, [(spec.id, "created")])
        log.info("created task %s (parent %s)", spec.id, spec.parent or "-")
        return True

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

    def delete_task(self, task_id: str) -> None:
        """Remove every key of the task and its index entries (its children are not deleted)."""
        parent, root = self.redis.hmget(self.keys(task_id).task, ["parent", "root"])
        pipe = self.redis.pipeline(transaction=False)
        for key in self.keys(task_id).all():  # one DEL per key: a cluster pipeline has no multi-key DEL
            pipe.delete(key)
        pipe.zrem(TASKS_INDEX, task_id)
        pipe.zrem(HEARTBEATS_INDEX, task_id)  # a task deleted while a turn runs leaves no member behind
        if parent:
            pipe.zrem(self.keys(parent).children, task_id)
            pipe.zrem(self.keys(parent).child_slots, task_id)  # its slots are free again (state.slots)
        if root and root != task_id:
            pipe.zrem(self.keys(root).tree_slots, task_id)
        changes.execute_with_changes(pipe, [(task_id, "removed")])

    # ------------------------------------------------------------------ inbox and activations

    def _encode_entry(self, message: InboxMessage) -> str:
        encoded = codec.model_json(message)  # valid text whatever the message holds (state.codec)
        size = len(encoded.encode())
        if size > self.message_cap_bytes:
            raise MessageTooLarge(
                f"message {message.id} is {size} bytes, over the cap of {self.message_cap_bytes} bytes; "
                "nothing was queued"
            )
        return encoded

    def check_message(self, message: InboxMessage) -> int:
        """The bytes ``message`` takes in an inbox (its stored JSON); MessageTooLarge, as ``queue_message`` would
        raise it, when that is over the cap. Writes nothing: a caller can refuse what it could never queue."""
        return len(self._encode_entry(message).encode())

    def queue_message(self, task_id: str, message: InboxMessage) -> bool:
        """Append ``message`` to the task's inbox. Idempotent by ``message.id``: returns False (writing nothing) if
        that id was already accepted. Raises MessageTooLarge / TaskNotFound, writing nothing."""
        encoded = self._encode_entry(message)
        keys = self.keys(task_id)
        result = int(
            self._queue(
                keys=[keys.task, keys.inbox, keys.seen], args=[message.id, encoded, repr(message.timestamp)]
            )
        )
        if result < 0:
            raise TaskNotFound(f"no task {task_id!r}; message {message.id} was not queued")
        return result == 1

    def queue_own_result(self, lease: Lease, message: InboxMessage) -> bool:
        """``queue_message`` into the lease holder's own inbox, fenced (LeaseLost if the lease is no longer ours):
        the result of a tool call reaches the conversation only from the turn that still owns it."""
        keys = self.keys(lease.task_id)
        result = self._fenced(
            self._queue_own,
            [keys.lease, keys.task, keys.inbox, keys.seen],
            [lease.token, message.id, self._encode_entry(message), repr(message.timestamp)],
        )
        return int(result) == 1

    def queue_text(
        self,
        task_id: str,
        text: str,
        *,
        sender: str = "user",
        kind: str = "user",
        message_id: str | None = None,
    ) -> bool:
        message = InboxMessage(type=kind, content=text, sender=sender)  # type: ignore[arg-type]
        if message_id:
            message.id = message_id
        return self.queue_message(task_id, message)

    def activate(self, task_id: str, reason: str, *, change: changes.Kind | None = None) -> str:
        """Signal that the task has work (at-least-once stream consumed by the operator / local supervisor);
        ``change``: also note that its tree row changed (``state.changes``, in the same round trip)."""
        return write_activation(self.redis, task_id, reason, _now(), change)

    def pending_count(self, task_id: str) -> int:
        return int(self.redis.llen(self.keys(task_id).inbox))

    def inbox(self, task_id: str) -> list[InboxMessage]:
        return [
            InboxMessage.model_validate_json(raw)
            for raw in self.redis.lrange(self.keys(task_id).inbox, 0, -1)
        ]

    # ------------------------------------------------------------------ lease

    def acquire_lease(
        self, task_id: str, *, holder: str | None = None, ttl_ms: int = DEFAULT_LEASE_TTL_MS
    ) -> Lease:
        """Take the task's lease with a new fencing token; LeaseBusy if a live holder has it."""
        keys = self.keys(task_id)
        who = holder or _holder_id()
        now = _now()
        token, current = self._acquire(
            keys=[keys.lease, keys.fence, keys.task, keys.heartbeat], args=[who, ttl_ms, now]
        )
        token = int(token)
        if token < 0:
            raise TaskNotFound(f"no task {task_id!r}")
        if token == 0:
            raise LeaseBusy(f"task {task_id} is already running a turn (lease held by {current})")
        # The first heartbeat: the global index the watchdog reads (only after the lease is ours, so a refused
        # acquire never freshens the entry of a turn that holds the lease and may be hung); the task runs now.
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(HEARTBEATS_INDEX, {task_id: float(now)})
        changes.execute_with_changes(pipe, [(task_id, "turn_started")])
        return Lease(task_id=task_id, token=token, holder=who)

    def renew_lease(self, lease: Lease, *, ttl_ms: int = DEFAULT_LEASE_TTL_MS) -> None:
        """Heartbeat: extend the lease, write ``uc:{T}:heartbeat`` and ``ZADD uc:heartbeats <now> <task id>``, in
        one pipeline (one round trip). LeaseLost if the lease is gone.

        The ZADD is a separate command, not part of the fenced script: ``uc:heartbeats`` is one global key, and on
        Redis Cluster a script may only touch keys of one slot (the task's hash tag). So a refused renew still
        freshens the entry; harmless, because the turn then stops (LeaseLost) and the watchdog reads the task's own
        keys before it acts, and drops entries whose task no longer runs once they are stale.
        """
        keys = self.keys(lease.task_id)
        now = _now()
        pipe = self.redis.pipeline(transaction=False)
        if isinstance(self.redis, RedisCluster):  # a cluster pipeline runs no scripts: the script goes alone, first
            self._fenced(self._renew, [keys.lease, keys.heartbeat], [lease.token, ttl_ms, now])
        else:
            self._renew(keys=[keys.lease, keys.heartbeat], args=[lease.token, ttl_ms, now], client=pipe)
        pipe.zadd(HEARTBEATS_INDEX, {lease.task_id: float(now)})
        try:
            pipe.execute()
        except redis.ResponseError as exc:
            if lua.LEASE_LOST in str(exc):
                raise LeaseLost(f"lease of {keys.lease} lost: write refused") from None
            raise

    def release_lease(self, lease: Lease) -> bool:
        """Drop the lease and mark the task idle; False if the lease was no longer ours (nothing written).
        Once released, the task leaves ``uc:heartbeats`` (a failed release leaves the new holder's entry alone)."""
        keys = self.keys(lease.task_id)
        released = bool(self._release(keys=[keys.lease, keys.task], args=[lease.token, _now()]))
        if released:
            self._left_running(lease.task_id)
        return released

    def _left_running(self, task_id: str) -> None:
        """A released or broken lease: the task leaves ``uc:heartbeats`` and its row is idle (``state.changes``)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(HEARTBEATS_INDEX, task_id)
        changes.execute_with_changes(pipe, [(task_id, "turn_ended")])

    def break_lease(self, task_id: str, holder: str, *, exact: bool = True) -> bool:
        """Delete the task's lease if ``holder`` (exact, or a prefix such as ``<pod name>:``) holds it: its process is
        known to be dead, so the next turn need not wait for the lease to expire (fencing keeps a zombie harmless)."""
        keys = self.keys(task_id)
        broken = bool(
            self.redis.eval(lua.BREAK_LEASE, 2, keys.lease, keys.task, holder, _now(), "1" if exact else "0")
        )
        if broken:
            self._left_running(task_id)
        return broken

    def lease_holder(self, task_id: str) -> str | None:
        """The live holder, or None if no turn holds the lease."""
        return self.redis.hget(self.keys(task_id).lease, "holder")

    def heartbeat_at(self, task_id: str) -> float | None:
        raw = self.redis.get(self.keys(task_id).heartbeat)
        return float(raw) if raw else None

    def _fenced(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        try:
            return script(keys=keys, args=args)
        except redis.ResponseError as exc:
            text = str(exc)
            if lua.LEASE_LOST in text:
                raise LeaseLost(f"lease of {keys[0]} lost: write refused") from None
            if lua.NO_TURN in text:
                raise UniCoreError(f"{keys[0]}: no turn to append to (drain first)") from None
            raise

    # ------------------------------------------------------------------ turn writes (fenced)

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
            now = _now()
            try:
                turn_number, new_turn, start_seq, turn_first_seq = self._fenced(
                    self._drain,
                    [keys.lease, keys.task, keys.inbox, keys.turns, keys.messages],
                    [
                        lease.token,
                        len(raw_entries),
                        raw_entries[-1],
                        "1" if first_drain else "0",
                        now,
                        uuid.uuid4().hex,  # write id: a retry after a lost reply replays the result (lua._replay)
                        *(arg for content, ids in batch for arg in (codec.dumps(content), codec.dumps(ids))),
                    ],
                )
            except redis.ResponseError as exc:
                if lua.STALE_INBOX in str(exc):
                    log.warning("inbox of %s changed under the drain; reading it again", lease.task_id)
                    continue
                raise
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
            )
        raise UniCoreError(f"inbox of {lease.task_id} kept changing under the drain")

    def append_message(
        self, lease: Lease, role: Role, content: list[ContentBlock], *, usage: Usage | None = None
    ) -> Message:
        """Append one message to the current turn (and add the model call's usage), fenced."""
        keys = self.keys(lease.task_id)
        now = _now()
        content = codec.valid(content)  # what is stored, and returned (state.codec)
        is_assistant = role == "assistant"
        has_tool_use = is_assistant and any("toolUse" in block for block in content)
        used = usage or Usage()
        seq, turn_number, message_number = self._fenced(
            self._append,
            [keys.lease, keys.task, keys.turns, keys.messages],
            [
                lease.token,
                role,
                codec.dumps(content),
                now,
                int(is_assistant),
                int(has_tool_use),
                used.input_tokens,
                used.output_tokens,
                used.total_tokens,
                uuid.uuid4().hex,  # write id: a retry after a lost reply does not store the answer twice
            ],
        )
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
            [lease.token, _now(), usage.input_tokens, usage.output_tokens, usage.total_tokens],
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
        now = _now()
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
            [lease.token, now, turn_number, last_response, *(report or ("", "")), *flat],
        )

    def set_task_fields(self, lease: Lease, fields: dict[str, str]) -> None:
        """Fenced HSET of task record fields (e.g. ``last_error``)."""
        keys = self.keys(lease.task_id)
        flat = [item for pair in fields.items() for item in pair]
        self._fenced(self._set_fields, [keys.lease, keys.task], [lease.token, _now(), *flat])
        changes.publish_one(self.redis, lease.task_id, "error" if "last_error" in fields else "updated")

    def record_error(self, lease: Lease, error: str) -> None:
        self.set_task_fields(lease, {"last_error": error[:4000]})

    # ------------------------------------------------------------------ reads of the conversation

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

    # ------------------------------------------------------------------ agents, and calls waiting for people

    def read_agent(self, agent_id: str) -> AgentDefinition | None:
        """``unicore.store.agents.read_agent``: the stored definition, None when there is none (AgentInvalid)."""
        return read_agent(self.redis, agent_id)

    def approval_calls(self, task_id: str) -> list[PendingCall]:
        """Every call of the task that waited or waits for a person, decided or not (``approvals.calls``)."""
        return approvals.calls(self.redis, task_id)

    def pending_calls(self, task_id: str) -> list[PendingCall]:
        """The calls a person may still decide (``approvals.pending_calls``, the task's own timeout)."""
        return approvals.pending_calls(self.redis, task_id)

    def waiting_for(self, task_id: str) -> PendingKind | None:
        """What the task waits for from people: "approval", "input" or None (``approvals.waiting_for``)."""
        return approvals.waiting_for(self.redis, task_id)

    def recorded_approval(self, task_id: str) -> Approval | None:
        """The ``approval`` setting the task's record holds (``approvals.recorded_approval``)."""
        return approvals.recorded_approval(self.redis, task_id)

    def decide(self, task_id: str, call_id: str | None, approve: bool, *, by: str, reason: str = "",
               timeout_seconds: float | None = None) -> list[PendingCall]:
        """A person's decision on ``call_id`` (None: every pending approval); ``approvals.decide`` says the rest."""
        return approvals.decide(self.redis, task_id, call_id, approve, by=by, reason=reason,
                                timeout_seconds=timeout_seconds)

    # ------------------------------------------------------------------ scheduling

    def next_action(self, task_id: str) -> NextAction:
        """What the task does next (``unicore.scheduling``): run a turn, deliver a report it owes its parent (its
        turn ended, its process died before the report reached the parent's inbox), both or neither."""
        return next_action(read_observation(self.redis, task_id))

    def needs_turn(self, task_id: str) -> bool:
        """True when the task has something to do now (``next_action``): a turn to run and none holds the lease
        (queued messages, unless it waits for people and none of them answers: ``store.approvals.blocked``; an
        unfinished turn, its process died or was cancelled before the turn ended), or a report still owed to the
        parent. Never a turn for a suspended task (``store.suspension``); its owed report is delivered all the same."""
        action = self.next_action(task_id)
        return action.run_turn or action.deliver_report


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
