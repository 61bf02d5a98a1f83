"""The spans of model calls (``chat <model>``) and tool calls (``execute_tool <tool>``): their GenAI attributes from
UniCore's request, response and tool types. The turn opens them where a call is made once (``ModelCalls.call``,
``tools.registry.run_tool_call``); off, each helper costs one check."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from unicore.providers.base import AnswerSink, Model, ModelRequest, ModelResponse
from unicore.traces import genai, spans


class FirstChunkClock:
    """An AnswerSink in front of the call's own (or none): notes when the answer's first text arrived."""

    def __init__(self, inner: AnswerSink | None) -> None:
        self.inner = inner
        self.started = time.monotonic()
        self.first: float | None = None

    def attempt_started(self) -> None:
        self.first = None  # a retried call's first chunk is its last try's
        self.started = time.monotonic()
        if self.inner is not None:
            self.inner.attempt_started()

    def text(self, delta: str) -> None:
        if self.first is None and delta:
            self.first = time.monotonic()
        if self.inner is not None:
            self.inner.text(delta)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


class ModelCallSpan:
    """The ``chat`` span of one call while it runs: ``sink`` wraps the call's sink, ``answered`` records the reply."""

    def __init__(self, span: spans.NoSpan, sink: AnswerSink | None, capture: bool) -> None:
        self.span = span
        self.clock = FirstChunkClock(sink) if spans.active() else None
        self.capture = capture

    def sink(self, sink: AnswerSink | None) -> Any:
        return self.clock if self.clock is not None else sink

    def answered(self, response: ModelResponse) -> None:
        if self.clock is None:
            return
        usage = response.usage
        self.span.set_many({
            genai.RESPONSE_MODEL: response.model_id or None,
            genai.USAGE_INPUT_TOKENS: usage.input_tokens,
            genai.USAGE_OUTPUT_TOKENS: usage.output_tokens,
            genai.RESPONSE_FINISH_REASONS: [genai.finish_reason(response.stop_reason)],
            genai.RESPONSE_TIME_TO_FIRST_CHUNK: (self.clock.first - self.clock.started
                                                 if self.clock.first is not None else None),
        })
        if self.capture:
            self.span.set(genai.OUTPUT_MESSAGES, genai.content([{"role": "assistant", "parts": response.content}]))


@contextmanager
def model_call(model: Model, request: ModelRequest, sink: AnswerSink | None) -> Iterator[ModelCallSpan]:
    """The ``chat <model>`` span around one logical call (its retries are events on it: ``providers.calling``)."""
    if not spans.active():
        yield ModelCallSpan(spans.NO_SPAN, sink, False)
        return
    capture = genai.capture_content()
    attributes: dict[str, Any] = {
        genai.OPERATION: genai.CHAT,
        genai.PROVIDER: genai.provider_name(getattr(model, "provider", "")),
        genai.REQUEST_MODEL: getattr(model, "name", "") or None,
        genai.REQUEST_MAX_TOKENS: request.max_tokens,
        genai.REQUEST_STREAM: sink is not None,
        genai.PURPOSE: request.purpose,
    }
    if capture:
        attributes[genai.SYSTEM_INSTRUCTIONS] = genai.content(request.system)
        attributes[genai.INPUT_MESSAGES] = genai.content(request.messages)
    with spans.span(f"{genai.CHAT} {getattr(model, 'name', '') or 'model'}", attributes, kind="client") as span:
        yield ModelCallSpan(span, sink, capture)


def _tool_attributes(use: Mapping[str, Any], tools: Iterable[Any]) -> dict[str, Any]:
    name = str(use.get("name", ""))
    tool = next((tool for tool in tools if tool.name == name), None)
    remote = getattr(tool, "remote_name", None)
    attributes: dict[str, Any] = {
        genai.OPERATION: genai.EXECUTE_TOOL,
        genai.TOOL_NAME: name,
        genai.TOOL_CALL_ID: str(use.get("toolUseId", "")) or None,
        genai.TOOL_TYPE: "extension" if remote else "function",
    }
    if remote:  # a tool of an MCP server: the tools/call request it makes
        attributes[genai.MCP_METHOD] = "tools/call"
        attributes["unicore.mcp.server"] = getattr(getattr(tool, "connection", None), "name", None)
        attributes["unicore.mcp.tool"] = str(remote)
    if genai.capture_content():
        attributes[genai.TOOL_CALL_ARGUMENTS] = genai.content(use.get("input", {}))
    return attributes


@contextmanager
def tool_call(use: Mapping[str, Any], tools: Iterable[Any]) -> Iterator[spans.NoSpan]:
    """The ``execute_tool <tool>`` span around one tool call (a spawn_task's children hang under it)."""
    if not spans.active():
        yield spans.NO_SPAN
        return
    name = str(use.get("name", "")) or "tool"
    with spans.span(f"{genai.EXECUTE_TOOL} {name}", _tool_attributes(use, tools)) as span:
        yield span


def tool_result(span: spans.NoSpan, result: Mapping[str, Any], outcome: str) -> None:
    """Record a tool call's result on its span: an error result marks it failed (``error.type``: the outcome)."""
    if not spans.active():
        return
    block = result.get("toolResult", {})
    if block.get("status") == "error":
        text = " ".join(str(part.get("text", "")) for part in block.get("content", []) if isinstance(part, dict))
        span.fail(outcome if outcome != "ok" else "tool_error", text)
    span.set("unicore.tool.outcome", outcome)
    if genai.capture_content():
        span.set(genai.TOOL_CALL_RESULT, genai.content(block.get("content", [])))


__all__ = ["FirstChunkClock", "ModelCallSpan", "model_call", "tool_call", "tool_result"]
