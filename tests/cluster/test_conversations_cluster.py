"""Shared conversations with the operator (issue 33), on the real local control plane with the pod runner: AgentTasks
that name a conversation in ``spec.conversations`` take part from their first turn; turn pods cannot write
conversations, so the operator posts their answers; an operator SIGKILLed right after posting an answer, before
delivering it, loses and repeats nothing once it starts again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.api.schema import conversation_message_id
from unicore.store import conversations
from unicore.store.tasks import TaskStore

from tests.cluster.operator_harness import StartOperator, Tasks, operator_factory
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

SCRIPT = {"default": "Nothing more.", "tasks": {
    "critic": [{"text": "Critic, ready."}, {"text": "Noted."}],
    "writer": [{"text": "Writer, ready. @critic, hello."}],
}}


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    # each namespace's own Redis user: its turn pods cannot write conversations (the operator posts for them)
    env = {"UNICORE_DEFAULT_GPUS": "0", "UNICORE_REDIS_IDENTITIES": "true",
           "UNICORE_REDIS_IDENTITY_RESYNC_SECONDS": "1"}
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env) as start:
        yield start


def test_answers_are_posted_by_the_operator_once_across_its_sigkill_between_post_and_delivery(
        start_operator: StartOperator, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str) -> None:
    store = TaskStore(redis_client)
    room = f"{k8s_namespace}/room"
    assert conversations.create(store, room, title="Room", created_by="tester")
    first = start_operator()
    tasks.create("critic", {"prompt": "You review.", "model": "scripted", "script": SCRIPT,
                            "conversations": ["room"], "limits": {"summarizeTurns": False}})
    wait_for(lambda: any(p.sender.endswith("/critic") and p.kind == "answer"
                         for p in conversations.posts(store, room)) or None, timeout=120,
             what="the critic's first answer posted by the operator")
    # The next operator dies right after posting the writer's answer, before delivering it to the critic.
    first.stop()
    dying = start_operator(UNICORE_FAULTS="kill:after conversation post")
    tasks.create("writer", {"prompt": "You write.", "model": "scripted", "script": SCRIPT,
                            "conversations": ["room"], "limits": {"summarizeTurns": False}})
    assert dying.proc is not None
    wait_for(lambda: dying.proc.poll() is not None or None, timeout=120,  # type: ignore[union-attr]
             what="the operator killed at 'after conversation post'")
    writer_answers = [p for p in conversations.posts(store, room) if p.sender.endswith("/writer")
                      and p.kind == "answer"]
    assert len(writer_answers) == 1  # posted, not delivered: the critic has nothing yet
    critic = f"{k8s_namespace}/critic"
    message_id = conversation_message_id(room, writer_answers[0].id, critic)
    assert message_id not in {m.id for m in store.inbox(critic)}
    start_operator()  # starts again: its reconcile delivers what was posted
    wait_for(lambda: tasks.get("critic") and (tasks.get("critic") or {}).get("status", {}).get("turns") == 2 or None,
             timeout=120, what="the critic's turn on the writer's hand-off")
    posts = conversations.posts(store, room)
    assert [p.text for p in posts if p.sender.endswith("/writer") and p.kind == "answer"] == [
        "Writer, ready. @critic, hello."]
    assert [p.text for p in posts if p.sender.endswith("/critic") and p.kind == "answer"] == [
        "Critic, ready.", "Noted."]
    delivered = [m for m in store.messages(critic) if "[conversation" in str(m.content)]
    assert len(delivered) == 1, delivered  # once, though two operators reached it
