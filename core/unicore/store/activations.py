"""Consumers of the activation streams (written by ``TaskStore.activate``; ``keys.activations_stream``: the local
``uc:activations`` and one per namespace): a consumer group per kind of consumer (the operator's, the local
supervisor's), read with XREADGROUP and acknowledged with XACK after the work is done (at-least-once).
``Activation`` is the one parser of a stream entry.

``ActivationConsumer`` takes a sync client (the local supervisor), ``AsyncActivationConsumer`` a ``redis.asyncio``
one (the operator, whose client returns bytes); either way entries come back as ``Activation``s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from unicore.log import get_logger
from unicore.store import changes
from unicore.store.client import AsyncRedisClient, RedisClient
from unicore.store.codec import text
from unicore.store.keys import ACTIVATIONS_MAXLEN, ACTIVATIONS_STREAM, activations_stream

log = get_logger("state.activations")


@dataclass(frozen=True)
class Activation:
    """One stream entry: ``task`` (the task id), ``reason``, ``ts`` (unix time of the activation)."""

    entry_id: Any  # the stream entry id as the client returned it (what ``ack`` takes back)
    task_id: str
    reason: str
    ts: float | None  # None when missing or unreadable
    stream: str = ""  # the stream it was read from

    @classmethod
    def of(cls, entry_id: Any, fields: Any, stream: str = "") -> Activation:
        decoded = {text(k): text(v) for k, v in (fields or {}).items()}
        try:
            ts: float | None = float(decoded.get("ts", ""))
        except ValueError:
            ts = None
        return cls(entry_id=entry_id, task_id=decoded.get("task", ""), reason=decoded.get("reason", ""), ts=ts,
                   stream=stream)


def entry_fields(task_id: str, reason: str, ts: str) -> dict[str, str]:
    """The fields of the stream entry that activates ``task_id`` (``TaskStore.activate`` writes them)."""
    return {"task": task_id, "reason": reason, "ts": ts}


def write_activation(client: RedisClient, task_id: str, reason: str, ts: str,
                     change: changes.Kind | None = None) -> str:
    """XADD the entry that wakes ``task_id`` to its activation stream (``keys.activations_stream``), with the note
    that its tree row changed (``change``, ``state.changes``) in the same round trip; the entry id, or "" when the
    stream refuses the entry: its namespace's Redis user can give its own stream an entry with the largest id, and
    then every XADD fails. That is logged and never fails the write the activation reports (a message queued, a
    decision made): the operator's periodic resync starts the work. The one writer of activations
    (``TaskStore.activate``, the approval deciders)."""
    stream = activations_stream(task_id)
    fields = entry_fields(task_id, reason, ts)
    try:
        if change is None:
            return text(client.xadd(stream, fields, maxlen=ACTIVATIONS_MAXLEN, approximate=True))
        pipe = client.pipeline(transaction=False)
        pipe.xadd(stream, fields, maxlen=ACTIVATIONS_MAXLEN, approximate=True)
        return text(changes.execute_with_changes(pipe, [(task_id, change)])[0])
    except redis.ResponseError as exc:
        log.warning("task %s: activation not written to %s (%s); the resync starts it", task_id, stream, exc)
        return ""


def _busy_group(exc: redis.ResponseError) -> bool:
    return "BUSYGROUP" in str(exc)


def missing_group(exc: redis.ResponseError) -> bool:
    """The stream or the consumer group does not exist (it was deleted, or Redis restarted empty)."""
    return "NOGROUP" in str(exc)


def _activations(reply: Any) -> list[Activation]:
    """The entries of an XREADGROUP reply (any number of streams)."""
    return [Activation.of(entry_id, fields, text(stream)) for stream, batch in reply or []
            for entry_id, fields in batch]


async def read_streams(client: AsyncRedisClient, group: str, consumer: str, start_ids: dict[str, str], *, count: int,
                       block: int | None) -> list[Activation]:
    """Up to ``count`` entries of each stream of ``start_ids`` (stream -> ``>`` for new ones, ``0`` for this
    consumer's pending ones) in one XREADGROUP: how one operator reads every namespace's stream with one blocked
    connection (a standalone Redis; on a Redis Cluster the streams are in different slots: one read per stream)."""
    if not start_ids:
        return []
    reply = await client.xreadgroup(group, consumer, start_ids, count=count, block=block)  # type: ignore[arg-type]
    return _activations(reply)


class ActivationConsumer:
    """A consumer of ``stream`` (the local ``uc:activations``) in consumer group ``group`` (sync client)."""

    def __init__(self, client: RedisClient, group: str, consumer: str, stream: str = ACTIVATIONS_STREAM) -> None:
        self.redis = client
        self.group = group
        self.consumer = consumer
        self.stream = stream

    def ensure_group(self, start_id: str = "$") -> None:
        """Create the group (and the stream) unless it exists; a new group starts after ``start_id``."""
        try:
            self.redis.xgroup_create(self.stream, self.group, id=start_id, mkstream=True)
        except redis.ResponseError as exc:
            if not _busy_group(exc):
                raise

    def read(self, start_id: str = ">", *, count: int, block: int | None) -> list[Activation]:
        """Up to ``count`` entries: new ones (``>``), or this consumer's pending ones (``0``)."""
        reply = self.redis.xreadgroup(self.group, self.consumer, {self.stream: start_id}, count=count,
                                      block=block)
        return _activations(reply)

    def ack(self, activations: Iterable[Activation]) -> None:
        ids = [activation.entry_id for activation in activations]
        if ids:
            self.redis.xack(self.stream, self.group, *ids)


class AsyncActivationConsumer:
    """A consumer of ``stream`` (a namespace's: ``keys.namespace_activations_stream``) in consumer group ``group``
    (``redis.asyncio`` client)."""

    def __init__(self, client: AsyncRedisClient, group: str, consumer: str, stream: str = ACTIVATIONS_STREAM) -> None:
        self.redis = client
        self.group = group
        self.consumer = consumer
        self.stream = stream

    async def ensure_group(self, start_id: str = "0") -> None:
        """Create the group (and the stream) unless it exists; a new group reads from ``start_id`` on."""
        try:
            await self.redis.xgroup_create(self.stream, self.group, id=start_id, mkstream=True)
        except redis.ResponseError as exc:
            if not _busy_group(exc):
                raise

    async def read(self, start_id: str = ">", *, count: int, block: int | None) -> list[Activation]:
        """Up to ``count`` entries: new ones (``>``), or this consumer's pending ones (``0``)."""
        reply = await self.redis.xreadgroup(self.group, self.consumer, {self.stream: start_id}, count=count,
                                            block=block)
        return _activations(reply)

    async def ack(self, activations: Sequence[Activation]) -> None:
        ids = [activation.entry_id for activation in activations]
        if ids:
            await self.redis.xack(self.stream, self.group, *ids)

    async def claim(self, min_idle_ms: int, *, count: int) -> list[Activation]:
        """Take over entries another consumer of the group read but did not acknowledge for ``min_idle_ms`` (e.g.
        an operator pod that was replaced); [] when the group does not exist. Deleted entries are left out."""
        try:
            result = await self.redis.xautoclaim(self.stream, self.group, self.consumer, min_idle_ms, "0-0",
                                                 count=count)
        except redis.ResponseError:
            return []
        entries = [entry for entry in (result[1] if result and len(result) > 1 else []) if entry and entry[1]]
        return [Activation.of(entry_id, fields) for entry_id, fields in entries]


__all__ = ["Activation", "ActivationConsumer", "AsyncActivationConsumer", "entry_fields", "missing_group",
           "read_streams", "write_activation"]
