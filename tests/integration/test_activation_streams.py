"""The operator's consumer of the namespaces' activation streams (issue 25, item 3) on a real redis-server: it reads
every served namespace's own stream, wakes only tasks of that stream's namespace, and one namespace that poisons its
stream (the largest id, ``MAXLEN 0``: all its Redis user can do) stops no other namespace's wake-ups.

The reconcile is replaced by ``ReconcileRecorder`` (what a reconcile was asked for): the reconcile itself needs the
API server and is covered by the cluster tests; here the question is which activations reach it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.store.client import build_async_client
from unicore.store.keys import namespace_activations_stream
from unicore.store.tasks import TaskStore
from unicore_operator import activation

MAX_ID = "18446744073709551615-18446744073709551615"


class ReconcileRecorder:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []

    async def __call__(self, ctx: Any, namespace: str, name: str, reason: str) -> None:
        self.asked.append((namespace, name, reason))


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[ReconcileRecorder]:
    made = ReconcileRecorder()
    monkeypatch.setattr(activation, "reconcile_task", made)
    yield made


async def _until(check: Any, what: str, timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_each_namespace_is_woken_from_its_own_stream_and_a_poisoned_one_stops_only_itself(
    redis_url: str, recorder: ReconcileRecorder
) -> None:
    store = TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))
    for task_id in ("team-a/x", "team-b/y", "team-b/z"):
        store.create_task(TaskSpec(id=task_id, prompt="hi"))

    async def scenario() -> None:
        aio = build_async_client(redis_url)
        ctx = SimpleNamespace(redis=SimpleNamespace(aio=aio), agenttasks=None, watches=lambda _ns: True,
                              settings=SimpleNamespace(cluster_wide=False, namespaces=("team-a", "team-b")))
        consumer = asyncio.get_running_loop().create_task(activation.consume_activations(ctx))  # type: ignore[arg-type]
        try:
            store.activate("team-a/x", "message")
            store.activate("team-b/y", "message")
            await _until(lambda: {("team-a", "x", "message"), ("team-b", "y", "message")} <= set(recorder.asked),
                         "both namespaces' activations")
            # an entry in team-a's stream that names team-b's task: acknowledged, never a wake-up of team-b
            store.redis.xadd(namespace_activations_stream("team-a"), {"task": "team-b/y", "reason": "forged"})
            # team-a's Redis user poisons its own stream
            store.redis.xadd(namespace_activations_stream("team-a"), {"task": "team-a/x"}, id=MAX_ID)
            assert store.activate("team-a/x", "after-poison") == ""
            store.activate("team-b/z", "message")
            await _until(lambda: ("team-b", "z", "message") in recorder.asked, "team-b's activation after the poison")
            assert ("team-b", "y", "forged") not in recorder.asked
            pending = await aio.xpending(namespace_activations_stream("team-a"), "operator")
            assert pending["pending"] == 0  # the forged and the poisoning entries were acknowledged too
        finally:
            consumer.cancel()
            with pytest.raises(asyncio.CancelledError):
                await consumer
            await aio.aclose()

    asyncio.run(scenario())
