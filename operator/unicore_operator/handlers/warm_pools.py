"""Warm pools (``unicore_operator.warm_pools``): a timer per Agent keeps its pool topped up; a warm pod's deletion
drops what Redis keeps of it."""

from __future__ import annotations

from typing import Any

import kopf

from unicore_operator import names
from unicore_operator.context import OperatorContext
from unicore_operator.indexes import WARM_SELECTOR
from unicore_operator.warm_pools import WARM_POOL_CHECK_SECONDS, forget_pod, keep_pool


def _ctx(memo: kopf.Memo) -> OperatorContext | None:
    ctx: OperatorContext | None = memo.get("ctx")
    return ctx if ctx is not None and ctx.ready.is_set() else None


@kopf.timer(names.GROUP, names.VERSION, names.AGENT_PLURAL, interval=WARM_POOL_CHECK_SECONDS, id="warm-pool")
async def keep_warm_pool(*, namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    ctx = _ctx(memo)
    if ctx is None or namespace is None or not ctx.watches(namespace):
        return  # not started yet: the next tick
    await keep_pool(ctx, namespace, name)


@kopf.on.event("", "v1", "pods", labels=WARM_SELECTOR)
async def warm_pod_event(*, type: str | None, namespace: str | None, name: str, memo: kopf.Memo,
                         **_: Any) -> None:
    ctx = _ctx(memo)
    if type == "DELETED" and ctx is not None and namespace is not None and ctx.watches(namespace):
        await forget_pod(ctx, namespace, name)
