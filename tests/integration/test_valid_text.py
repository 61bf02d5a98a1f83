"""Text that is not valid Unicode never bricks a task (issue 24, item 1), on a real redis-server.

A model answer ``"bad \\ud800 once"`` failed its turn (UnicodeEncodeError) and was stored anyway, as a ``\\ud800``
escape that Redis' cjson refuses: from then on every turn failed in the drain script and the user's messages piled
up. Now every text is made valid at the store's edge (``unicore.store.codec``: a lone surrogate becomes U+FFFD),
whoever sent it: a model (through the OpenAI-compatible provider and a real local HTTP server, tests/sse_server.py),
a tool (``list_files`` over a file name that is not UTF-8) and the task's own fields; a person's message through the
web UI is in tests/ui/test_ui_valid_text.py (``unicore send`` refuses arguments that are not UTF-8, exit 2)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from unicore.api.schema import Approval, TaskSpec
from unicore.providers import openai_compat
from unicore.providers.openai_compat import OpenAISettings, build_openai_model
from unicore.providers.retry import RetryPolicy
from unicore.store import approvals
from unicore.store.keys import TaskKeys
from unicore.store.tasks import TaskStore, connect
from unicore.store.token_stream import read_after
from unicore.turn.outcome import EXIT_OK, TurnOutcome
from unicore.turn.run import run_turn

from tests.integration.conftest import TurnRunner
from tests.sse_server import SSEServer, serve, stream, text_chunks

BAD = "bad \ud800 once"
SHOWN = "bad \ufffd once"


@pytest.fixture
def server() -> Iterator[SSEServer]:
    yield from serve()


@pytest.fixture(autouse=True)
def fresh_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_compat, "SERVED_NAMES", {})
    monkeypatch.setattr(openai_compat, "NOT_STREAMING", set())


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    """A client as every UniCore process makes it (``state.store.connect``)."""
    made = connect(redis_url)
    yield made
    made.close()


def openai_turn(client: redis.Redis, server: SSEServer, workspace: Path, task: str) -> TurnOutcome:
    settings = OpenAISettings(base_url=server.base_url, timeout=10, retry=RetryPolicy(max_attempts=2))
    return run_turn(task, redis=client, workspace=workspace, summarize=False,
                    model_factory=lambda record, c: build_openai_model("qwen", settings=settings, redis_client=c))


def texts_sent(server: SSEServer, post: int) -> list[str]:
    return [m["content"] for m in server.posts()[post]["body"]["messages"] if isinstance(m["content"], str)]


def test_a_model_answer_with_a_lone_surrogate_is_stored_valid_and_the_task_goes_on(
    client: redis.Redis, server: SSEServer, tmp_path: Path
) -> None:
    store = TaskStore(client)
    store.create_task(TaskSpec(id="t", prompt="hi"))
    server.answers.append(stream(text_chunks(BAD)))
    first = openai_turn(client, server, tmp_path, "t")
    assert (first.exit_code, first.final_text, first.error) == (EXIT_OK, SHOWN, "")
    stored = store.last_message("t")
    assert stored is not None and stored.content == [{"text": SHOWN}]
    assert store.get_task("t").last_response == SHOWN
    assert "".join(e.text for e in read_after(store, "t", "0") if e.kind == "text") == SHOWN  # the live view too

    store.queue_text("t", "and now?")
    server.answers.append(stream(text_chunks("fine")))
    second = openai_turn(client, server, tmp_path, "t")
    assert (second.exit_code, second.final_text, second.error) == (EXIT_OK, "fine", "")
    assert texts_sent(server, 1)[-2:] == [SHOWN, "and now?"]  # the user's next message was answered
    assert client.llen(TaskKeys("t").inbox) == 0


def test_a_task_stored_before_the_fix_runs_again(
    client: redis.Redis, server: SSEServer, tmp_path: Path
) -> None:
    """An answer stored as a ``\\ud800`` escape (before text was made valid): the drain script no longer fails on
    it, the history load leaves it out (quarantined), and the user's message is answered."""
    store = TaskStore(client)
    store.create_task(TaskSpec(id="old", prompt="hi"))
    server.answers.append(stream(text_chunks("good")))
    assert openai_turn(client, server, tmp_path, "old").exit_code == EXIT_OK
    key = TaskKeys("old").messages
    good = str(client.lindex(key, -1))
    client.lset(key, -1, good.replace('"good"', '"bad \\ud800 once"'))  # as the code before the fix stored it

    store.queue_text("old", "still there?")
    server.answers.append(stream(text_chunks("yes")))
    again = openai_turn(client, server, tmp_path, "old")
    assert (again.exit_code, again.final_text, again.error) == (EXIT_OK, "yes", "")
    sent = texts_sent(server, 1)
    assert sent[-1] == "still there?" and sent[-2].startswith("[quarantined message ")


def test_a_tool_result_with_a_lone_surrogate_is_queued_valid_and_the_turn_goes_on(
    store: TaskStore, turn: TurnRunner, tmp_path: Path
) -> None:
    """``list_files`` over a file whose name is not UTF-8 (Python names it with a lone surrogate)."""
    workspace = tmp_path / "lister"
    workspace.mkdir()
    os.close(os.open(bytes(workspace) + b"/bad\xffname.txt", os.O_CREAT | os.O_WRONLY, 0o600))
    script = {"tasks": {"lister": [{"tool_use": [{"name": "list_files", "input": {}}]}, {"echo_results": True}]}}
    store.create_task(TaskSpec(id="lister", prompt="list", script=script))
    outcome = turn("lister")
    assert outcome.exit_code == EXIT_OK and outcome.tool_calls == 1, outcome.error
    assert "bad\ufffdname.txt" in outcome.final_text
    (result,) = [b["toolResult"] for m in store.messages("lister") for b in m.content if "toolResult" in b]
    assert "bad\ufffdname.txt" in result["content"][0]["text"]


def test_an_approved_tool_call_whose_result_has_a_lone_surrogate_is_queued_valid(
    store: TaskStore, turn: TurnRunner, tmp_path: Path
) -> None:
    """The result of a call that waited for a person goes its own way into the inbox (``approvals_turn``)."""
    workspace = tmp_path / "gate"
    workspace.mkdir()
    os.close(os.open(bytes(workspace) + b"/bad\xffname.txt", os.O_CREAT | os.O_WRONLY, 0o600))
    script = {"tasks": {"gate": [{"tool_use": [{"name": "list_files", "input": {}}]}, {"echo_results": True}]}}
    store.create_task(TaskSpec(id="gate", prompt="list", script=script, approval=Approval(tools=["list_files"])))
    assert "waiting for approval" in turn("gate").note
    [call] = approvals.pending_calls(store.redis, "gate")
    approvals.decide(store.redis, "gate", call.call_id, True, by="alice")
    done = turn("gate")
    assert done.exit_code == EXIT_OK and done.error == "", done.error
    assert "bad\ufffdname.txt" in done.final_text


def test_task_fields_and_the_prompt_are_stored_valid(client: redis.Redis) -> None:
    store = TaskStore(client)
    assert store.create_task(TaskSpec(id="fields", prompt=BAD, system_prompt=f"be {BAD}",
                                      script={"default": BAD}))
    record = store.get_task("fields")
    assert (record.system_prompt, record.script) == (f"be {SHOWN}", {"default": SHOWN})
    assert [m.content for m in store.inbox("fields")] == [SHOWN]


def test_a_reply_that_is_not_utf8_is_read_with_replacement_characters(client: redis.Redis, redis_url: str) -> None:
    raw = redis.Redis.from_url(redis_url)  # bytes in, as another writer may have stored them
    raw.hset(TaskKeys("rawtask").task, mapping={"id": "rawtask", "name": "rawtask", "root": "rawtask",
                                                 "last_response": b"caf\xe9"})
    raw.close()
    assert TaskStore(client).get_task("rawtask").last_response == "caf\ufffd"
