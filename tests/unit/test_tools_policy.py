"""Policy: the pure spawn/message checks shared by the local and Kubernetes spawners."""

from __future__ import annotations

import pytest
from unicore.api.schema import Limits
from unicore.errors import LimitExceeded, ToolError
from unicore.tools import policy
from unicore.tools.policy import TreeCounts, check_message, check_spawn
from unicore.tools.registry import ALL_TOOLS
from unicore.tools.storeview import TaskView

ZERO = TreeCounts(children=0, descendants=0, tokens_used=0)


def root(**limits: object) -> TaskView:
    return TaskView(id="demo", limits=Limits(**limits))  # type: ignore[arg-type]


def test_allowed_spawn_plan() -> None:
    plan = check_spawn(root(), "research-a", ZERO, None, ALL_TOOLS)
    assert plan.child_id == "demo-research-a"
    assert plan.depth == 1
    assert plan.tools == list(policy.DEFAULT_CHILD_TOOLS)


def test_namespaced_parent() -> None:
    parent = TaskView(id="default/demo", depth=0)
    assert check_spawn(parent, "a", ZERO, None, ALL_TOOLS).child_id == "default/demo-a"


@pytest.mark.parametrize("name", ["", "A", "bad name", "-a", "a-", "a_b", "x" * 64, "a/b"])
def test_invalid_names(name: str) -> None:
    with pytest.raises(ToolError, match="invalid child name"):
        check_spawn(root(), name, ZERO, None, ALL_TOOLS)


def test_name_making_the_id_too_long() -> None:
    parent = TaskView(id="p" * 200)
    with pytest.raises(ToolError, match="too long"):
        check_spawn(parent, "a" * 60, ZERO, None, ALL_TOOLS)


def test_recursion_off() -> None:
    with pytest.raises(LimitExceeded, match="recursion is false"):
        check_spawn(root(recursion=False), "a", ZERO, None, ALL_TOOLS)


def test_max_depth() -> None:
    parent = TaskView(id="d-a-b", parent="d-a", root="d", depth=2, limits=Limits(max_depth=2))
    with pytest.raises(LimitExceeded, match="depth 3, but limits.max_depth is 2"):
        check_spawn(parent, "c", ZERO, None, ALL_TOOLS)
    ok = TaskView(id="d-a", parent="d", root="d", depth=1, limits=Limits(max_depth=2))
    assert check_spawn(ok, "c", ZERO, None, ALL_TOOLS).depth == 2


def test_max_children() -> None:
    counts = TreeCounts(children=3, descendants=3, tokens_used=0)
    with pytest.raises(LimitExceeded, match="already has 3 child task"):
        check_spawn(root(max_children=3), "d", counts, None, ALL_TOOLS)
    assert check_spawn(root(max_children=4), "d", counts, None, ALL_TOOLS)


def test_max_descendants() -> None:
    counts = TreeCounts(children=1, descendants=5, tokens_used=0)
    with pytest.raises(LimitExceeded, match="already has 5 descendant"):
        check_spawn(root(max_descendants=5), "x", counts, None, ALL_TOOLS)


def test_token_budget() -> None:
    counts = TreeCounts(children=0, descendants=0, tokens_used=1000)
    with pytest.raises(LimitExceeded, match="token budget exhausted.*1,000 of its 1,000"):
        check_spawn(root(token_budget=1000), "x", counts, None, ALL_TOOLS)
    with pytest.raises(LimitExceeded, match="token budget"):
        check_message(root(token_budget=1000), counts)
    check_message(root(token_budget=1001), counts)
    check_message(root(token_budget=0), counts)  # 0 = unlimited
    assert check_spawn(root(token_budget=0), "x", counts, None, ALL_TOOLS)


def test_requested_tools_must_be_a_subset_of_the_parents() -> None:
    parent = TaskView(id="demo", tools=["read_file", "spawn_task", "task_status"])
    plan = check_spawn(parent, "a", ZERO, ["read_file"], ALL_TOOLS)
    assert plan.tools == ["read_file"]
    with pytest.raises(LimitExceeded, match="cannot get tools its parent lacks: write_file"):
        check_spawn(parent, "a", ZERO, ["read_file", "write_file"], ALL_TOOLS)
    with pytest.raises(ToolError, match="unknown tool"):
        check_spawn(parent, "a", ZERO, ["shell"], ALL_TOOLS)


def test_default_child_tools_are_cut_to_what_the_parent_has() -> None:
    parent = TaskView(id="demo", tools=["read_file", "spawn_task"])
    assert check_spawn(parent, "a", ZERO, None, ALL_TOOLS).tools == ["read_file", "spawn_task"]
    configured = TaskView(id="demo", child_tools=["write_file", "read_file"])
    assert check_spawn(configured, "a", ZERO, None, ALL_TOOLS).tools == ["write_file", "read_file"]
    assert check_spawn(configured, "a", ZERO, [], ALL_TOOLS).tools == []


def test_a_child_never_gets_tools_outside_its_parents_child_toolset() -> None:
    """childTools is the ceiling of a parent's children, not only their default (what admission checks too)."""
    parent = TaskView(id="demo", tools=["read_file", "list_files", "spawn_task", "task_status"],
                      child_tools=["read_file", "task_status"])
    assert check_spawn(parent, "a", ZERO, ["read_file"], ALL_TOOLS).tools == ["read_file"]
    with pytest.raises(LimitExceeded, match=r"outside its parent's child toolset \(childTools\): list_files"):
        check_spawn(parent, "a", ZERO, ["list_files"], ALL_TOOLS)
    with pytest.raises(LimitExceeded, match="cannot get tools its parent lacks: write_file"):
        check_spawn(parent, "a", ZERO, ["write_file"], ALL_TOOLS)
    assert policy.tool_ceiling(parent) == ["read_file", "task_status"]
    assert policy.tool_ceiling(TaskView(id="demo", tools=["read_file", "shell"])) == ["read_file", "shell"]
    assert policy.tool_ceiling(TaskView(id="demo", tools=["read_file", "shell"]), ALL_TOOLS) == ["read_file"]


def test_a_spawned_child_has_its_parents_turn_timeout_as_the_parents_jobs_have_it() -> None:
    from unicore.launch.k8s_spawner import child_agenttask

    parent = TaskView(id="ns/p", limits=Limits(turn_timeout_seconds=3600))
    meta = {"name": "p", "namespace": "ns", "uid": "u"}
    unset = child_agenttask({"metadata": meta, "spec": {}}, "p-a", "go", ["read_file"], parent)
    assert "turnTimeoutSeconds" not in unset["spec"]["limits"]  # the operator's default, the parent's too
    assert unset["spec"]["limits"]["maxDescendants"] == parent.limits.max_descendants
    set_ = child_agenttask({"metadata": meta, "spec": {"limits": {"turnTimeoutSeconds": 60}}}, "p-a", "go", [], parent)
    assert set_["spec"]["limits"]["turnTimeoutSeconds"] == 60


def test_a_refused_spawn_says_what_the_api_server_said() -> None:
    from kubernetes.client.rest import ApiException
    from unicore.launch.k8s_spawner import refusal

    denied = ApiException(status=403, reason="Forbidden")
    denied.body = '{"kind": "Status", "message": "admission webhook \\"x\\" denied the request: too wide"}'
    assert refusal(denied) == 'admission webhook "x" denied the request: too wide'
    assert refusal(ApiException(status=403, reason="Forbidden")) == "forbidden (check the agents' Role)"
    assert refusal(ApiException(status=500, reason="Internal Server Error")) == "Internal Server Error"
