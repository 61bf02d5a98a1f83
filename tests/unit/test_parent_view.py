"""A parent's settings from the AgentTask chain and the Agents alone (``unicore_operator.parent_view``, issue 25: never
from its Redis record, which its namespace's turn pods may write)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from annotated_types import Le
from unicore.api.schema import Limits
from unicore.tools import policy
from unicore_operator import parent_view
from unicore_operator.parent_view import LineageBroken

NS = "team-a"
TIMEOUT = 600


def task(name: str, parent: str | None = None, **spec: Any) -> dict[str, Any]:
    body_spec: dict[str, Any] = {"prompt": "go", **spec}
    if parent is not None:
        body_spec["parentRef"] = {"name": parent, "uid": f"uid-{parent}"}
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": {}}, "spec": body_spec}


def agent(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-agent-{name}"},
            "spec": {"model": "scripted", **spec}}


def walk(tasks: list[dict[str, Any]], name: str) -> list[Mapping[str, Any]]:
    by_name = {body["metadata"]["name"]: body for body in tasks}

    async def fetch(other: str) -> Mapping[str, Any] | None:
        return by_name.get(other)

    return asyncio.run(parent_view.ancestry(NS, by_name[name], fetch))


def view_of(tasks: list[dict[str, Any]], name: str, agents: dict[str, Any] | None = None) -> Any:
    return parent_view.effective_view(NS, walk(tasks, name), agents or {}, TIMEOUT)


ROOT = task("r", tools=["read_file", "write_file", "spawn_task", "task_status"], childTools=["read_file", "spawn_task"],
            limits={"maxDepth": 2, "maxChildren": 4, "maxDescendants": 6, "tokenBudget": 900})


def test_a_root_is_what_its_spec_stores() -> None:
    view = view_of([ROOT], "r")
    assert (view.id, view.parent, view.root_id, view.depth, view.agent, view.agents) == (
        f"{NS}/r", None, f"{NS}/r", 0, None, None)
    assert view.tools == ["read_file", "write_file", "spawn_task", "task_status"]
    assert view.child_tools == ["read_file", "spawn_task"]
    assert view.limits == Limits(max_depth=2, max_children=4, max_descendants=6, token_budget=900)
    assert view.model == "scripted"
    # without spec.tools: the default toolset, as the record says (None)
    bare = view_of([task("s")], "s")
    assert bare.tools is None and policy.allowed_tool_names(bare) == list(policy.DEFAULT_TOOLS)


def test_a_chain_folds_down_from_its_root() -> None:
    child = task("r-c", "r", limits={"maxChildren": 2})  # no spec.tools: its parent's childTools
    grandchild = task("r-c-g", "r-c", tools=["read_file"], limits={"recursion": False})
    tasks = [ROOT, child, grandchild]
    view = view_of(tasks, "r-c")
    assert (view.parent, view.root_id, view.depth) == (f"{NS}/r", f"{NS}/r", 1)
    assert view.tools == ["read_file", "spawn_task"] and view.child_tools is None
    assert (view.limits.max_children, view.limits.max_descendants, view.limits.token_budget) == (2, 6, 900)
    deepest = view_of(tasks, "r-c-g")
    assert (deepest.parent, deepest.root_id, deepest.depth) == (f"{NS}/r-c", f"{NS}/r", 2)
    assert deepest.tools == ["read_file"] and deepest.limits.recursion is False


def test_agents_are_resolved_as_a_turn_resolves_them_and_the_agent_object_wins() -> None:
    lead = agent("lead", tools=["read_file", "spawn_task", "task_status"], agents=["helper"],
                 limits={"maxDepth": 2, "maxChildren": 3})
    helper = agent("helper", tools=["read_file", "list_files"], limits={"maxIterations": 20})
    root = task("r", agentRef={"name": "lead"}, tools=["read_file", "spawn_task"], limits={"maxChildren": 5})
    child = task("r-h", "r", agentRef={"name": "helper"}, limits={"maxChildren": 3, "maxDepth": 2})
    agents = {"lead": lead, "helper": helper}
    view = view_of([root, child], "r", agents)
    assert view.agent == f"{NS}/lead" and view.agents == ["helper"]
    assert view.tools == ["read_file", "spawn_task"]  # the task narrows its agent
    assert (view.limits.max_children, view.limits.max_depth) == (3, 2)  # the lower of the two
    helped = view_of([root, child], "r-h", agents)
    assert (helped.agent, helped.depth, helped.root_id) == (f"{NS}/helper", 1, f"{NS}/r")
    assert helped.tools == ["read_file", "list_files"] and helped.limits.max_iterations == 20
    # the Agent was narrowed since: its object is what counts
    narrowed = {**agents, "lead": agent("lead", tools=["read_file", "spawn_task"], agents=[],
                                        limits={"maxDepth": 2, "maxChildren": 3})}
    assert view_of([root], "r", narrowed).agents == []
    with pytest.raises(LineageBroken, match="its parent team-a/r may not spawn agent helper"):
        view_of([root, child], "r-h", narrowed)


@pytest.mark.parametrize(("tasks", "agents", "words"), [
    ([task("r", agentRef={"name": "lead"})], {}, "AgentTask team-a/r above it cannot run as its Agent: Agent "
                                                 "team-a/lead does not exist"),
    ([ROOT, task("r-h", "r", agentRef={"name": "helper"})], {"helper": agent("helper")},
     "its parent team-a/r may not spawn agent helper (the agents it may spawn: none)"),
    # made while no webhook was there (the create handler refused it, but its record can be forged)
    ([ROOT, task("r-w", "r", tools=["write_file"], limits={"maxDescendants": 60})], {},
     "AgentTask team-a/r-w above it does not narrow its own parent team-a/r: spec.limits.maxDescendants 60 is "
     "above its parent's 6; spec.tools names write_file, not among its parent's childTools"),
    ([task("r", limits={"maxDepth": 0}), task("r-c", "r")], {}, "it would be at depth 1, deeper than its parent's"),
    ([task("r", limits={"recursion": False}), task("r-c", "r")], {}, "limits.recursion is false for team-a/r"),
    ([ROOT, {**task("r-c", "r"), "spec": {"parentRef": {"name": "r", "uid": "uid-old-r"}}}], {},
     "spec.parentRef.uid uid-old-r is not the uid of AgentTask team-a/r"),
])
def test_a_link_that_does_not_narrow_its_parent_breaks_the_chain(tasks: list[dict[str, Any]],
                                                                  agents: dict[str, Any], words: str) -> None:
    with pytest.raises(LineageBroken) as caught:
        view_of(tasks, tasks[-1]["metadata"]["name"], agents)
    assert words in str(caught.value)


def test_a_missing_ancestor_another_namespace_and_a_cycle_break_the_chain() -> None:
    with pytest.raises(LineageBroken, match=r"AgentTask team-a/gone, the parent of team-a/c, does not exist"):
        walk([task("c", "gone")], "c")
    outside = task("c")
    outside["spec"]["parentRef"] = {"name": "r", "namespace": "team-b"}
    with pytest.raises(LineageBroken, match="names a parent outside namespace team-a"):
        walk([outside, task("r")], "c")
    with pytest.raises(LineageBroken, match=r"form a cycle: a -> b -> a"):
        walk([task("a", "b"), task("b", "a")], "a")
    with pytest.raises(LineageBroken, match="form a cycle: s -> s"):
        walk([task("s", "s")], "s")


def chain_of(length: int) -> list[dict[str, Any]]:
    """A chain of ``length`` tasks t0 (the root) .. t<length-1>, each allowed the deepest tree there is."""
    deepest = {"maxDepth": parent_view.MAX_DEPTH}
    return [task("t0", limits=deepest)] + [task(f"t{n}", f"t{n - 1}", limits=deepest) for n in range(1, length)]


def test_the_chain_is_at_most_max_depth_deep() -> None:
    bound = next(m.le for m in Limits.model_fields["max_depth"].metadata if isinstance(m, Le))
    assert parent_view.MAX_DEPTH == bound == 32
    tasks = chain_of(parent_view.MAX_DEPTH + 1)  # a task at depth 32: 32 ancestors
    last = f"t{parent_view.MAX_DEPTH}"
    assert len(walk(tasks, last)) == parent_view.MAX_DEPTH + 1
    assert view_of(tasks, last).depth == parent_view.MAX_DEPTH
    deeper = chain_of(parent_view.MAX_DEPTH + 2)
    with pytest.raises(LineageBroken, match="AgentTask team-a/t33 has more than 32 ancestors"):
        walk(deeper, f"t{parent_view.MAX_DEPTH + 1}")
