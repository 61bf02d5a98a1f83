"""Regression tests for the runtime holes of issue 10 (lost reports, tool ids, poisoned history, limit races,
cancelled children), on a real redis-server."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.api.schema import Limits, TaskSpec, Usage
from unicore.launch.local_spawner import LocalSpawner
from unicore.providers.base import AnswerSink, ModelRequest, ModelResponse
from unicore.store.tasks import TaskStore, connect
from unicore.tools import policy
from unicore.turn.answers import MAX_ARGUMENT_DEPTH
from unicore.turn.history import INTERRUPTED_TEXT
from unicore.turn.outcome import EXIT_CANCELLED, EXIT_OK

from tests.converse_check import converse_problems
from tests.integration.conftest import NoteTool, RecordingModel, TurnRunner
from tests.unit.test_openai import FakeEndpoint, completion, make_model
from tests.waiting import wait_for

FINAL = {"default": "final answer"}


def _results_seen(request: ModelRequest) -> list[dict[str, Any]]:
    return [
        block["toolResult"]
        for message in request.messages
        if message["role"] == "user"
        for block in message["content"]
        if "toolResult" in block
    ]


# ---------------------------------------------------------------- 1. a child's report survives a crash


def _turn_dying_while_it_reports(url: str, task_id: str, workspace: str) -> None:
    """Run one turn of ``task_id``; SIGKILL the process when the completion is about to reach the parent's
    inbox (after the turn ended in Redis): the crash window of the lost report."""
    client = connect(url)
    store_cls = TaskStore
    original = store_cls.queue_message

    def queue_message(self: TaskStore, target: str, message: Any) -> bool:
        if message.type == "completion":
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, target, message)

    store_cls.queue_message = queue_message  # type: ignore[method-assign]
    runner = TurnRunner(client, Path(workspace))
    runner(task_id, lease_ttl_ms=300)


def test_a_child_that_dies_after_ending_its_turn_still_reports_to_its_parent_once(
    store: TaskStore, turn: TurnRunner, redis_url: str, tmp_path: Path
) -> None:
    store.create_task(TaskSpec(id="p", prompt="go", script=FINAL))
    store.create_task(TaskSpec(id="p-c", parent="p", prompt="work", script=FINAL))
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_turn_dying_while_it_reports, args=(redis_url, "p-c", str(tmp_path)))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    assert store.turn_meta("p-c", 0).get("ended_at"), "the child's turn ended before the crash"
    assert [m.type for m in store.inbox("p")] == ["user"], "the crash lost the report (so far)"
    wait_for(lambda: store.lease_holder("p-c") is None, timeout=10, what="the dead turn's lease to expire")

    assert store.needs_turn("p-c"), "a child that owes its parent a report is runnable"
    assert turn("p-c").exit_code == EXIT_OK
    completions = [m for m in store.inbox("p") if m.type == "completion"]
    assert len(completions) == 1
    assert completions[0].id == "completion:p-c:0"
    assert "final answer" in completions[0].content
    assert not store.needs_turn("p-c")
    turn("p-c")  # nothing to do, nothing delivered twice
    assert len([m for m in store.inbox("p") if m.type == "completion"]) == 1


# ---------------------------------------------------------------- 2. tool-use ids repeated or omitted by a server


@pytest.fixture
def endpoint() -> Iterator[FakeEndpoint]:
    server = FakeEndpoint()
    yield server
    server.close()


def _tool_call(call_id: str | None, text: str) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": "note", "arguments": json.dumps({"text": text})}}
    if call_id is not None:
        call["id"] = call_id
    return call


@pytest.mark.parametrize("call_id", ["call_0", None, ""], ids=["repeated", "omitted", "empty"])
def test_tool_calls_with_repeated_or_missing_ids_all_get_their_results(
    store: TaskStore, turn: TurnRunner, endpoint: FakeEndpoint, call_id: str | None
) -> None:
    for text in ("a", "b"):
        endpoint.answers.append((200, completion({"content": None, "tool_calls": [_tool_call(call_id, text)]},
                                                 "tool_calls")))
    endpoint.answers.append((200, completion({"content": None, "tool_calls": [_tool_call(call_id, "c"),
                                                                              _tool_call(call_id, "d")]},
                                             "tool_calls")))
    endpoint.answers.append((200, completion({"content": "done"}, "stop")))
    store.create_task(TaskSpec(id="oa", prompt="note things", tools=["note"]))
    turn.models["oa"] = RecordingModel(make_model(endpoint))
    assert turn("oa").exit_code == EXIT_OK

    last = turn.requests("oa")[-1]
    results = _results_seen(last)
    texts = [r["content"][0]["text"] for r in results]
    assert texts == ["noted: a", "noted: b", "noted: c", "noted: d"], texts
    assert all(r["status"] == "success" for r in results)
    ids = [r["toolUseId"] for r in results]
    assert len(set(ids)) == 4 and all(ids)
    assert converse_problems(last.messages) == []
    sent = endpoint.requests[-1]["body"]["messages"]
    tool_msgs = [m for m in sent if m["role"] == "tool"]
    assert len(tool_msgs) == 4 and all(m["content"].startswith("noted:") for m in tool_msgs)


# ---------------------------------------------------------------- 3. a deeply nested answer never poisons history


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"x": value}
    return value


class DeeplyNestedAnswerModel:
    """A model whose first answer is a tool call with an input nested ``depth`` levels deep, then text."""

    provider, name = "test", "deeply-nested"

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.requests: list[ModelRequest] = []

    def converse(self, request: ModelRequest, sink: AnswerSink | None = None) -> ModelResponse:
        self.requests.append(request)
        if len(self.requests) == 1:
            use = {"toolUseId": "t1", "name": "note", "input": {"text": "x", "deep": _nested(self.depth)}}
            return ModelResponse(content=[{"toolUse": use}], usage=Usage(), stop_reason="tool_use")
        return ModelResponse(content=[{"text": "recovered"}], usage=Usage(), stop_reason="end_turn")


def test_a_deeply_nested_tool_input_gets_an_error_result_and_the_task_keeps_working(
    store: TaskStore, turn: TurnRunner
) -> None:
    """Issue 24 changed the answer's refusal into an error result of the call (``answers.bounded_input``): one rule
    for every tool call nested too deep, also those a provider parsed itself, as here."""
    store.create_task(TaskSpec(id="deep", prompt="go", tools=["note"]))
    model = DeeplyNestedAnswerModel(250)
    turn.models["deep"] = model  # type: ignore[assignment]
    assert turn("deep").exit_code == EXIT_OK
    history = store.load_history("deep")  # loads: nothing poisoned was stored
    assert history[-1].messages[-1].content == [{"text": "recovered"}]
    results = _results_seen(model.requests[1])
    assert [r["status"] for r in results] == ["error"]
    assert f"nested at most {MAX_ARGUMENT_DEPTH} levels deep" in results[0]["content"][0]["text"]
    store.queue_text("deep", "again")
    assert turn("deep").exit_code == EXIT_OK


def test_a_history_already_holding_an_undecodable_message_loads_with_it_quarantined(
    store: TaskStore, turn: TurnRunner, redis_client: redis.Redis
) -> None:
    store.create_task(TaskSpec(id="old", prompt="go", script=FINAL))
    assert turn("old").exit_code == EXIT_OK
    keys = store.keys("old")
    # What an earlier version stored from a hostile answer: valid JSON, nested beyond what the loader accepts.
    poisoned = {"seq": 2, "turn_number": 0, "message_number": 2, "role": "assistant", "timestamp": 1.0,
                "content": [{"toolUse": {"toolUseId": "z", "name": "note", "input": _nested(300)}}]}
    redis_client.rpush(keys.messages, json.dumps(poisoned))
    turns = store.load_history("old")
    texts = [b.get("text", "") for b in turns[-1].messages[-1].content]
    assert turns[-1].messages[-1].seq == 2 and "quarantined" in texts[0]
    store.queue_text("old", "still there?")
    assert turn("old").exit_code == EXIT_OK
    assert store.get_task("old").last_response == "final answer"


# ---------------------------------------------------------------- 4. concurrent spawns respect the limits


def test_concurrent_spawns_never_exceed_max_descendants(
    store: TaskStore, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits = Limits(max_descendants=10, max_children=10, max_depth=3)
    store.create_task(TaskSpec(id="r", prompt="go", limits=limits))
    spawner = LocalSpawner(store)
    siblings = [spawner.spawn("r", f"s{i}", "work", None)[0] for i in range(8)]
    # Every sibling passes the (read-only) policy check before any of them creates its child: the race.
    attempts = 2 * len(siblings)
    barrier = threading.Barrier(attempts, timeout=30)
    checked = policy.check_spawn

    def check_then_wait(*args: Any, **kwargs: Any) -> Any:
        plan = checked(*args, **kwargs)
        barrier.wait()
        return plan

    monkeypatch.setattr(policy, "check_spawn", check_then_wait)
    outcomes: list[str] = []

    def spawn(parent: str, name: str) -> None:
        try:
            LocalSpawner(TaskStore(connect(redis_url))).spawn(parent, name, "more", None)
            outcomes.append("created")
        except policy.LimitExceeded:
            outcomes.append("refused")

    threads = [threading.Thread(target=spawn, args=(p, f"g{j}")) for p in siblings for j in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    descendants = [t for t in store.list_tasks() if t != "r"]
    assert len(descendants) <= limits.max_descendants, descendants
    assert outcomes.count("created") == limits.max_descendants - len(siblings)
    assert outcomes.count("refused") == attempts - outcomes.count("created")


# ---------------------------------------------------------------- 6. a cancelled turn leaves its task runnable


def test_a_turn_cancelled_during_its_model_call_is_resumed_and_reports(store: TaskStore, turn: TurnRunner) -> None:
    script = {"default": "final answer", "tasks": {"q-c": [{"sleep": 0.01, "text": "final answer"}]}}
    store.create_task(TaskSpec(id="q", prompt="go", script=script))
    store.create_task(TaskSpec(id="q-c", parent="q", prompt="work", script=script))
    cancel = threading.Event()
    turn.hooks["q-c"] = lambda _request: cancel.set()  # Ctrl-C arrives while the model answers
    assert turn("q-c", cancel=cancel).exit_code == EXIT_CANCELLED
    assert store.get_task("q-c").status == "idle"
    assert store.needs_turn("q-c"), "the cancelled turn never ended: the task must run again"
    turn.hooks.pop("q-c")
    assert turn("q-c").exit_code == EXIT_OK
    completions = [m for m in store.inbox("q") if m.type == "completion"]
    assert len(completions) == 1 and "final answer" in completions[0].content
    assert not store.needs_turn("q-c")


def test_a_cancelled_tool_call_gets_a_synthetic_result_when_resumed(store: TaskStore, turn: TurnRunner) -> None:
    script = {"tasks": {"w": [{"tool_use": [{"name": "note", "input": {"text": "x"}}]}, {"text": "ok"}]}}
    store.create_task(TaskSpec(id="w", prompt="go", tools=["note"], script=script))
    cancel = threading.Event()
    turn.extra_tools = [NoteTool()]
    turn.hooks["w"] = lambda _request: cancel.set()
    assert turn("w", cancel=cancel).exit_code == EXIT_CANCELLED
    turn.hooks.pop("w")
    assert turn("w").exit_code == EXIT_OK
    results = _results_seen(turn.requests("w")[-1])
    assert results and results[0]["status"] == "error"
    assert results[0]["content"][0]["text"] in ("Cancelled", INTERRUPTED_TEXT)


def test_an_owed_report_is_delivered_before_the_next_turn_of_the_child_starts(
    store: TaskStore, turn: TurnRunner, redis_url: str, tmp_path: Path
) -> None:
    """The child's turn 0 ended and died before reporting; a new message starts its turn 1 before anyone
    redelivered: both reports reach the parent, in order (turn 1's end must not replace turn 0's owed report)."""
    store.create_task(TaskSpec(id="m", prompt="go", script=FINAL))
    store.create_task(TaskSpec(id="m-c", parent="m", prompt="work", script=FINAL))
    proc = multiprocessing.get_context("fork").Process(
        target=_turn_dying_while_it_reports, args=(redis_url, "m-c", str(tmp_path))
    )
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    wait_for(lambda: store.lease_holder("m-c") is None, timeout=10, what="the dead turn's lease to expire")
    store.queue_text("m-c", "one more thing")
    assert turn("m-c").exit_code == EXIT_OK
    ids = [m.id for m in store.inbox("m") if m.type == "completion"]
    assert ids == ["completion:m-c:0", "completion:m-c:1"]


# ---------------------------------------------------------------- 14. a failed child tells its parent


def test_a_child_whose_turn_fails_tells_its_parent_why(store: TaskStore, redis_client: redis.Redis,
                                                       redis_url: str, tmp_path: Path) -> None:
    from unicore.launch.local import LocalSupervisor

    store.create_task(TaskSpec(id="f", script={"default": "noted", "tasks": {"f": [{"echo": True}]}}))
    store.create_task(TaskSpec(id="f-x", parent="f", prompt="work", model="nosuchprovider:m"))
    store.activate("f-x", "test")
    supervisor = LocalSupervisor(redis_client, redis_url, env={"UNICORE_HOME": str(tmp_path)},
                                 on_event=lambda _text: None)
    settle = supervisor.run_until_settled("f", timeout=120)
    assert settle.settled and settle.failures == {"f-x": 1}
    texts = [b["text"] for m in store.messages("f") if m.role == "user" for b in m.content if "text" in b]
    failed = [t for t in texts if t.startswith("[SYSTEM] Child task f-x has FAILED")]
    assert len(failed) == 1, texts
    assert "nosuchprovider" in failed[0]  # the reason: the child's last error
    assert "[SYSTEM] Child task f-x has FAILED" in store.get_task("f").last_response  # the parent's model saw it


# ---------------------------------------------------------------- 11. a retried write does not apply twice


def test_a_write_retried_after_its_reply_was_lost_applies_once(store: TaskStore, redis_client: redis.Redis) -> None:
    """The Redis client re-sends a command whose connection died; if the server had already run it, the drain and
    the answer's append (the writes that are not naturally idempotent) replay their first result."""
    store.create_task(TaskSpec(id="rt", prompt="hi"))
    lease = store.acquire_lease("rt")
    sent: list[tuple[Any, list[str], list[Any]]] = []
    original = store._fenced

    def twice(script: Any, keys: list[str], args: list[Any]) -> Any:
        first = original(script, keys, args)
        sent.append((script, keys, args))
        assert original(script, keys, args) == first  # the retry: same command, same reply
        return first

    store._fenced = twice  # type: ignore[method-assign]
    drained = store.drain(lease, first_drain=True)
    answer = store.append_message(lease, "assistant", [{"text": "hello"}], usage=Usage(total_tokens=7,
                                                                                          input_tokens=5,
                                                                                          output_tokens=2))
    assert len(sent) == 2 and drained.drained == 1
    assert [m.seq for m in store.messages("rt")] == [0, answer.seq] == [0, 1]
    record = store.get_task("rt")
    assert record.iterations == 1 and record.total_tokens == 7
