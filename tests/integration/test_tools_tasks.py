"""spawn_task / message_task / task_status and the child's system prompt, on a real Redis with TaskStore."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.api.schema import Limits, TaskSpec
from unicore.launch.local_spawner import LocalSpawner
from unicore.store.keys import ACTIVATIONS_STREAM
from unicore.store.tasks import TaskStore
from unicore.tools.base import ToolContext
from unicore.tools.registry import run_tool_call, toolset_for
from unicore.turn.prompts import build_system_prompt


@pytest.fixture
def store(redis_client: redis.Redis) -> TaskStore:
    return TaskStore(redis_client)


def ctx_for(store: TaskStore, task_id: str, tmp_path: Path) -> ToolContext:
    return ToolContext(
        task_id=task_id, store=store, spawner=LocalSpawner(store), workspace=tmp_path / task_id
    )


def call(
    store: TaskStore, task_id: str, tmp_path: Path, name: str, tool_input: dict[str, Any]
) -> tuple[str, str]:
    record = store.get_task(task_id)
    block = run_tool_call(
        ctx_for(store, task_id, tmp_path),
        toolset_for(record),
        {"toolUse": {"toolUseId": "tu-1", "name": name, "input": tool_input}},
    )
    result = block["toolResult"]
    assert result["toolUseId"] == "tu-1"
    return result["status"], "\n".join(item.get("text", "") for item in result["content"])


def activations(client: redis.Redis) -> list[dict[str, str]]:
    return [fields for _, fields in client.xrange(ACTIVATIONS_STREAM)]


def test_spawn_creates_a_child_with_inherited_settings(
    store: TaskStore, redis_client: redis.Redis, tmp_path: Path
) -> None:
    limits = Limits(max_depth=2, max_children=5, token_budget=10_000)
    store.create_task(
        TaskSpec(
            id="demo",
            prompt="go",
            model="scripted:x.yaml",
            limits=limits,
            script={"default": "ok"},
            child_tools=["read_file", "task_status"],
        )
    )
    status, text = call(store, "demo", tmp_path, "spawn_task", {"name": "research-a", "prompt": "Find A"})
    assert status == "success", text
    assert "Started child task demo-research-a" in text
    child = store.get_task("demo-research-a")
    assert child.parent == "demo" and child.root == "demo" and child.depth == 1
    assert child.model == "scripted:x.yaml" and child.script == {"default": "ok"}
    assert child.limits == limits
    assert child.tools == ["read_file", "task_status"]
    assert store.children("demo") == ["demo-research-a"]
    assert [m.content for m in store.inbox("demo-research-a")] == ["Find A"]
    assert {"task": "demo-research-a", "reason": "spawn"}.items() <= activations(redis_client)[-1].items()
    # The child's toolset is the parent's configured child toolset (no spawn_task in it).
    assert [tool.name for tool in toolset_for(child)] == ["read_file", "task_status"]


def test_spawning_an_existing_child_sends_it_a_message(
    store: TaskStore, redis_client: redis.Redis, tmp_path: Path
) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go"))
    call(store, "demo", tmp_path, "spawn_task", {"name": "a", "prompt": "first"})
    before = store.get_task("demo-a")
    status, text = call(store, "demo", tmp_path, "spawn_task", {"name": "a", "prompt": "second"})
    assert status == "success"
    assert "demo-a already exists: sent it your prompt as a new message" in text
    assert [m.content for m in store.inbox("demo-a")] == ["first", "second"]
    assert store.inbox("demo-a")[1].sender == "demo"
    assert store.children("demo") == ["demo-a"]
    assert store.get_task("demo-a").created_at == before.created_at
    assert activations(redis_client)[-1]["task"] == "demo-a"


def test_spawn_name_clash_with_a_foreign_task(store: TaskStore, tmp_path: Path) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go"))
    store.create_task(TaskSpec(id="demo-a", prompt="I am a root"))
    status, text = call(store, "demo", tmp_path, "spawn_task", {"name": "a", "prompt": "hi"})
    assert status == "error" and "is not a child of demo" in text
    assert [m.content for m in store.inbox("demo-a")] == ["I am a root"]


def test_invalid_spawn_input_is_an_error_result(store: TaskStore, tmp_path: Path) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go"))
    status, text = call(store, "demo", tmp_path, "spawn_task", {"name": "Bad Name", "prompt": ""})
    assert status == "error"
    assert "- name: String should match pattern" in text
    assert "- prompt:" in text
    assert store.children("demo") == []


def test_message_task_reaches_a_descendant(
    store: TaskStore, redis_client: redis.Redis, tmp_path: Path
) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go"))
    call(store, "demo", tmp_path, "spawn_task", {"name": "a", "prompt": "first"})
    call(store, "demo-a", tmp_path, "spawn_task", {"name": "x", "prompt": "deep"})
    assert call(store, "demo", tmp_path, "message_task", {"task": "a", "message": "more"})[0] == "success"
    assert call(store, "demo", tmp_path, "message_task", {"task": "demo-a-x", "message": "deeper"}) == (
        "success",
        "Sent your message to demo-a-x; it will report back when done.",
    )
    assert [m.content for m in store.inbox("demo-a")] == ["first", "more"]
    assert [m.content for m in store.inbox("demo-a-x")] == ["deep", "deeper"]
    assert activations(redis_client)[-1]["task"] == "demo-a-x"
    status, text = call(store, "demo-a", tmp_path, "message_task", {"task": "demo", "message": "up?"})
    assert status == "error" and "no task 'demo' among your descendants" in text
    status, text = call(store, "demo", tmp_path, "message_task", {"task": "nobody", "message": "hi"})
    assert status == "error" and "among your descendants" in text


def test_task_status_on_a_small_tree(store: TaskStore, redis_client: redis.Redis, tmp_path: Path) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go"))
    for name in ("a", "b"):
        call(store, "demo", tmp_path, "spawn_task", {"name": name, "prompt": f"work {name}"})
    call(store, "demo-a", tmp_path, "spawn_task", {"name": "x", "prompt": "work x"})
    assert call(store, "demo-b", tmp_path, "task_status", {}) == ("success", "demo-b has no child tasks.")

    # demo-a: running, executing a tool (assistant toolUse stored, no result yet), fresh heartbeat.
    lease_a = store.acquire_lease("demo-a")
    store.drain(lease_a, first_drain=True)
    store.append_message(
        lease_a,
        "assistant",
        [{"toolUse": {"toolUseId": "u1", "name": "read_file", "input": {"path": "notes.md"}}}],
    )
    # demo-b: finished a turn, idle, with a last answer.
    lease_b = store.acquire_lease("demo-b")
    store.drain(lease_b, first_drain=True)
    store.append_message(lease_b, "assistant", [{"text": "B is done: 7"}])
    store.end_turn(lease_b, 0, last_response="B is done: 7")
    store.release_lease(lease_b)
    # demo-a-x: running, waiting on the model, but its heartbeat is 10 minutes old.
    lease_x = store.acquire_lease("demo-a-x")
    store.drain(lease_x, first_drain=True)
    redis_client.set(store.keys("demo-a-x").heartbeat, repr(time.time() - 600))

    status, text = call(store, "demo", tmp_path, "task_status", {})
    assert status == "success", text
    lines = text.splitlines()
    assert (
        lines[0]
        == "Task tree under demo: 3 task(s) shown, 2 running, 1 looking stuck, 0 tokens used by them."
    )
    assert lines[1].startswith("- demo-a: running, 1 turn(s), 1 tool iteration(s)")
    assert any(line.strip() == "running tool read_file" for line in lines)
    assert any(
        'last tool: read_file {"path": "notes.md"}' in line and "(no result yet)" in line for line in lines
    )
    x_at = next(i for i, line in enumerate(lines) if line.startswith("  - demo-a-x: running"))
    assert "LOOKS STUCK: no heartbeat for 10m" in lines[x_at + 1]
    assert lines[x_at + 2].strip().startswith("last state: in a model call for")
    b_at = next(i for i, line in enumerate(lines) if line.startswith("- demo-b: idle, 1 turn(s)"))
    assert lines[b_at + 1].strip() == "last answer: B is done: 7"
    assert b_at > x_at  # the tree is printed depth first: demo-a, demo-a-x, then demo-b

    # One level only, and focusing on one child.
    _, shallow = call(store, "demo", tmp_path, "task_status", {"levels": 1})
    assert "demo-a-x" not in shallow and "demo-b" in shallow
    _, focused = call(store, "demo", tmp_path, "task_status", {"task": "a"})
    assert focused.splitlines()[0].startswith("Task tree under demo-a: 1 task(s) shown")
    status, text = call(store, "demo-b", tmp_path, "task_status", {"task": "demo-a"})
    assert status == "error" and "among your descendants" in text


def test_child_system_prompt_has_the_parents_transcript(store: TaskStore, tmp_path: Path) -> None:
    store.create_task(TaskSpec(id="demo", prompt="Research the moons of Jupiter", system_prompt="Be brief."))
    lease = store.acquire_lease("demo")
    store.drain(lease, first_drain=True)
    store.append_message(
        lease,
        "assistant",
        [
            {"text": "Delegating."},
            {
                "toolUse": {
                    "toolUseId": "s1",
                    "name": "spawn_task",
                    "input": {"name": "io", "prompt": "Io facts"},
                }
            },
        ],
    )
    call(store, "demo", tmp_path, "spawn_task", {"name": "io", "prompt": "Io facts"})

    root_prompt = build_system_prompt(store, store.get_task("demo"))
    assert "Your task id is demo." in root_prompt and "Be brief." in root_prompt
    assert "spawn_task starts a child task" in root_prompt
    assert "parent_conversation" not in root_prompt

    child_prompt = build_system_prompt(store, store.get_task("demo-io"))
    assert "You are a child task of demo." in child_prompt
    assert "User: Research the moons of Jupiter" in child_prompt
    # the parent's tool calls without their ids (random, from the model server: a child's prompt would differ from
    # run to run) and marked as the parent's, not the child's to follow
    assert 'Assistant used tool spawn_task with input: {"name": "io", "prompt": "Io facts"}' in child_prompt
    assert "s1" not in child_prompt and "the tool calls and results in it are demo's" in child_prompt
    assert "Be brief." not in child_prompt  # the parent's own system prompt is not inherited


def test_parent_transcript_is_bounded_with_a_marker(store: TaskStore, tmp_path: Path) -> None:
    store.create_task(TaskSpec(id="demo", prompt="start-of-conversation " + "x" * 100))
    lease = store.acquire_lease("demo")
    store.drain(lease, first_drain=True)
    for index in range(300):
        store.append_message(lease, "assistant", [{"text": f"step {index:03d} " + "y" * 200}])
    store.create_task(TaskSpec(id="demo-c", parent="demo", prompt="hi"))

    prompt = build_system_prompt(store, store.get_task("demo-c"), parent_context_chars=4096)
    body = prompt.split("<parent_conversation>\n", 1)[1].split("\n</parent_conversation>", 1)[0]
    assert len(body) <= 4096
    assert body.startswith("[... ") and "earlier characters of the parent conversation omitted ...]" in body
    assert "start-of-conversation" not in body
    assert body.endswith("step 299 " + "y" * 200)

    unbounded = build_system_prompt(store, store.get_task("demo-c"), parent_context_chars=10_000_000)
    assert "User: start-of-conversation" in unbounded and "omitted" not in unbounded
