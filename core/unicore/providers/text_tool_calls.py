"""Tool calls a model wrote as text because the server's tool-call parser failed (pure).

Measured with llama.cpp's ``llama-server --jinja`` and Qwen2.5-Coder 0.5B/1.5B Instruct: a tool request is answered
with the call as bare JSON in ``content`` and never in ``tool_calls``::

    {"name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}

sometimes several (one after the other, or a JSON list), sometimes in a ```json fence, sometimes in Qwen's
``<tool_call>...</tool_call>`` tags. :func:`parse_text_tool_calls` decides what such a text is:

* **calls**: every call-shaped object names a declared tool and its arguments pass that tool's ``input_schema``
  (the subset of JSON Schema our tools use: ``unicore.providers.schema_check``): they become ``toolUse`` blocks
  (any prose before fenced calls stays a text block);
* **failed**: the text is (or contains) something that looks like a failed call: an object with
  ``name``/``arguments``/``parameters``/``function``, an unknown tool name, arguments that fail the schema, or
  unparsable JSON that looks like a call. It must never become the final answer: the provider reports it in
  ``ModelResponse.refused`` and the turn tells the model the expected format and asks again (as for
  ``answers.BadAnswer``);
* **text**: anything else (an ordinary answer, or JSON data that is not call-shaped).

:func:`may_be_call` says, from an answer's beginning, whether it may still turn out to be a call, so a streaming
provider holds such text back from live viewers until it is decided.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from unicore.providers.base import ToolSpec
from unicore.providers.schema_check import schema_problems

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)```", re.DOTALL)
_TAG = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_CALL_HINT = re.compile(r'"(name|arguments|parameters|function)"\s*:')
_OPENERS = ("{", "[", "```", "<tool_call>")
MAX_SHOWN = 300


@dataclass
class TextCalls:
    kind: Literal["text", "calls", "failed"]
    calls: list[dict[str, Any]] = field(default_factory=list)  # toolUse inner dicts (no id yet)
    prose: str = ""  # text kept beside the calls (before a fence)
    problem: str = ""  # kind "failed": what was wrong


def may_be_call(prefix: str) -> bool:
    """Could an answer starting with ``prefix`` still be a call written as text? (Whitespace only: yes.)"""
    head = prefix.lstrip()
    if not head:
        return True
    return any(head.startswith(o) or o.startswith(head) for o in _OPENERS)


def expected_format(tools: Sequence[ToolSpec]) -> str:
    names = ", ".join(t.name for t in tools) or "none"
    return (
        "To call a tool, use the tool-calling interface, or answer with only a JSON object of the form "
        '{"name": "<tool name>", "arguments": {<arguments matching the tool\'s input schema>}} '
        f"(one object per call). Your tools: {names}."
    )


def _decode_sequence(text: str) -> tuple[list[Any], bool]:
    """The JSON values at the start of ``text`` one after the other (whitespace or commas between), and whether
    that was all of it."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and (text[pos].isspace() or text[pos] == ","):
            pos += 1
        if pos >= end:
            return values, True
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to decode: not a call we can read
            return values, False
        values.append(value)


def _undoubled(text: str) -> list[str]:
    """Readings of a call written with doubled braces, as in a Python format template (``{{"name": ...}}``: the
    1.5B wrote that after seeing such text, docs/models.md): the outer pair dropped, or every pair halved."""
    stripped = text.strip()
    if not (stripped.startswith("{{") and stripped.endswith("}}")):
        return []
    return [stripped[1:-1], stripped.replace("{{", "{").replace("}}", "}")]


def _decode_call_json(text: str) -> tuple[list[Any], bool]:
    """:func:`_decode_sequence`, and when that fails on a doubled-brace call, the first reading of
    :func:`_undoubled` that decodes whole into call-shaped objects."""
    values, whole = _decode_sequence(text)
    if whole:
        return values, whole
    for reading in _undoubled(text):
        decoded, complete = _decode_sequence(reading)
        if complete and decoded and all(_call_shaped(v) for v in _flatten(decoded)):
            return decoded, True
    return values, whole


def _segments(text: str) -> list[str] | None:
    """Split a call-shaped answer into JSON segments; None when text other than fences/tags/JSON remains."""
    segments: list[str] = []
    rest = text

    def take(match: re.Match[str]) -> str:
        segments.append(match.group(match.lastindex or 1))
        return "\n"

    rest = _TAG.sub(take, rest)
    rest = _FENCE.sub(take, rest)
    leftover = rest.strip()
    if leftover:
        if not leftover.startswith(("{", "[")):
            return None
        segments.append(leftover)
    return segments


def _call_shaped(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    if isinstance(value.get("function"), dict):
        return True
    return isinstance(value.get("name"), str) and ("arguments" in value or "parameters" in value)


def _flatten(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for value in values:
        if isinstance(value, list):
            out.extend(value)
        elif isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
            out.extend(value["tool_calls"])
        else:
            out.append(value)
    return out


def _to_call(value: dict[str, Any], tools: dict[str, ToolSpec]) -> tuple[dict[str, Any] | None, str]:
    """A call-shaped object -> (toolUse inner dict, "") or (None, problem)."""
    body = value["function"] if isinstance(value.get("function"), dict) else value
    name = body.get("name")
    arguments = body.get("arguments", body.get("parameters", {}))
    if not isinstance(name, str) or not name:
        return None, "a tool call without a tool name"
    if name not in tools:
        return None, f"unknown tool {name!r}"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return None, f"the arguments of {name} are not valid JSON"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None, f"the arguments of {name} are not a JSON object"
    problems = schema_problems(arguments, tools[name].input_schema)
    if problems:
        return None, f"invalid arguments for {name}: " + "; ".join(problems[:5])
    return {"name": name, "input": arguments}, ""


def _calls(values: list[Any], tools: dict[str, ToolSpec]) -> TextCalls:
    items = _flatten(values)
    shaped = [item for item in items if _call_shaped(item)]
    if not shaped:
        return TextCalls("text")
    if len(shaped) != len(items):
        return TextCalls("failed", problem="tool calls mixed with other JSON")
    calls: list[dict[str, Any]] = []
    for item in shaped:
        call, problem = _to_call(item, tools)
        if call is None:
            return TextCalls("failed", problem=problem)
        calls.append(call)
    return TextCalls("calls", calls=calls)


def _looks_like_call(text: str) -> bool:
    return bool(_CALL_HINT.search(text))


def parse_text_tool_calls(text: str, tools: Sequence[ToolSpec]) -> TextCalls:
    """What an answer's text is: ``calls`` (toolUse inputs, validated), ``failed`` (a failed call), or ``text``."""
    stripped = text.strip()
    if not stripped or not tools:
        return TextCalls("text")
    declared = {t.name: t for t in tools}
    if stripped.startswith(_OPENERS):
        split = _segments(stripped)
        if split is None:  # a call followed by prose, or worse: a call only if it looks like one
            return _failed_if_call_like(stripped, "the answer mixes a tool call with other text")
        values: list[Any] = []
        for segment in split:
            decoded, whole = _decode_call_json(segment)
            if not whole:
                problem = "the tool call is not valid JSON"
                if decoded:
                    problem = "the answer mixes a tool call with other text"
                return _failed_if_call_like(segment, problem)
            values.extend(decoded)
        return _calls(values, declared)
    # prose first: only fenced or tagged calls count (JSON shown in a fence as an example is not call-shaped)
    fenced = [m.group(m.lastindex or 1) for m in (*_TAG.finditer(stripped), *_FENCE.finditer(stripped))]
    values = []
    for segment in fenced:
        decoded, whole = _decode_call_json(segment)
        if not whole:
            if _looks_like_call(segment) and segment.lstrip().startswith("{"):
                return TextCalls("failed", problem="the tool call is not valid JSON")
            continue
        values.extend(v for v in _flatten(decoded) if _call_shaped(v))
    if not values:
        return TextCalls("text")
    result = _calls(values, declared)
    if result.kind == "calls":
        first = min(m.start() for m in (*_TAG.finditer(stripped), *_FENCE.finditer(stripped)))
        result.prose = stripped[:first].rstrip()
    return result


def _failed_if_call_like(text: str, problem: str) -> TextCalls:
    return TextCalls("failed", problem=problem) if _looks_like_call(text) else TextCalls("text")


def refusal_reason(result: TextCalls, text: str, tools: Sequence[ToolSpec], *, cut: bool = False) -> str:
    """What the model is told about a failed call written as text (``answers.refusal_text`` wraps it)."""
    shown = text.strip()
    if len(shown) > MAX_SHOWN:
        shown = shown[:MAX_SHOWN] + "..."
    why = result.problem + (" (the answer was cut off at max_tokens)" if cut else "")
    return f"it looks like a tool call written as text that could not be run ({why}): {shown!r}. " + expected_format(
        tools
    )


__all__ = ["TextCalls", "expected_format", "may_be_call", "parse_text_tool_calls", "refusal_reason"]
