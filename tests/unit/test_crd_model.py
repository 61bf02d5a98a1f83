"""The AgentTask and Agent spec models read exactly the CRDs' camelCase fields (their aliases come from an alias
generator), and reading an object's spec never fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from unicore.agents import KUBERNETES_ONLY
from unicore.api.schema import SCHEDULING_FIELDS
from unicore.api.spec import (
    A2ASpec,
    AgentSpec,
    AgentTaskSpec,
    ApprovalSpec,
    LimitsSpec,
    ParentRef,
    SpecInvalid,
    WarmPoolSpec,
    WorkbenchSpec,
    agent_spec_of,
    parse_spec,
    spec_key,
    task_spec_of,
)

ROOT = Path(__file__).resolve().parents[2]


def crd_spec_schema(crd_file: str = "agenttask.yaml") -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / crd_file).read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def aliases(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


@pytest.mark.parametrize(
    ("model", "path"),
    [(AgentTaskSpec, ()), (LimitsSpec, ("limits",)), (ParentRef, ("parentRef",)), (ApprovalSpec, ("approval",)),
     (WorkbenchSpec, ("workbench",))],
)
def test_model_keys_are_the_crd_properties(model: type[BaseModel], path: tuple[str, ...]) -> None:
    schema = crd_spec_schema()
    for part in path:
        schema = schema["properties"][part]
    assert aliases(model) == set(schema["properties"])


@pytest.mark.parametrize(
    ("model", "path"),
    [(AgentSpec, ()), (LimitsSpec, ("limits",)), (ApprovalSpec, ("approval",)), (WorkbenchSpec, ("workbench",)),
     (WarmPoolSpec, ("warmPool",)), (A2ASpec, ("a2a",))],
)
def test_agent_model_keys_are_the_agent_crd_properties(model: type[BaseModel], path: tuple[str, ...]) -> None:
    schema = crd_spec_schema("agent.yaml")
    for part in path:
        schema = schema["properties"][part]
    assert aliases(model) == set(schema["properties"])


def test_scheduling_fields_are_fields_of_both_specs() -> None:
    for field in SCHEDULING_FIELDS:
        assert field in AgentTaskSpec.model_fields and field in AgentSpec.model_fields
    assert KUBERNETES_ONLY == (*(spec_key(AgentSpec, field) for field in SCHEDULING_FIELDS),
                               spec_key(AgentSpec, "warm_pool"), "a2a")
    assert spec_key(AgentTaskSpec, "priority_class_name") == "priorityClassName"
    assert spec_key(LimitsSpec, "turn_timeout_seconds") == "turnTimeoutSeconds"


def test_reading_an_object_s_spec_never_fails() -> None:
    body = {"spec": {"prompt": "go", "gpus": 2, "limits": {"maxDepth": 1}, "queueName": "q"}}
    assert task_spec_of(body) == AgentTaskSpec(prompt="go", gpus=2, limits=LimitsSpec(max_depth=1), queue_name="q")
    # a key a newer CRD added, and a value the model refuses: read as unset, the rest as written
    odd = task_spec_of({"spec": {"prompt": "go", "newField": 1, "gpus": -1, "limits": {"maxDepth": -1},
                                 "parentRef": {"name": "root"}}})
    assert odd == AgentTaskSpec(prompt="go", parent_ref=ParentRef(name="root"))
    assert odd.model_fields_set == {"prompt", "parent_ref"}
    for nothing in (None, {}, {"spec": None}, {"spec": "text"}, {"spec": {"prompt": 5, "gpus": "x"}}):
        empty = task_spec_of(nothing)
        assert empty == AgentTaskSpec() and not empty.suspend and empty.limits.set_fields() == {}
    agent = agent_spec_of({"spec": {"model": "scripted", "gpus": 0, "limits": {"turnTimeoutSeconds": 60},
                                    "tools": ["read_file"], "resources": {"requests": {"cpu": "9"},
                                                                          "limits": {"cpu": "1"}}}})
    assert (agent.model, agent.gpus, agent.limits.turn_timeout_seconds) == ("scripted", 0, 60)
    assert agent.resources is None  # a request above its limit: refused, so unset
    assert agent_spec_of(None) == AgentSpec()


def test_camel_case_keys_fill_snake_case_attributes() -> None:
    spec = parse_spec({
        "prompt": "go",
        "systemPrompt": "be brief",
        "childTools": ["read_file"],
        "parentRef": {"name": "root", "uid": "u-1"},
        "nodeSelector": {"gpu": "a100"},
        "priorityClassName": "high",
        "runtimeClassName": "nvidia",
        "queueName": "team-a",
        "limits": {"maxIterations": 3, "turnTimeoutSeconds": 60, "summarizeTurns": False, "tokenBudget": 0},
    })
    assert spec.system_prompt == "be brief" and spec.child_tools == ["read_file"]
    assert spec.parent_ref == ParentRef(name="root", uid="u-1")
    assert spec.node_selector == {"gpu": "a100"} and spec.queue_name == "team-a"
    assert (spec.priority_class_name, spec.runtime_class_name) == ("high", "nvidia")
    assert spec.limits.set_fields() == {
        "max_iterations": 3, "turn_timeout_seconds": 60, "summarize_turns": False, "token_budget": 0,
    }


def test_attribute_names_are_accepted_too() -> None:
    assert LimitsSpec(max_children=2).max_children == 2
    assert AgentTaskSpec(system_prompt="s", queue_name="q").queue_name == "q"


def test_unknown_and_out_of_range_keys_are_reported_by_their_yaml_path() -> None:
    with pytest.raises(SpecInvalid, match=r"spec\.limits\.maxIterations: Input should be greater than or equal to 1"):
        parse_spec({"prompt": "x", "limits": {"maxIterations": 0}})
    with pytest.raises(SpecInvalid, match=r"spec\.queuename: Extra inputs are not permitted"):
        parse_spec({"prompt": "x", "queuename": "q"})


def test_spec_approval_reaches_the_runtime_task_spec() -> None:
    from unicore.api.schema import Approval
    from unicore.api.spec import to_task_spec

    spec = parse_spec({"prompt": "hi", "approval": {"tools": ["write_file", "spawn_task"], "timeoutSeconds": 60}})
    assert to_task_spec("ns", "t", spec, None).approval == Approval(tools=["write_file", "spawn_task"],
                                                                    timeout_seconds=60)
    every = parse_spec({"prompt": "hi", "approval": {"tools": ["*"]}})
    assert to_task_spec("ns", "t", every, None).approval == Approval(tools=["*"], timeout_seconds=3600)
    assert to_task_spec("ns", "t", parse_spec({"prompt": "hi"}), None).approval is None
    with pytest.raises(SpecInvalid, match="spec.approval.timeoutSeconds"):
        parse_spec({"prompt": "hi", "approval": {"tools": ["*"], "timeoutSeconds": 0}})
