"""``unicore conv show NAME --follow`` (issue 33) prints the participating agents' answers as they are written, from
their tasks' live token streams, then the posts: a real redis-server, the streams written by the turn's own writer
(``TokenStreamSink``), the follower a ``unicore`` subprocess whose output the test waits on."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from unicore.store import conversations
from unicore.store.tasks import TaskStore
from unicore.store.token_stream import StreamSettings, TokenStreamSink, current_call

from tests.unicore_cli import REPO, OutputReader
from tests.waiting import wait_for

ROOM = "room"
ESC, RLO = "\x1b[2J", "\u202e"
FAST = StreamSettings(flush_chars=1, flush_seconds=0.0)


Followers = list[tuple[subprocess.Popen[str], OutputReader]]


@pytest.fixture
def follower() -> Iterator[Followers]:
    started: Followers = []
    yield started
    for proc, out in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        print(f"the follower printed: {out.text!r}")  # shown when the test fails


def start_follow(cli_env: dict[str, str], started: Followers,
                 *options: str) -> tuple[subprocess.Popen[str], OutputReader]:
    proc = subprocess.Popen([sys.executable, "-m", "unicore_client.local.main", "conv", "show", ROOM, "--follow",
                             "--timeout", "120", *options], env={**cli_env, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    assert proc.stdout is not None
    started.append((proc, OutputReader(proc.stdout)))
    return started[-1]


def open_room(store: TaskStore) -> None:
    """A room with the person, the writer, and the critic, who left."""
    conversations.create(store, ROOM, title="Room", created_by="alice")
    conversations.join(store, ROOM, "user", "alice")
    for task in ("writer", "critic"):
        conversations.join(store, ROOM, "task", task)
    conversations.leave(store, ROOM, "task", "critic")


def test_follow_prints_an_agents_live_answer_escaped_then_its_post_once(
        store: TaskStore, cli_env: dict[str, str], follower: Followers) -> None:
    open_room(store)
    # a call already under way when the follower starts: shown from its start
    writer = TokenStreamSink(store.redis, "writer", turn=0, call=0, seq=3, settings=FAST)
    writer.attempt_started()
    writer.text("Early ")
    wait_for(lambda: any(e.text == "Early " for e in current_call(store, "writer")[0]), what="the first delta")
    proc, out = start_follow(cli_env, follower)
    wait_for(lambda: "writer (live): Early " in out.text, what="the call in progress")

    with TokenStreamSink(store.redis, "critic", turn=0, call=0, seq=3, settings=FAST) as critic:
        critic.text("not shown: the critic left")
    writer.text(f"draft{ESC}{RLO} one\nsecond line")
    live = "writer (live): Early draft\\x1b[2J\\u202e one\nwriter (live): second line"
    wait_for(lambda: live in out.text, what="the live text")
    assert proc.poll() is None  # printed while the answer is written, before anything is posted
    writer.close()
    seq = conversations.post(store, ROOM, "answer:writer:0", kind="answer", sender_kind="task", sender="writer",
                             text="Early draft one")
    answered = f"#{seq} writer (agent) answered: Early draft one\n"
    wait_for(lambda: answered in out.text, what="the post")
    conversations.set_status(store, ROOM, "closed", "alice")
    assert proc.wait(timeout=60) == 0  # closed: the follower ends
    text = out.text
    assert f"{live}\n{answered}#{seq + 1} - note: " in text, text  # the live lines, the post, the closing note
    assert "\x1b" not in text and RLO not in text
    assert text.count("(live)") == 2 and "critic (live)" not in text and "not shown" not in text
    assert text.count("Early draft one") == 1  # the post once; the live lines are the only other copy


def test_no_tokens_follows_posts_only(store: TaskStore, cli_env: dict[str, str],
                                      follower: Followers) -> None:
    open_room(store)
    proc, out = start_follow(cli_env, follower, "--no-tokens")
    wait_for(lambda: "participants:" in out.text, what="the conversation")
    with TokenStreamSink(store.redis, "writer", turn=0, call=0, seq=3, settings=FAST) as writer:
        writer.text("live text")
    seq = conversations.post(store, ROOM, "answer:writer:0", kind="answer", sender_kind="task", sender="writer",
                             text="live text")
    wait_for(lambda: f"#{seq} writer (agent) answered: live text\n" in out.text, what="the post")
    conversations.set_status(store, ROOM, "closed", "alice")
    assert proc.wait(timeout=60) == 0
    assert "(live)" not in out.text
