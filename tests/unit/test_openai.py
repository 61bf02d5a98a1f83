"""OpenAI-compatible provider against a tiny real HTTP server on a free local port (no client mocking).

This server answers every request with one JSON object, as a server that ignores ``stream: true`` does (the
provider reads such an answer as well); the streamed answers are tested in tests/integration/test_openai_streaming.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from unicore.errors import ConfigError, ModelError
from unicore.providers.base import ModelRequest, ToolSpec
from unicore.providers.openai_compat import OpenAICompatModel, OpenAISettings, chat_messages
from unicore.providers.retry import RetryPolicy


class FakeEndpoint:
    """Serves queued (status, body) answers to POST /v1/chat/completions and records each request."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.requests: list[dict[str, Any]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                length = int(self.headers.get("Content-Length", 0))
                endpoint.requests.append(
                    {
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "body": json.loads(self.rfile.read(length)),
                    }
                )
                status, body = (
                    endpoint.answers.pop(0) if endpoint.answers else (400, {"error": {"message": "none"}})
                )
                if status == DROP:  # close the connection without an answer (a server restarting)
                    self.close_connection = True
                    return
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


DROP = 0  # an answer status that makes the fake endpoint hang up without answering


@pytest.fixture
def endpoint() -> Iterator[FakeEndpoint]:
    server = FakeEndpoint()
    yield server
    server.close()


def completion(
    message: dict[str, Any], finish: str, prompt: int = 30, completion_tokens: int = 9
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "qwen2.5-7b-instruct",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        },
    }


def make_model(
    endpoint: FakeEndpoint, sleeps: list[float] | None = None, key: str | None = "sk-test", attempts: int = 8
) -> OpenAICompatModel:
    settings = OpenAISettings(
        base_url=endpoint.url, api_key=key, timeout=10, retry=RetryPolicy(max_attempts=attempts)
    )
    return OpenAICompatModel(
        "qwen2.5-7b-instruct",
        settings,
        sleep=(sleeps if sleeps is not None else []).append,
        uniform=lambda lo, hi: 1.0,
    )


SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def test_plain_text(endpoint: FakeEndpoint) -> None:
    endpoint.answers.append((200, completion({"content": "Hello there."}, "stop", 12, 3)))
    model = make_model(endpoint)
    response = model.converse(
        ModelRequest(
            task_id="demo",
            system="Be brief.",
            messages=[{"role": "user", "content": [{"text": "Hi"}]}],
            max_tokens=64,
            temperature=0.1,
        )
    )
    assert response.content == [{"text": "Hello there."}]
    assert response.stop_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (
        12,
        3,
        15,
    )
    sent = endpoint.requests[0]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer sk-test"
    assert sent["body"] == {
        "model": "qwen2.5-7b-instruct",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_tokens": 64,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.1,
    }


def test_tool_call_round_trip(endpoint: FakeEndpoint) -> None:
    tools = [ToolSpec(name="read_file", description="Read a file", input_schema=SCHEMA)]
    endpoint.answers.append(
        (
            200,
            completion(
                {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                        }
                    ],
                },
                "tool_calls",
            ),
        )
    )
    model = make_model(endpoint, key=None)
    first = ModelRequest(
        task_id="demo", messages=[{"role": "user", "content": [{"text": "Read a.txt"}]}], tools=tools
    )
    response = model.converse(first)
    assert response.stop_reason == "tool_use"
    assert response.content == [
        {"toolUse": {"toolUseId": "call_1", "name": "read_file", "input": {"path": "a.txt"}}}
    ]
    assert endpoint.requests[0]["auth"] is None
    assert endpoint.requests[0]["body"]["tools"] == [
        {
            "type": "function",
            "function": {"name": "read_file", "description": "Read a file", "parameters": SCHEMA},
        }
    ]

    endpoint.answers.append((200, completion({"content": "It says hello."}, "stop")))
    history = [
        *first.messages,
        {"role": "assistant", "content": [{"text": "Reading."}, *response.content]},
        {
            "role": "user",
            "content": [
                {"text": "Also, be quick."},
                {"toolResult": {"toolUseId": "call_1", "content": [{"text": "hello"}], "status": "success"}},
            ],
        },
    ]
    final = model.converse(ModelRequest(task_id="demo", messages=history, tools=tools))
    assert final.content == [{"text": "It says hello."}]
    assert endpoint.requests[1]["body"]["messages"] == [
        {"role": "user", "content": "Read a.txt"},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "hello"},  # tool results right after the call
        {"role": "user", "content": "Also, be quick."},
    ]


def test_error_results_and_json_content_are_translated() -> None:
    request = ModelRequest(
        task_id="t",
        messages=[
            {
                "role": "assistant",
                "content": [
                    {"toolUse": {"toolUseId": "a", "name": "x", "input": {}}},
                    {"toolUse": {"toolUseId": "b", "name": "y", "input": {"k": 1}}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "toolResult": {
                            "toolUseId": "a",
                            "content": [{"text": "interrupted"}],
                            "status": "error",
                        }
                    },
                    {
                        "toolResult": {
                            "toolUseId": "b",
                            "content": [{"json": {"ok": True}}],
                            "status": "success",
                        }
                    },
                ],
            },
        ],
    )
    messages = chat_messages(request)
    assert messages[0]["content"] is None and [c["id"] for c in messages[0]["tool_calls"]] == ["a", "b"]
    assert messages[1:] == [
        {"role": "tool", "tool_call_id": "a", "content": "Error: interrupted"},
        {"role": "tool", "tool_call_id": "b", "content": '{"ok": true}'},
    ]


def test_unparseable_tool_arguments_reach_the_tool_layer(endpoint: FakeEndpoint) -> None:
    endpoint.answers.append(
        (
            200,
            completion(
                {
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "c9",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": "{not json"},
                        }
                    ],
                },
                "stop",
            ),
        )
    )
    response = make_model(endpoint).converse(
        ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "x"}]}])
    )
    assert response.stop_reason == "tool_use"
    assert response.content == [
        {"toolUse": {"toolUseId": "c9", "name": "read_file", "input": {"_unparsed_arguments": "{not json"}}}
    ]


def test_429_and_503_are_retried_with_backoff(endpoint: FakeEndpoint) -> None:
    endpoint.answers += [
        (429, {"error": {"message": "rate limited"}}),
        (503, {"error": {"message": "loading"}}),
        (200, completion({"content": "ok"}, "length")),
    ]
    sleeps: list[float] = []
    response = make_model(endpoint, sleeps).converse(
        ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "x"}]}])
    )
    assert response.content == [{"text": "ok"}] and response.stop_reason == "max_tokens"
    assert sleeps == [2.0, 4.0]
    assert len(endpoint.requests) == 3


def test_throttling_gives_up_after_max_attempts(endpoint: FakeEndpoint) -> None:
    endpoint.answers += [(429, {"error": {"message": "rate limited"}})] * 3
    sleeps: list[float] = []
    with pytest.raises(ModelError, match="still throttled after 3 tries: HTTP 429: rate limited"):
        make_model(endpoint, sleeps, attempts=3).converse(
            ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "x"}]}])
        )
    assert sleeps == [2.0, 4.0]


def test_other_http_errors_fail_immediately(endpoint: FakeEndpoint) -> None:
    endpoint.answers.append((400, {"error": {"message": "maximum context length is 8192 tokens"}}))
    sleeps: list[float] = []
    with pytest.raises(ModelError, match="HTTP 400.*maximum context length is 8192 tokens"):
        make_model(endpoint, sleeps).converse(
            ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "x"}]}])
        )
    assert sleeps == [] and len(endpoint.requests) == 1


class RecordingCoordinator:
    """Stands in for the Redis-backed ThrottleCoordinator: records what the call runner tells it."""

    def __init__(self) -> None:
        self.throttled_delays: list[float] = []
        self.successes = 0

    def acquire(self, estimated_tokens: int = 0) -> object:
        return object()

    def commit(self, admission: object, tokens: int) -> None:
        pass

    def throttled(self, backoff_seconds: float) -> float:
        self.throttled_delays.append(backoff_seconds)
        return 1.0

    def succeeded(self) -> float:
        self.successes += 1
        return 1.0


def test_server_errors_and_dropped_connections_are_retried_without_throttling_anyone(
    endpoint: FakeEndpoint,
) -> None:
    endpoint.answers += [
        (502, {"error": {"message": "bad gateway"}}),
        (DROP, {}),
        (500, {"error": {"message": "engine restarting"}}),
        (429, {"error": {"message": "rate limited"}}),
        (200, completion({"content": "ok"}, "stop")),
    ]
    sleeps: list[float] = []
    coordinator = RecordingCoordinator()
    settings = OpenAISettings(base_url=endpoint.url, timeout=10, retry=RetryPolicy(max_attempts=8))
    model = OpenAICompatModel("m", settings, coordinator=coordinator,  # type: ignore[arg-type]
                              sleep=sleeps.append, uniform=lambda lo, hi: 1.0)
    response = model.converse(ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "x"}]}]))
    assert response.content == [{"text": "ok"}]
    assert sleeps == [2.0, 4.0, 8.0, 16.0] and len(endpoint.requests) == 5
    assert coordinator.throttled_delays == [16.0]  # only the 429 slows the model down for everyone
    assert coordinator.successes == 1


def test_unreachable_endpoint_is_retried_then_a_model_error() -> None:
    server = FakeEndpoint()
    url = server.url
    server.close()  # nothing listens on that port any more
    sleeps: list[float] = []
    settings = OpenAISettings(base_url=url, timeout=5, retry=RetryPolicy(max_attempts=3))
    model = OpenAICompatModel("m", settings, sleep=sleeps.append, uniform=lambda lo, hi: 1.0)
    with pytest.raises(ModelError, match=r"still unavailable after 3 tries: unreachable: openai endpoint .*refused"):
        model.converse(ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "x"}]}]))
    assert sleeps == [2.0, 4.0]


def test_settings_need_a_base_url() -> None:
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL"):
        OpenAISettings.from_env({})
    settings = OpenAISettings.from_env(
        {"OPENAI_BASE_URL": "http://vllm:8000/v1/", "UNICORE_OPENAI_RPM": "30"}
    )
    assert settings.base_url == "http://vllm:8000/v1" and settings.api_key is None
    assert settings.limits.max_requests == 30
    assert "sk-" not in repr(
        OpenAISettings.from_env({"OPENAI_BASE_URL": "http://x", "OPENAI_API_KEY": "sk-secret"})
    )
    with pytest.raises(ConfigError):
        OpenAISettings.from_env({"OPENAI_BASE_URL": "http://x", "UNICORE_OPENAI_TIMEOUT": "soon"})
