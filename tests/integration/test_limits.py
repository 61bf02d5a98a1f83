"""Limits: a spawn beyond depth / fan-out / descendants / budget / allowed tools is refused with a clear
tool error, and NOTHING else happens (every Redis key, the activation stream included, stays byte-for-byte
the same)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.api.schema import Limits, TaskSpec, Usage
from unicore.errors import ToolError
from unicore.launch.local_spawner import LocalSpawner
from unicore.store.keys import TaskKeys
from unicore.store.slots import STALE_RESERVATION_SECONDS, SpawnSlots
from unicore.store.tasks import TaskStore
from unicore.tools.base import ToolContext
from unicore.tools.registry import ALL_TOOLS, run_tool_call, toolset_for


@pytest.fixture
def store(redis_client: redis.Redis) -> TaskStore:
    return TaskStore(redis_client)


def snapshot(redis_url: str) -> dict[bytes, Any]:
    """Every key's content: a hash as its sorted fields (the DUMP of a hash table depends on where Redis's
    incremental rehashing is, which reads move on), anything else as its DUMP."""
    raw = redis.Redis.from_url(redis_url)
    try:
        return {key: sorted(raw.hgetall(key).items()) if raw.type(key) == b"hash" else raw.dump(key)
                for key in sorted(raw.scan_iter(count=1000))}
    finally:
        raw.close()


def spawn(
    store: TaskStore,
    parent: str,
    tmp_path: Path,
    tool_input: dict[str, Any],
    tools_override: list[Any] | None = None,
) -> tuple[str, str]:
    ctx = ToolContext(task_id=parent, store=store, spawner=LocalSpawner(store), workspace=tmp_path)
    tools = tools_override if tools_override is not None else toolset_for(store.get_task(parent))
    block = run_tool_call(
        ctx, tools, {"toolUse": {"toolUseId": "tu", "name": "spawn_task", "input": tool_input}}
    )
    return block["toolResult"]["status"], block["toolResult"]["content"][0]["text"]


def assert_refused_and_unchanged(
    store: TaskStore,
    redis_url: str,
    parent: str,
    tmp_path: Path,
    tool_input: dict[str, Any],
    expected: str,
    **kwargs: Any,
) -> None:
    before = snapshot(redis_url)
    assert before, "the test tree should exist"
    status, text = spawn(store, parent, tmp_path, tool_input, **kwargs)
    assert status == "error", text
    assert expected in text
    assert snapshot(redis_url) == before


def test_allowed_spawn_does_write(store: TaskStore, redis_url: str, tmp_path: Path) -> None:
    """Control for the tests below: the snapshot sees a spawn's writes."""
    store.create_task(TaskSpec(id="demo", prompt="go"))
    before = snapshot(redis_url)
    assert spawn(store, "demo", tmp_path, {"name": "a", "prompt": "p"})[0] == "success"
    after = snapshot(redis_url)
    assert after != before
    assert b"uc:{demo-a}:task" in after and b"uc:{demo}:children" in after


def test_depth_limit(store: TaskStore, redis_url: str, tmp_path: Path) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go", limits=Limits(max_depth=1)))
    assert spawn(store, "demo", tmp_path, {"name": "a", "prompt": "p"})[0] == "success"
    # demo-a is at max depth: its toolset has no spawn_task, and the spawner refuses even if asked directly.
    assert "spawn_task" not in [tool.name for tool in toolset_for(store.get_task("demo-a"))]
    status, text = spawn(store, "demo-a", tmp_path, {"name": "b", "prompt": "p"})
    assert status == "error" and "not available to this task" in text
    assert_refused_and_unchanged(
        store,
        redis_url,
        "demo-a",
        tmp_path,
        {"name": "b", "prompt": "p"},
        "maximum depth reached: a child of demo-a would be at depth 2, but limits.max_depth is 1",
        tools_override=[ALL_TOOLS["spawn_task"]],
    )
    assert not store.exists("demo-a-b")


def test_recursion_off(store: TaskStore, redis_url: str, tmp_path: Path) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go", limits=Limits(recursion=False)))
    assert_refused_and_unchanged(
        store,
        redis_url,
        "demo",
        tmp_path,
        {"name": "a", "prompt": "p"},
        "spawning child tasks is disabled",
        tools_override=[ALL_TOOLS["spawn_task"]],
    )


def test_fan_out_limit(store: TaskStore, redis_url: str, tmp_path: Path) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go", limits=Limits(max_children=2)))
    for name in ("a", "b"):
        assert spawn(store, "demo", tmp_path, {"name": name, "prompt": "p"})[0] == "success"
    assert_refused_and_unchanged(
        store,
        redis_url,
        "demo",
        tmp_path,
        {"name": "c", "prompt": "p"},
        "maximum children reached: demo already has 2 child task(s)",
    )
    # Resuming an existing child is not a new child: still allowed.
    assert spawn(store, "demo", tmp_path, {"name": "a", "prompt": "again"})[0] == "success"
    assert store.children("demo") == ["demo-a", "demo-b"]


def test_a_slot_reserved_by_a_spawner_that_died_is_freed_once_stale(
    store: TaskStore, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go", limits=Limits(max_children=2, max_descendants=2)))
    assert spawn(store, "demo", tmp_path, {"name": "a", "prompt": "p"})[0] == "success"

    def reserve_and_die(child_id: str, when: float) -> None:  # what a spawner killed before its create leaves
        SpawnSlots(redis_client, clock=lambda: when).reserve(
            parent_id="demo", root_id="demo", child_id=child_id, max_children=2, max_descendants=2,
            known_children=store.children("demo"), known_descendants=store.children("demo"))

    reserve_and_die("demo-ghost", time.time())  # a spawn in flight (or just died): its slot is respected
    assert_refused_and_unchanged(store, redis_url, "demo", tmp_path, {"name": "b", "prompt": "p"},
                                 "maximum children reached: demo already has 2 child task(s)")
    long_ago = time.time() - STALE_RESERVATION_SECONDS - 1  # as if the grace had passed since the reservation
    redis_client.zadd(TaskKeys("demo").child_slots, {"demo-ghost": long_ago})
    redis_client.zadd(TaskKeys("demo").tree_slots, {"demo-ghost": long_ago})
    # the ghost never became a child: once stale, its slots go to the next spawn; the real child keeps its own
    status, text = spawn(store, "demo", tmp_path, {"name": "b", "prompt": "p"})
    assert status == "success", text
    assert store.children("demo") == ["demo-a", "demo-b"]
    assert sorted(redis_client.zrange(TaskKeys("demo").child_slots, 0, -1)) == ["demo-a", "demo-b"]
    assert sorted(redis_client.zrange(TaskKeys("demo").tree_slots, 0, -1)) == ["demo-a", "demo-b"]
    # a stale score alone frees nothing: a child that exists is counted however old its reservation
    redis_client.zadd(TaskKeys("demo").child_slots, {"demo-a": 1.0, "demo-b": 1.0})
    assert_refused_and_unchanged(store, redis_url, "demo", tmp_path, {"name": "c", "prompt": "p"},
                                 "maximum children reached: demo already has 2 child task(s)")


def test_descendants_limit(store: TaskStore, redis_url: str, tmp_path: Path) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go", limits=Limits(max_descendants=3, max_children=10)))
    assert spawn(store, "demo", tmp_path, {"name": "a", "prompt": "p"})[0] == "success"
    assert spawn(store, "demo-a", tmp_path, {"name": "x", "prompt": "p"})[0] == "success"
    assert spawn(store, "demo-a-x", tmp_path, {"name": "y", "prompt": "p"})[0] == "success"
    assert_refused_and_unchanged(
        store,
        redis_url,
        "demo",
        tmp_path,
        {"name": "b", "prompt": "p"},
        "maximum task tree size reached: demo already has 3 descendant task(s)",
    )
    assert_refused_and_unchanged(
        store,
        redis_url,
        "demo-a",
        tmp_path,
        {"name": "z", "prompt": "p"},
        "demo already has 3 descendant task(s)",
    )


def test_token_budget(store: TaskStore, redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go", limits=Limits(token_budget=1000)))
    assert spawn(store, "demo", tmp_path, {"name": "a", "prompt": "p"})[0] == "success"
    # The child used 600 tokens, the root 400: the tree's budget is spent.
    for task_id, used in (("demo-a", 600), ("demo", 400)):
        lease = store.acquire_lease(task_id)
        store.drain(lease, first_drain=True)
        store.append_message(
            lease,
            "assistant",
            [{"text": "ok"}],
            usage=Usage(input_tokens=used, output_tokens=0, total_tokens=used),
        )
        store.release_lease(lease)
    assert int(redis_client.hget(store.keys("demo").task, "tree_total_tokens") or 0) == 1000
    assert_refused_and_unchanged(
        store,
        redis_url,
        "demo",
        tmp_path,
        {"name": "b", "prompt": "p"},
        "token budget exhausted: the task tree of demo has used 1,000 of its 1,000 tokens",
    )
    # Sending more work to an existing child is refused too.
    assert_refused_and_unchanged(
        store, redis_url, "demo", tmp_path, {"name": "a", "prompt": "more"}, "token budget exhausted"
    )
    assert_refused_and_unchanged(
        store, redis_url, "demo-a", tmp_path, {"name": "x", "prompt": "p"}, "token budget exhausted"
    )


def test_budget_uses_per_task_totals_when_the_roll_up_missed(
    store: TaskStore, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go", limits=Limits(token_budget=500)))
    assert spawn(store, "demo", tmp_path, {"name": "a", "prompt": "p"})[0] == "success"
    redis_client.hset(store.keys("demo-a").task, "total_tokens", 500)  # no tree_total_tokens on the root
    assert_refused_and_unchanged(
        store, redis_url, "demo", tmp_path, {"name": "b", "prompt": "p"}, "has used 500 of its 500 tokens"
    )


def test_child_cannot_get_tools_its_parent_lacks(store: TaskStore, redis_url: str, tmp_path: Path) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go", tools=["read_file", "spawn_task"]))
    assert_refused_and_unchanged(
        store,
        redis_url,
        "demo",
        tmp_path,
        {"name": "a", "prompt": "p", "tools": ["read_file", "write_file"]},
        "a child cannot get tools its parent lacks: write_file",
    )
    assert_refused_and_unchanged(
        store,
        redis_url,
        "demo",
        tmp_path,
        {"name": "a", "prompt": "p", "tools": ["rm_rf"]},
        "unknown tool(s) rm_rf",
    )
    assert (
        spawn(store, "demo", tmp_path, {"name": "a", "prompt": "p", "tools": ["read_file"]})[0] == "success"
    )
    assert store.get_task("demo-a").tools == ["read_file"]


def test_bad_names_and_oversize_prompts_write_nothing(
    store: TaskStore, redis_url: str, tmp_path: Path
) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go"))
    assert_refused_and_unchanged(
        store,
        redis_url,
        "demo",
        tmp_path,
        {"name": "../evil", "prompt": "p"},
        "Invalid input for tool spawn_task",
    )
    spawner = LocalSpawner(store)
    before = snapshot(redis_url)
    with pytest.raises(ToolError, match="prompt too large"):
        spawner.spawn("demo", "a", "\u00e9" * 200_000, None)
    with pytest.raises(ToolError, match="invalid child name"):
        spawner.spawn("demo", "UPPER", "p", None)
    with pytest.raises(ToolError, match="parent task nope not found"):
        spawner.spawn("nope", "a", "p", None)
    assert snapshot(redis_url) == before


def test_message_task_refused_by_budget_writes_nothing(
    store: TaskStore, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    store.create_task(TaskSpec(id="demo", prompt="go", limits=Limits(token_budget=100)))
    assert spawn(store, "demo", tmp_path, {"name": "a", "prompt": "p"})[0] == "success"
    redis_client.hset(store.keys("demo").task, "tree_total_tokens", 150)
    ctx = ToolContext(task_id="demo", store=store, spawner=LocalSpawner(store), workspace=tmp_path)
    before = snapshot(redis_url)
    block = run_tool_call(
        ctx,
        toolset_for(store.get_task("demo")),
        {"toolUse": {"toolUseId": "m", "name": "message_task", "input": {"task": "a", "message": "more"}}},
    )
    assert block["toolResult"]["status"] == "error"
    assert "has used 150 of its 100 tokens" in block["toolResult"]["content"][0]["text"]
    assert snapshot(redis_url) == before
