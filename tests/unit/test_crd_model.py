"""The AgentTask spec model reads exactly the CRD's camelCase fields (its aliases come from an alias generator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from unicore.api.spec import AgentTaskSpec, ApprovalSpec, LimitsSpec, ParentRef, SpecInvalid, parse_spec

ROOT = Path(__file__).resolve().parents[2]


def crd_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / "agenttask.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def aliases(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


@pytest.mark.parametrize(
    ("model", "path"),
    [(AgentTaskSpec, ()), (LimitsSpec, ("limits",)), (ParentRef, ("parentRef",)), (ApprovalSpec, ("approval",))],
)
def test_model_keys_are_the_crd_properties(model: type[BaseModel], path: tuple[str, ...]) -> None:
    schema = crd_spec_schema()
    for part in path:
        schema = schema["properties"][part]
    assert aliases(model) == set(schema["properties"])


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
