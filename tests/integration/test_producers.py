"""10 producer processes x 100 messages while turns drain: each delivered exactly once, per-producer order kept."""

from __future__ import annotations

import multiprocessing
import re
import threading

from unicore.api.schema import TaskSpec
from unicore.store.tasks import TaskStore, connect

from tests.waiting import wait_for

PRODUCERS = 10
MESSAGES = 100


def produce(url: str, producer: int) -> None:
    store = TaskStore(connect(url))
    for j in range(MESSAGES):
        if j == MESSAGES // 2:  # half-way, let a turn drain what is there: drains interleave with producers
            wait_for(lambda: store.pending_count("busy") == 0, timeout=60, what="a turn to drain the inbox")
        store.queue_text("busy", f"p{producer}:{j}", message_id=f"p{producer}-{j}", sender=f"p{producer}")
        if j % 10 == 0:  # a retried send (same id) is accepted once
            assert not store.queue_text("busy", f"p{producer}:{j}", message_id=f"p{producer}-{j}")


def test_concurrent_producers_and_draining_turns(store, turn, redis_url):
    store.create_task(TaskSpec(id="busy", prompt="start", script={"default": "ok"}))
    context = multiprocessing.get_context("fork")
    producers = [context.Process(target=produce, args=(redis_url, i)) for i in range(PRODUCERS)]
    for process in producers:
        process.start()

    stop = threading.Event()
    outcomes: list[int] = []

    def drain_with_turns() -> None:  # two competing turn runners: the lease lets one at a time drain
        while not stop.is_set():
            outcomes.append(turn("busy").exit_code)

    runners = [threading.Thread(target=drain_with_turns) for _ in range(2)]
    for runner in runners:
        runner.start()
    try:
        for process in producers:
            process.join(timeout=120)
            assert process.exitcode == 0
        wait_for(
            lambda: store.pending_count("busy") == 0 and store.lease_holder("busy") is None,
            timeout=60,
            what="the inbox to be drained",
        )
    finally:
        stop.set()
        for runner in runners:
            runner.join(timeout=60)

    assert set(outcomes) <= {0, 3}  # finished, or refused because the other runner held the lease
    assert outcomes.count(0) >= 2  # several turns drained while producers were writing
    delivered = [
        block["text"]
        for m in store.messages("busy")
        if m.role == "user"
        for block in m.content
        if "text" in block and re.fullmatch(r"p\d+:\d+", block["text"])
    ]
    assert len(delivered) == PRODUCERS * MESSAGES
    assert len(set(delivered)) == len(delivered)  # exactly once
    for producer in range(PRODUCERS):
        order = [int(t.split(":")[1]) for t in delivered if t.startswith(f"p{producer}:")]
        assert order == list(range(MESSAGES))  # per-producer order kept
    assert len(store.load_history("busy")) >= 2
