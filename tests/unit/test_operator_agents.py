"""Agents on the operator's side (issue 17), pure: checks of tasks against their Agent, the Job's defaults from the
Agent, the TaskSpec an agentRef task stores, a spawned agent child's AgentTask, the count behind status.tasks."""

from __future__ import annotations

from typing import Any

import pytest
from unicore.api.schema import MCPServerRef
from unicore.api.spec import SpecInvalid, agent_spec_of, parse_spec, task_spec_of, to_task_spec
from unicore.launch.k8s_spawner import child_agenttask
from unicore.store.task_views import TaskView, view_from_mapping
from unicore_operator.agent_checks import agent_definition, agent_task_problems
from unicore_operator.handlers.agents import count_tasks
from unicore_operator.job_builder import build_turn_job_spec, with_agent_defaults
from unicore_operator.settings import OperatorSettings

NS = "team-a"
WRITER: dict[str, Any] = {
    "metadata": {"name": "writer", "namespace": NS},
    "spec": {"model": "openai:qwen", "tools": ["read_file", "write_file", "spawn_task"], "agents": ["researcher"],
             "limits": {"maxIterations": 30, "tokenBudget": 1000, "turnTimeoutSeconds": 300},
             "gpus": 0, "nodeSelector": {"pool": "cpu"}, "priorityClassName": "agents",
             "resources": {"requests": {"cpu": "250m"}},
             "mcpServers": [{"name": "time", "tools": ["get_current_time"]}]},
}


def task(spec: dict[str, Any], name: str = "report") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "uid": "u1"}, "spec": spec}


def problems(spec: dict[str, Any], agent: dict[str, Any] | None = WRITER, parent: TaskView | None = None) -> list[str]:
    return agent_task_problems(namespace=NS, name="report", parsed=parse_spec(spec), agent_body=agent, parent=parent)


def test_a_task_that_narrows_its_agent_passes() -> None:
    assert problems({"agentRef": {"name": "writer"}, "prompt": "go", "tools": ["read_file"],
                     "limits": {"maxIterations": 10, "turnTimeoutSeconds": 300}}) == []


@pytest.mark.parametrize(("spec", "problem"), [
    ({"tools": ["read_file", "list_files"]}, "spec.tools names list_files, not among its agent's tools"),
    ({"limits": {"maxIterations": 31}}, "spec.limits.maxIterations 31 is above its agent's 30"),
    ({"limits": {"tokenBudget": 0}}, "spec.limits.tokenBudget 0 (unlimited) is above its agent's 1,000"),
    ({"limits": {"turnTimeoutSeconds": 301}}, "spec.limits.turnTimeoutSeconds 301 is above its agent's 300"),
    ({"mcpServers": [{"name": "time"}]}, "spec.mcpServers time: every tool is more than its agent allows"),
])
def test_widening_its_agent_is_named(spec: dict[str, Any], problem: str) -> None:
    found = problems({"agentRef": {"name": "writer"}, "prompt": "go", **spec})
    assert len(found) == 1 and problem in found[0], found


def test_a_missing_or_unusable_agent_is_named() -> None:
    spec = {"agentRef": {"name": "writer"}, "prompt": "go"}
    assert problems(spec, None) == [f"Agent {NS}/writer does not exist: spec.agentRef names an Agent of the task's "
                                    "own namespace"]
    broken = {**WRITER, "spec": {**WRITER["spec"], "model": "gpt:4"}}
    (found,) = problems(spec, broken)
    assert found.startswith(f"Agent {NS}/writer cannot be used: spec.model of the Agent 'gpt:4': unknown model")
    with pytest.raises(SpecInvalid, match="spec.agents needs spawn_task"):
        agent_definition({"spec": {"model": "scripted", "tools": ["read_file"], "agents": ["x"]}})


def test_a_child_s_agent_must_be_one_its_parent_may_spawn() -> None:
    spec = {"agentRef": {"name": "writer"}, "parentRef": {"name": "root"}, "prompt": "go"}
    parent = view_from_mapping({"id": f"{NS}/root", "agents": '["researcher"]'})
    (found,) = problems(spec, parent=parent)
    assert found == f"its parent {NS}/root may not spawn agent writer (the agents it may spawn: researcher)"
    assert problems(spec, parent=view_from_mapping({"id": f"{NS}/root", "agents": '["writer"]'})) == []


def test_an_agent_task_stores_only_what_it_sets() -> None:
    spec = to_task_spec(NS, "report", parse_spec({"agentRef": {"name": "writer"}, "prompt": "go",
                                                  "limits": {"maxIterations": 5}}), None)
    assert spec.agent == f"{NS}/writer"
    assert spec.model_fields_set == {"id", "prompt", "agent", "limits"}
    assert spec.limits.model_fields_set == {"max_iterations"}


def test_the_job_takes_what_the_task_leaves_unset_from_its_agent() -> None:
    settings = OperatorSettings(redis_url="redis://redis:6379/0", agent_image="example/agent:1")
    body = task({"agentRef": {"name": "writer"}, "prompt": "go", "nodeSelector": {"pool": "a"},
                 "limits": {"turnTimeoutSeconds": 900}})
    spec = with_agent_defaults(task_spec_of(body), agent_spec_of(WRITER))
    assert spec.model == "openai:qwen" and spec.gpus == 0 and spec.priority_class_name == "agents"
    assert spec.node_selector == {"pool": "a"}  # the task's own wins
    assert spec.limits.turn_timeout_seconds == 300  # the lower of the two
    assert spec.mcp_servers == [MCPServerRef(name="time", tools=["get_current_time"])]
    job = build_turn_job_spec(body, 0, settings, spec=spec)
    pod = job["spec"]["template"]["spec"]
    assert pod["activeDeadlineSeconds"] == 300 and pod["priorityClassName"] == "agents"
    assert pod["nodeSelector"] == {"pool": "a"} and "tolerations" not in pod  # gpus 0: no GPU toleration
    resources = pod["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == "250m" and settings.gpu_resource not in resources.get("limits", {})
    plain = task_spec_of(task({"prompt": "go"}))
    assert with_agent_defaults(plain, agent_spec_of(WRITER)) is plain  # a task without agentRef: untouched
    own = task_spec_of(task({"agentRef": {"name": "writer"}}))
    assert with_agent_defaults(own, None) is own


def test_a_spawned_agent_child_narrows_both_its_agent_and_its_parent() -> None:
    from unicore.agents import definition_from_spec

    parent = {"metadata": {"name": "root", "namespace": NS, "uid": "p1", "labels": {}},
              "spec": {"gpus": 2, "queueName": "q", "limits": {"turnTimeoutSeconds": 600}}}
    view = view_from_mapping({"id": f"{NS}/root", "model": "openai:big",
                              "limits": '{"max_iterations": 50, "max_children": 2, "token_budget": 0}'})
    researcher = definition_from_spec({"model": "scripted", "limits": {"maxIterations": 20, "tokenBudget": 500}})
    child = child_agenttask(parent, "root-facts", "find", None, view, "researcher", researcher.limits)
    spec = child["spec"]
    assert spec["agentRef"] == {"name": "researcher"} and "tools" not in spec and "model" not in spec
    assert (spec["limits"]["maxIterations"], spec["limits"]["maxChildren"], spec["limits"]["tokenBudget"]) == (20, 2,
                                                                                                                 500)
    assert spec["limits"]["turnTimeoutSeconds"] == 600 and "gpus" not in spec and spec["queueName"] == "q"
    narrowed = child_agenttask(parent, "root-facts", "find", ["read_file"], view, "researcher", researcher.limits)
    assert narrowed["spec"]["tools"] == ["read_file"]


def test_status_tasks_counts_the_namespace_s_live_tasks_of_the_agent() -> None:
    index = {
        (NS, "a"): [{"spec": {"agentRef": {"name": "writer"}}, "metadata": {}}],
        (NS, "b"): [{"spec": {"agentRef": {"name": "writer"}}, "metadata": {"deletionTimestamp": "now"}}],
        (NS, "c"): [{"spec": {"agentRef": {"name": "researcher"}}, "metadata": {}}],
        ("team-b", "d"): [{"spec": {"agentRef": {"name": "writer"}}, "metadata": {}}],
        (NS, "e"): [{"spec": {}, "metadata": {}}],
    }
    assert count_tasks(index, NS, "writer") == 1 and count_tasks(index, NS, "researcher") == 1
    assert count_tasks(None, NS, "writer") == 0
