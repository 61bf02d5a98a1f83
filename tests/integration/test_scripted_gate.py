"""The scripted model's gate step on a real redis-server: a model call that waits until a test opens the task's gate
(``unicore.store.gates``), goes on once it is open, fails clearly past its deadline, and stops when the turn is
cancelled; a namespace's Redis user reads its tasks' gates and cannot open them (``unicore.store.acl``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.exceptions import NoPermissionError
from unicore.api.schema import TaskSpec
from unicore.errors import ModelError, TurnCancelled
from unicore.providers.base import ModelRequest, ModelResponse
from unicore.providers.scripted import ScriptedModel, load_script
from unicore.store import acl
from unicore.store.client import build_client
from unicore.store.gates import gate_is_open, open_gate
from unicore.store.keys import gate_key
from unicore.store.tasks import TaskStore

from tests.integration.conftest import TurnRunner
from tests.waiting import wait_for


def ask(task_id: str) -> ModelRequest:
    return ModelRequest(task_id=task_id, messages=[{"role": "user", "content": [{"text": "go"}]}])


def exists_calls(client: redis.Redis) -> int:
    """How many EXISTS the server has answered (INFO commandstats): a gated call asks once per poll."""
    return int(client.info("commandstats").get("cmdstat_exists", {}).get("calls", 0))


class Call:
    """A call run in a thread; ``result`` or ``error`` once it returned."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.result = call()
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            self.error = exc

    def done(self) -> bool:
        return not self.thread.is_alive()


def polled_while_closed(client: redis.Redis, call: Call, times: int = 5) -> None:
    """Wait until the gated call has asked ``times`` more times whether its gate is open, and is still waiting."""
    before = exists_calls(client)
    wait_for(lambda: exists_calls(client) - before >= times, timeout=30, what=f"{times} polls of the gate")
    assert not call.done(), f"the gated call returned before its gate opened: {call.result!r} {call.error!r}"


def test_a_gated_call_waits_for_its_gate_and_goes_on_once_it_is_open(redis_client: redis.Redis) -> None:
    script = {"tasks": {"t": [{"gate": "go", "timeout": 60, "text": "past the gate"}, {"text": "second"}]}}
    model = ScriptedModel(load_script(script), redis_client=redis_client)
    call = Call(lambda: model.converse(ask("t")))
    polled_while_closed(redis_client, call)
    assert not gate_is_open(redis_client, "t", "go")
    open_gate(redis_client, "other-task", "go")  # another task's gate, the same name: not this one
    polled_while_closed(redis_client, call)
    open_gate(redis_client, "t", "go")
    assert redis_client.get("uc:{t}:gate:go") == "1" and gate_is_open(redis_client, "t", "go")
    wait_for(call.done, timeout=10, what="the gated call to return once its gate is open")
    assert call.error is None
    response: ModelResponse = call.result
    assert response.content == [{"text": "past the gate"}] and response.stop_reason == "end_turn"
    again = model.converse(ask("t"))  # the gate stays open: a retried turn passes it at once
    assert again.content == [{"text": "past the gate"}]


def test_a_gate_not_opened_by_its_deadline_fails_the_call_naming_the_gate(redis_client: redis.Redis) -> None:
    model = ScriptedModel(load_script({"tasks": {"ns/t": [{"gate": "go", "timeout": 0.3, "text": "never"}]}}),
                          redis_client=redis_client)
    began = time.monotonic()
    with pytest.raises(ModelError) as info:
        model.converse(ask("ns/t"))
    took = time.monotonic() - began
    assert 0.3 <= took < 10, took
    message = str(info.value)
    assert "gate 'go' of task ns/t was not opened within 0.3 s" in message and gate_key("ns/t", "go") in message


def test_a_gate_then_a_sleep_and_a_cancelled_gate(redis_client: redis.Redis) -> None:
    script = {"tasks": {"t": [{"gate": "g", "sleep": 0.2, "text": "later"}], "c": [{"gate": "never", "text": "x"}]}}
    model = ScriptedModel(load_script(script), redis_client=redis_client)
    open_gate(redis_client, "t", "g")
    began = time.monotonic()
    assert model.converse(ask("t")).content == [{"text": "later"}]
    assert time.monotonic() - began >= 0.2  # the step's sleep after its (open) gate

    cancel = threading.Event()
    model.set_cancel_event(cancel)
    call = Call(lambda: model.converse(ask("c")))
    polled_while_closed(redis_client, call)
    cancel.set()  # what SIGTERM does to a turn: the gate's wait ends at once
    wait_for(call.done, timeout=10, what="the cancelled gated call to return")
    assert isinstance(call.error, TurnCancelled) and "gate 'never'" in str(call.error)


def test_a_gate_without_redis_fails_at_once() -> None:
    model = ScriptedModel(load_script({"tasks": {"t": [{"gate": "go", "text": "x"}]}}))
    with pytest.raises(ModelError, match="needs Redis"):
        model.converse(ask("t"))


@pytest.fixture
def tenant(redis_client: redis.Redis, redis_url: str) -> Iterator[redis.Redis]:
    """A client logged in as namespace team-a's Redis user (made with the admin client, as the operator does)."""
    password = acl.new_password()
    acl.apply_namespace_user(redis_client, "team-a", password)
    client = build_client(acl.identity_url(redis_url, acl.namespace_user("team-a"), password),
                          decode_responses=True, retry_for=0)
    yield client
    client.close()
    acl.delete_namespace_user(redis_client, "team-a")


def test_a_namespaces_user_reads_its_tasks_gates_and_cannot_open_them(
    redis_client: redis.Redis, tenant: redis.Redis,
) -> None:
    assert not gate_is_open(tenant, "team-a/t", "go")
    with pytest.raises(NoPermissionError):
        open_gate(tenant, "team-a/t", "go")  # only a test, with the admin identity, opens a gate
    with pytest.raises(NoPermissionError):
        tenant.delete(gate_key("team-a/t", "go"))
    open_gate(redis_client, "team-a/t", "go")
    assert gate_is_open(tenant, "team-a/t", "go")
    with pytest.raises(NoPermissionError):
        tenant.get(gate_key("team-a/t", "go"))  # EXISTS only
    for other in ("team-b/t", "team-a-2/t"):  # another namespace's gates: not even their existence
        open_gate(redis_client, other, "go")
        with pytest.raises(NoPermissionError):
            gate_is_open(tenant, other, "go")


def test_a_turn_run_with_its_namespaces_user_waits_at_the_gate_until_the_test_opens_it(
    redis_client: redis.Redis, tenant: redis.Redis, tmp_path: Path,
) -> None:
    admin = TaskStore(redis_client)
    script = {"tasks": {"gated": [{"gate": "go", "timeout": 60, "text": "opened"}]}}
    admin.create_task(TaskSpec(id="team-a/gated", prompt="wait for it", script=script))
    runner = TurnRunner(tenant, tmp_path)
    call = Call(lambda: runner("team-a/gated"))
    wait_for(lambda: admin.lease_holder("team-a/gated"), timeout=30, what="the turn to hold its lease")
    polled_while_closed(redis_client, call)
    assert [m.role for m in admin.messages("team-a/gated")] == ["user"]  # inside the model call, no answer yet
    open_gate(redis_client, "team-a/gated", "go")
    wait_for(call.done, timeout=30, what="the turn to end once the gate is open")
    assert call.error is None, call.error
    assert (call.result.exit_code, call.result.final_text) == (0, "opened")
    assert [m.role for m in admin.messages("team-a/gated")] == ["user", "assistant"]
