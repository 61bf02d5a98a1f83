"""Progress-aware heartbeat on real Redis: a stalled step stops the heartbeat so the lease expires; a healthy
long turn keeps its lease; a hung tool's turn is taken over, the next turn's model gets a synthetic error
result for the unanswered call, and the zombie writes nothing when its tool finally returns."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.store.tasks import TaskStore
from unicore.turn.history import INTERRUPTED_TEXT
from unicore.turn.outcome import EXIT_LEASE_LOST, EXIT_OK, TurnOutcome
from unicore_devcluster.fixture_tools import SPEC

from tests.integration.conftest import TurnRunner
from tests.waiting import wait_for

TTL_MS = 600  # heartbeat every 0.2 s
STALL = 0.5


class Background:
    """One turn in a thread (the test observes Redis while it runs)."""

    def __init__(self, turn: TurnRunner, task_id: str, **kwargs: Any) -> None:
        self.outcome: TurnOutcome | None = None
        self.thread = threading.Thread(target=self._run, args=(turn, task_id, kwargs), daemon=True)
        self.thread.start()

    def _run(self, turn: TurnRunner, task_id: str, kwargs: dict[str, Any]) -> None:
        self.outcome = turn(task_id, **kwargs)

    def join(self) -> TurnOutcome:
        self.thread.join(timeout=60)
        assert self.outcome is not None, "the turn did not finish"
        return self.outcome


def heartbeat(client: redis.Redis, task_id: str) -> str | None:
    return client.get(f"uc:{{{task_id}}}:heartbeat")


def test_a_stalled_model_call_stops_the_heartbeat_and_the_lease_expires(
    store: TaskStore, turn: TurnRunner, redis_client: redis.Redis
) -> None:
    script = {"tasks": {"hung": [{"sleep": 5, "text": "late"}]}}
    store.create_task(TaskSpec(id="hung", prompt="go", script=script))
    running = Background(turn, "hung", lease_ttl_ms=TTL_MS, stall_seconds=STALL)
    wait_for(lambda: store.lease_holder("hung") is not None, timeout=10, what="the turn to take the lease")
    wait_for(lambda: store.lease_holder("hung") is None, timeout=10, what="the stalled lease to expire")
    assert running.thread.is_alive()  # the process is still there, stuck in the model call
    last_beat = heartbeat(redis_client, "hung")
    outcome = running.join()
    assert outcome.exit_code == EXIT_LEASE_LOST  # the late answer found the lease gone and wrote nothing
    assert heartbeat(redis_client, "hung") == last_beat
    assert [m.role for m in store.messages("hung")] == ["user"]


def test_a_healthy_turn_longer_than_the_ttl_and_the_stall_limit_keeps_beating(
    store: TaskStore, turn: TurnRunner, redis_client: redis.Redis
) -> None:
    steps = [
        {"sleep": 0.3, "tool_use": [{"name": "note", "input": {"text": "a"}}]},
        {"sleep": 0.3, "tool_use": [{"name": "note", "input": {"text": "b"}}]},
        {"sleep": 0.3, "tool_use": [{"name": "note", "input": {"text": "c"}}]},
        {"sleep": 0.3, "text": "done"},
    ]
    store.create_task(TaskSpec(id="busy", prompt="go", script={"tasks": {"busy": steps}}))
    running = Background(turn, "busy", lease_ttl_ms=TTL_MS, stall_seconds=STALL)
    beats: set[str] = set()

    def finished() -> bool:
        beat = heartbeat(redis_client, "busy")
        if beat is not None:
            beats.add(beat)
        return not running.thread.is_alive()

    wait_for(finished, timeout=30, interval=0.02, what="the healthy turn to finish")
    outcome = running.join()
    assert outcome.exit_code == EXIT_OK and outcome.final_text == "done", outcome
    assert len(beats) >= 4, beats  # 1.2 s of model sleeps, a beat every 0.2 s


def test_a_hung_tool_is_taken_over_with_a_synthetic_result_and_the_zombie_writes_nothing(
    store: TaskStore, turn: TurnRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNICORE_EXTRA_TOOLS", SPEC)
    script = {"tasks": {"stuck": [
        {"tool_use": [{"name": "slow_step", "input": {"seconds": 60}}]},
        {"echo_results": True},
    ]}}
    store.create_task(TaskSpec(id="stuck", prompt="go", tools=["slow_step"], script=script))
    cancel = threading.Event()
    zombie = Background(turn, "stuck", lease_ttl_ms=TTL_MS, stall_seconds=STALL, cancel=cancel)
    wait_for(lambda: store.lease_holder("stuck") is not None, timeout=10, what="the turn to take the lease")
    wait_for(lambda: store.lease_holder("stuck") is None, timeout=10, what="the hung turn's lease to expire")
    assert zombie.thread.is_alive()
    [call] = [b["toolUse"] for m in store.messages("stuck") for b in m.content if "toolUse" in b]
    assert call["name"] == "slow_step"

    # the next turn (on Kubernetes: a new Job, after the watchdog's reap)
    outcome = turn("stuck", lease_ttl_ms=TTL_MS, stall_seconds=STALL)
    assert outcome.exit_code == EXIT_OK
    assert outcome.final_text == f"[error] {call['toolUseId']}: {INTERRUPTED_TEXT}"
    request = turn.requests("stuck")[-1]
    results = [b["toolResult"] for m in request.messages for b in m["content"] if "toolResult" in b]
    assert [(r["toolUseId"], r["status"]) for r in results] == [(call["toolUseId"], "error")]

    cancel.set()  # the hung tool finally returns (SIGTERM sets this event in a real turn process)
    assert zombie.join().exit_code == EXIT_LEASE_LOST
    assert store.pending_count("stuck") == 0  # no late tool result was queued
    stored = [b for m in store.messages("stuck") for b in m.content if "toolResult" in b]
    assert stored == []  # the only answer the model saw is the synthetic one
