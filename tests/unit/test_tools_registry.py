"""Registry: toolsets, JSON schemas, and run_tool_call turning every tool problem into an error result."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict
from unicore.api.schema import Limits, TaskSpec
from unicore.errors import LimitExceeded, ToolError
from unicore.tools.base import Tool, ToolContext
from unicore.tools.registry import ALL_TOOLS, run_tool_call, tool_names_for, tool_specs, toolset_for
from unicore.tools.storeview import TaskView


class NoSpawner:
    def spawn(self, parent_id: str, name: str, prompt: str, tools: list[str] | None,
              agent: str | None = None) -> tuple[str, bool]:
        raise AssertionError("not expected to spawn")


def make_ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(
        task_id="demo",
        store=None,  # type: ignore[arg-type]
        spawner=NoSpawner(),
        workspace=tmp_path,
    )


def use(name: str, tool_input: Any, tool_use_id: str = "t1") -> dict[str, Any]:
    return {"toolUse": {"toolUseId": tool_use_id, "name": name, "input": tool_input}}


def result_text(block: dict[str, Any]) -> str:
    return "\n".join(item.get("text", "") for item in block["toolResult"]["content"])


class EchoInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str
    times: int = 1


class Echo(Tool):
    name = "echo"
    description = "echo"
    Input = EchoInput

    def run(self, ctx: ToolContext, args: EchoInput) -> str:  # type: ignore[override]
        return args.text * args.times


class Raises(Tool):
    name = "raises"
    description = "raises"
    Input = EchoInput

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def run(self, ctx: ToolContext, args: EchoInput) -> str:  # type: ignore[override]
        raise self.exc


class ReturnsJson(Tool):
    name = "as_json"
    description = "json"
    Input = EchoInput

    def run(self, ctx: ToolContext, args: EchoInput) -> dict[str, Any]:  # type: ignore[override]
        return {"text": args.text, "n": args.times}


# ----------------------------------------------------------------------------- toolsets


def test_root_gets_default_toolset() -> None:
    names = tool_names_for(TaskView(id="demo"))
    assert names == ["read_file", "write_file", "list_files", "spawn_task", "message_task", "task_status"]
    assert [tool.name for tool in toolset_for(TaskView(id="demo"))] == names


def test_child_gets_reduced_read_only_toolset() -> None:
    names = tool_names_for(TaskView(id="demo-a", parent="demo", root="demo", depth=1))
    assert "write_file" not in names
    assert names == ["read_file", "list_files", "task_status", "spawn_task", "message_task"]


def test_spawn_tools_dropped_at_max_depth_and_without_recursion() -> None:
    at_max = TaskView(id="d-a-b", parent="d-a", depth=2, limits=Limits(max_depth=2))
    assert "spawn_task" not in tool_names_for(at_max)
    assert "message_task" not in tool_names_for(at_max)
    assert "read_file" in tool_names_for(at_max)
    no_recursion = TaskView(id="demo", limits=Limits(recursion=False))
    assert "spawn_task" not in tool_names_for(no_recursion)
    assert "write_file" in tool_names_for(no_recursion)


def test_explicit_tools_win_and_unknown_names_are_dropped() -> None:
    view = TaskView(id="demo", tools=["task_status", "read_file", "no_such_tool", "read_file"])
    assert tool_names_for(view) == ["task_status", "read_file"]


def test_toolset_for_accepts_a_task_spec() -> None:
    spec = TaskSpec(id="demo", tools=["list_files"], limits=Limits(recursion=False))
    assert [tool.name for tool in toolset_for(spec)] == ["list_files"]


def test_tool_specs_have_json_schemas_from_the_input_models() -> None:
    specs = {spec.name: spec for spec in tool_specs(ALL_TOOLS.values())}
    assert set(specs) == set(ALL_TOOLS)
    spawn = specs["spawn_task"].input_schema
    assert spawn["type"] == "object"
    assert set(spawn["required"]) == {"name", "prompt"}
    assert spawn["properties"]["name"]["pattern"].startswith("^[a-z0-9]")
    assert spawn["additionalProperties"] is False
    assert "title" not in spawn
    assert specs["read_file"].input_schema["required"] == ["path"]
    assert specs["spawn_task"].description


# ----------------------------------------------------------------------------- run_tool_call


def test_happy_path_text_result(tmp_path: Path) -> None:
    block = run_tool_call(make_ctx(tmp_path), [Echo()], use("echo", {"text": "ab", "times": 2}, "id-7"))
    assert block == {"toolResult": {"toolUseId": "id-7", "content": [{"text": "abab"}], "status": "success"}}


def test_dict_result_becomes_json_content(tmp_path: Path) -> None:
    block = run_tool_call(make_ctx(tmp_path), [ReturnsJson()], use("as_json", {"text": "x"}))
    assert block["toolResult"]["content"] == [{"json": {"text": "x", "n": 1}}]
    assert block["toolResult"]["status"] == "success"


def test_accepts_the_inner_tool_use_dict(tmp_path: Path) -> None:
    inner = use("echo", {"text": "hi"})["toolUse"]
    assert result_text(run_tool_call(make_ctx(tmp_path), [Echo()], inner)) == "hi"


def test_unknown_tool_is_an_error_result(tmp_path: Path) -> None:
    block = run_tool_call(make_ctx(tmp_path), [Echo()], use("frobnicate", {}))
    assert block["toolResult"]["status"] == "error"
    assert block["toolResult"]["toolUseId"] == "t1"
    assert "unknown tool 'frobnicate'" in result_text(block)
    assert "echo" in result_text(block)


def test_tool_outside_the_allowed_set_is_refused(tmp_path: Path) -> None:
    block = run_tool_call(make_ctx(tmp_path), [Echo()], use("write_file", {"path": "x", "content": "y"}))
    assert block["toolResult"]["status"] == "error"
    assert "not available to this task" in result_text(block)
    assert not (tmp_path / "x").exists()


def test_invalid_input_lists_every_error(tmp_path: Path) -> None:
    block = run_tool_call(make_ctx(tmp_path), [Echo()], use("echo", {"times": "many", "colour": "red"}))
    text = result_text(block)
    assert block["toolResult"]["status"] == "error"
    assert "Invalid input for tool echo" in text
    assert "- text: required field is missing" in text
    assert "- times:" in text and '"many"' in text
    assert "- colour: unknown field" in text


def test_non_object_input_is_an_error_result(tmp_path: Path) -> None:
    block = run_tool_call(make_ctx(tmp_path), [Echo()], use("echo", "just a string"))
    assert block["toolResult"]["status"] == "error"
    assert "Invalid input for tool echo" in result_text(block)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ToolError("no such thing"), "Error: no such thing"),
        (LimitExceeded("maximum depth reached"), "Error: maximum depth reached"),
        (RuntimeError("boom"), "failed unexpectedly: RuntimeError: boom"),
        (KeyError("k"), "failed unexpectedly: KeyError"),
    ],
)
def test_tool_exceptions_become_error_results(tmp_path: Path, exc: Exception, expected: str) -> None:
    block = run_tool_call(make_ctx(tmp_path), [Raises(exc)], use("raises", {"text": "x"}))
    assert block["toolResult"]["status"] == "error"
    assert expected in result_text(block)


def test_cancelled_context_does_not_run_the_tool(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    ctx.cancel = threading.Event()
    ctx.cancel.set()
    block = run_tool_call(ctx, ALL_TOOLS.values(), use("write_file", {"path": "x", "content": "y"}))
    assert block["toolResult"]["status"] == "error"
    assert "cancelled" in result_text(block)
    assert not (tmp_path / "x").exists()


def test_huge_output_is_cut(tmp_path: Path) -> None:
    block = run_tool_call(make_ctx(tmp_path), [Echo()], use("echo", {"text": "x", "times": 300_000}))
    text = result_text(block)
    assert len(text) < 110_000
    assert "more characters cut" in text
