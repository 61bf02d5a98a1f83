"""``kubectl agenttask logs --follow`` (``LiveFollower``) against the task API's real routes over a real Redis, with a
turn running in process (issue 14): the transcript, live answers while the turn runs, each answer's text once, in
history order, and the end when the task settles; without the right to the stream it steps aside."""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.store.tasks import TaskStore
from unicore_client.kubectl_plugin.errors import Forbidden, PluginError
from unicore_client.kubectl_plugin.live_follow import LiveFollower
from unicore_client.kubectl_plugin.logs_view import TranscriptPrinter
from unicore_client.kubectl_plugin.proxy import task_path
from unicore_operator.task_api import answer
from unicore_operator.task_api.lookup import static_lookup
from unicore_operator.task_api.service import TaskApi

from tests.integration.conftest import TurnRunner
from tests.integration.test_live_stream import _gated_turn
from tests.waiting import wait_for

NS, NAME = "team-a", "chat"
TASK_ID = f"{NS}/{NAME}"


class RoutesClient:
    """The plugin's TaskApiClient, answered by the task API's routes in process (no HTTP, no API server)."""

    def __init__(self, api: TaskApi, refuse: str = "") -> None:
        self.api, self.refuse = api, refuse
        self.calls: list[str] = []

    def get(self, path: str, query: Sequence[tuple[str, Any]] = ()) -> dict[str, Any]:
        self.calls.append(path.rsplit("/", 1)[-1])
        if self.refuse and path.endswith("/" + self.refuse):
            raise Forbidden(f"forbidden: you cannot get agenttasks/{self.refuse}")
        params = [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in query]
        response = answer(self.api, "GET", path, urlencode(params), sender="user:alice")
        if response.status != 200:
            raise PluginError(str(response.body))
        return response.body


class Output(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            return super().write(text)

    def text(self) -> str:
        with self.lock:
            return self.getvalue()


@pytest.fixture
def api(redis_url: str) -> TaskApi:
    store = TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))
    return TaskApi(store, static_lookup(lambda: [{"metadata": {"namespace": NS, "name": NAME}}]))


def follower(client: RoutesClient, out: Output, settled: list[bool]) -> LiveFollower:
    return LiveFollower(client, transcript_path=task_path(NS, NAME, "transcript"),  # type: ignore[arg-type]
                        stream_path=task_path(NS, NAME, "stream"), printer=TranscriptPrinter(tools=True), out=out,
                        tools=True, page_size=2, finished=lambda state: settled.append(True) or True, wait_seconds=2)


def test_logs_follow_prints_live_answers_once_in_history_order(api: TaskApi, turn: TurnRunner) -> None:
    store = api.store
    gate, thread, outcomes = _gated_turn(store, turn, TASK_ID)
    client, out, settled = RoutesClient(api), Output(), []
    result: list[bool] = []
    reader = threading.Thread(target=lambda: result.append(follower(client, out, settled).run()), daemon=True)
    reader.start()
    wait_for(lambda: "stream" in client.calls, timeout=10, what="the follower's first read")
    thread.start()
    try:
        wait_for(lambda: "Assistant: alpha beta gamma" in out.text(), timeout=20, what="the live answer")
        assert thread.is_alive() and reader.is_alive()  # printed while the turn runs
    finally:
        gate.set()
        thread.join(30)
    reader.join(30)
    assert result == [True] and settled and outcomes[0].exit_code == 0
    text = out.text()
    assert text.count("alpha beta gamma") == 1 and text.count("final words here") == 1, text
    order = [text.index(s) for s in ("=== turn 1", "User: stream please", "Assistant: alpha beta gamma",
                                     "Assistant used tool note", "Tool result", "Assistant: final words here")]
    assert order == sorted(order), text


def test_a_task_that_already_answered_prints_its_transcript_and_ends(api: TaskApi, turn: TurnRunner) -> None:
    api.store.create_task(TaskSpec(id=TASK_ID, prompt="hi", script={"default": "stored answer"}))
    assert turn(TASK_ID).exit_code == 0
    out, settled = Output(), []
    assert follower(RoutesClient(api), out, settled).run() is True
    assert out.text().count("Assistant: stored answer") == 1 and "User: hi" in out.text()


def test_without_the_right_to_the_stream_the_follower_steps_aside(api: TaskApi) -> None:
    api.store.create_task(TaskSpec(id=TASK_ID, prompt="hi"))
    out, settled = Output(), []
    client = RoutesClient(api, refuse="stream")
    assert follower(client, out, settled).run() is False
    assert out.text() == "" and client.calls == ["stream"]  # the caller polls the transcript instead
