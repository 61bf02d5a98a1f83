"""A person's message with a lone surrogate (JSON allows ``"\\ud800"``) through the web UI, without a browser (issue 24,
item 1): queued as valid text (U+FFFD) and answered. Was: the queue failed (the message could not be encoded) and a
message stored that way bricked its task (tests/integration/test_valid_text.py)."""

from __future__ import annotations

import json

import pytest
from unicore.api.schema import TaskSpec
from unicore.store.tasks import TaskStore, connect

from tests.ui.conftest import UI
from tests.ui.test_ui_http import cookie, csrf, request
from tests.waiting import wait_for

pytestmark = pytest.mark.ui


def test_a_message_with_a_lone_surrogate_is_queued_valid_and_answered(ui: UI, redis_url: str) -> None:
    store = TaskStore(connect(redis_url))
    store.create_task(TaskSpec(id="echo", model="scripted", script={"tasks": {"echo": [{"echo": True}]}}))
    jar = cookie(ui)
    headers = {"Cookie": jar, "X-CSRF-Token": csrf(ui, jar)}
    body = {"text": "caf\ud800 au lait", "client_id": "c0ffee00-5e11"}  # json.dumps writes it as "\ud800"
    reply = request(ui, "POST", "/api/tasks/echo/messages", headers=headers, body=body)
    assert (reply.status, json.loads(reply.read())) == (200, {"queued": True})

    def answer() -> str | None:
        last = store.last_message("echo")
        return str(last.content[0]["text"]) if last is not None and last.role == "assistant" else None

    assert wait_for(answer, timeout=60, what="the echo of the message") == "caf\ufffd au lait"
    user = [m for m in store.messages("echo") if m.role == "user"]
    assert [m.content for m in user] == [[{"text": "caf\ufffd au lait"}]]
