"""A child AgentTask may only narrow its parent (``unicore_operator.lineage``, shared by the admission webhook and the
create handler), and what ``spawn_task`` writes into a child always passes those checks."""

from __future__ import annotations

from typing import Any

import pytest
from unicore.api.schema import Limits
from unicore.api.spec import parse_spec, to_task_spec
from unicore.launch.k8s_spawner import child_agenttask
from unicore.store.task_views import TaskView
from unicore.tools import policy
from unicore_operator import lineage

NS = "team-a"
DEFAULT_TIMEOUT = 600
PARENT_LIMITS = Limits(max_iterations=50, max_depth=3, max_children=4, max_descendants=5, token_budget=1000)
PARENT_TOOLS = ["read_file", "list_files", "spawn_task", "task_status"]
PARENT_CHILD_TOOLS = ["read_file", "task_status"]


def parent_view(**overrides: Any) -> TaskView:
    fields: dict[str, Any] = {"id": f"{NS}/p", "limits": PARENT_LIMITS, "tools": PARENT_TOOLS,
                              "child_tools": PARENT_CHILD_TOOLS}
    fields.update(overrides)
    return TaskView(**fields)


def parent_object(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": NS, "uid": "uid-p", "labels": {}}, "spec": {"prompt": "go", **spec}}


def problems(spec: dict[str, Any], *, parent: TaskView | None = None, parent_obj: dict[str, Any] | None = None,
             labels: dict[str, str] | None = None) -> list[str]:
    spec = {"parentRef": {"name": "p"}, **spec}
    return lineage.check_child(
        namespace=NS, name="p-c", labels=labels or {}, parsed=parse_spec(spec),
        parent_obj=parent_obj or parent_object(), parent=parent or parent_view(), default_turn_timeout=DEFAULT_TIMEOUT)


def test_a_child_that_inherits_or_narrows_everything_passes() -> None:
    assert problems({}) == []
    assert problems({"limits": {"maxDescendants": 2, "tokenBudget": 10, "maxDepth": 1, "recursion": False},
                     "tools": ["read_file"]}) == []
    assert problems({"parentRef": {"name": "p", "uid": "uid-p", "namespace": NS}}) == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"limits": {"maxDescendants": 6}}, "spec.limits.maxDescendants 6 is above its parent's 5"),
        ({"limits": {"maxChildren": 5}}, "spec.limits.maxChildren 5 is above its parent's 4"),
        ({"limits": {"maxIterations": 51}}, "spec.limits.maxIterations 51 is above its parent's 50"),
        ({"limits": {"maxDepth": 4}}, "spec.limits.maxDepth 4 is above its parent's 3"),
        ({"limits": {"tokenBudget": 0}}, "spec.limits.tokenBudget 0 (unlimited) is above its parent's 1,000"),
        ({"limits": {"tokenBudget": 1001}}, "spec.limits.tokenBudget 1,001 is above its parent's 1,000"),
        ({"limits": {"turnTimeoutSeconds": 601}}, "spec.limits.turnTimeoutSeconds 601 is above its parent's 600"),
        ({"tools": ["read_file", "write_file"]},
         "spec.tools names write_file, not among its parent's childTools (read_file, task_status)"),
        ({"tools": ["list_files"]},
         "spec.tools names list_files, not among its parent's childTools (read_file, task_status)"),
        ({"parentRef": {"name": "p", "namespace": "team-b"}},
         "spec.parentRef.namespace 'team-b': a parent must be in its child's own namespace (team-a)"),
        ({"parentRef": {"name": "p", "uid": "uid-other"}}, "spec.parentRef.uid uid-other is not the uid of"),
    ],
)
def test_what_widens_its_parent_is_named(spec: dict[str, Any], expected: str) -> None:
    found = problems(spec)
    assert len(found) == 1 and expected in found[0], found


def test_without_child_tools_the_ceiling_is_the_parents_own_tools() -> None:
    parent = parent_view(child_tools=None)
    assert problems({"tools": ["list_files", "spawn_task"]}, parent=parent) == []
    assert problems({"tools": ["write_file"]}, parent=parent) == [
        "spec.tools names write_file, not among its parent's tools (read_file, list_files, spawn_task, task_status)"]
    # a root without spec.tools has the default toolset
    assert problems({"tools": ["write_file"]}, parent=parent_view(child_tools=None, tools=None)) == []


def test_a_parent_that_may_not_have_children_has_none() -> None:
    no_recursion = parent_view(limits=PARENT_LIMITS.model_copy(update={"recursion": False}))
    assert any("limits.recursion is false" in p for p in problems({}, parent=no_recursion))
    deep = parent_view(depth=3, parent=f"{NS}/q", root=f"{NS}/r")
    assert any("at depth 4, deeper than its parent's limits.maxDepth 3" in p for p in problems({}, parent=deep))
    assert problems({"limits": {"recursion": True}},
                    parent=parent_view(limits=Limits(recursion=False, max_depth=3))) != []


def test_the_turn_timeout_is_compared_as_the_jobs_get_it() -> None:
    # unset on both sides: both get the operator's default
    assert problems({}) == []
    # the parent's spec sets it: a child without one gets the (longer) default
    short = parent_object(limits={"turnTimeoutSeconds": 60})
    assert problems({}, parent_obj=short) == ["spec.limits.turnTimeoutSeconds 600 is above its parent's 60"]
    assert problems({"limits": {"turnTimeoutSeconds": 60}}, parent_obj=short) == []


def test_the_root_label_must_name_the_parents_tree() -> None:
    assert problems({}, labels={"unicore.dev/root": "p"}) == []
    assert problems({}, labels={"unicore.dev/root": "other"}) == [
        "label unicore.dev/root=other is not its parent's tree (p)"]
    child_parent = parent_view(parent=f"{NS}/r", root=f"{NS}/r", depth=1)
    assert problems({}, parent=child_parent, labels={"unicore.dev/root": "r"}) == []


def test_the_refusal_names_child_parent_and_every_problem() -> None:
    found = problems({"limits": {"maxDescendants": 6, "tokenBudget": 0}})
    message = lineage.refusal(NS, "p-c", "p", found)
    assert message.startswith("AgentTask team-a/p-c may only narrow its parent team-a/p: ")
    assert "maxDescendants 6" in message and "tokenBudget 0 (unlimited)" in message


def test_a_child_without_tools_gets_the_parents_default_child_toolset() -> None:
    parent = parent_view()
    stored = to_task_spec(NS, "p-c", parse_spec({"parentRef": {"name": "p"}}), parent)
    assert stored.tools == PARENT_CHILD_TOOLS
    # no childTools: the runtime's default child toolset, cut to what the parent has
    stored = to_task_spec(NS, "p-c", parse_spec({"parentRef": {"name": "p"}}), parent_view(child_tools=None))
    assert stored.tools == ["read_file", "list_files", "task_status", "spawn_task"]
    # a root keeps "no list" (the default toolset for its depth)
    assert to_task_spec(NS, "r", parse_spec({"prompt": "go"}), None).tools is None


@pytest.mark.parametrize("parent_spec", [{}, {"limits": {"turnTimeoutSeconds": 120}}])
@pytest.mark.parametrize("child_tools", [None, ["read_file"]])
def test_what_spawn_task_writes_passes_the_checks(parent_spec: dict[str, Any], child_tools: list[str] | None) -> None:
    parent = parent_view(child_tools=child_tools)
    obj = parent_object(**parent_spec)
    tools = policy.child_tools(parent, None, None)
    body = child_agenttask(obj, "p-c", "do it", tools, parent)
    spec = body["spec"]
    assert spec.get("limits", {}).get("turnTimeoutSeconds") == parent_spec.get("limits", {}).get("turnTimeoutSeconds")
    found = lineage.check_child(namespace=NS, name="p-c", labels=body["metadata"]["labels"],
                                parsed=parse_spec(spec), parent_obj=obj, parent=parent,
                                default_turn_timeout=DEFAULT_TIMEOUT)
    assert found == []
