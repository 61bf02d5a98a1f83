"""Agent definitions and how a task narrows its agent (issue 17): pure functions of ``unicore.agents``."""

from __future__ import annotations

from typing import Any

import pytest
from unicore.agent_resolution import resolved_record
from unicore.agents import (
    DEFAULT_AGENT_TOOLS,
    AgentDefinition,
    AgentInvalid,
    agent_id,
    definition_from_spec,
    effective_spec,
    own_settings,
    widening,
)
from unicore.api.schema import TaskSpec
from unicore.errors import LimitExceeded
from unicore.store.records import TaskRecord
from unicore.store.task_views import TaskView
from unicore.tools import policy

WRITER: dict[str, Any] = {
    "model": "openai:qwen",
    "systemPrompt": "You write reports.",
    "tools": ["read_file", "write_file", "spawn_task", "task_status"],
    "mcpServers": [{"name": "time", "tools": ["get_current_time", "convert_time"]}, {"name": "everything"}],
    "agents": ["researcher"],
    "limits": {"maxIterations": 40, "maxChildren": 3, "tokenBudget": 50000, "recursion": True},
    "approval": {"tools": ["write_file"], "timeoutSeconds": 600},
    "gpus": 0,
    "nodeSelector": {"pool": "cpu"},
}


def writer() -> AgentDefinition:
    return definition_from_spec(WRITER)


def task(**fields: Any) -> TaskSpec:
    return TaskSpec.model_validate({"id": "t", "agent": "writer", **fields})


def test_a_spec_reads_into_a_definition_without_the_kubernetes_fields() -> None:
    agent = writer()
    assert agent.model == "openai:qwen" and agent.system_prompt == "You write reports."
    assert agent.limits.max_iterations == 40 and agent.limits.token_budget == 50000
    assert agent.limits.max_depth == 3  # a limit the Agent does not set is the runtime's default
    assert agent.approval is not None and agent.approval.timeout_seconds == 600
    assert [ref.name for ref in agent.mcp_servers or ()] == ["time", "everything"]
    assert definition_from_spec({"model": "scripted"}).tools == list(DEFAULT_AGENT_TOOLS) == list(policy.DEFAULT_TOOLS)


@pytest.mark.parametrize(("spec", "message"), [
    ({}, "spec.model: Field required"),
    ({"model": "scripted", "limits": {"maxIterations": 0}}, "spec.limits.maxIterations: Input should be greater"),
    ({"model": "scripted", "tools": ["Read-File"]}, "spec.tools.0: String should match pattern"),
    ({"model": "scripted", "colour": "red"}, "spec.colour: Extra inputs are not permitted"),
    ({"model": "scripted", "tools": ["read_file"], "approval": {"tools": ["write_file"]}},
     "spec.approval.tools names write_file, not among the agent's tools"),
    ({"model": "scripted", "tools": ["read_file"], "agents": ["researcher"]},
     "spec.agents needs spawn_task among spec.tools"),
    ({"model": "scripted", "agents": ["Not_A_Name"]}, "spec.agents.0: String should match pattern"),
    ({"model": "scripted", "mcpServers": [{"name": "t"}, {"name": "t"}]}, "MCP server(s) named more than once: t"),
    ("model: scripted", "an Agent needs a spec mapping"),
])
def test_bad_specs_are_one_line_errors(spec: Any, message: str) -> None:
    with pytest.raises(AgentInvalid) as caught:
        definition_from_spec(spec)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_approval_may_gate_an_mcp_tool_of_the_agent() -> None:
    spec = {**WRITER, "approval": {"tools": ["time__convert_time", "*"]}}
    assert definition_from_spec(spec).approval is not None
    with pytest.raises(AgentInvalid, match="time__set_time"):
        definition_from_spec({**WRITER, "approval": {"tools": ["time__set_time"]}})


def test_an_agent_id_follows_the_task_namespace() -> None:
    assert agent_id("team-a/report", "writer") == "team-a/writer"
    assert agent_id("report", "writer") == "writer"


def test_a_task_that_sets_nothing_gets_its_agent() -> None:
    spec = effective_spec(task(prompt="hi"), writer())
    assert spec.model == "openai:qwen" and spec.system_prompt == "You write reports."
    assert spec.tools == ["read_file", "write_file", "spawn_task", "task_status"]
    assert spec.limits == writer().limits
    assert spec.approval == writer().approval
    assert spec.mcp_servers == writer().mcp_servers
    assert spec.agent == "writer" and spec.prompt == "hi"


def test_a_task_narrows_tools_limits_and_mcp_tools() -> None:
    spec = effective_spec(task(tools=["read_file", "spawn_task"],
                               limits={"max_iterations": 10, "token_budget": 0, "recursion": False},
                               mcp_servers=[{"name": "time", "tools": ["convert_time"]}]), writer())
    assert spec.tools == ["read_file", "spawn_task"]
    assert spec.limits.max_iterations == 10
    assert spec.limits.token_budget == 50000  # 0 (unlimited) under a budget keeps the budget
    assert spec.limits.recursion is False
    assert spec.limits.max_children == 3  # not set by the task: the agent's
    assert spec.mcp_servers is not None
    assert [(r.name, r.tools) for r in spec.mcp_servers] == [("time", ["convert_time"])]


def test_whatever_a_stored_task_holds_it_never_widens_its_agent() -> None:
    """Defence in depth: a task record that asks for more (written before its agent was narrowed) is cut down."""
    spec = effective_spec(task(tools=["read_file", "list_files", "time__convert_time"],
                               limits={"max_iterations": 400, "max_children": 1, "token_budget": 90000},
                               mcp_servers=[{"name": "time"}, {"name": "elsewhere"}],
                               child_tools=["read_file", "list_files"]), writer())
    assert spec.tools == ["read_file", "time__convert_time"]
    assert (spec.limits.max_iterations, spec.limits.max_children, spec.limits.token_budget) == (40, 1, 50000)
    assert spec.mcp_servers is not None
    assert [(r.name, r.tools) for r in spec.mcp_servers] == [("time", ["get_current_time", "convert_time"])]
    assert spec.child_tools == ["read_file"]


def test_a_task_adds_approval_gates_and_keeps_the_agent_s() -> None:
    spec = effective_spec(task(approval={"tools": ["spawn_task"]}), writer())
    assert spec.approval is not None
    assert spec.approval.tools == ["write_file", "spawn_task"] and spec.approval.timeout_seconds == 600
    spec = effective_spec(task(approval={"tools": [], "timeout_seconds": 60}), writer())
    assert spec.approval is not None and spec.approval.tools == ["write_file"] and spec.approval.timeout_seconds == 60


def test_the_task_s_model_and_prompt_join_the_agent_s() -> None:
    spec = effective_spec(task(model="scripted", system_prompt="Be brief."), writer())
    assert spec.model == "scripted" and spec.system_prompt == "You write reports.\n\nBe brief."


def test_own_settings_round_trip_what_the_creator_set() -> None:
    original = task(tools=["read_file"], limits={"max_iterations": 5})
    stored = own_settings(original)
    assert stored == {"tools": ["read_file"], "limits": {"max_iterations": 5}}
    again = TaskSpec.model_validate({"id": "t", **stored})
    assert again.model_fields_set == {"id", "tools", "limits"} and again.limits.model_fields_set == {"max_iterations"}
    assert effective_spec(again, writer()).limits.max_children == 3


@pytest.mark.parametrize(("fields", "problem"), [
    ({"tools": ["read_file", "list_files"]}, "spec.tools names list_files, not among its agent's tools"),
    ({"limits": {"max_iterations": 41}}, "spec.limits.maxIterations 41 is above its agent's 40"),
    ({"limits": {"token_budget": 0}}, "spec.limits.tokenBudget 0 (unlimited) is above its agent's 50,000"),
    ({"limits": {"token_budget": 50001}}, "spec.limits.tokenBudget 50,001 is above its agent's 50,000"),
    ({"limits": {"max_depth": 4}}, "spec.limits.maxDepth 4 is above its agent's 3"),
    ({"mcp_servers": [{"name": "other"}]}, "spec.mcpServers names other, not among its agent's MCP servers"),
    ({"mcp_servers": [{"name": "time"}]}, "spec.mcpServers time: every tool is more than its agent allows"),
    ({"mcp_servers": [{"name": "time", "tools": ["set_time"]}]}, "spec.mcpServers time: set_time is more"),
    ({"tools": ["read_file"], "child_tools": ["write_file"]}, "spec.childTools names write_file, not among its"),
])
def test_widening_is_named(fields: dict[str, Any], problem: str) -> None:
    problems = widening(task(**fields), writer())
    assert len(problems) == 1 and problem in problems[0], problems


def test_narrowing_is_no_problem() -> None:
    assert widening(task(tools=["read_file"], limits={"max_iterations": 40, "recursion": False,
                                                      "token_budget": 10}, approval={"tools": ["read_file"]},
                         mcp_servers=[{"name": "time", "tools": ["convert_time"]}, {"name": "everything"}],
                         model="scripted"), writer()) == []
    unlimited = definition_from_spec({"model": "scripted", "limits": {"tokenBudget": 0}})
    assert widening(task(limits={"token_budget": 10**9}), unlimited) == []


def test_a_record_resolves_against_the_current_definition() -> None:
    record = TaskRecord(id="t", name="t", root="t", agent="writer", tools=["read_file"],
                        own_spec={"limits": {"max_iterations": 30}}, agents=[])
    resolved = resolved_record(record, writer())
    assert resolved.tools == writer().tools  # the record's old tools are not the task's own: the agent's now
    assert resolved.limits.max_iterations == 30 and resolved.agents == ["researcher"]
    smaller = definition_from_spec({**WRITER, "limits": {"maxIterations": 20}, "agents": []})
    again = resolved_record(record, smaller)
    assert again.limits.max_iterations == 20 and again.agents == []


def test_spawning_by_agent_name_needs_the_parent_s_agent_to_list_it() -> None:
    parent = TaskView(id="t", agents=["researcher"])
    policy.check_agent(parent, "researcher")
    with pytest.raises(LimitExceeded, match="the agents you may spawn: researcher"):
        policy.check_agent(parent, "writer")
    with pytest.raises(LimitExceeded, match="you may spawn no agents by name"):
        policy.check_agent(TaskView(id="t"), "researcher")
    assert policy.agent_child_tools("researcher", ["read_file", "list_files"], None) == ["read_file", "list_files"]
    with pytest.raises(LimitExceeded, match="write_file are not among them"):
        policy.agent_child_tools("researcher", ["read_file"], ["write_file"])
