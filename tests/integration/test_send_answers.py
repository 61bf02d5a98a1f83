"""Parallel `unicore send` to one task: each prints the answer to ITS message, not the task's latest answer.

The interleaving is forced without timing: a child of the task holds a live lease (as if it were still working),
so the first send's supervisor cannot settle after its message is answered; the second message is sent and
answered meanwhile, and only then is the child released. Before the fix the first send printed the second
message's answer (``last_response``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from unicore.api.schema import TaskSpec
from unicore.store.tasks import TaskStore, connect
from unicore.turn.history import answer_to

from tests.waiting import wait_for

UNICORE = str(Path(sys.executable).with_name("unicore"))


@pytest.fixture
def cli_env(redis_url: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "REDIS_URL": redis_url, "UNICORE_HOME": str(tmp_path / "home")}


def unicore(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``unicore ARGS``, run to its end with its output captured."""
    return subprocess.run([UNICORE, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def send(task: str, text: str, message_id: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [UNICORE, "send", "--quiet", "--id", message_id, task, text],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def answered(store: TaskStore, task: str, message_id: str) -> str | None:
    return answer_to(store.load_history(task), message_id)


def test_interleaved_sends_each_print_the_answer_to_their_own_message(
    cli_env: dict[str, str], redis_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "echo.json"
    script.write_text(json.dumps({"tasks": {"chat": [{"echo": True}] * 5}}))
    run = unicore("run", "--quiet", "--no-summary", "--script", str(script), "--name", "chat", "hello", env=cli_env)
    assert run.returncode == 0 and run.stdout == "hello\n", run.stderr

    store = TaskStore(connect(redis_url))
    store.create_task(TaskSpec(id="chat-busy", parent="chat"))  # a child with nothing queued ...
    child_lease = store.acquire_lease("chat-busy", holder="test:1", ttl_ms=300_000)  # ... that looks busy
    first = second = None
    try:
        first = send("chat", "first question", "m-first", cli_env)
        wait_for(lambda: answered(store, "chat", "m-first"), timeout=60, what="the answer to the first message")
        second = send("chat", "second question", "m-second", cli_env)
        wait_for(lambda: answered(store, "chat", "m-second"), timeout=60, what="the answer to the second message")
        assert first.poll() is None  # the first send was still waiting while the second was answered
    finally:
        store.release_lease(child_lease)
        outputs = [proc.communicate(timeout=120) for proc in (first, second) if proc is not None]
    assert first is not None and second is not None
    assert (first.returncode, second.returncode) == (0, 0), outputs
    assert outputs[0][0] == "first question\n"  # not "second question", the task's latest answer
    assert outputs[1][0] == "second question\n"
    assert store.get_task("chat").last_response == "second question"
    turns = store.load_history("chat")
    assert len(turns) == 3  # each message had its own turn
    assert [m.inbox_ids for m in turns[1].messages] == [["m-first"], []]

    # a repeated id is accepted once and still prints that message's answer
    repeat = unicore("send", "--quiet", "--id", "m-first", "chat", "first question, again", env=cli_env)
    assert repeat.returncode == 0 and repeat.stdout == "first question\n", repeat.stderr
    assert len(store.load_history("chat")) == 3
