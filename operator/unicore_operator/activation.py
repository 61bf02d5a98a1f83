"""Background loops: the activation stream consumer (consumer group ``operator``) and the periodic resync.

The consumer reads ``uc:activations`` with XREADGROUP, reconciles each named task and XACKs afterwards
(at-least-once: entries read but not acknowledged before a crash are read again from this consumer's pending list
at the next start). A stream or group that does not exist yet is created. The resync reconciles every AgentTask in
the index every ``UNICORE_RESYNC_SECONDS``: a lost activation delays a turn, it never loses it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from unicore.state.codec import text

from unicore_operator import metrics, names
from unicore_operator.context import OperatorContext
from unicore_operator.log import logger
from unicore_operator.reconcile import reconcile_task

BATCH = 128
BLOCK_MS = 2000
CLAIM_IDLE_MS = 60_000
RESYNC_CONCURRENCY = 16


def consumer_name() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


async def ensure_group(client: aioredis.Redis) -> None:
    try:
        await client.xgroup_create(names.ACTIVATIONS_STREAM, names.OPERATOR_CONSUMER_GROUP, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise




async def handle_entries(ctx: OperatorContext, entries: list[tuple[Any, dict[Any, Any]]]) -> None:
    """Reconcile every task named in ``entries`` (each task once per batch), then acknowledge them all."""
    tasks: dict[tuple[str, str], str] = {}
    earliest: dict[tuple[str, str], float] = {}
    for _entry_id, fields in entries:
        decoded = {text(k): text(v) for k, v in (fields or {}).items()}
        task_id = decoded.get("task", "")
        if "/" not in task_id:
            continue  # a local-mode task id: not ours
        namespace, name = task_id.split("/", 1)
        if ctx.watches(namespace):
            tasks.setdefault((namespace, name), decoded.get("reason") or "activation")
            try:
                ts = float(decoded.get("ts", ""))
            except ValueError:
                continue
            earliest[(namespace, name)] = min(ts, earliest.get((namespace, name), ts))
    if tasks:
        created = await asyncio.gather(
            *(reconcile_task(ctx, ns, name, reason) for (ns, name), reason in tasks.items())
        )
        for key, job_name in zip(tasks, created, strict=True):
            if job_name and key in earliest:
                metrics.observe_activation(earliest[key])
    ids = [entry_id for entry_id, _ in entries]
    if ids:
        await ctx.redis.aio.xack(names.ACTIVATIONS_STREAM, names.OPERATOR_CONSUMER_GROUP, *ids)


async def consume_activations(ctx: OperatorContext) -> None:
    client = ctx.redis.aio
    consumer = consumer_name()
    start_id = "0"  # first our own pending entries (read before a crash, never acknowledged), then new ones
    backoff = 0.5
    while True:
        try:
            await ensure_group(client)
            while True:
                response = await client.xreadgroup(
                    names.OPERATOR_CONSUMER_GROUP, consumer, {names.ACTIVATIONS_STREAM: start_id},
                    count=BATCH, block=None if start_id == "0" else BLOCK_MS,
                )
                entries = [entry for _stream, batch in response or [] for entry in batch]
                if start_id == "0" and not entries:
                    start_id = ">"
                    continue
                if entries:
                    await handle_entries(ctx, entries)
                backoff = 0.5
        except asyncio.CancelledError:
            raise
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                logger.warning("activation stream error: %s", exc)
            start_id = "0"
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            logger.warning("activation stream unavailable (%s); retrying in %.1fs", exc, backoff)
        except Exception:
            logger.exception("activation consumer failed; restarting it")
        await asyncio.sleep(backoff)  # a background loop (not a handler): back off before reconnecting
        backoff = min(backoff * 2, 10.0)


async def claim_abandoned(ctx: OperatorContext) -> None:
    """Take over entries another consumer read but never acknowledged (e.g. an operator pod that was replaced)."""
    try:
        result = await ctx.redis.aio.xautoclaim(
            names.ACTIVATIONS_STREAM, names.OPERATOR_CONSUMER_GROUP, consumer_name(), CLAIM_IDLE_MS, "0-0",
            count=BATCH,
        )
    except ResponseError:
        return
    entries = [entry for entry in (result[1] if result and len(result) > 1 else []) if entry and entry[1]]
    if entries:
        await handle_entries(ctx, entries)


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
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("resync failed; next one in %.0fs", ctx.settings.resync_seconds)
        await asyncio.sleep(ctx.settings.resync_seconds)
