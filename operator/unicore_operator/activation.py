"""Background loops: the activation stream consumer (consumer group ``operator``) and the periodic resync.

The consumer reads ``uc:activations`` (through ``unicore.state.activations``), reconciles each named task and
acknowledges afterwards (at-least-once: entries read but not acknowledged before a crash are read again from this
consumer's pending list at the next start). A stream or group that does not exist yet is created. The resync
reconciles every AgentTask in the index every ``UNICORE_RESYNC_SECONDS``: a lost activation delays a turn, it never
loses it.
"""

from __future__ import annotations

import asyncio
import os
import socket

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from unicore.state.activations import Activation, AsyncActivationConsumer, missing_group

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


def consumer_name() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


def consumer(ctx: OperatorContext) -> AsyncActivationConsumer:
    """This operator process as a consumer of the activation stream (consumer group ``operator``)."""
    return AsyncActivationConsumer(ctx.redis.aio, names.OPERATOR_CONSUMER_GROUP, consumer_name())


async def handle_entries(ctx: OperatorContext, entries: list[Activation]) -> None:
    """Reconcile every task named in ``entries`` (each task once per batch), then acknowledge them all."""
    tasks: dict[tuple[str, str], str] = {}
    earliest: dict[tuple[str, str], float] = {}
    for entry in entries:
        if "/" not in entry.task_id:
            continue  # a local-mode task id: not ours
        namespace, name = entry.task_id.split("/", 1)
        if ctx.watches(namespace):
            tasks.setdefault((namespace, name), entry.reason or "activation")
            if entry.ts is None:
                continue
            earliest[(namespace, name)] = min(entry.ts, earliest.get((namespace, name), entry.ts))
    if tasks:
        created = await asyncio.gather(
            *(reconcile_task(ctx, ns, name, reason) for (ns, name), reason in tasks.items())
        )
        for key, job_name in zip(tasks, created, strict=True):
            if job_name and key in earliest:
                metrics.observe_activation(earliest[key])
    await consumer(ctx).ack(entries)


async def consume_activations(ctx: OperatorContext) -> None:
    stream = consumer(ctx)
    start_id = "0"  # first our own pending entries (read before a crash, never acknowledged), then new ones
    backoff = 0.5
    while True:
        try:
            await stream.ensure_group()
            while True:
                entries = await stream.read(start_id, count=BATCH, block=None if start_id == "0" else BLOCK_MS)
                if start_id == "0" and not entries:
                    start_id = ">"
                    continue
                if entries:
                    await handle_entries(ctx, entries)
                backoff = 0.5
        except asyncio.CancelledError:
            raise
        except ResponseError as exc:
            if not missing_group(exc):
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
    entries = await consumer(ctx).claim(CLAIM_IDLE_MS, count=BATCH)
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
            if count >= BURST:
                release_free_memory()  # the resync was a burst: give back what it freed
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("resync failed; next one in %.0fs", ctx.settings.resync_seconds)
        await asyncio.sleep(ctx.settings.resync_seconds)
