"""The streaming OpenAI-compatible provider against a real local HTTP server (tests/sse_server.py) speaking
llama-server's stream format, with a real redis-server for the turn and the metrics.

Fakes stand only for what a real server cannot be made to do on demand; each is named after the real behaviour
(``server_dies_mid_answer``, ``server_repeats_tool_call_ids``, ``overloaded_with_retry_after``,
``answer_without_choices``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.providers import openai_compat
from unicore.providers.base import ModelRequest, ToolSpec
from unicore.providers.openai_compat import OpenAICompatModel, OpenAISettings, build_openai_model
from unicore.providers.retry import RetryPolicy
from unicore.store.keys import METRICS_COUNTERS
from unicore.store.tasks import TaskStore
from unicore.turn.outcome import EXIT_OK
from unicore.turn.run import run_turn

from tests.answer_sink import RecordingSink as Sink
from tests.sse_server import (
    MODEL,
    SSEServer,
    answer_without_choices,
    json_answer,
    overloaded_with_retry_after,
    serve,
    server_dies_mid_answer,
    server_ends_stream_early,
    server_repeats_tool_call_ids,
    stream,
    text_chunks,
)
from tests.waiting import wait_for

WRITE_CALL = '{"name": "write_file", "arguments": {"path": "hello.txt", "content": "Hello from Qwen"}}'


@pytest.fixture
def server() -> Iterator[SSEServer]:
    yield from serve()


@pytest.fixture(autouse=True)
def fresh_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_compat, "SERVED_NAMES", {})
    monkeypatch.setattr(openai_compat, "NOT_STREAMING", set())


def settings(server: SSEServer, attempts: int = 8) -> OpenAISettings:
    return OpenAISettings(base_url=server.base_url, timeout=10, retry=RetryPolicy(max_attempts=attempts))


def model(server: SSEServer, sleeps: list[float], name: str = "qwen", **kw: object) -> OpenAICompatModel:
    return OpenAICompatModel(name, settings(server), sleep=sleeps.append, uniform=lambda lo, hi: 1.0, **kw)  # type: ignore[arg-type]


def ask(tools: list[ToolSpec] | None = None) -> ModelRequest:
    return ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "go"}]}], tools=tools or [])


# ---------------------------------------------------------------- streaming


def test_the_request_streams_and_text_reaches_the_sink_as_it_arrives(server: SSEServer) -> None:
    sink = Sink()
    chunks = text_chunks("Hello there, friend.", pieces=3, prompt=21)
    pieces = [c["choices"][0]["delta"]["content"] for c in chunks[1:4]]
    # after the server sent text chunk i (chunks 1..3), the client's sink has it before the stream goes on
    server.answers.append(stream(chunks, between=lambda i: 1 <= i <= 3 and wait_for(
        lambda: len(sink.deltas) >= i, timeout=10, what=f"text delta {i} in the sink")))
    response = model(server, []).converse(ask(), sink)
    assert sink.deltas == pieces and len(pieces) == 3 and sink.attempts == 1
    assert response.content == [{"text": "Hello there, friend."}] and response.stop_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (21, 5)
    body = server.posts()[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("cut", [server_dies_mid_answer, server_ends_stream_early])
def test_a_stream_cut_mid_answer_is_retried_and_no_half_answer_is_returned(server: SSEServer, cut: object) -> None:
    full = text_chunks("The whole answer, at last.")
    server.answers += [cut(full[:3]), stream(full)]  # type: ignore[operator]
    sink, sleeps = Sink(), list[float]()
    response = model(server, sleeps).converse(ask(), sink)
    assert response.content == [{"text": "The whole answer, at last."}]
    assert sink.attempts == 2 and "".join(sink.deltas) == "The whole answer, at last."  # the cut try was voided
    assert sleeps == [2.0] and len(server.posts()) == 2


def test_a_stream_cut_every_time_fails_the_call_without_an_answer(server: SSEServer) -> None:
    server.answers += [server_dies_mid_answer(text_chunks("Half")[:2])] * 3
    sleeps: list[float] = []
    failing = OpenAICompatModel("qwen", settings(server, attempts=3), sleep=sleeps.append, uniform=lambda a, b: 1.0)
    with pytest.raises(Exception, match="still unavailable after 3 tries: stream cut"):
        failing.converse(ask())


def test_repeated_tool_call_ids_within_an_answer_are_made_unique(server: SSEServer) -> None:
    calls = [("read_file", '{"path": "a"}'), ("read_file", '{"path": "b"}')]
    server.answers.append(server_repeats_tool_call_ids(calls))
    response = model(server, []).converse(ask())
    ids = [b["toolUse"]["toolUseId"] for b in response.content]
    assert ids[0] == "call_0" and len(set(ids)) == 2 and response.stop_reason == "tool_use"
    assert [b["toolUse"]["input"] for b in response.content] == [{"path": "a"}, {"path": "b"}]


@pytest.mark.parametrize(("header", "expected"), [("3", 3.0), ("7200", 120.0), ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0)])
def test_429_with_retry_after_is_the_backoff_capped(server: SSEServer, header: str, expected: float) -> None:
    server.answers += [overloaded_with_retry_after(header), stream(text_chunks("ok"))]
    sleeps: list[float] = []
    assert model(server, sleeps).converse(ask()).content == [{"text": "ok"}]
    assert sleeps == [expected]


def test_an_answer_without_choices_is_retried_as_transient(server: SSEServer) -> None:
    server.answers += [answer_without_choices(), stream(text_chunks("ok"))]
    sleeps: list[float] = []
    assert model(server, sleeps).converse(ask()).content == [{"text": "ok"}]
    assert sleeps == [2.0]


def test_a_name_the_server_does_not_serve_uses_the_alias_from_models(server: SSEServer) -> None:
    server.models = [f"/models/{MODEL}"]
    server.answers += [json_answer(404, {"error": {"message": "The model `x` does not exist."}}),
                       stream(text_chunks("one")), stream(text_chunks("two"))]
    qwen = model(server, [], name="qwen2.5-coder-0.5b-instruct-q4_k_m")
    assert qwen.converse(ask()).content == [{"text": "one"}]
    assert qwen.converse(ask()).content == [{"text": "two"}]
    assert [r["body"]["model"] for r in server.posts()] == [
        "qwen2.5-coder-0.5b-instruct-q4_k_m", f"/models/{MODEL}", f"/models/{MODEL}"]
    assert [r["path"] for r in server.requests if r["method"] == "GET"] == ["/v1/models"]  # once per process


def test_a_server_that_cannot_stream_tools_is_asked_without_streaming(server: SSEServer) -> None:
    """Older llama-server builds answer a streamed request with tools with HTTP 500 "Cannot use tools with stream"."""
    tools = [ToolSpec(name="read_file", description="", input_schema={"type": "object"})]
    server.answers += [json_answer(500, {"error": {"code": 500, "message": "Cannot use tools with stream"}}),
                       json_answer(200, {"model": MODEL, "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": "no stream"}}]}),
                       json_answer(200, {"model": MODEL, "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": "still none"}}]})]
    sink, sleeps = Sink(), list[float]()
    qwen = model(server, sleeps)
    assert qwen.converse(ask(tools), sink).content == [{"text": "no stream"}]
    assert qwen.converse(ask(tools), sink).content == [{"text": "still none"}]
    assert sink.deltas == ["still none"] and sleeps == []  # the whole text as one delta
    assert [r["body"].get("stream", False) for r in server.posts()] == [True, False, False]


def test_a_text_call_cut_at_max_tokens_is_refused_saying_so(server: SSEServer) -> None:
    tools = [ToolSpec(name="write_file", description="", input_schema={"type": "object"})]
    server.answers.append(stream(text_chunks(WRITE_CALL[:40], finish="length")))
    response = model(server, []).converse(ask(tools))
    assert "cut off at max_tokens" in response.refused and response.stop_reason == "max_tokens"


# ---------------------------------------------------------------- through the turn (real Redis)


def run(client: redis.Redis, server: SSEServer, workspace: Path, task: str) -> object:
    return run_turn(
        task,
        redis=client,
        model_factory=lambda record, c: build_openai_model("qwen", settings=settings(server), redis_client=c),
        workspace=workspace,
        summarize=False,
    )


def test_one_model_call_moves_model_calls_total_by_exactly_one(
    redis_client: redis.Redis, server: SSEServer, tmp_path: Path
) -> None:
    """Regression: the turn and the provider's CallRunner both counted every call (2 per call)."""
    TaskStore(redis_client).create_task(TaskSpec(id="once", prompt="say hi"))
    server.answers.append(stream(text_chunks("hi", prompt=33)))
    outcome = run(redis_client, server, tmp_path, "once")
    assert outcome.exit_code == EXIT_OK and outcome.final_text == "hi"  # type: ignore[attr-defined]
    counters = redis_client.hgetall(METRICS_COUNTERS)
    calls = {k: float(v) for k, v in counters.items() if k.startswith("model_calls_total|")}
    assert calls == {"model_calls_total|model=qwen,outcome=ok,provider=openai": 1.0}
    assert float(counters["model_tokens_total|kind=input,model=qwen,provider=openai"]) == 33
    hist = redis_client.hgetall("uc:metrics:hist")
    assert float(hist["model_call_duration_seconds|model=qwen,provider=openai|count"]) == 1


def test_a_tool_call_written_as_text_runs_the_tool(
    redis_client: redis.Redis, server: SSEServer, tmp_path: Path
) -> None:
    """llama-server --jinja + Qwen2.5-Coder: the call arrives as bare JSON in content, never in tool_calls."""
    store = TaskStore(redis_client)
    store.create_task(TaskSpec(id="writer", prompt="write hello.txt"))
    server.answers += [stream(text_chunks(WRITE_CALL, pieces=6)),
                       stream(text_chunks(f"```json\n{WRITE_CALL.replace('Qwen', 'Qwen again')}\n```")),
                       stream(text_chunks("I wrote hello.txt."))]
    outcome = run(redis_client, server, tmp_path, "writer")
    assert outcome.exit_code == EXIT_OK and outcome.final_text == "I wrote hello.txt."  # type: ignore[attr-defined]
    assert (tmp_path / "hello.txt").read_text() == "Hello from Qwen again"
    stored = [m for t in store.load_history("writer") for m in t.messages if m.role == "assistant"]
    assert [b["toolUse"]["name"] for b in stored[0].content] == ["write_file"]
    # the tool results went back to the model as tool messages answering the synthesized calls
    tool_messages = [m for m in server.posts()[2]["body"]["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 2 and all("hello.txt" in m["content"] for m in tool_messages)


def test_a_failed_call_written_as_text_is_never_the_final_answer(
    redis_client: redis.Redis, server: SSEServer, tmp_path: Path
) -> None:
    store = TaskStore(redis_client)
    store.create_task(TaskSpec(id="bad", prompt="write hello.txt"))
    bad = '{"name": "create_file", "arguments": {"filename": "hello.txt"}}'
    server.answers += [stream(text_chunks(bad)), stream(text_chunks(WRITE_CALL)), stream(text_chunks("Written."))]
    outcome = run(redis_client, server, tmp_path, "bad")
    assert outcome.exit_code == EXIT_OK and outcome.final_text == "Written."  # type: ignore[attr-defined]
    assert (tmp_path / "hello.txt").exists()
    second = server.posts()[1]["body"]["messages"]
    told = second[-1]["content"]
    assert second[-1]["role"] == "user" and "unknown tool 'create_file'" in told
    assert '{"name": "<tool name>", "arguments"' in told and "write_file" in told
    stored = json.dumps([m.content for t in store.load_history("bad") for m in t.messages if m.role == "assistant"])
    assert "create_file" not in stored  # the failed call was never stored as an answer
