"""Tool calls written as text, in the shapes llama-server --jinja + Qwen2.5-Coder 0.5B/1.5B write them."""

from __future__ import annotations

import pytest
from unicore.providers.base import ToolSpec
from unicore.providers.schema_check import schema_problems
from unicore.providers.text_tool_calls import may_be_call, parse_text_tool_calls
from unicore.tools.registry import ALL_TOOLS, tool_specs

TOOLS: list[ToolSpec] = tool_specs(ALL_TOOLS.values())
WRITE = '{"name": "write_file", "arguments": {"path": "hello.txt", "content": "Hello, world!"}}'
LIST = '{"name": "list_files", "arguments": {}}'


def test_a_bare_call_becomes_a_tool_use() -> None:
    result = parse_text_tool_calls(WRITE, TOOLS)
    assert result.kind == "calls" and result.prose == ""
    assert result.calls == [{"name": "write_file", "input": {"path": "hello.txt", "content": "Hello, world!"}}]


@pytest.mark.parametrize("text", [
    f"```json\n{WRITE}\n```",
    f"```\n{WRITE}\n```\n",
    f"\n\n  {WRITE}  \n",
    f"<tool_call>\n{WRITE}\n</tool_call>",
])
def test_fenced_tagged_and_padded_calls(text: str) -> None:
    result = parse_text_tool_calls(text, TOOLS)
    assert result.kind == "calls" and [c["name"] for c in result.calls] == ["write_file"]


@pytest.mark.parametrize("text", [
    f"{WRITE}\n{LIST}",
    f"{WRITE}\n\n{LIST}\n",
    f"```json\n{WRITE}\n```\n```json\n{LIST}\n```",
    f"[{WRITE}, {LIST}]",
    f"```json\n{WRITE}\n{LIST}\n```",
])
def test_several_calls(text: str) -> None:
    result = parse_text_tool_calls(text, TOOLS)
    assert result.kind == "calls" and [c["name"] for c in result.calls] == ["write_file", "list_files"]


@pytest.mark.parametrize("text", [
    '{{"name": "read_file", "arguments": {"path": "a.txt"}}}',  # the outer pair doubled
    '{{"name": "read_file", "arguments": {{"path": "a.txt"}}}}',  # every pair doubled (a format template)
    '```json\n{{"name": "read_file", "arguments": {{"path": "a.txt"}}}}\n```',
])
def test_a_call_written_with_doubled_braces_is_taken(text: str) -> None:
    """The 1.5B, shown a transcript, wrote its calls as ``{{...}}`` and each was refused until the turn ran out of
    iterations (docs/models.md)."""
    assert parse_text_tool_calls(text, TOOLS).calls == [{"name": "read_file", "input": {"path": "a.txt"}}]


@pytest.mark.parametrize("text", [
    '{{"name": "read_file", "arguments": {"path": 3}}}',  # undoubled, but its arguments do not fit the schema
    '{{"status": "ok"}}',  # not call-shaped once undoubled: not a call, and not call-like either
])
def test_doubled_braces_still_validate(text: str) -> None:
    result = parse_text_tool_calls(text, TOOLS)
    assert result.calls == [] and result.kind in ("failed", "text")
    if "read_file" in text:
        assert result.kind == "failed" and "path: expected string" in result.problem


def test_openai_shaped_and_string_arguments() -> None:
    text = '{"type": "function", "function": {"name": "read_file", "arguments": "{\\"path\\": \\"a.txt\\"}"}}'
    assert parse_text_tool_calls(text, TOOLS).calls == [{"name": "read_file", "input": {"path": "a.txt"}}]
    text = '{"name": "read_file", "parameters": {"path": "a.txt"}}'
    assert parse_text_tool_calls(text, TOOLS).calls == [{"name": "read_file", "input": {"path": "a.txt"}}]


def test_prose_before_a_fenced_call_stays_text_beside_it() -> None:
    result = parse_text_tool_calls(f"I will write the file now.\n```json\n{WRITE}\n```", TOOLS)
    assert result.kind == "calls" and result.prose == "I will write the file now."


@pytest.mark.parametrize(("text", "problem"), [
    ('{"name": "delete_everything", "arguments": {"path": "/"}}', "unknown tool 'delete_everything'"),
    ('{"name": "write_file", "arguments": {"path": "a.txt"}}', "content: required field is missing"),
    ('{"name": "write_file", "arguments": {"path": 3, "content": "x"}}', "path: expected string"),
    ('{"name": "write_file", "arguments": {"path": "a", "content": "x", "mode": "w"}}', "mode: unknown field"),
    ('{"name": "write_file", "arguments": {"path": "a.txt", "content": "unterminated', "not valid JSON"),
    (f"{WRITE}\nDone, the file is written.", "mixes a tool call with other text"),
    ('Sure:\n```json\n{"name": "write_file", "arguments": {"path": "a.txt"}}\n```', "required field is missing"),
    ('{"name": "write_file", "arguments": "{not json"}', "not valid JSON"),
])
def test_failed_calls_are_reported_not_taken_as_text(text: str, problem: str) -> None:
    result = parse_text_tool_calls(text, TOOLS)
    assert result.kind == "failed" and problem in result.problem


@pytest.mark.parametrize("text", [
    "The file hello.txt now says Hello, world!",
    '{"status": "ok", "files": 3}',  # JSON data as an answer, not call-shaped
    'Use it like this:\n```python\nprint("hi")\n```',
    "",
])
def test_ordinary_answers_stay_text(text: str) -> None:
    assert parse_text_tool_calls(text, TOOLS).kind == "text"


def test_without_declared_tools_nothing_is_a_call() -> None:
    assert parse_text_tool_calls(WRITE, []).kind == "text"


def test_may_be_call_while_streaming() -> None:
    for prefix in ["", "  \n", "{", '{"na', "`", "``", "```json\n{", "<tool", "[", " <tool_call>"]:
        assert may_be_call(prefix), prefix
    for prefix in ["The", "Sure", "<p>", "1."]:
        assert not may_be_call(prefix), prefix


def test_schema_subset_of_our_tools() -> None:
    spawn = next(t.input_schema for t in TOOLS if t.name == "spawn_task")
    assert schema_problems({"name": "research-a", "prompt": "go"}, spawn) == []
    assert schema_problems({"name": "research-a", "prompt": "go", "tools": None}, spawn) == []
    assert schema_problems({"name": "research-a", "prompt": "go", "tools": ["read_file"]}, spawn) == []
    assert schema_problems({"name": "Bad Name", "prompt": "go"}, spawn) == [
        "name: does not match ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"]
    assert schema_problems({"name": "a", "prompt": "", "tools": "x"}, spawn) == [
        "prompt: at least 1 characters", "tools: matches none of the allowed forms"]
    read = next(t.input_schema for t in TOOLS if t.name == "read_file")
    assert schema_problems({"path": "a", "max_bytes": 0}, read) == ["max_bytes: at least 1"]
    assert schema_problems({"path": "a", "offset": True}, read) == ["offset: expected integer, got bool"]
