"""What every part of ``TaskStore`` stands on: its client (one that decodes responses), the Lua scripts registered on
it, the keys of a task, the cap on an inbox message, and the fenced call of a turn's script.

``TaskStore`` (``unicore.store.tasks``) is put together from the parts that build on this: the task's records
(``task_reads``, ``task_writes``), its inbox (``inbox``), its lease (``task_leases``) and the turn's fenced writes
(``turn_writes``)."""

from __future__ import annotations

import time
from typing import Any

import redis

from unicore.api.schema import DEFAULT_MESSAGE_CAP_BYTES, InboxMessage
from unicore.errors import ConfigError, LeaseLost, MessageTooLarge, UniCoreError
from unicore.store import codec, lua
from unicore.store.client import RedisClient
from unicore.store.keys import TaskKeys


def write_time() -> str:
    """The time the store writes: unix seconds as the float's repr (what the scripts store and compare)."""
    return repr(time.time())


class TaskStoreBase:
    """The client and scripts of a ``TaskStore``. ``client`` must decode responses (``connect()`` makes such a
    client)."""

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

    @staticmethod
    def keys(task_id: str) -> TaskKeys:
        return TaskKeys(task_id)

    def _encode_entry(self, message: InboxMessage) -> str:
        """The inbox entry of ``message`` (a task's prompt at its creation, or any message queued later);
        MessageTooLarge over the cap."""
        encoded = codec.model_json(message)  # valid text whatever the message holds (store.codec)
        size = len(encoded.encode())
        if size > self.message_cap_bytes:
            raise MessageTooLarge(
                f"message {message.id} is {size} bytes, over the cap of {self.message_cap_bytes} bytes; "
                "nothing was queued"
            )
        return encoded

    def _fenced(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        try:
            return script(keys=keys, args=args)
        except redis.ResponseError as exc:
            text = str(exc)
            if lua.WRITES_LOST in text:
                raise LeaseLost(f"lease of {keys[0]} voided: an earlier write of this turn is missing (lost in a "
                                "Redis failover); write refused") from None
            if lua.LEASE_LOST in text:
                raise LeaseLost(f"lease of {keys[0]} lost: write refused") from None
            if lua.NO_TURN in text:
                raise UniCoreError(f"{keys[0]}: no turn to append to (drain first)") from None
            raise


__all__ = ["TaskStoreBase", "write_time"]
