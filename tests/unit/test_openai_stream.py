"""SSE parsing, delta assembly and held-back text of the OpenAI-compatible stream (pure)."""

from __future__ import annotations

import json

import pytest
from unicore.providers.base import ModelRequest, ToolSpec
from unicore.providers.calling import Retryable
from unicore.providers.openai_stream import HeldText, StreamAssembler, StreamError, answer_response, sse_events

from tests.sse_server import chunk, text_chunks, tool_call_chunks


class Sink:
    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.attempts = 0

    def attempt_started(self) -> None:
        self.attempts += 1

    def text(self, delta: str) -> None:
        self.deltas.append(delta)


def body(chunks: list[dict]) -> list[bytes]:  # type: ignore[type-arg]
    """The lines a client reads from a llama-server stream."""
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return [line.encode() for line in text.splitlines(keepends=True)]


def test_sse_events_follow_the_rules() -> None:
    lines = [b": keep-alive\n", b"event: message\n", b"data: {\"a\":\n", b"data: 1}\r\n", b"\r\n",
             b"data:[DONE]\n", b"\n", b"data: unfinished\n"]
    assert list(sse_events(lines)) == ['{"a":\n1}', "[DONE]"]


def test_text_deltas_in_order_and_usage_from_the_final_chunk() -> None:
    assembled = StreamAssembler()
    deltas = [assembled.feed_data(d) for d in sse_events(body(text_chunks("Hello there, friend.", prompt=12)))]
    assert "".join(deltas) == "Hello there, friend." and len([d for d in deltas if d]) == 3
    assert assembled.complete and assembled.done and assembled.finish_reason == "stop"
    assert assembled.usage == {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    assert assembled.model.endswith(".gguf")


def test_tool_call_fragments_are_assembled_by_index() -> None:
    assembled = StreamAssembler()
    calls = [("call_a", "read_file", '{"path": "a.txt"}'), ("call_b", "write_file", '{"path": "b", "content": "x"}')]
    for data in sse_events(body(tool_call_chunks(calls, split=4))):
        assembled.feed_data(data)
    assert assembled.tool_uses() == [
        {"toolUseId": "call_a", "name": "read_file", "input": {"path": "a.txt"}},
        {"toolUseId": "call_b", "name": "write_file", "input": {"path": "b", "content": "x"}},
    ]
    assert assembled.finish_reason == "tool_calls"


def test_deltas_without_index_and_with_repeated_id_and_name() -> None:
    """Servers that omit ``index`` and repeat the id and the whole name in every delta."""
    assembled = StreamAssembler()
    for call_id, args in [("c1", '{"pa'), ("c1", 'th": "x"}'), ("c2", "{}")]:
        assembled.feed(chunk({"tool_calls": [{"id": call_id, "function": {"name": "read_file", "arguments": args}}]}))
    uses = assembled.tool_uses()
    assert [(u["toolUseId"], u["input"]) for u in uses] == [("c1", {"path": "x"}), ("c2", {})]
    assert [u["name"] for u in uses] == ["read_file", "read_file"]


def test_a_stream_without_finish_or_done_is_incomplete() -> None:
    assembled = StreamAssembler()
    for c in text_chunks("cut here", usage=False)[:-1]:
        assembled.feed(c)
    assert not assembled.complete


def test_an_error_inside_the_stream() -> None:
    with pytest.raises(StreamError) as caught:
        StreamAssembler().feed_data('{"error": {"code": 500, "message": "slot unavailable"}}')
    assert caught.value.status == 500


def request(tools: list[ToolSpec] | None = None) -> ModelRequest:
    return ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "go"}]}], tools=tools or [])


TOOLS = [ToolSpec(name="read_file", description="", input_schema={
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})]


def test_held_text_is_released_for_a_plain_answer_and_dropped_for_a_call() -> None:
    sink = Sink()
    held = HeldText(sink, hold=True)
    for delta in ["\n", "{", '"status": "ok"}']:
        held.text(delta)
    assert sink.deltas == []
    assembled = StreamAssembler()
    assembled.feed(chunk({"content": '\n{"status": "ok"}'}, "stop"))
    response = answer_response(request(TOOLS), assembled, held, model="m", text_calls=True)
    assert response.content == [{"text": '\n{"status": "ok"}'}] and "".join(sink.deltas) == '\n{"status": "ok"}'

    sink = Sink()
    held = HeldText(sink, hold=True)
    call = '{"name": "read_file", "arguments": {"path": "a.txt"}}'
    held.text(call)
    assembled = StreamAssembler()
    assembled.feed(chunk({"content": call}, "stop"))
    response = answer_response(request(TOOLS), assembled, held, model="m", text_calls=True)
    assert sink.deltas == [] and response.stop_reason == "tool_use"
    assert response.content[0]["toolUse"]["input"] == {"path": "a.txt"}
    assert response.content[0]["toolUse"]["toolUseId"].startswith("call_")


def test_prose_is_not_held() -> None:
    sink = Sink()
    held = HeldText(sink, hold=True)
    for delta in ["\n", "Th", "e answer", " is 4."]:
        held.text(delta)
    assert sink.deltas == ["\nTh", "e answer", " is 4."]  # only the undecided whitespace waited


def test_missing_usage_is_estimated_and_empty_choices_are_retried() -> None:
    assembled = StreamAssembler()
    assembled.feed(chunk({"content": "x" * 40}, "length"))
    response = answer_response(request(), assembled, HeldText(Sink(), hold=False), model="m", text_calls=True)
    assert response.stop_reason == "max_tokens" and response.usage.output_tokens >= 10
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    empty = StreamAssembler()
    empty.feed(chunk(choices=False, usage={"prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3}))
    with pytest.raises(Retryable, match="empty choices"):
        answer_response(request(), empty, HeldText(Sink(), hold=False), model="m", text_calls=True)


def test_failed_text_call_is_refused_with_the_expected_format() -> None:
    assembled = StreamAssembler()
    text = '{"name": "read_file", "arguments": {"file": "a.txt"}}'
    assembled.feed(chunk({"content": text}, "stop"))
    sink = Sink()
    held = HeldText(sink, hold=True)
    held.text(text)
    response = answer_response(request(TOOLS), assembled, held, model="m", text_calls=True)
    assert "path: required field is missing" in response.refused
    assert '{"name": "<tool name>", "arguments"' in response.refused and "read_file" in response.refused
    assert sink.deltas == []
