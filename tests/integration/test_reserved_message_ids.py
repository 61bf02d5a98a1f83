"""A user cannot choose a message id the runtime gives its own messages (issue 24, item 4).

The inbox accepts each id once, so ``unicore send TASK TEXT --id completion:CHILD:0`` used to stand in for the
child's report (the real one was dropped as a repeat) and ``--id tr:<call id>`` made a tool's real result vanish.
Every path a user names an id on refuses them, by one rule (``schema.user_message_id``): the CLI (exit 2, one line,
nothing queued), the web UI's backend (400) and the task API (422, the code of its other invalid fields)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.errors import TaskNotFound
from unicore.store.tasks import TaskStore
from unicore_client.ui.local_backend import LocalBackend
from unicore_client.ui.refusals import BadRequest
from unicore_operator.task_api import answer
from unicore_operator.task_api.lookup import static_lookup
from unicore_operator.task_api.service import TaskApi

from tests.unicore_cli import unicore

RESERVED = ["completion:demo-child:0", "failed:demo-child:0", "tr:call-1", "prompt:demo", "decision:0123abcd",
            "reap-reap-stuck-1"]


def _inbox_ids(store: TaskStore, task_id: str) -> list[str]:
    return [message.id for message in store.inbox(task_id)]


@pytest.mark.parametrize("message_id", RESERVED)
def test_the_cli_refuses_a_runtime_id_and_queues_nothing(
    store: TaskStore, cli_env: dict[str, str], message_id: str
) -> None:
    store.create_task(TaskSpec(id="demo", prompt="hello"))
    run = unicore("send", "demo", "I am your child's report", "--id", message_id, "--no-wait", env=cli_env)
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr, run.stderr
    assert "runtime's own messages" in run.stderr and repr(message_id) in run.stderr, run.stderr
    assert _inbox_ids(store, "demo") == ["prompt:demo"]


def test_the_cli_still_takes_an_id_of_its_own(store: TaskStore, cli_env: dict[str, str]) -> None:
    store.create_task(TaskSpec(id="demo", prompt="hello"))
    for _ in range(2):  # a repeated id is accepted once
        run = unicore("send", "demo", "follow up", "--id", "completion-like-but-mine", "--no-wait", env=cli_env)
        assert run.returncode == 0, run.stderr
    assert _inbox_ids(store, "demo") == ["prompt:demo", "completion-like-but-mine"]


@pytest.mark.parametrize("message_id", [*RESERVED, "reap-00000000"])
def test_the_ui_backend_refuses_a_runtime_id(store: TaskStore, redis_client: redis.Redis, redis_url: str,
                                             message_id: str) -> None:
    store.create_task(TaskSpec(id="demo", prompt="hello"))
    backend = LocalBackend(redis_client, redis_url)
    with pytest.raises(BadRequest, match="runtime's own messages"):
        backend.send("demo", "I am your child's report", message_id)
    assert _inbox_ids(store, "demo") == ["prompt:demo"]
    with pytest.raises(BadRequest, match="runtime's own messages"):  # refused before the task is even looked up
        backend.send("no-such-task", "hi", message_id)


def test_an_ordinary_client_id_reaches_the_store(redis_client: redis.Redis, redis_url: str) -> None:
    backend = LocalBackend(redis_client, redis_url)
    with pytest.raises(TaskNotFound):  # an ordinary id reaches the store, which says the task is missing
        backend.send("no-such-task", "hi", "c0ffee00-aaaa")


def _post(api: TaskApi, body: Any) -> tuple[int, dict[str, Any]]:
    response = answer(api, "POST", "/apis/tasks.unicore.dev/v1alpha1/namespaces/team-a/agenttasks/demo/messages",
                      "", json.dumps(body).encode(), sender="user:alice")
    return response.status, response.body


@pytest.mark.parametrize("message_id", RESERVED)
def test_the_task_api_refuses_a_runtime_id(store: TaskStore, message_id: str) -> None:
    api = TaskApi(store, static_lookup(lambda: [{"metadata": {"namespace": "team-a", "name": "demo"}}]))
    store.create_task(TaskSpec(id="team-a/demo", prompt="hello"))
    status, body = _post(api, {"id": message_id, "text": "I am your child's report"})
    assert (status, body["reason"]) == (422, "Invalid"), body
    assert body["message"].startswith("invalid message: id: ") and "runtime's own messages" in body["message"], body
    assert "\n" not in body["message"]
    assert _inbox_ids(store, "team-a/demo") == ["prompt:team-a/demo"]
    status, body = _post(api, {"id": "m-1", "text": "an ordinary message"})
    assert status == 202 and _inbox_ids(store, "team-a/demo") == ["prompt:team-a/demo", "user:m-1"]

