"""One turn numbering for users (issue 11): turn N runs as Job ``<task>-tN``, and the AgentTask's status, its Events,
the task API's transcript and ``kubectl agenttask logs --turn N`` / ``describe`` all call it N.

Real parts: Redis, the runtime's TaskStore (turns drained, answered and ended as a turn process does), the operator's
reconcile and Job-end recording (over a fake API server that keeps what it is sent), the task API and the plugin's
``logs`` and ``describe`` commands (their HTTP hop replaced by a direct call into the task API).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import io
import json
from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import urlencode

import pytest
import redis
from unicore.api.schema import TaskSpec, text_block
from unicore.store.tasks import TaskStore
from unicore_client.kubectl_plugin import commands
from unicore_client.kubectl_plugin import main as cli
from unicore_client.kubectl_plugin.describe_view import render_describe
from unicore_client.kubectl_plugin.errors import NotFound
from unicore_client.kubectl_plugin.kube import KubeContext
from unicore_client.kubectl_plugin.proxy import TaskApiClient
from unicore_operator import reconcile
from unicore_operator.context import OperatorContext
from unicore_operator.indexes import job_view
from unicore_operator.redis_state import RedisState
from unicore_operator.settings import OperatorSettings
from unicore_operator.task_api import routes
from unicore_operator.task_api.lookup import static_lookup
from unicore_operator.task_api.service import TaskApi

NS, NAME = "team-a", "demo"
KEY = (NS, NAME)
TASK_ID = f"{NS}/{NAME}"
ANSWERS = ("the first answer", "the second answer")
KUBE = cast(KubeContext, argparse.Namespace(namespace=NS))
API = "/apis/tasks.unicore.dev/v1alpha1"


class RecordingKube:
    """The operator's API-server calls, kept: created Jobs, status patches (applied to the indexed body, as the
    AgentTask watch would), Events."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.jobs: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str]] = []

    def create_job(self, job: dict[str, Any]) -> bool:
        name = job["metadata"]["name"]
        if name in self.jobs:
            return False
        self.jobs[name] = job
        return True

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.jobs.get(name)

    def get_agenttask(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.body

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.body["status"] = status

    def post_event(self, task: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        self.events.append((reason, message))


def run_turn(store: TaskStore, answer: str) -> None:
    """What a turn process does to Redis: drain the inbox (a new turn), answer, end the turn."""
    lease = store.acquire_lease(TASK_ID)
    drained = store.drain(lease, first_drain=True)
    assert drained.turn_number is not None
    store.append_message(lease, "assistant", [text_block(answer)])
    store.end_turn(lease, drained.turn_number, last_response=answer, summary=f"said {answer}")
    store.release_lease(lease)


async def operate(redis_url: str, store: TaskStore, api: TaskApi) -> RecordingKube:
    """Two turns of the task as the operator drives them: each Job created by reconcile, run, and its end recorded
    through the Job watch's handler; then the status after the second turn."""
    body: dict[str, Any] = {
        "apiVersion": "unicore.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": NAME, "namespace": NS, "uid": "uid-1", "generation": 1},
        "spec": {"prompt": "hello"}, "status": {},
    }
    kube = RecordingKube(body)
    settings = OperatorSettings.model_validate({"redis_url": redis_url, "namespaces": (NS,)})
    ctx = OperatorContext(settings=settings, redis=RedisState(redis_url), kube=cast(Any, kube), store=store,
                          agenttasks={KEY: [body]}, turnjobs={}, turnpods={})
    workers = ctx.reconciles.start(lambda key, reason: reconcile.reconcile_task(ctx, *key, reason), 1)
    try:
        for index, answer in enumerate(ANSWERS):
            if index:  # the user's next message, through the task API as `kubectl agenttask send` posts it
                sent = routes.answer(api, "POST", f"{API}/namespaces/{NS}/agenttasks/{NAME}/messages", "",
                              json.dumps({"id": f"m-{index}", "text": "and then?"}).encode(), sender="user:alice")
                assert sent.status == 202, sent.body
            created = await reconcile.reconcile_task(ctx, NS, NAME, "test")
            assert created is not None
            job = kube.jobs[created]
            ctx.turnjobs[KEY] = [job_view(job)]
            run_turn(store, answer)
            job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
            ctx.turnjobs[KEY] = [job_view(job)]
            await reconcile.job_changed(ctx, job, "MODIFIED")  # records the end (TurnEnded), asks for a reconcile
            await ctx.reconciles.join()  # ... which a worker runs
        await asyncio.gather(*ctx.background)
    finally:
        for worker in workers:
            worker.cancel()
        ctx.job_executor.shutdown()
        await ctx.redis.close()
    return kube


class InProcessTaskApiClient(TaskApiClient):
    """The plugin's task API client with its hop (API server -> aggregated API on the operator) replaced by a direct
    call."""

    def __init__(self, api: TaskApi) -> None:
        super().__init__(KUBE, timeout=0)
        self.api = api

    def _once(self, method: str, path: str, query: Sequence[tuple[str, Any]],
              body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        params = [(key, str(value).lower() if isinstance(value, bool) else str(value)) for key, value in query]
        response = routes.answer(self.api, method, path, urlencode(params), json.dumps(body).encode() if body else b"",
                          sender="user:alice")
        return response.status, response.body


def plugin_logs(api: TaskApi, monkeypatch: pytest.MonkeyPatch, *argv: str) -> str:
    monkeypatch.setattr(commands, "TaskApiClient", lambda kube, timeout: InProcessTaskApiClient(api))
    args: argparse.Namespace = cli.parse(["-n", NS, "logs", NAME, *argv])
    out = io.StringIO()
    assert commands.cmd_logs(args, KUBE, out) == 0
    return out.getvalue()


def test_turn_n_is_job_t_n_in_status_events_transcript_and_plugin(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))
    store.create_task(TaskSpec(id=TASK_ID, prompt="hello"))
    api = TaskApi(store, static_lookup(lambda: [{"metadata": {"namespace": NS, "name": NAME}}]))

    kube = asyncio.run(operate(redis_url, store, api))

    assert list(kube.jobs) == ["demo-t1", "demo-t2"]
    status = kube.body["status"]
    assert status["turns"] == 2
    assert status["lastTurn"]["number"] == 2  # the turn that ran as Job demo-t2
    assert status["lastTurn"]["summary"] == f"said {ANSWERS[1]}"

    whole = routes.answer(api, "GET", f"{API}/namespaces/{NS}/agenttasks/{NAME}/transcript", sender="user:alice").body
    assert [turn["number"] for turn in whole["turns"]] == [1, 2]
    assert sorted({message["turn"] for message in whole["messages"]}) == [1, 2]

    second = plugin_logs(api, monkeypatch, "--turn", "2").lstrip("\n")
    assert second.startswith("=== turn 2 (") and ANSWERS[1] in second and ANSWERS[0] not in second
    first = plugin_logs(api, monkeypatch, "--turn", "1").lstrip("\n")
    assert first.startswith("=== turn 1 (") and ANSWERS[0] in first and ANSWERS[1] not in first
    everything = plugin_logs(api, monkeypatch)
    assert [line.split()[2] for line in everything.splitlines() if line.startswith("=== turn ")] == ["1", "2"]
    with pytest.raises(NotFound, match=r"no turn 3 yet \(turns are numbered from 1; it has 1\.\.2\)"):
        plugin_logs(api, monkeypatch, "--turn", "3")

    started = [message for reason, message in kube.events if reason == "TurnStarted"]
    ended = [message for reason, message in kube.events if reason == "TurnEnded"]
    assert [m.split(" (")[0] for m in started] == ["turn 1 started as Job demo-t1", "turn 2 started as Job demo-t2"]
    assert ended == ["turn 1: Job demo-t1 finished", "turn 2: Job demo-t2 finished"]

    described = render_describe(kube.body, [], [], datetime.datetime.now(datetime.UTC))
    assert "Last Turn:          #2 " in described


def test_logs_refuses_turn_zero_before_asking(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.parse(["logs", NAME, "--turn", "0"])
    assert "turns are numbered from 1" in capsys.readouterr().err
