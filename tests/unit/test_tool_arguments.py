"""Tool call arguments nested too deep (issue 24, item 7): one rule for arguments sent as JSON text (OpenAI-compatible
servers, Bedrock's stream) and inputs a provider parsed itself (Bedrock, the scripted model): at most
``MAX_ARGUMENT_DEPTH`` levels, else an error tool result; never a RecursionError, never a refused answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from unicore.tools.base import ToolContext
from unicore.tools.registry import run_tool_call
from unicore.tools.workspace import ReadFile
from unicore.turn.answers import (
    MAX_ANSWER_DEPTH,
    MAX_ARGUMENT_DEPTH,
    UNPARSED,
    BadAnswer,
    accept_answer,
    json_depth,
    tool_input,
)


def nested_input(depth: int) -> dict[str, Any]:
    """An input object ``depth`` levels deep (the object itself is level 1)."""
    value: Any = []
    for _ in range(depth - 2):
        value = [value]
    return {"path": value}


def test_arguments_at_the_bound_are_parsed_and_one_level_more_are_not() -> None:
    at = json.dumps(nested_input(MAX_ARGUMENT_DEPTH))
    assert json_depth(json.loads(at), 1000) == MAX_ARGUMENT_DEPTH
    assert tool_input(at) == json.loads(at)
    over = json.dumps(nested_input(MAX_ARGUMENT_DEPTH + 1))
    assert tool_input(over) == {UNPARSED: over[:200]}


def test_arguments_nested_100000_deep_are_no_recursion_error() -> None:
    raw = '{"path": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert tool_input(raw) == {UNPARSED: raw[:200]}


@pytest.mark.parametrize(("raw", "expected"), [
    ("", {}), ("  ", {}), ('{"a": 1}', {"a": 1}), ("[1]", {UNPARSED: "[1]"}), ("{not json", {UNPARSED: "{not json"}),
])
def test_other_arguments_as_before(raw: str, expected: dict[str, Any]) -> None:
    assert tool_input(raw) == expected


def test_an_answer_whose_parsed_input_is_too_deep_is_kept_with_a_stand_in_input() -> None:
    """Was: the whole answer refused (nested more than MAX_ANSWER_DEPTH), so the model never got a tool result."""
    deep = {"toolUse": {"toolUseId": "c1", "name": "read_file", "input": nested_input(500)}}
    fine = {"toolUse": {"toolUseId": "c2", "name": "read_file", "input": nested_input(MAX_ARGUMENT_DEPTH)}}
    stored = accept_answer([deep, fine], set(), max_bytes=1 << 20)
    assert list(stored[0]["toolUse"]["input"]) == [UNPARSED]
    assert stored[1] == fine and json_depth(stored, 1000) == MAX_ANSWER_DEPTH


def test_the_tool_layer_answers_a_stand_in_input_with_an_error_result(tmp_path: Path) -> None:
    ctx = ToolContext(task_id="demo", store=None, spawner=None, workspace=tmp_path)  # type: ignore[arg-type]
    block = run_tool_call(ctx, [ReadFile()], {"toolUseId": "c1", "name": "read_file", "input": {UNPARSED: "[[["}})
    result = block["toolResult"]
    assert result["status"] == "error"
    assert f"not one JSON object nested at most {MAX_ARGUMENT_DEPTH} levels deep" in result["content"][0]["text"]


def test_an_answer_nested_too_deep_elsewhere_is_still_refused() -> None:
    deep: Any = "leaf"
    for _ in range(MAX_ANSWER_DEPTH):
        deep = {"x": deep}
    with pytest.raises(BadAnswer, match=f"nested more than {MAX_ANSWER_DEPTH} levels deep"):
        accept_answer([{"text": "hi"}, {"reasoningContent": deep}], set(), max_bytes=1 << 20)
