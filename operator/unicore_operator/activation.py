"""Background loops: the activation streams' consumer (consumer group ``operator``) and the periodic resync.

Every namespace has its own activation stream (``keys.namespace_activations_stream``): a namespace's Redis user can
write only its own, so one that poisons it (an entry with the largest id, ``MAXLEN 0``) stops no other namespace's
wake-ups. The consumer reads the streams of every namespace it serves (``served_namespaces``: the
configured ones, or, cluster-wide, those with AgentTasks in the index): on a standalone Redis all of them with one
blocking XREADGROUP, on a Redis Cluster (whose streams are in different slots) one reader per stream. It reconciles
each named task of the stream's own namespace and acknowledges afterwards (at-least-once: entries read but not
acknowledged before a crash are read again from this consumer's pending list at the next start). A stream or group
that does not exist yet is created, reading from its first entry. The resync reconciles every AgentTask in the index
every ``UNICORE_RESYNC_SECONDS``: a lost activation delays a turn, it never loses it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Sequence

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from unicore.api.contract import task_namespace
from unicore.store.activations import Activation, AsyncActivationConsumer, missing_group, read_streams
from unicore.store.keys import namespace_activations_stream

from unicore_operator import metrics, names
from unicore_operator.context import OperatorContext
from unicore_operator.log import logger
from unicore_operator.memory import release_free_memory
from unicore_operator.reconcile import reconcile_task
from unicore_operator.reconcile_queue import BURST

BATCH = 128
BLOCK_MS = 2000
CLAIM_IDLE_MS = 60_000
RESYNC_CONCURRENCY = 16
NAMESPACES_RECHECK_SECONDS = 2.0  # how soon a namespace's first AgentTask gets its stream read (cluster-wide)


def consumer_name() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


def served_namespaces(ctx: OperatorContext) -> list[str]:
    """The namespaces whose activation streams this operator reads."""
    if not ctx.settings.cluster_wide:
        return sorted(ctx.settings.namespaces)
    return sorted({namespace for namespace, _ in (ctx.agenttasks.keys() if ctx.agenttasks is not None else ())})


def consumer(ctx: OperatorContext, namespace: str) -> AsyncActivationConsumer:
    """This operator process as a consumer of ``namespace``'s activation stream (consumer group ``operator``)."""
    return AsyncActivationConsumer(ctx.redis.aio, names.OPERATOR_CONSUMER_GROUP, consumer_name(),
                                   namespace_activations_stream(namespace))


async def handle_entries(ctx: OperatorContext, namespace: str, entries: list[Activation]) -> None:
    """Reconcile every task of ``namespace`` named in ``entries`` (read from that namespace's stream; each task once
    per batch), then acknowledge them all. An entry naming another namespace's task is acknowledged and ignored."""
    tasks: dict[tuple[str, str], str] = {}
    earliest: dict[tuple[str, str], float] = {}
    for entry in entries:
        if "/" not in entry.task_id or task_namespace(entry.task_id) != namespace:
            continue  # a local-mode task id, or a task of another namespace: not this stream's to wake
        key = (namespace, entry.task_id.split("/", 1)[1])
        if ctx.watches(namespace):
            tasks.setdefault(key, entry.reason or "activation")
            if entry.ts is None:
                continue
            earliest[key] = min(entry.ts, earliest.get(key, entry.ts))
    if tasks:
        created = await asyncio.gather(
            *(reconcile_task(ctx, ns, name, reason) for (ns, name), reason in tasks.items())
        )
        for key, job_name in zip(tasks, created, strict=True):
            if job_name and key in earliest:
                metrics.observe_activation(earliest[key])
    await consumer(ctx, namespace).ack(entries)


async def _read_some(ctx: OperatorContext, streams: dict[str, AsyncActivationConsumer],
                     start: dict[str, str]) -> list[Activation]:
    """Our pending entries of the streams not drained yet (no wait), else new entries of all (blocking)."""
    first = {stream: "0" for stream, at in start.items() if at == "0"}
    if first:
        entries = await read_streams(ctx.redis.aio, names.OPERATOR_CONSUMER_GROUP, consumer_name(), first,
                                     count=BATCH, block=None)
        for stream in first.keys() - {entry.stream for entry in entries}:
            start[stream] = ">"  # its pending list is drained: only new entries from now on
        if entries:
            return entries
    wanted = {stream: ">" for stream in streams if start.get(stream) == ">"}
    return await read_streams(ctx.redis.aio, names.OPERATOR_CONSUMER_GROUP, consumer_name(), wanted,
                              count=BATCH, block=BLOCK_MS)


async def _consume(ctx: OperatorContext, namespaces: Callable[[], Sequence[str]]) -> None:
    """Read the activation streams of ``namespaces()`` (asked again at every read) until cancelled."""
    by_stream: dict[str, str] = {}  # stream -> namespace
    start: dict[str, str] = {}  # stream -> "0" (our pending entries first) or ">"
    backoff = 0.5
    while True:
        try:
            for namespace in namespaces():
                stream = namespace_activations_stream(namespace)
                if stream not in by_stream:
                    await consumer(ctx, namespace).ensure_group()
                    by_stream[stream], start[stream] = namespace, "0"
            if not by_stream:
                await asyncio.sleep(NAMESPACES_RECHECK_SECONDS)  # a background loop: nothing to read yet
                continue
            entries = await _read_some(ctx, {s: consumer(ctx, ns) for s, ns in by_stream.items()}, start)
            for stream, namespace in by_stream.items():
                batch = [entry for entry in entries if entry.stream == stream]
                if batch:
                    await handle_entries(ctx, namespace, batch)
            backoff = 0.5
            continue
        except asyncio.CancelledError:
            raise
        except ResponseError as exc:
            if not missing_group(exc):
                logger.warning("activation stream error: %s", exc)
            by_stream.clear()  # a stream or group is gone: create them again, our pending entries first
            start.clear()
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            logger.warning("activation streams unavailable (%s); retrying in %.1fs", exc, backoff)
        except Exception:
            logger.exception("activation consumer failed; restarting it")
        await asyncio.sleep(backoff)  # a background loop (not a handler): back off before reconnecting
        backoff = min(backoff * 2, 10.0)


async def consume_activations(ctx: OperatorContext) -> None:
    """Read every served namespace's activation stream until cancelled (see the module doc)."""
    if not isinstance(ctx.redis.aio, aioredis.RedisCluster):
        await _consume(ctx, lambda: served_namespaces(ctx))
        return
    readers: dict[str, asyncio.Task[None]] = {}
    try:
        while True:
            for namespace in served_namespaces(ctx):
                if namespace not in readers or readers[namespace].done():
                    readers[namespace] = asyncio.get_running_loop().create_task(
                        _consume(ctx, lambda ns=namespace: [ns]), name=f"unicore-activations-{namespace}")
            await asyncio.sleep(NAMESPACES_RECHECK_SECONDS)  # a background loop: look for new namespaces
    finally:
        for reader in readers.values():
            reader.cancel()


async def claim_abandoned(ctx: OperatorContext) -> None:
    """Take over entries another consumer read but never acknowledged (e.g. an operator pod that was replaced)."""
    for namespace in served_namespaces(ctx):
        entries = await consumer(ctx, namespace).claim(CLAIM_IDLE_MS, count=BATCH)
        if entries:
            await handle_entries(ctx, namespace, entries)


async def resync_all(ctx: OperatorContext, reason: str = "resync") -> int:
    """Reconcile every indexed AgentTask (bounded concurrency). Returns how many were looked at."""
    keys = list(ctx.agenttasks.keys()) if ctx.agenttasks is not None else []
    limiter = asyncio.Semaphore(RESYNC_CONCURRENCY)

    async def one(key: tuple[str, str]) -> None:
        async with limiter:
            await reconcile_task(ctx, key[0], key[1], reason)

    await asyncio.gather(*(one(key) for key in keys))
    return len(keys)


async def resync_loop(ctx: OperatorContext) -> None:
    await asyncio.sleep(min(2.0, ctx.settings.resync_seconds))  # let the watches fill the indexes first
    while True:
        try:
            count = await resync_all(ctx)
            await claim_abandoned(ctx)
            logger.debug("resync reconciled %d task(s)", count)
            if count >= BURST:
                release_free_memory()  # the resync was a burst: give back what it freed
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("resync failed; next one in %.0fs", ctx.settings.resync_seconds)
        await asyncio.sleep(ctx.settings.resync_seconds)
