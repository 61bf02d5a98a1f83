"""Tool arguments nested 100,000 deep (issue 24, item 7): the call gets an error tool result and the turn goes on
(it failed with RecursionError), through the streaming OpenAI-compatible provider and a real local HTTP server
(tests/sse_server.py), a real redis-server and the real workspace tools."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.providers import openai_compat
from unicore.providers.openai_compat import OpenAISettings, build_openai_model
from unicore.providers.retry import RetryPolicy
from unicore.store.tasks import TaskStore
from unicore.turn.answers import MAX_ARGUMENT_DEPTH
from unicore.turn.outcome import EXIT_OK, TurnOutcome
from unicore.turn.run import run_turn

from tests.sse_server import SSEServer, serve, stream, text_chunks, tool_call_chunks

DEEP = 100_000


@pytest.fixture
def server() -> Iterator[SSEServer]:
    yield from serve()


@pytest.fixture(autouse=True)
def fresh_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_compat, "SERVED_NAMES", {})
    monkeypatch.setattr(openai_compat, "NOT_STREAMING", set())


def nested(depth: int) -> str:
    """Arguments whose ``path`` is a list nested so that the whole object is ``depth`` levels deep."""
    return '{"path": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def run(client: redis.Redis, server: SSEServer, workspace: Path, task: str) -> TurnOutcome:
    settings = OpenAISettings(base_url=server.base_url, timeout=10, retry=RetryPolicy(max_attempts=2))
    return run_turn(task, redis=client, workspace=workspace, summarize=False,
                    model_factory=lambda record, c: build_openai_model("qwen", settings=settings, redis_client=c))


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["body"]["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("depth", [DEEP, MAX_ARGUMENT_DEPTH + 1])
def test_arguments_nested_too_deep_get_an_error_result_and_the_turn_goes_on(
    redis_client: redis.Redis, server: SSEServer, tmp_path: Path, depth: int
) -> None:
    store = TaskStore(redis_client)
    store.create_task(TaskSpec(id="deep", prompt="read it"))
    server.answers += [stream(tool_call_chunks([("call_1", "read_file", nested(depth))], split=1)),
                       stream(text_chunks("I could not read it."))]
    outcome = run(redis_client, server, tmp_path, "deep")
    assert (outcome.exit_code, outcome.final_text, outcome.error) == (EXIT_OK, "I could not read it.", "")
    (result,) = tool_results(server.posts()[1])
    assert f"nested at most {MAX_ARGUMENT_DEPTH} levels deep" in result["content"]
    stored = [b for m in store.messages("deep") for b in m.content if "toolResult" in b]
    assert [b["toolResult"]["status"] for b in stored] == ["error"]


def test_arguments_at_the_depth_bound_reach_the_tool(
    redis_client: redis.Redis, server: SSEServer, tmp_path: Path
) -> None:
    """At MAX_ARGUMENT_DEPTH the arguments are parsed and validated as usual (the tool says what is wrong)."""
    store = TaskStore(redis_client)
    store.create_task(TaskSpec(id="bound", prompt="read it"))
    server.answers += [stream(tool_call_chunks([("call_1", "read_file", nested(MAX_ARGUMENT_DEPTH))], split=1)),
                       stream(text_chunks("done"))]
    outcome = run(redis_client, server, tmp_path, "bound")
    assert (outcome.exit_code, outcome.final_text) == (EXIT_OK, "done")
    (result,) = tool_results(server.posts()[1])
    assert "nested at most" not in result["content"] and "path" in result["content"]
    (answer,) = [m for m in store.messages("bound") if m.role == "assistant" and m.content[0].get("toolUse")]
    assert answer.content[0]["toolUse"]["input"] == json.loads(nested(MAX_ARGUMENT_DEPTH))


def test_a_call_written_as_text_nested_100000_deep_is_refused_and_the_turn_goes_on(
    redis_client: redis.Redis, server: SSEServer, tmp_path: Path
) -> None:
    """llama-server's models may write the call as text (providers.text_tool_calls): refused, never a crash."""
    TaskStore(redis_client).create_task(TaskSpec(id="text", prompt="read it"))
    call = '{"name": "read_file", "arguments": ' + nested(DEEP) + "}"
    server.answers += [stream(text_chunks(call, pieces=4)), stream(text_chunks("Sorry."))]
    outcome = run(redis_client, server, tmp_path, "text")
    assert (outcome.exit_code, outcome.final_text, outcome.error) == (EXIT_OK, "Sorry.", "")
    told = server.posts()[1]["body"]["messages"][-1]
    assert told["role"] == "user" and "could not be used" in told["content"]
