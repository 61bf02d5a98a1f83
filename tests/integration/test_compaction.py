"""Context compaction on the real Redis: a long scripted conversation runs past a small context window.

The 2,000-message conversation is built through real turns: a scripted model with a 2,000-token window calls the
``note`` tool 999 times in one turn (prompt + 999 x (call, result) + the final answer = 2,000 stored messages).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest
import redis
from unicore.api.schema import Limits, TaskSpec
from unicore.providers.base import AnswerSink, ModelRequest, ModelResponse
from unicore.providers.calling import estimate_input_tokens
from unicore.providers.scripted import ScriptedModel, load_script
from unicore.store import compactions as compaction_state
from unicore.store.compactions import Compaction, append_compaction, load_request_history, read_compactions
from unicore.store.keys import METRICS_COUNTERS, TaskKeys
from unicore.store.tasks import TaskStore
from unicore.turn.compaction import COMPACTION_PROMPT, HistoryView
from unicore.turn.context_window import ContextSettings
from unicore.turn.history import INTERRUPTED_TEXT
from unicore.turn.outcome import EXIT_FAILED, EXIT_OK
from unicore.turn.run import run_turn
from unicore.turn.transcript import compaction_mark
from unicore_client.local import main as cli

from tests.integration.conftest import NoteTool

WINDOW = 2000
LIMIT = int(WINDOW * 0.75)
CALLS = 999
SUMMARY_HEAD = "[Summary of the conversation before this point"


class SmallWindowModel(ScriptedModel):
    """The scripted model with a small context window, keeping every request it receives."""

    def __init__(self, script: dict[str, Any]) -> None:
        super().__init__(load_script(script))
        self.requests: list[ModelRequest] = []

    def converse(self, request: ModelRequest, sink: AnswerSink | None = None) -> ModelResponse:
        self.requests.append(request)
        return super().converse(request, sink)


def long_script(task: str, calls: int, window: int = WINDOW) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"tool_use": [{"name": "note", "input": {"text": f"step {i} of the long job"}}]} for i in range(calls)
    ]
    steps.append({"text": "All steps are done."})
    return {"context_window": window, "tasks": {task: steps}}


def run(client: redis.Redis, tmp_path: Any, task_id: str, model: SmallWindowModel, **kwargs: Any) -> Any:
    return run_turn(task_id, redis=client, model_factory=lambda record, _client: model,
                    toolset_factory=lambda record: [NoteTool()], workspace=tmp_path / "ws",
                    context=ContextSettings(), **kwargs)


def first_text(request: ModelRequest) -> str:
    return str(request.messages[0]["content"][0].get("text", ""))


def assert_no_split_pairs(request: ModelRequest) -> None:
    """Every result in the request follows its call in the same request, and every call has its result next."""
    uses: set[str] = set()
    for index, message in enumerate(request.messages):
        for block in message["content"]:
            if "toolUse" in block:
                uses.add(block["toolUse"]["toolUseId"])
            if "toolResult" in block:
                result = block["toolResult"]
                assert result["toolUseId"] in uses, f"result {result['toolUseId']} without its call"
                assert INTERRUPTED_TEXT not in json.dumps(result), "a call lost its result (synthetic repair)"
        if message["role"] == "assistant" and index + 1 < len(request.messages):
            called = {b["toolUse"]["toolUseId"] for b in message["content"] if "toolUse" in b}
            answered = {b["toolResult"]["toolUseId"] for b in request.messages[index + 1]["content"]
                        if "toolResult" in b}
            assert called <= answered


def test_a_2000_message_conversation_runs_past_a_small_window(store, redis_client, redis_url, tmp_path, monkeypatch,
                                                              capsys):
    task = "long"
    script = long_script(task, CALLS)
    store.create_task(TaskSpec(id=task, prompt="Run the long job, one note per step.", script=script,
                               limits=Limits(max_iterations=CALLS + 5)))
    model = SmallWindowModel(script)

    outcome = run(redis_client, tmp_path, task, model, summarize=True)

    assert outcome.exit_code == EXIT_OK, outcome.error
    assert outcome.final_text == "All steps are done."
    assert store.message_count(task) == 2000
    # every note ran once, in order: the scripted steps kept counting across compactions and no result was
    # dropped as a duplicate (tool-use ids stay unique over the whole history)
    results = [b["toolResult"] for m in store.messages(task) for b in m.content if "toolResult" in b]
    assert [r["content"][0]["text"] for r in results] == [f"noted: step {i} of the long job" for i in range(CALLS)]

    records = read_compactions(redis_client, task)
    assert len(records) >= 2
    assert [r.upto for r in records] == sorted({r.upto for r in records})  # append-only, each covers more
    stored = store.messages(task)
    for record in records:  # a cut never follows a tool call: its result is on the same side
        before = stored[record.upto - 1]
        assert before.role == "user" or not any("toolUse" in b for b in before.content)

    # every request the model received stays under the limit (so under the window) with no pair split
    assert len(model.requests) > CALLS
    for request in model.requests:
        assert estimate_input_tokens(request) <= LIMIT < WINDOW
        assert_no_split_pairs(request)
    # the model sees the summary: each record's summary led the turn requests made from it
    turn_requests = [r for r in model.requests if r.purpose == "turn"]
    seen = {first_text(r) for r in turn_requests if first_text(r).startswith(SUMMARY_HEAD)}
    for record in records:
        assert any(record.summary in text and f"messages 1-{record.upto:,}" in text for text in seen), record
    assert turn_requests[-1].earlier_answers == records[-1].answers > 0
    # compaction summaries are model calls with purpose "summary", without tool blocks
    summaries = [r for r in model.requests if r.purpose == "summary" and COMPACTION_PROMPT in json.dumps(r.messages)]
    assert len(summaries) >= len(records)
    assert not any("toolUse" in b or "toolResult" in b for r in summaries for m in r.messages for b in m["content"])
    assert float(redis_client.hget(METRICS_COUNTERS, "compactions_total|") or 0) == len(records)

    # the transcript still shows all 2,000 messages, with a mark where each compaction starts
    monkeypatch.setenv("REDIS_URL", redis_url)
    capsys.readouterr()
    assert cli.main(["show", task, "--compactions"]) == 0
    out = capsys.readouterr().out
    assert out.count("[tool call note ") == CALLS and out.count("[tool result ") == CALLS
    assert out.count("Assistant: All steps are done.") == 1
    for record in records:
        assert out.count(compaction_mark(record.upto)) == 1
        assert f"(compaction summary: {record.summary})" in out
    lines = out.splitlines()
    first_mark = lines.index(compaction_mark(records[0].upto))
    following = next(line for line in lines[first_mark + 1:] if not line.startswith("(compaction summary"))
    assert following.startswith(("User:", "Assistant:"))


def seed(store: TaskStore, task_id: str, count: int) -> Any:
    """A task with ``count`` stored messages (alternating user/assistant text) through the store's append path."""
    store.create_task(TaskSpec(id=task_id, prompt="message 0"))
    lease = store.acquire_lease(task_id)
    store.drain(lease, first_drain=True)
    for i in range(1, count):
        store.append_message(lease, "assistant" if i % 2 else "user", [{"text": f"message {i}"}])
    return lease


def test_the_load_after_compaction_reads_only_from_the_newest_record(store, redis_client, monkeypatch):
    lease = seed(store, "seeded", 500)
    assert append_compaction(redis_client, lease, Compaction(upto=100, summary="first hundred", answers=50))
    assert append_compaction(redis_client, lease, Compaction(upto=480, summary="up to 480", answers=240))
    decoded: list[str] = []
    real = compaction_state.load_message
    monkeypatch.setattr(compaction_state, "load_message", lambda raw: decoded.append(raw) or real(raw))

    loaded = load_request_history(redis_client, "seeded")

    assert loaded.total == 500 and loaded.start == 480
    assert loaded.compaction is not None and loaded.compaction.summary == "up to 480"
    assert len(decoded) == 20  # only the messages after the newest record were read and decoded
    assert [m.seq for m in loaded.messages] == list(range(480, 500))
    assert loaded.turn is not None and [m.seq for m in loaded.turn.messages] == list(range(480, 500))
    shaped = HistoryView(loaded.compaction, loaded.messages).request_messages()
    assert "up to 480" in shaped[0]["content"][0]["text"]
    assert [m["role"] for m in shaped] == ["user", "assistant"] * 10  # alternating, summary merged into user


def test_records_only_grow_and_a_damaged_newest_record_is_skipped(store, redis_client):
    lease = seed(store, "grow", 50)
    assert append_compaction(redis_client, lease, Compaction(upto=20, summary="to 20"))
    assert not append_compaction(redis_client, lease, Compaction(upto=20, summary="again"))  # a retry: no duplicate
    assert not append_compaction(redis_client, lease, Compaction(upto=10, summary="older"))
    with pytest.raises(Exception, match="outside the stored messages"):
        append_compaction(redis_client, lease, Compaction(upto=50, summary="past the end"))
    redis_client.rpush(TaskKeys("grow").compactions, "{not json")
    loaded = load_request_history(redis_client, "grow")
    assert loaded.compaction is not None and loaded.compaction.summary == "to 20" and loaded.start == 20
    assert [r.summary for r in read_compactions(redis_client, "grow")] == ["to 20"]
    store.release_lease(lease)
    stale = lease
    with pytest.raises(Exception, match="lease"):
        append_compaction(redis_client, stale, Compaction(upto=30, summary="zombie"))


def test_a_message_larger_than_the_window_fails_the_turn_clearly(store, redis_client, tmp_path):
    script = {"context_window": 1000, "tasks": {"big": [{"text": "never"}]}}
    store.create_task(TaskSpec(id="big", prompt="x " * 4000, script=script))
    model = SmallWindowModel(script)

    outcome = run(redis_client, tmp_path, "big", model)

    assert outcome.exit_code == EXIT_FAILED
    assert "does not fit the model's context window of 1,000 tokens" in outcome.error
    assert "\n" not in outcome.error
    assert not [r for r in model.requests if r.purpose == "turn"]  # never sent past the window
    assert store.get_task("big").last_error.startswith("ContextTooLarge")
    assert read_compactions(redis_client, "big") == []


def test_context_settings_pick_the_window_per_model():
    settings = ContextSettings.from_env({"UNICORE_CONTEXT_WINDOWS": '{"openai:qwen*": 4096, "claude-*": 150000}',
                                         "UNICORE_CONTEXT_WINDOW_TOKENS": "9000", "UNICORE_COMPACT_AT": "0.5"})
    assert settings.limit_for("openai:qwen2.5-coder-0.5b") == (4096, 2048)
    assert settings.window_for("bedrock:claude-sonnet-4") == 150_000
    assert settings.window_for("scripted", 2000) == 2000  # the script's own window beats the general variable
    assert settings.window_for("openai:other") == 9000
    defaults = ContextSettings()
    assert defaults.window_for("bedrock:claude-sonnet-4") == 200_000 and defaults.compact_at == 0.75
    assert defaults.window_for("openai:unknown-model") == 32_768
    with pytest.raises(Exception, match="UNICORE_CONTEXT_WINDOWS"):
        ContextSettings.from_env({"UNICORE_CONTEXT_WINDOWS": "[4096]"})
    with pytest.raises(Exception, match="UNICORE_COMPACT_AT"):
        ContextSettings.from_env({"UNICORE_COMPACT_AT": "1.5"})



def test_a_crash_between_writing_the_summary_and_using_it_loses_and_repeats_nothing(store, redis_client, redis_url,
                                                                                     tmp_path):
    calls = 40
    steps: list[dict[str, Any]] = [{"tool_use": [{"name": "list_files", "input": {}}]} for _ in range(calls)]
    script = {"context_window": 1000, "tasks": {"crash": [*steps, {"text": "Listed everything."}]}}
    store.create_task(TaskSpec(id="crash", prompt="List the files, again and again.", script=script,
                               tools=["list_files"], limits=Limits(max_iterations=calls + 5)))
    env = {**os.environ, "REDIS_URL": redis_url, "UNICORE_FAULTS": "kill:after compaction",
           "UNICORE_POD_NAME": "crashpod", "UNICORE_HOME": str(tmp_path / "home"),
           "UNICORE_WORKSPACE": str(tmp_path / "ws"), "UNICORE_SUMMARIZE_TURNS": "0"}
    killed = subprocess.run([sys.executable, "-m", "unicore.turn.entry", "crash"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # died right after storing its first record
    keys = TaskKeys("crash")
    written = redis_client.lrange(keys.compactions, 0, -1)
    assert len(written) == 1
    first = Compaction.parse(written[0])
    assert first is not None
    before_crash = redis_client.lrange(keys.messages, 0, -1)
    assert first.upto < len(before_crash)
    assert store.break_lease("crash", "crashpod:", exact=False)  # what the operator does for a dead pod

    model = SmallWindowModel(script)
    outcome = run_turn("crash", redis=redis_client, model_factory=lambda record, _client: model,
                       workspace=tmp_path / "ws", context=ContextSettings(), summarize=False)

    assert outcome.exit_code == EXIT_OK, outcome.error
    assert outcome.final_text == "Listed everything."
    # the record written before the crash is the one the next request started from (the newest valid one)
    resumed = [r for r in model.requests if r.purpose == "turn"]
    assert first_text(resumed[0]).startswith(SUMMARY_HEAD) and first.summary in first_text(resumed[0])
    assert resumed[0].earlier_answers == first.answers
    # append-only: the crashed turn's messages and record are untouched; later records cover more
    after = redis_client.lrange(keys.messages, 0, -1)
    assert after[: len(before_crash)] == before_crash
    assert redis_client.lindex(keys.compactions, 0) == written[0]
    uptos = [r.upto for r in read_compactions(redis_client, "crash")]
    assert uptos == sorted(set(uptos)) and uptos[0] == first.upto
    # nothing lost or repeated: one result per call, every call once, seqs contiguous
    messages = store.messages("crash")
    assert [m.seq for m in messages] == list(range(len(messages)))
    uses = [b["toolUse"]["toolUseId"] for m in messages for b in m.content if "toolUse" in b]
    results = [b["toolResult"] for m in messages for b in m.content if "toolResult" in b]
    assert len(uses) == len(set(uses)) == calls
    assert sorted(r["toolUseId"] for r in results) == sorted(uses)
    assert all(r.get("status", "success") == "success" for r in results)
    assert sum(1 for m in messages if m.role == "assistant") == calls + 1
