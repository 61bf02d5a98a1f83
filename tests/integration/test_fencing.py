"""A turn that lost its lease (reaped, then woke up) writes nothing."""

from __future__ import annotations

import pytest
from unicore.api.schema import TaskSpec, Usage
from unicore.errors import LeaseBusy, LeaseLost
from unicore.store.tasks import TaskStore
from unicore.turn.outcome import EXIT_BUSY, EXIT_LEASE_LOST

from tests.waiting import wait_for


def snapshot(store: TaskStore, task_id: str) -> dict:
    keys = store.keys(task_id)
    r = store.redis
    return {
        "task": r.hgetall(keys.task),
        "turns": r.lrange(keys.turns, 0, -1),
        "messages": r.lrange(keys.messages, 0, -1),
        "turnmeta": r.hgetall(keys.turnmeta),
        "inbox": r.lrange(keys.inbox, 0, -1),
        "lease": r.hgetall(keys.lease),
    }


def test_a_zombie_turn_cannot_write_after_its_lease_expired_and_was_taken(store):
    store.create_task(TaskSpec(id="z", prompt="hello"))
    zombie = store.acquire_lease("z", holder="zombie", ttl_ms=150)
    store.drain(zombie, first_drain=True)
    wait_for(lambda: store.lease_holder("z") is None, timeout=5, what="the zombie's lease to expire")
    successor = store.acquire_lease("z", holder="successor")
    assert successor.token > zombie.token
    store.queue_text("z", "queued for the successor")
    before = snapshot(store, "z")

    writes = [
        lambda: store.drain(zombie, first_drain=False),
        lambda: store.append_message(zombie, "assistant", [{"text": "zombie answer"}]),
        lambda: store.end_turn(zombie, 0, last_response="zombie", summary="zombie"),
        lambda: store.record_usage(zombie, Usage(input_tokens=5, output_tokens=5, total_tokens=10)),
        lambda: store.record_error(zombie, "zombie error"),
        lambda: store.renew_lease(zombie),
    ]
    for write in writes:
        with pytest.raises(LeaseLost):
            write()
    assert store.release_lease(zombie) is False
    assert snapshot(store, "z") == before
    assert store.lease_holder("z") == "successor"


def test_a_live_lease_refuses_a_second_turn(store, turn):
    store.create_task(TaskSpec(id="busy", prompt="hello"))
    store.acquire_lease("busy", holder="someone-else")
    with pytest.raises(LeaseBusy, match="someone-else"):
        store.acquire_lease("busy")
    outcome = turn("busy")
    assert outcome.exit_code == EXIT_BUSY and "someone-else" in outcome.error
    assert store.pending_count("busy") == 1 and store.message_count("busy") == 0


def test_a_turn_reaped_during_its_model_call_writes_nothing_afterwards(store, turn):
    store.create_task(
        TaskSpec(id="reaped", prompt="hello", script={"tasks": {"reaped": [{"text": "too late"}]}})
    )

    taken_over: list[dict] = []

    def reap_and_take_over(_request):
        store.redis.delete(store.keys("reaped").lease)  # the watchdog reaps the turn ...
        store.acquire_lease("reaped", holder="next-turn")  # ... and the next turn takes the task
        taken_over.append(snapshot(store, "reaped"))

    turn.hooks["reaped"] = reap_and_take_over
    outcome = turn("reaped")
    assert outcome.exit_code == EXIT_LEASE_LOST
    after = snapshot(store, "reaped")
    assert after == taken_over[0]
    assert all("too late" not in raw for raw in after["messages"])
    assert store.lease_holder("reaped") == "next-turn"
