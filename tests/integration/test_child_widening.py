"""A child is checked against its parent as the API server has it, never against the parent's Redis record (issue 25,
item 4), on a real redis-server.

Code in a turn pod of ``team-a`` holds ``team-a``'s Redis user (``state.acl``), which may HSET every field of its own
tasks' records: limits, tools, childTools, depth, root, the agents it may spawn. The admission webhook
(``admission.review``) and the create handler (``admission.vet_new_child``, ``parent_view.create_record``) take the
parent's settings from the AgentTask chain and the Agents (``parent_view``), and its tree's root from that chain, so
what the tenant wrote widens no child and puts no slot into another namespace's tree budget."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from unicore.api.spec import parse_spec, to_task_spec
from unicore.store.agents import write_agent
from unicore.store.keys import TaskKeys
from unicore.store.slots import SpawnSlots
from unicore.store.tasks import TaskStore
from unicore.tools.storeview import get_view
from unicore_operator import admission, agent_checks, parent_view
from unicore_operator.context import OperatorContext

from tests.integration.test_admission_review import NS, agenttask, make_ctx, review_of
from tests.integration.test_redis_identities import Identities

VICTIM = "team-b/victim"
ROOT_SPEC: dict[str, Any] = {
    "prompt": "go", "tools": ["read_file", "spawn_task", "task_status"], "childTools": ["read_file"],
    "limits": {"maxChildren": 2, "maxDescendants": 3, "tokenBudget": 1000, "maxDepth": 1},
}
HELPER = {"metadata": {"name": "helper", "namespace": NS, "uid": "uid-helper"},
          "spec": {"model": "scripted", "tools": ["read_file"]}}
VIEW_FIELDS = ("id", "parent", "root_id", "depth", "model", "tools", "child_tools", "limits", "agent", "agents")


@pytest.fixture
def tenant(redis_client: redis.Redis, redis_url: str) -> Iterator[redis.Redis]:
    """A client logged in as team-a's own Redis user: what a turn pod of team-a holds."""
    made = Identities(redis_client, redis_url)
    yield made.client(NS)
    made.close()


def store_task(redis_url: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The AgentTask ``name`` and the record the operator stores for it before any tampering (``to_task_spec`` over
    its parent's untampered record, as the create handler did before the fix)."""
    store = TaskStore.from_url(redis_url)
    parsed = parse_spec(spec)
    parent = get_view(store, f"{NS}/{parsed.parent_ref.name}") if parsed.parent_ref is not None else None
    store.create_task(to_task_spec(NS, name, parsed, parent))
    return agenttask(name, spec)


def context(redis_url: str, tasks: list[dict[str, Any]]) -> OperatorContext:
    ctx = make_ctx(redis_url, {(NS, body["metadata"]["name"]): body for body in tasks})
    ctx.agents = {(NS, "helper"): [HELPER]}
    return ctx


def review(redis_url: str, tasks: list[dict[str, Any]], name: str, spec: dict[str, Any]) -> admission.Verdict:
    async def run() -> admission.Verdict:
        ctx = context(redis_url, tasks)
        try:
            return await admission.review(ctx, review_of(name, spec))
        finally:
            await ctx.redis.close()

    return asyncio.run(run())


def vet(redis_url: str, tasks: list[dict[str, Any]], name: str, spec: dict[str, Any]) -> str | None:
    async def run() -> str | None:
        ctx = context(redis_url, tasks)
        try:
            return (await admission.vet_new_child(ctx, NS, name, agenttask(name, spec), parse_spec(spec))).refusal
        finally:
            await ctx.redis.close()

    return asyncio.run(run())


# What code in a turn pod of team-a writes into its own task's record, and a child that it widens (child spec,
# the words of the refusal).
TAMPERING = {
    "limits": ({"limits": json.dumps({"max_children": 50, "max_descendants": 100, "token_budget": 0,
                                      "max_depth": 5})},
               {"limits": {"maxDescendants": 10, "tokenBudget": 0}}, "maxDescendants 10 is above its parent's 3"),
    "tools": ({"tools": json.dumps(["read_file", "write_file", "spawn_task"]),
               "child_tools": json.dumps(["read_file", "write_file"])},
              {"tools": ["write_file"]}, "spec.tools names write_file, not among its parent's childTools (read_file)"),
    "agents": ({"agents": json.dumps(["helper"])}, {"agentRef": {"name": "helper"}},
               "its parent team-a/p may not spawn agent helper (the agents it may spawn: none)"),
}


@pytest.mark.parametrize("field", sorted(TAMPERING))
def test_a_record_the_tenant_widened_widens_no_child(redis_url: str, tenant: redis.Redis, field: str) -> None:
    written, child, refusal = TAMPERING[field]
    parent = store_task(redis_url, "p", ROOT_SPEC)
    tenant.hset(TaskKeys(f"{NS}/p").task, mapping=written)
    spec = {"parentRef": {"name": "p"}, **child}
    verdict = review(redis_url, [parent], "p-wide", spec)
    assert not verdict.allowed and refusal in verdict.message, verdict.message
    refused = vet(redis_url, [parent], "p-wide", spec)
    assert refused is not None and refusal in refused, refused
    assert SpawnSlots(TaskStore.from_url(redis_url).redis).held(f"{NS}/p") == {"children": 0, "descendants": 0}


def test_a_depth_the_tenant_lowered_admits_no_deeper_child(redis_url: str, tenant: redis.Redis) -> None:
    parent = store_task(redis_url, "p", ROOT_SPEC)  # maxDepth 1: children, no grandchildren
    child = store_task(redis_url, "p-c", {"parentRef": {"name": "p"}, "tools": ["read_file"]})
    tenant.hset(TaskKeys(f"{NS}/p-c").task, mapping={"depth": "0", "limits": json.dumps({"recursion": True})})
    spec = {"parentRef": {"name": "p-c"}, "tools": ["read_file"]}
    verdict = review(redis_url, [parent, child], "p-c-g", spec)
    assert not verdict.allowed and "it would be at depth 2, deeper than its parent's limits.maxDepth 1" in \
        verdict.message, verdict.message
    refused = vet(redis_url, [parent, child], "p-c-g", spec)
    assert refused is not None and "at depth 2" in refused


def test_a_forged_root_puts_no_slot_in_another_namespaces_tree(redis_url: str, tenant: redis.Redis) -> None:
    admin = TaskStore.from_url(redis_url)
    victim = SpawnSlots(admin.redis)
    for n in range(2):
        victim.reserve(parent_id=VICTIM, root_id=VICTIM, child_id=f"{VICTIM}-{n}", max_children=3,
                       max_descendants=3)
    parent = store_task(redis_url, "p", ROOT_SPEC)
    tenant.hset(TaskKeys(f"{NS}/p").task, mapping={"root": VICTIM})
    spec = {"parentRef": {"name": "p"}, "tools": ["read_file"]}
    assert vet(redis_url, [parent], "p-a", spec) is None
    assert admin.redis.zrange(TaskKeys(VICTIM).tree_slots, 0, -1) == [f"{VICTIM}-0", f"{VICTIM}-1"]
    assert admin.redis.zrange(TaskKeys(f"{NS}/p").tree_slots, 0, -1) == [f"{NS}/p-a"]
    # team-b's tree full: the webhook counts the tree of the chain's root, so it neither refuses nor reveals it
    victim.reserve(parent_id=VICTIM, root_id=VICTIM, child_id=f"{VICTIM}-2", max_children=3, max_descendants=3)
    verdict = review(redis_url, [parent], "p-b", spec)
    assert verdict.allowed, verdict.message


def test_the_childs_record_takes_its_root_and_depth_from_the_chain(redis_url: str, tenant: redis.Redis) -> None:
    admin = TaskStore.from_url(redis_url)
    parent = store_task(redis_url, "p", ROOT_SPEC)
    tenant.hset(TaskKeys(f"{NS}/p").task, mapping={"root": VICTIM, "depth": "7",
                                                     "limits": json.dumps({"max_descendants": 100})})
    spec = {"parentRef": {"name": "p"}, "tools": ["read_file"]}
    vetted = asyncio.run(_vetted(redis_url, [parent], "p-a", spec))
    assert vetted.refusal is None
    assert parent_view.create_record(admin, NS, "p-a", parse_spec(spec), vetted.parent)
    record = admin.get_task(f"{NS}/p-a")
    assert (record.root, record.depth, record.limits.max_descendants) == (f"{NS}/p", 1, 3)


async def _vetted(redis_url: str, tasks: list[dict[str, Any]], name: str, spec: dict[str, Any]) -> admission.Vetted:
    ctx = context(redis_url, tasks)
    try:
        return await admission.vet_new_child(ctx, NS, name, agenttask(name, spec), parse_spec(spec))
    finally:
        await ctx.redis.close()


def test_an_untampered_tree_has_the_settings_its_records_hold(redis_url: str) -> None:
    """The view from the AgentTasks and Agents is what the operator stores and a turn resolves: roots, plain
    children, agents and their children."""
    admin = TaskStore.from_url(redis_url)
    lead = {"metadata": {"name": "lead", "namespace": NS, "uid": "uid-lead"},
            "spec": {"model": "scripted", "tools": ["read_file", "spawn_task", "task_status"], "agents": ["helper"],
                     "limits": {"maxDepth": 3, "maxChildren": 3, "tokenBudget": 5000}}}
    helper = {**HELPER, "spec": {"model": "scripted", "tools": ["read_file", "spawn_task"],
                                 "limits": {"maxIterations": 30}}}
    for body in (lead, helper):
        write_agent(admin.redis, f"{NS}/{body['metadata']['name']}", agent_checks.agent_definition(body))
    tasks = [store_task(redis_url, "r", {"prompt": "go", "agentRef": {"name": "lead"}, "limits": {"maxChildren": 2}}),
             store_task(redis_url, "r-h", {"parentRef": {"name": "r"}, "agentRef": {"name": "helper"}}),
             store_task(redis_url, "r-h-c", {"parentRef": {"name": "r-h"}, "tools": ["read_file"]}),
             store_task(redis_url, "p", ROOT_SPEC),
             store_task(redis_url, "p-c", {"parentRef": {"name": "p"}, "limits": {"maxChildren": 1}})]

    async def views() -> list[Any]:
        ctx = context(redis_url, tasks)
        ctx.agents = {(NS, "lead"): [lead], (NS, "helper"): [helper]}
        try:
            return [await admission.effective_parent(ctx, NS, body) for body in tasks]
        finally:
            await ctx.redis.close()

    for body, view in zip(tasks, asyncio.run(views()), strict=True):
        record = get_view(admin, f"{NS}/{body['metadata']['name']}")
        assert record is not None
        assert {f: getattr(view, f) for f in VIEW_FIELDS} == {f: getattr(record, f) for f in VIEW_FIELDS}


def test_a_record_forged_for_a_refused_child_vouches_for_no_grandchild(redis_url: str, tenant: redis.Redis) -> None:
    """A child made while no webhook was there is refused by the create handler and gets no record; the tenant can
    write one for it, but its grandchildren are checked along the AgentTask chain, which names it."""
    parent = store_task(redis_url, "p", ROOT_SPEC)
    wide = agenttask("p-w", {"parentRef": {"name": "p"}, "tools": ["write_file", "spawn_task"],
                             "limits": {"maxDescendants": 100, "maxDepth": 1}})
    tenant.hset(TaskKeys(f"{NS}/p-w").task, mapping={
        "id": f"{NS}/p-w", "parent": f"{NS}/p", "root": f"{NS}/p", "depth": "0", "tools": json.dumps(["write_file"]),
        "limits": json.dumps({"max_descendants": 100, "max_depth": 5})})
    verdict = review(redis_url, [parent, wide], "p-w-g", {"parentRef": {"name": "p-w"}, "tools": ["write_file"]})
    assert not verdict.allowed
    assert verdict.message.startswith("AgentTask team-a/p-w-g cannot be checked against its parent team-a/p-w: "
                                      "AgentTask team-a/p-w above it does not narrow its own parent team-a/p: "), \
        verdict.message
    assert "spec.tools names write_file, spawn_task, not among its parent's childTools (read_file)" in verdict.message
