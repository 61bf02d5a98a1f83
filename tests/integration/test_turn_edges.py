"""Bad input and edge cases of a turn: malformed scripts, unknown models, oversized messages, invalid tool input,
unknown tools, model errors, max_iterations, SIGTERM-style cancellation, turn summaries and telemetry."""

from __future__ import annotations

import threading
import time

import pytest
from unicore.api.schema import DEFAULT_MESSAGE_CAP_BYTES, InboxMessage, Limits, TaskSpec
from unicore.errors import MessageTooLarge, ModelError
from unicore.store.keys import METRICS_COUNTERS, METRICS_HISTOGRAMS
from unicore.turn.history import CANCELLED_TEXT
from unicore.turn.outcome import EXIT_CANCELLED, EXIT_FAILED
from unicore_client.local import main as cli

from tests.integration.conftest import RecordingModel


def results_of(store, task_id):
    return [b["toolResult"] for m in store.messages(task_id) for b in m.content if "toolResult" in b]


@pytest.fixture
def cli_env(redis_url, monkeypatch, tmp_path):
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("UNICORE_HOME", str(tmp_path / "home"))
    return tmp_path


def test_malformed_script_is_a_one_line_error_and_creates_nothing(cli_env, store, capsys):
    bad = cli_env / "bad.yaml"
    bad.write_text("tasks:\n  x:\n    - txt: typo\n")
    code = cli.main(["run", "--model", f"scripted:{bad}", "--name", "t1", "hello"])
    err = capsys.readouterr().err.strip()
    assert code == 2  # a bad script file is a bad argument
    assert err.startswith("unicore: error: invalid") and "txt" in err and "Traceback" not in err
    assert len(err.splitlines()) == 1
    assert not store.exists("t1")


def test_unknown_model_and_bad_arguments(cli_env, store, capsys):
    assert cli.main(["run", "--model", "gpt-17", "--name", "t2", "hello"]) == 1
    assert "unknown model" in capsys.readouterr().err
    assert not store.exists("t2")
    with pytest.raises(SystemExit) as info:
        cli.main(["run"])
    assert info.value.code == 2
    assert cli.main(["run", "--name", "Not Valid!", "hello"]) == 2
    assert "invalid task id" in capsys.readouterr().err
    assert cli.main(["send", "nope", "hello", "--no-wait"]) == 1
    assert "no task 'nope'" in capsys.readouterr().err


def test_message_over_the_cap_is_refused_and_nothing_is_written(store, cli_env, capsys):
    store.create_task(TaskSpec(id="cap", prompt="hi"))
    before = store.redis.lrange(store.keys("cap").inbox, 0, -1)
    huge = "x" * (DEFAULT_MESSAGE_CAP_BYTES + 1)
    with pytest.raises(MessageTooLarge, match="over the cap"):
        store.queue_message("cap", InboxMessage(type="user", content=huge))
    assert cli.main(["send", "cap", huge, "--no-wait"]) == 1
    assert "over the cap" in capsys.readouterr().err
    assert store.redis.lrange(store.keys("cap").inbox, 0, -1) == before
    assert store.redis.zcard(store.keys("cap").seen) == 1  # only the prompt's id


def test_invalid_tool_input_and_unknown_tool_become_error_results(store, turn):
    script = {
        "tasks": {
            "tools": [
                {
                    "tool_use": [
                        {"name": "note", "input": {"wrong": 1}},
                        {"name": "no_such_tool", "input": {}},
                        {"name": "note", "input": {"text": "boom", "fail": True}},
                    ]
                },
                {"text": "recovered"},
            ]
        }
    }
    store.create_task(TaskSpec(id="tools", prompt="go", script=script, tools=[]))
    outcome = turn("tools")
    assert outcome.exit_code == 0 and outcome.final_text == "recovered"
    invalid, unknown, failed = results_of(store, "tools")
    assert invalid["status"] == "error" and "text" in invalid["content"][0]["text"]
    assert unknown["status"] == "error" and "unknown tool 'no_such_tool'" in unknown["content"][0]["text"]
    assert failed["status"] == "error" and "failed on purpose" in failed["content"][0]["text"]


class FailingModel:
    provider, name = "scripted", "failing"

    def converse(self, request, sink=None):
        raise ModelError("the provider is down")


def test_model_error_fails_the_turn_records_it_and_loses_nothing(store, turn):
    store.create_task(TaskSpec(id="down", prompt="are you there?", script={"default": "back"}))
    turn.models["down"] = RecordingModel(FailingModel())
    outcome = turn("down")
    assert outcome.exit_code == EXIT_FAILED and "provider is down" in outcome.error
    record = store.get_task("down")
    assert "provider is down" in record.last_error and record.status == "idle"
    assert store.lease_holder("down") is None
    assert [m.content for m in store.messages("down")] == [[{"text": "are you there?"}]]  # kept
    del turn.models["down"]
    store.queue_text("down", "hello again")
    outcome = turn("down")
    assert outcome.exit_code == 0 and outcome.final_text == "back"
    (only_turn,) = store.load_history("down")  # the unanswered message and the new one share the turn
    assert [m.role for m in only_turn.messages] == ["user", "user", "assistant"]
    assert turn.requests("down")[-1].messages[0]["content"] == [
        {"text": "are you there?"},
        {"text": "hello again"},
    ]
    assert store.get_task("down").last_error == ""


def test_max_iterations_ends_the_turn_with_a_note(store, turn):
    loop = [{"tool_use": [{"name": "note", "input": {"text": str(i)}}]} for i in range(5)]
    store.create_task(
        TaskSpec(
            id="loop",
            prompt="go",
            script={"tasks": {"loop": loop}},
            tools=[],
            limits=Limits(max_iterations=2),
        )
    )
    outcome = turn("loop")
    assert outcome.exit_code == 0 and outcome.iterations == 2
    assert "max_iterations=2" in outcome.note
    assert "max_iterations=2" in store.turn_meta("loop", 0)["note"]
    last = store.last_message("loop")  # the last tool result is stored, for the next turn to answer
    assert last.role == "user" and "toolResult" in last.content[0]
    assert store.pending_count("loop") == 0


def test_cancel_during_tools_records_remaining_calls_as_cancelled(store, turn):
    script = {
        "tasks": {
            "stop": [
                {"tool_use": [{"name": "note", "input": {"text": str(i)}} for i in range(3)]},
                {"text": "never"},
            ]
        }
    }
    store.create_task(TaskSpec(id="stop", prompt="go", script=script, tools=[]))
    cancel = threading.Event()
    original_run = turn.extra_tools[0].run

    def run_then_cancel(ctx, args):
        cancel.set()  # SIGTERM arrives while the first tool runs
        return original_run(ctx, args)

    turn.extra_tools[0].run = run_then_cancel  # type: ignore[method-assign]
    outcome = turn("stop", cancel=cancel)
    assert outcome.exit_code == EXIT_CANCELLED
    assert store.lease_holder("stop") is None and store.get_task("stop").status == "idle"
    queued = [m.content["toolResult"] for m in store.inbox("stop")]
    assert [q["status"] for q in queued] == ["success", "error", "error"]
    assert [q["content"][0]["text"] for q in queued[1:]] == [CANCELLED_TEXT, CANCELLED_TEXT]
    turn.extra_tools[0].run = original_run  # type: ignore[method-assign]
    assert turn("stop").final_text == "never"  # the next turn picks the results up in the same turn
    assert len(store.load_history("stop")) == 1


def test_turn_summary_usage_and_telemetry(store, turn, redis_client):
    store.create_task(TaskSpec(id="sum", prompt="one two three", script={"default": "four five"}))
    outcome = turn("sum", summarize=True)
    assert outcome.exit_code == 0
    meta = store.turn_meta("sum", 0)
    assert meta["summary"].startswith("Scripted turn") and float(meta["ended_at"]) > 0
    record = store.get_task("sum")
    assert record.output_tokens > 2 and record.total_tokens == record.input_tokens + record.output_tokens
    assert record.tree_total_tokens == record.total_tokens  # a root's tree totals include itself
    counters = redis_client.hgetall(METRICS_COUNTERS)
    assert float(counters["turns_started_total|"]) >= 1
    assert float(counters["turns_finished_total|"]) >= 1
    assert any(k.startswith("model_tokens_total|kind=output") for k in counters)


def test_a_turn_records_the_time_from_its_oldest_message_being_queued_to_its_start(store, turn, redis_client):
    store.create_task(TaskSpec(id="late", prompt="go", script={"default": "done"}))
    queued = time.time() - 3.0  # a message that waited 3 s (the prompt came later)
    assert store.queue_message("late", InboxMessage(type="user", content="and this", timestamp=queued))
    assert turn("late").exit_code == 0
    hist = redis_client.hgetall(METRICS_HISTOGRAMS)
    assert float(hist["turn_start_seconds|start=local|count"]) == 1
    assert 3.0 <= float(hist["turn_start_seconds|start=local|sum"]) < 60
    assert "turn_start_seconds|start=local|le=2.5" not in hist and hist["turn_start_seconds|start=local|le=5"] == "1"


class EmptyOnceModel:
    """Answers its first call with an empty message (no content blocks), as llama-server's Qwen2.5-Coder 1.5B did
    when woken after a spawn (docs/models.md), then with text."""

    provider, name = "scripted", "empty-once"

    def __init__(self) -> None:
        self.calls = 0

    def converse(self, request, sink=None):
        from unicore.providers.base import ModelResponse

        self.calls += 1
        if self.calls == 1:
            return ModelResponse(content=[], stop_reason="end_turn")
        return ModelResponse(content=[{"text": "answered after all"}], stop_reason="end_turn")


def test_an_empty_answer_is_refused_and_asked_again_not_a_failed_turn(store, turn):
    store.create_task(TaskSpec(id="empty", prompt="say something", script={"default": "unused"}))
    turn.models["empty"] = RecordingModel(EmptyOnceModel())
    outcome = turn("empty")
    assert outcome.exit_code == 0 and outcome.final_text == "answered after all"
    assert store.get_task("empty").last_error == ""
    roles_and_texts = [(m.role, m.content[0].get("text", "")) for m in store.messages("empty")]
    assert roles_and_texts[0] == ("user", "say something")
    assert roles_and_texts[1][0] == "user" and "no content blocks" in roles_and_texts[1][1]  # the model was told why
    assert roles_and_texts[2] == ("assistant", "answered after all")
    assert len(turn.requests("empty")) == 2
