"""Traces in local mode against a real Jaeger (issue 32): a 3-level tree is one trace whose span tree is the task
tree (spawn -> child turns -> report -> parent turn), across a turn SIGKILLed and retried; with no exporter
configured, a turn builds no span (the SDK is not even imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from unicore.store.keys import METRICS_HISTOGRAMS
from unicore.store.tasks import TaskStore, connect
from unicore_client.traces.jaeger import JaegerServer

from tests.jaeger_binary import jaeger_binary
from tests.trace_tree import (
    AGENT_ATTRIBUTES,
    CHAT_ATTRIBUTES,
    LEAF,
    MID,
    ROOT,
    TOOL_ATTRIBUTES,
    TraceTree,
    missing,
    three_level_script,
)
from tests.unicore_cli import unicore
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
SCRIPT = three_level_script({"text": "Leaf: 42."})


@pytest.fixture(scope="module")
def jaeger() -> Iterator[JaegerServer]:
    with JaegerServer(jaeger_binary()) as server:
        yield server


def _traced_env(cli_env: dict[str, str], jaeger: JaegerServer) -> dict[str, str]:
    return {**cli_env, "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"}


def test_a_three_level_tree_is_one_trace_shaped_like_the_tree_across_a_killed_turn(cli_env, redis_url, tmp_path,
                                                                                     jaeger):
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    env = {**_traced_env(cli_env, jaeger), "UNICORE_FAULTS": f"kill-once@{LEAF}:after model call"}
    run = unicore("run", "--model", f"scripted:{script}", "--name", ROOT, "Start.", env=env)
    assert run.returncode == 0, run.stderr
    store = TaskStore(connect(redis_url))
    trace_ids = {store.get_task(task).trace_id for task in (ROOT, MID, LEAF)}
    assert len(trace_ids) == 1 and "" not in trace_ids, trace_ids  # one trace, stored with every task
    (trace_id,) = trace_ids

    def complete() -> TraceTree | None:
        trace = jaeger.get_trace(trace_id)
        tree = TraceTree(trace) if trace else None
        if not tree or len(tree.turns(MID)) != 2 or len(tree.turns(LEAF)) != 2:
            return None
        return tree if any(tree.turns(MID)[1].id in turn.links for turn in tree.turns(ROOT)) else None

    tree = wait_for(complete, timeout=30, what="every turn's span in Jaeger")
    assert not tree.orphans(), tree.outline()
    assert not tree.foreign, tree.outline()
    (root_task,) = tree.roots()
    assert root_task.name == f"task {ROOT}", tree.outline()

    root_turns, mid_turns, leaf_turns = tree.turns(ROOT), tree.turns(MID), tree.turns(LEAF)
    # the root's turns hang under its task span; a child's under the spawn call of the turn that made it
    assert [tree.parent(t).id for t in root_turns] == [root_task.id] * len(root_turns), tree.outline()
    for turns, spawner in ((mid_turns, root_turns[0]), (leaf_turns, mid_turns[0])):
        for turn in turns:
            spawn = tree.parent(turn)
            assert spawn.name == "execute_tool spawn_task", tree.outline()
            assert tree.parent(spawn).id == spawner.id, tree.outline()
    # the killed attempt shows, failed, and its retry ran the same turn through
    lost, retry = leaf_turns
    assert lost.failed and lost.tags.get("error.type") == "TurnLost", lost.tags
    assert not retry.failed and retry.tags.get("unicore.turn.number") == 1, retry.tags
    assert lost.start + lost.duration <= retry.start + 1000  # the lost one ends where the retry begins
    # a parent's next turn links to the report that woke it
    assert retry.id in mid_turns[1].links, tree.outline()
    assert mid_turns[1].id in root_turns[-1].links, tree.outline()
    # the conventions' attributes on every agent, model and tool span
    for turn in root_turns + mid_turns + leaf_turns:
        assert not missing(turn, AGENT_ATTRIBUTES), (turn.name, turn.tags)
        assert turn.tags["gen_ai.conversation.id"] == ROOT
    chats = tree.prefixed("chat ")
    assert len(chats) >= 6
    for chat in chats:
        assert not missing(chat, CHAT_ATTRIBUTES), (chat.name, chat.tags)
        assert chat.tags["gen_ai.provider.name"] == "unicore.scripted"
    tools = tree.prefixed("execute_tool ")
    assert len(tools) == 2
    for tool in tools:
        assert not missing(tool, TOOL_ATTRIBUTES), tool.tags
        assert tool.tags["gen_ai.tool.name"] == "spawn_task"
    # no content unless opted in
    assert not any(key.startswith(("gen_ai.input", "gen_ai.output")) for span in tree.spans.values()
                   for key in span.tags)
    # the duration histograms' exemplars name spans of this trace (a dashboard panel leads to it)
    hist = store.redis.hgetall(METRICS_HISTOGRAMS)
    exemplars = {field: value for field, value in hist.items() if "|ex=" in field}
    for metric in ("turn_duration_seconds", "model_call_duration_seconds", "turn_start_seconds"):
        mine = [value.split()[1] for field, value in exemplars.items()
                if field.startswith(f"{metric}|") and value.startswith(trace_id)]
        assert mine and all(span_id in tree.spans for span_id in mine), (metric, exemplars)
    # the turn's own steps: its queue wait and drains (the retry finds the prompt drained by the lost attempt)
    for turn in (root_turns[0], mid_turns[0]):
        inside = {span.name for span in tree.within(turn)}
        assert {"queue_wait", "inbox_drain"} <= inside, (turn.name, inside)
    assert "inbox_drain" in {span.name for span in tree.within(retry)}


def test_message_content_goes_on_spans_only_when_opted_in(cli_env, redis_url, tmp_path, jaeger):
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"default": "The <b>answer</b>."}))
    env = {**_traced_env(cli_env, jaeger), "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    run = unicore("run", "--model", f"scripted:{script}", "--name", "content", "--no-summary", "Say it.",
                  env=env)
    assert run.returncode == 0, run.stderr
    trace_id = TaskStore(connect(redis_url)).get_task("content").trace_id

    def chat() -> dict[str, object] | None:
        trace = jaeger.get_trace(trace_id)
        chats = TraceTree(trace).prefixed("chat ") if trace else []
        return chats[0].tags if chats else None

    tags = wait_for(chat, timeout=30, what="the chat span")
    assert "Say it." in str(tags["gen_ai.input.messages"])
    assert "The <b>answer</b>." in str(tags["gen_ai.output.messages"])


NO_TRACING_PROBE = """
import json, sys
from unicore.api.schema import TaskSpec
from unicore.store.keys import METRICS_HISTOGRAMS
from unicore.store.tasks import TaskStore, connect
from unicore.traces import setup, spans
from unicore.turn.run import run_turn
store = TaskStore(connect(sys.argv[1]))
store.create_task(TaskSpec(id=sys.argv[2], prompt="hi", script={"default": "ok"}))
setup.start("probe")  # as unicore-turn does
outcome = run_turn(sys.argv[2], redis=store.redis)
print(json.dumps({"exit": outcome.exit_code, "active": spans.active(),
                  "sdk": any(m.startswith("opentelemetry.sdk") for m in sys.modules),
                  "trace": store.get_task(sys.argv[2]).trace_id != ""}))
"""


@pytest.mark.parametrize("configured", [False, True], ids=["nothing-configured", "console-exporter"])
def test_with_no_exporter_configured_a_turn_builds_no_span_and_imports_no_sdk(redis_url, configured):
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["REDIS_URL"] = redis_url
    if configured:  # the control: the same probe with an exporter does trace
        env["OTEL_TRACES_EXPORTER"] = "console"
    task = f"quiet-{configured}".lower()
    proc = subprocess.run([sys.executable, "-c", NO_TRACING_PROBE, redis_url, task], env=env, capture_output=True,
                          text=True, timeout=60, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"exit": 0, "active": configured, "sdk": configured, "trace": configured}


def test_a_question_to_a_person_is_a_human_wait_span_in_the_turn_that_resumes(cli_env, redis_url, tmp_path, jaeger):
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"tasks": {"asks": [
        {"tool_use": [{"name": "ask_user", "input": {"question": "Which colour?"}}]}, {"text": "Blue it is."}]}}))
    env = _traced_env(cli_env, jaeger)
    run = unicore("run", "--model", f"scripted:{script}", "--name", "asks", "--no-summary", "--ask-user",
                  "Pick a colour.", env=env)
    assert run.returncode == 0 and "asks asks (" in run.stdout, (run.stdout, run.stderr)
    send = unicore("send", "asks", "Blue", env=env)
    assert send.returncode == 0, send.stderr
    trace_id = TaskStore(connect(redis_url)).get_task("asks").trace_id

    def waited() -> TraceTree | None:
        trace = jaeger.get_trace(trace_id)
        tree = TraceTree(trace) if trace else None
        return tree if tree and tree.named("human_wait") and len(tree.turns("asks")) == 2 else None

    tree = wait_for(waited, timeout=30, what="the human_wait span")
    [wait] = tree.named("human_wait")
    assert wait.tags["unicore.wait.kind"] == "input" and wait.tags["unicore.wait.outcome"] == "answered"
    assert wait.tags["gen_ai.tool.name"] == "ask_user" and wait.tags["gen_ai.tool.call.id"]
    asked, resumed = tree.turns("asks")
    assert tree.parent(wait).id == resumed.id  # in the turn that took the answer
    assert wait.start >= asked.start and wait.duration > 0
