"""Drain + history load at 10 / 100 / 1,000 / 10,000 stored messages: Redis round trips and time.

Usage: .venv/bin/python bench/bench_drain.py [--repeat 30] [--no-write]
Uses $REDIS_URL if set, else a private redis-server on a unix socket. Appends its table to docs/benchmarks.md
(section "Drain and history load") unless --no-write.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from unicore.api.schema import TaskSpec  # noqa: E402
from unicore.store.tasks import TaskStore, connect  # noqa: E402

from bench.doc_section import write_section  # noqa: E402

SIZES = (10, 100, 1_000, 10_000)
SECTION = "## Drain and history load"


class RoundTrips:
    """Counts commands sent to Redis (a pipeline or a script call is one round trip)."""

    def __init__(self, client: Any) -> None:
        self.count = 0
        base = client.connection_pool.connection_class
        counter = self

        def send_packed_command(conn: Any, command: Any, check_health: bool = True) -> None:
            counter.count += 1
            base.send_packed_command(conn, command, check_health)

        client.connection_pool.connection_class = type(
            "Counting", (base,), {"send_packed_command": send_packed_command}
        )
        client.connection_pool.disconnect()


def fill_history(store: TaskStore, task_id: str, n: int) -> None:
    """Store ``n`` messages as turns of 10 (user, assistant, ...), written directly in big pipelines."""
    keys = store.keys(task_id)
    now = time.time()
    pipe = store.redis.pipeline(transaction=False)
    for seq in range(n):
        turn, position = divmod(seq, 10)
        if position == 0:
            pipe.rpush(keys.turns, json.dumps({"turn_number": turn, "started_at": now, "first_seq": seq}))
        role = "user" if position % 2 == 0 else "assistant"
        content = [{"text": f"message {seq} " + "lorem ipsum " * 20}]
        pipe.rpush(
            keys.messages,
            json.dumps(
                {
                    "seq": seq,
                    "turn_number": turn,
                    "message_number": position,
                    "role": role,
                    "timestamp": now,
                    "content": content,
                }
            ),
        )
    pipe.hset(keys.task, "turns", (n + 9) // 10)
    pipe.execute()


def measure(store: TaskStore, trips: RoundTrips, n: int, repeat: int, check: bool = True) -> dict[str, float]:
    task_id = f"bench-{n}"
    store.create_task(TaskSpec(id=task_id))
    fill_history(store, task_id, n)
    drain_times, load_times, drain_trips, load_trips = [], [], set(), set()
    for i in range(repeat):
        for j in range(3):
            store.queue_text(task_id, f"new message {i}.{j}")
        lease = store.acquire_lease(task_id)
        before = trips.count
        began = time.perf_counter()
        result = store.drain(lease, first_drain=True)
        drain_times.append(time.perf_counter() - began)
        drain_trips.add(trips.count - before)
        assert result.drained == 3
        store.append_message(lease, "assistant", [{"text": "ok"}])
        store.release_lease(lease)
        before = trips.count
        began = time.perf_counter()
        turns = store.load_history(task_id)
        load_times.append(time.perf_counter() - began)
        load_trips.add(trips.count - before)
        assert sum(len(t.messages) for t in turns) >= n
    if check:  # the first calls also load the Lua scripts (NOSCRIPT -> EVAL); the warm-up run is not checked
        assert len(drain_trips) == 1 and len(load_trips) == 1, (drain_trips, load_trips)
    store.delete_task(task_id)
    return {
        "n": n,
        "drain_trips": drain_trips.pop(),
        "drain_ms": statistics.median(drain_times) * 1000,
        "load_trips": load_trips.pop(),
        "load_ms": statistics.median(load_times) * 1000,
    }


def table(rows: list[dict[str, float]]) -> str:
    anchor = rows[0]
    lines = [
        "| stored messages | drain round trips | drain ms (median) | drain vs 10 | history load round trips "
        "| history load ms (median) | load vs 10 |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['n']:,} | {row['drain_trips']} | {row['drain_ms']:.3f} | "
            f"{row['drain_ms'] / anchor['drain_ms']:.2f}x | {row['load_trips']} | {row['load_ms']:.2f} | "
            f"{row['load_ms'] / anchor['load_ms']:.1f}x |"
        )
    return "\n".join(lines)




def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    server = None
    url = os.environ.get("REDIS_URL")
    if not url:
        from tests.redis_server import RedisServer

        server = RedisServer()
        url = server.url
    try:
        client = connect(url)
        trips = RoundTrips(client)
        store = TaskStore(client)
        measure(store, trips, 10, 3, check=False)  # warm up: scripts loaded, connection open
        rows = [measure(store, trips, n, args.repeat) for n in SIZES]
    finally:
        if server is not None:
            server.stop()
    result = table(rows)
    print(result)
    drain_ratio = rows[-1]["drain_ms"] / rows[0]["drain_ms"]
    verdict = (
        f"Round trips are constant ({rows[0]['drain_trips']} per drain, {rows[0]['load_trips']} per history "
        f"load) at every size; the drain at 10,000 messages takes {drain_ratio:.2f}x the time at 10 "
        f"(target: within 2x). History load moves every message to the client, so its time grows with "
        f"the history (O(n) bytes, one round trip)."
    )
    print(verdict)
    if not args.no_write:
        doc = "\n".join(
            [
                SECTION,
                "",
                f"Command: `.venv/bin/python bench/bench_drain.py --repeat {args.repeat}` (median of "
                f"{args.repeat} "
                "drains of 3 queued messages into a task with the given stored history; a private "
                "redis-server on a "
                "unix socket; round trips counted at the client connection, a pipeline or script call = 1).",
                f"Measured {time.strftime('%Y-%m-%d')} on a shared 2-core machine.",
                "",
                result,
                "",
                verdict,
            ]
        )
        print(f"written to {write_section(SECTION, doc)}")
    return 0 if drain_ratio <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
