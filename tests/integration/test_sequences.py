"""Seed 000's seven operational sequences and its four fixed bugs, on a real Redis, one test each."""

from __future__ import annotations

from unicore.api.schema import InboxMessage, TaskSpec, tool_result_block
from unicore.store.keys import ACTIVATIONS_STREAM

from tests.converse_check import converse_problems


def texts(message):
    return [block["text"] for block in message.content if "text" in block]


def spawn(name, prompt):
    return {"name": "spawn_task", "input": {"name": name, "prompt": prompt}}


def test_sequence_1_new_task_creation(store, turn):
    assert store.create_task(
        TaskSpec(id="s1", prompt="Hello", script={"tasks": {"s1": [{"text": "Hi there!"}]}})
    )
    assert store.pending_count("s1") == 1
    outcome = turn("s1")
    assert outcome.exit_code == 0 and outcome.final_text == "Hi there!"
    (turn0,) = store.load_history("s1")
    assert turn0.turn_number == 0
    assert [(m.role, texts(m), m.message_number) for m in turn0.messages] == [
        ("user", ["Hello"], 0),
        ("assistant", ["Hi there!"], 1),
    ]
    record = store.get_task("s1")
    assert (record.status, record.turns, record.last_response) == ("idle", 1, "Hi there!")
    assert store.pending_count("s1") == 0 and store.lease_holder("s1") is None


def test_sequence_2_continuing_conversation_starts_a_new_turn_and_keeps_history(store, turn):
    store.create_task(
        TaskSpec(id="s2", prompt="first", script={"tasks": {"s2": [{"text": "one"}, {"echo": True}]}})
    )
    turn("s2")
    store.queue_text("s2", "second")
    outcome = turn("s2")
    assert outcome.final_text == "second"
    turns = store.load_history("s2")
    assert [t.turn_number for t in turns] == [0, 1]
    assert [texts(m) for m in turns[0].messages] == [["first"], ["one"]]
    assert [texts(m) for m in turns[1].messages] == [["second"], ["second"]]
    # the model saw the whole history, not only the new turn
    last_request = turn.requests("s2")[-1]
    assert [m["role"] for m in last_request.messages] == ["user", "assistant", "user"]
    assert last_request.messages[0]["content"] == [{"text": "first"}]


def test_sequence_3_tool_results_stay_in_the_current_turn_batched_in_one_message(store, turn):
    script = {
        "tasks": {
            "s3": [
                {
                    "tool_use": [
                        {"name": "note", "input": {"text": "x"}},
                        {"name": "note", "input": {"text": "y"}},
                    ]
                },
                {"text": "finished"},
            ]
        }
    }
    store.create_task(TaskSpec(id="s3", prompt="use tools", script=script, tools=[]))
    outcome = turn("s3")
    assert outcome.exit_code == 0 and outcome.final_text == "finished"
    (turn0,) = store.load_history("s3")
    roles = [m.role for m in turn0.messages]
    assert roles == ["user", "assistant", "user", "assistant"]
    results = [b["toolResult"] for b in turn0.messages[2].content]
    assert [r["content"][0]["text"] for r in results] == ["noted: x", "noted: y"]
    assert all(r["status"] == "success" for r in results)
    assert store.get_task("s3").tool_iterations == 1


def test_sequence_4_parent_spawns_child_which_sees_the_parent_and_reports_back(store, turn, redis_client):
    script = {
        "tasks": {
            "p4": [{"tool_use": [spawn("kid", "Find the answer")]}, {"text": "spawned"}],
            "p4-kid": [{"text": "The answer is 42."}],
        }
    }
    store.create_task(TaskSpec(id="p4", prompt="Delegate this", script=script))
    assert turn("p4").exit_code == 0
    child = store.get_task("p4-kid")
    assert (child.parent, child.root, child.depth) == ("p4", "p4", 1)
    assert store.children("p4") == ["p4-kid"]
    assert [m.content for m in store.inbox("p4-kid")] == ["Find the answer"]
    reasons = [(f["task"], f["reason"]) for _, f in redis_client.xrange(ACTIVATIONS_STREAM)]
    assert ("p4-kid", "spawn") in reasons
    assert turn("p4-kid").final_text == "The answer is 42."
    assert "Delegate this" in turn.requests("p4-kid")[0].system  # the parent's transcript is in the prompt
    (completion,) = store.inbox("p4")
    assert completion.type == "completion" and completion.sender == "p4-kid"
    assert completion.content.startswith(
        "[SYSTEM] Child task p4-kid has completed successfully.\nRan 1 turns"
    )
    assert completion.content.endswith("Final response from child:\nThe answer is 42.")
    assert ("p4", "completion:p4-kid") in [
        (f["task"], f["reason"]) for _, f in redis_client.xrange(ACTIVATIONS_STREAM)
    ]


def test_sequence_5_child_completing_while_parent_runs_joins_the_current_turn(store, turn):
    script = {
        "tasks": {
            "p5": [
                {"tool_use": [spawn("kid", "work")]},
                {"tool_use": [{"name": "note", "input": {"text": "busy"}}]},
                {"echo": True},
            ],
            "p5-kid": [{"text": "kid result"}],
        }
    }
    store.create_task(TaskSpec(id="p5", prompt="go", script=script))

    def run_child_during_second_call(request):
        if sum(m["role"] == "assistant" for m in request.messages) == 1:
            assert turn("p5-kid").exit_code == 0  # the child finishes while the parent's turn is running

    turn.hooks["p5"] = run_child_during_second_call
    outcome = turn("p5")
    assert "kid result" in outcome.final_text
    turns = store.load_history("p5")
    assert len(turns) == 1
    kinds = [(m.role, "toolResult" in m.content[0], texts(m)[:1]) for m in turns[0].messages]
    assert kinds[3] == ("assistant", False, [])  # the note tool call
    assert kinds[4][:2] == ("user", True)  # its result first ...
    assert kinds[5][0] == "user" and kinds[5][2][0].startswith(
        "[SYSTEM] Child task p5-kid"
    )  # ... then the completion
    assert store.pending_count("p5") == 0


def test_sequence_6_child_completing_while_parent_is_stopped_starts_a_new_turn(store, turn):
    script = {
        "tasks": {
            "p6": [{"tool_use": [spawn("kid", "work")]}, {"text": "waiting"}, {"echo": True}],
            "p6-kid": [{"text": "late result"}],
        }
    }
    store.create_task(TaskSpec(id="p6", prompt="go", script=script))
    turn("p6")
    assert store.get_task("p6").status == "idle"
    turn("p6-kid")
    outcome = turn("p6")
    assert "late result" in outcome.final_text
    turns = store.load_history("p6")
    assert [t.turn_number for t in turns] == [0, 1]
    assert len(turns[0].messages) == 4  # preserved
    assert texts(turns[1].messages[0])[0].startswith("[SYSTEM] Child task p6-kid has completed")


def test_sequence_7_simultaneous_completions_land_in_one_new_turn_as_separate_messages(store, turn):
    kids = ["a", "b", "c", "d"]
    script = {
        "tasks": {
            "p7": [{"tool_use": [spawn(k, f"job {k}") for k in kids]}, {"text": "waiting"}, {"echo": True}],
            "p7-*": [{"echo": True}],
        }
    }
    store.create_task(TaskSpec(id="p7", prompt="fan out", script=script))
    turn("p7")
    for kid in kids:
        assert turn(f"p7-{kid}").exit_code == 0
    assert store.pending_count("p7") == 4
    outcome = turn("p7")
    turns = store.load_history("p7")
    assert len(turns) == 2
    new_turn = turns[1].messages
    assert [m.role for m in new_turn] == ["user"] * 4 + ["assistant"]
    assert [m.message_number for m in new_turn] == [0, 1, 2, 3, 4]
    for kid in kids:
        assert f"job {kid}" in outcome.final_text
    request = turn.requests("p7")[-1]
    assert converse_problems(request.messages) == []  # the 4 user messages were merged for the model
    assert len(request.messages[-1]["content"]) == 4


def test_bug_1_tool_results_reach_the_conversation(store):
    store.create_task(TaskSpec(id="b1", prompt="x"))
    lease = store.acquire_lease("b1")
    store.drain(lease, first_drain=True)
    store.append_message(
        lease,
        "assistant",
        [
            {"toolUse": {"toolUseId": "t1", "name": "note", "input": {}}},
            {"toolUse": {"toolUseId": "t2", "name": "note", "input": {}}},
        ],
    )
    for tool_id in ("t1", "t2"):
        store.queue_message(
            "b1",
            InboxMessage(type="tool_result", content=tool_result_block(tool_id, "ok"), tool_use_id=tool_id),
        )
    store.queue_text("b1", "a user note")
    result = store.drain(lease, first_drain=False)
    assert result.drained == 3
    assert [[next(iter(b)) for b in m.content] for m in result.messages] == [
        ["toolResult", "toolResult"],
        ["text"],
    ]
    stored = store.messages("b1")
    assert [b["toolResult"]["toolUseId"] for b in stored[2].content] == ["t1", "t2"]


def test_bug_2_recreating_an_existing_task_never_overwrites_its_conversation(store, turn):
    spec = TaskSpec(id="b2", prompt="remember me", script={"tasks": {"b2": [{"text": "ok"}]}})
    assert store.create_task(spec)
    turn("b2")
    before = store.load_history("b2")
    assert store.create_task(TaskSpec(id="b2", prompt="new prompt", system_prompt="other")) is False
    assert store.load_history("b2") == before
    assert store.pending_count("b2") == 0 and store.get_task("b2").system_prompt == ""


def test_bug_3_messages_go_to_the_turn_just_created(store):
    store.create_task(TaskSpec(id="b3", prompt="first"))
    lease = store.acquire_lease("b3")
    store.drain(lease, first_drain=True)
    store.append_message(lease, "assistant", [{"text": "done"}])
    store.release_lease(lease)
    store.queue_text("b3", "second")
    store.queue_text("b3", "third")
    lease = store.acquire_lease("b3")
    result = store.drain(lease, first_drain=True)
    assert result.new_turn and result.turn_number == 1
    assert [(m.turn_number, m.message_number) for m in result.messages] == [(1, 0), (1, 1)]
    appended = store.append_message(lease, "assistant", [{"text": "reply"}])
    assert (appended.turn_number, appended.message_number, appended.seq) == (1, 2, 4)
    turns = store.load_history("b3")
    assert [len(t.messages) for t in turns] == [2, 3]


def test_bug_4_no_new_turn_while_the_task_is_running(store):
    store.create_task(TaskSpec(id="b4", prompt="first"))
    lease = store.acquire_lease("b4")
    store.drain(lease, first_drain=True)
    store.append_message(lease, "assistant", [{"text": "a turn-ending answer"}])
    store.queue_text("b4", "arrived while running")
    running = store.drain(lease, first_drain=False)
    assert not running.new_turn and running.turn_number == 0
    store.append_message(lease, "assistant", [{"text": "answered"}])
    store.queue_text("b4", "arrived while stopped")
    stopped = store.drain(lease, first_drain=True)
    assert stopped.new_turn and stopped.turn_number == 1
