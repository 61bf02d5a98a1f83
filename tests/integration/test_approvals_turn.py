"""Turns with gated tools and ask_user (in-process turns on a real redis-server, scripted model)."""

from __future__ import annotations

import json
from typing import ClassVar

import pytest
from pydantic import BaseModel
from unicore.api.schema import Approval, TaskSpec
from unicore.errors import AlreadyDecided
from unicore.store import approval_writes as writes
from unicore.store import approvals
from unicore.store.keys import METRICS_COUNTERS
from unicore.store.tasks import TaskStore
from unicore.tools.base import Tool, ToolContext
from unicore.turn.approvals import INTERRUPTED_TEXT
from unicore.turn.history import answer_to
from unicore.turn.outcome import EXIT_OK


class CountTool(Tool):
    """A gated test tool that counts its runs."""

    name = "count"
    description = "Count."
    runs: ClassVar[list[str]] = []

    class Input(BaseModel):
        label: str

    Input.__name__ = "CountInput"

    def run(self, ctx: ToolContext, args: BaseModel) -> str:
        assert isinstance(args, CountTool.Input)
        CountTool.runs.append(args.label)
        return f"counted {args.label}"


@pytest.fixture
def gated(store: TaskStore, turn):
    CountTool.runs = []
    turn.extra_tools.append(CountTool())

    def create(task_id: str, steps: list[dict], tools: list[str] | None = None, **kw) -> None:
        spec = TaskSpec(id=task_id, prompt="go", script={"tasks": {task_id: steps}},
                        approval=Approval(tools=["count"], **kw), tools=tools)
        assert store.create_task(spec)
    return create


def _results(request) -> list[dict]:
    return [block["toolResult"] for message in request.messages for block in message["content"]
            if "toolResult" in block]


def test_an_approved_call_runs_once_after_the_decision_and_the_conversation_goes_on(store, turn, gated):
    gated("t", [{"tool_use": [{"name": "count", "input": {"label": "a"}}, {"name": "note", "input": {"text": "x"}}]},
                {"echo_results": True}])
    first = turn("t")
    assert first.exit_code == EXIT_OK and "waiting for approval of count" in first.note
    assert CountTool.runs == [] and len(turn.requests("t")) == 1
    record = store.get_task("t")
    assert record.status == "idle" and record.last_response.startswith("waiting for approval")
    assert approvals.waiting_for(store.redis, "t") == "approval" and not store.needs_turn("t")
    [call] = approvals.pending_calls(store.redis, "t")
    assert (call.tool, call.input, call.kind) == ("count", {"label": "a"}, "approval")

    assert turn("t").exit_code == EXIT_OK  # nothing decided: no model call
    assert len(turn.requests("t")) == 1 and CountTool.runs == []

    approvals.decide(store.redis, "t", call.call_id, True, by="alice")
    assert store.needs_turn("t")
    done = turn("t")
    assert done.exit_code == EXIT_OK and CountTool.runs == ["a"]
    results = _results(turn.requests("t")[-1])
    assert [r["content"][0]["text"] for r in results] == ["counted a", "noted: x"]  # one message, call order
    assert "counted a" in done.final_text and not store.needs_turn("t")

    with pytest.raises(AlreadyDecided):
        approvals.decide(store.redis, "t", call.call_id, True, by="bob")
    assert turn("t").exit_code == EXIT_OK
    assert CountTool.runs == ["a"] and len(turn.requests("t")) == 2
    [decided] = approvals.calls(store.redis, "t")
    assert decided.status == "approved" and decided.resolved_at is not None
    # each call counted once (tool_calls_total): the approved one when it ran, the other one when the first turn ran it
    counted = {field: float(value) for field, value in store.redis.hgetall(METRICS_COUNTERS).items()
               if field.startswith("tool_calls_total|")}
    assert counted == {"tool_calls_total|outcome=ok,server=,source=builtin,tool=count": 1,
                       "tool_calls_total|outcome=ok,server=,source=builtin,tool=note": 1}


def test_a_denied_call_gives_the_model_an_error_result_with_the_reason(store, turn, gated):
    gated("t", [{"tool_use": [{"name": "count", "input": {"label": "a"}}]}, {"echo_results": True}])
    turn("t")
    approvals.decide(store.redis, "t", None, False, by="bob", reason="not today")
    done = turn("t")
    [result] = _results(turn.requests("t")[-1])
    assert result["status"] == "error" and result["content"][0]["text"] == "Error: denied by bob: not today"
    assert CountTool.runs == [] and "denied by bob: not today" in done.final_text


def test_an_overdue_approval_is_denied(store, turn, gated):
    gated("t", [{"tool_use": [{"name": "count", "input": {"label": "a"}}]}, {"echo_results": True}],
          timeout_seconds=5)
    turn("t")
    [call] = approvals.pending_calls(store.redis, "t")
    assert approvals.expire_overdue(store.redis, "t", now=call.requested_at + 1, timeout_seconds=5) == []
    assert approvals.expire_overdue(store.redis, "t", now=call.requested_at + 5, timeout_seconds=5) == [call.call_id]
    turn("t")
    [result] = _results(turn.requests("t")[-1])
    assert result["content"][0]["text"] == "Error: denied by timeout: no decision within 5s"


def test_an_approved_call_started_by_a_turn_that_died_is_not_run_again(store, turn, gated):
    gated("t", [{"tool_use": [{"name": "count", "input": {"label": "a"}}]}, {"echo_results": True}])
    turn("t")
    [call] = approvals.pending_calls(store.redis, "t")
    approvals.decide(store.redis, "t", call.call_id, True, by="alice")
    dead = store.acquire_lease("t", holder="dead-turn")
    assert writes.start_call(store.redis, dead, call.call_id)  # then it died before the result was stored
    store.break_lease("t", "dead-turn")
    turn("t")
    [result] = _results(turn.requests("t")[-1])
    assert CountTool.runs == [] and result["content"][0]["text"] == INTERRUPTED_TEXT


def test_invalid_gated_calls_fail_at_once_instead_of_waiting(store, turn, gated):
    gated("t", [{"tool_use": [{"name": "count", "input": {"wrong": 1}}]}, {"echo_results": True}])
    done = turn("t")
    assert approvals.calls(store.redis, "t") == [] and "Invalid input for tool count" in done.final_text


def test_ask_user_waits_and_the_next_user_message_is_its_result(store, turn, gated):
    gated("t", [{"tool_use": [{"name": "ask_user", "input": {"question": "Which colour?"}}]}, {"echo_results": True}],
          tools=["ask_user", "read_file"])
    first = turn("t")
    assert "an answer to ask_user" in first.note
    assert approvals.waiting_for(store.redis, "t") == "input"
    store.queue_text("t", "a child's news", kind="completion")
    assert not store.needs_turn("t")  # only a user message answers
    store.queue_text("t", "Blue, please", message_id="m-answer")
    assert store.needs_turn("t")
    done = turn("t")
    [result] = _results(turn.requests("t")[-1])
    assert result["status"] == "success" and result["content"][0]["text"] == "Blue, please"
    texts = [block.get("text") for m in turn.requests("t")[-1].messages for block in m["content"]]
    assert "Blue, please" not in texts and "a child's news" in texts  # the answer is no user message of its own
    assert done.final_text == answer_to(store.load_history("t"), "m-answer")
    [asked] = approvals.calls(store.redis, "t")
    assert (asked.status, asked.answer, asked.answer_id) == ("answered", "Blue, please", "m-answer")


def test_a_child_inherits_its_parents_gates_and_a_waiting_child_reports_nothing(store, turn, gated):
    gated("p", [{"text": "ok"}])
    store.create_task(TaskSpec(id="p-c", parent="p", prompt="work", tools=["count"],
                               script={"tasks": {"p-c": [{"tool_use": [{"name": "count", "input": {"label": "c"}}]},
                                                         {"text": "child done"}]}}))
    assert store.get_task("p-c").approval == Approval(tools=["count"])
    turn("p-c")
    assert approvals.waiting_for(store.redis, "p-c") == "approval"
    assert [m.type for m in store.inbox("p")] == ["user"]  # its own prompt: no completion of the child yet
    approvals.decide(store.redis, "p-c", None, True, by="alice")
    turn("p-c")
    inbox = [json.loads(m.model_dump_json()) for m in store.inbox("p")]
    assert [m["type"] for m in inbox] == ["user", "completion"] and "child done" in inbox[1]["content"]


def test_a_namespaces_own_redis_user_records_waits_and_resolves_them(redis_client, redis_url, tmp_path):
    """The turn's side under the agent namespace's ACL user (state.acl); the decision with the admin identity."""
    from redis.exceptions import NoPermissionError
    from unicore.store import acl
    from unicore.store.client import build_client

    from tests.integration.conftest import NoteTool, TurnRunner

    admin = TaskStore(redis_client)
    password = acl.new_password()
    acl.apply_namespace_user(redis_client, "team-a", password)
    try:
        tenant = build_client(acl.identity_url(redis_url, acl.namespace_user("team-a"), password),
                              decode_responses=True, retry_for=0)
        script = {"tasks": {"t": [{"tool_use": [{"name": "note", "input": {"text": "gated"}},
                                                {"name": "ask_user", "input": {"question": "ok?"}}]},
                                  {"echo_results": True}]}}
        admin.create_task(TaskSpec(id="team-a/t", prompt="go", script=script, tools=["note", "ask_user"],
                                   approval=Approval(tools=["note"])))
        runner = TurnRunner(tenant, tmp_path, extra_tools=[NoteTool()])
        assert runner("team-a/t").exit_code == EXIT_OK
        assert approvals.waiting_for(redis_client, "team-a/t") == "approval"
        approvals.decide(redis_client, "team-a/t", None, True, by="alice")
        admin.queue_text("team-a/t", "yes", message_id="m1")
        done = runner("team-a/t")
        assert done.exit_code == EXIT_OK and "noted: gated" in done.final_text and "yes" in done.final_text
        with pytest.raises(NoPermissionError):  # it really is the namespace's restricted user
            tenant.acl_whoami()
        tenant.close()
    finally:
        acl.delete_namespace_user(redis_client, "team-a")


def test_an_answer_too_large_for_a_result_becomes_an_error_result(store, turn, gated):
    from unicore.api.schema import DEFAULT_MESSAGE_CAP_BYTES, InboxMessage

    gated("t", [{"tool_use": [{"name": "ask_user", "input": {"question": "Everything?"}}]}, {"echo_results": True}],
          tools=["ask_user"])
    turn("t")
    probe = InboxMessage(id="m-big", type="user", content="", sender="user")
    answer = "x" * (DEFAULT_MESSAGE_CAP_BYTES - len(probe.model_dump_json().encode()) - 10)  # a queueable message
    assert store.queue_message("t", InboxMessage(id="m-big", type="user", content=answer, sender="user"))
    turn("t")
    [result] = _results(turn.requests("t")[-1])
    assert result["status"] == "error" and "too large to keep" in result["content"][0]["text"]
