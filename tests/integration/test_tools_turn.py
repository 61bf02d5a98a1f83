"""The tools through real turns (unicore.turn.run.run_turn + scripted model + TaskStore on a real Redis):
a root spawns children, a refused spawn reaches the model as an error result, children see the parent's
transcript and report back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.api.schema import Limits, TaskSpec
from unicore.store.tasks import TaskStore
from unicore.turn.outcome import TurnOutcome
from unicore.turn.prompts import build_system_prompt
from unicore.turn.run import run_turn

SCRIPT: dict[str, Any] = {
    "default": "Done.",
    "tasks": {
        "demo": [
            {
                "tool_use": [
                    {"name": "spawn_task", "input": {"name": "a", "prompt": "Find A"}},
                    {"name": "spawn_task", "input": {"name": "b", "prompt": "Find B"}},
                    {"name": "spawn_task", "input": {"name": "c", "prompt": "Find C"}},
                    {"name": "write_file", "input": {"path": "plan.md", "content": "a, b"}},
                ]
            },
            {"text": "Waiting for my researchers."},
            {"echo": True},
        ],
        "demo-*": [
            {"tool_use": [{"name": "read_file", "input": {"path": "plan.md"}}]},
            {"text": "Result from a child."},
        ],
    },
}


def tool_results(store: TaskStore, task_id: str) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for message in store.messages(task_id):
        for block in message.content:
            if "toolResult" in block:
                results[block["toolResult"]["toolUseId"]] = block["toolResult"]
    return results


def tool_uses(store: TaskStore, task_id: str) -> list[dict[str, Any]]:
    return [b["toolUse"] for m in store.messages(task_id) for b in m.content if "toolUse" in b]


@pytest.fixture
def store(redis_client: redis.Redis) -> TaskStore:
    return TaskStore(redis_client)


def test_root_spawns_children_through_a_real_turn(
    store: TaskStore, redis_client: redis.Redis, tmp_path: Path
) -> None:
    store.create_task(
        TaskSpec(id="demo", prompt="Research A and B", script=SCRIPT, limits=Limits(max_children=2))
    )
    prompts: dict[str, str] = {}

    def capture(st: TaskStore, record: Any) -> str:
        prompts[record.id] = build_system_prompt(st, record)
        return prompts[record.id]

    def turn(task_id: str) -> TurnOutcome:
        """One turn of ``task_id`` in workspace ``tmp_path/task_id``, its system prompt captured."""
        return run_turn(
            task_id, redis=redis_client, workspace=tmp_path / task_id, summarize=False, system_prompt_builder=capture
        )

    outcome = turn("demo")
    assert outcome.exit_code == 0, outcome
    assert outcome.final_text == "Waiting for my researchers."

    uses = {use["input"].get("name", use["name"]): use["toolUseId"] for use in tool_uses(store, "demo")}
    results = tool_results(store, "demo")
    assert results[uses["a"]]["status"] == "success"
    assert results[uses["b"]]["status"] == "success"
    refused = results[uses["c"]]
    assert refused["status"] == "error"
    assert "maximum children reached: demo already has 2 child task(s)" in refused["content"][0]["text"]
    assert results[uses["write_file"]]["status"] == "success"
    assert (tmp_path / "demo" / "plan.md").read_text() == "a, b"
    assert store.children("demo") == ["demo-a", "demo-b"]
    assert not store.exists("demo-c")

    # A child's turn: reduced toolset (no write_file), the parent's transcript in its system prompt.
    child = store.get_task("demo-a")
    assert child.depth == 1 and child.script == SCRIPT
    (tmp_path / "demo-a").mkdir()
    (tmp_path / "demo-a" / "plan.md").write_text("child copy")
    outcome = turn("demo-a")
    assert outcome.exit_code == 0, outcome
    assert outcome.final_text == "Result from a child."
    child_results = list(tool_results(store, "demo-a").values())
    assert [r["status"] for r in child_results] == ["success"]
    assert child_results[0]["content"] == [{"text": "child copy"}]
    assert "You are a child task of demo." in prompts["demo-a"]
    assert "User: Research A and B" in prompts["demo-a"]
    assert "Assistant used tool spawn_task" in prompts["demo-a"]
    assert "maximum children reached" in prompts["demo-a"]  # tool results are part of the parent context

    # The child's completion reached the parent's inbox.
    completions = [m for m in store.inbox("demo") if m.type == "completion"]
    assert [m.sender for m in completions] == ["demo-a"]
    assert "Result from a child." in str(completions[0].content)
