"""The operator's activation path stays off the API server: index lookups, no read per child event."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from unicore_operator.context import OperatorContext
from unicore_operator.handlers import agenttasks
from unicore_operator.settings import OperatorSettings


def make_ctx(index: dict[tuple[str, str], list[dict[str, Any]]] | None) -> OperatorContext:
    settings = OperatorSettings(redis_url="redis://unused:6379/0", namespaces=("ns",))
    return OperatorContext(settings=settings, redis=None, kube=None,  # type: ignore[arg-type]
                           store=None, agenttasks=index)


def test_indexed_task_is_a_copy_from_the_index() -> None:
    body = {"metadata": {"name": "root", "namespace": "ns", "uid": "u1"}, "spec": {}, "status": {}}
    ctx = make_ctx({("ns", "root"): [body]})
    found = ctx.indexed_task("ns", "root")
    assert found == body and found is not body
    assert ctx.indexed_task("ns", "other") is None
    assert make_ctx(None).indexed_task("ns", "root") is None
    ctx.job_executor.shutdown()


@pytest.mark.parametrize("parent_indexed", [True, False])
def test_child_event_reconciles_only_an_indexed_parent(parent_indexed: bool) -> None:
    parent = {"metadata": {"name": "root", "namespace": "ns"}, "spec": {}, "status": {}}
    ctx = make_ctx({("ns", "root"): [parent]} if parent_indexed else {})
    child = {"metadata": {"name": "kid", "namespace": "ns", "generation": 1}}
    handler: Any = agenttasks.agenttask_event
    asyncio.run(handler(event={"type": "MODIFIED"}, body=child, spec={"parentRef": {"name": "root"}},
                        status={"phase": "Idle", "observedGeneration": 1}, namespace="ns", name="kid",
                        memo={"ctx": ctx}))
    assert ctx.reconciles.pending == ({("ns", "root"): "child:kid"} if parent_indexed else {})
    ctx.job_executor.shutdown()
