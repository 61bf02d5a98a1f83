"""Building a model request for a task with 10,000 stored messages after compaction vs a task with 10.

What a turn does before each model call: read the newest compaction record and only the messages after it
(``unicore.store.compactions.load_request_history``), shape them (summary first, ``HistoryView.request_messages``)
and estimate the request's tokens. The anchor is the same build for a task with 10 stored messages and no
compaction, measured in the same run, interleaved. For reference, the build without compaction (load every stored
message, ``TaskStore.load_history``, then shape all of them) is measured after them (a tenth of the repeats): what
every request cost before.

Usage: .venv/bin/python bench/bench_request_build.py [--repeat 300] [--no-write]
Uses $REDIS_URL if set, else a private redis-server on a unix socket. Writes its section of docs/benchmarks.md
(section "Request build after compaction") unless --no-write. Exit 1 if the ratio passes 2x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from unicore.api.schema import TaskSpec  # noqa: E402
from unicore.providers.base import ModelRequest  # noqa: E402
from unicore.providers.calling import estimate_input_tokens  # noqa: E402
from unicore.store.compactions import Compaction, append_compaction, load_request_history  # noqa: E402
from unicore.store.task_reads import history_messages  # noqa: E402
from unicore.store.tasks import TaskStore, connect  # noqa: E402
from unicore.turn.compaction import HistoryView  # noqa: E402
from unicore.turn.history import build_request_messages  # noqa: E402

from bench.bench_drain import fill_history  # noqa: E402
from bench.doc_section import write_section  # noqa: E402

SECTION = "## Request build after compaction"
BIG, SMALL, TAIL = 10_000, 10, 10  # the big task's newest compaction leaves TAIL messages after it
SYSTEM = "You are a helpful agent. " * 40
SUMMARY = "The user asked for a long job; the assistant ran it step by step and noted each result. " * 16




def build_compacted(store: TaskStore, task_id: str) -> int:
    """One request build as the turn does it; returns the messages read from Redis."""
    loaded = load_request_history(store.redis, task_id)
    messages = HistoryView(loaded.compaction, loaded.messages).request_messages()
    estimate_input_tokens(ModelRequest(task_id=task_id, system=SYSTEM, messages=messages))
    return len(loaded.messages)


def build_uncompacted(store: TaskStore, task_id: str) -> int:
    """The build before compaction: every stored message loaded and shaped."""
    stored = history_messages(store.load_history(task_id))
    messages = build_request_messages(stored)
    estimate_input_tokens(ModelRequest(task_id=task_id, system=SYSTEM, messages=messages))
    return len(stored)


def seed(store: TaskStore, task_id: str, n: int, compact: bool) -> None:
    store.create_task(TaskSpec(id=task_id))
    fill_history(store, task_id, n)
    if compact:
        lease = store.acquire_lease(task_id)
        append_compaction(store.redis, lease, Compaction(upto=n - TAIL, summary=SUMMARY, answers=(n - TAIL) // 2))
        store.release_lease(lease)


def measure(builds: dict[str, Callable[[], int]], repeat: int) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {name: [] for name in builds}
    read: dict[str, int] = {}
    for _ in range(repeat):  # interleaved, so drift and load hit every variant alike
        for name, build in builds.items():
            began = time.perf_counter()
            read[name] = build()
            times[name].append(time.perf_counter() - began)
    return {name: {"ms": statistics.median(values) * 1000, "read": read[name]} for name, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    server: Any = None
    url = os.environ.get("REDIS_URL")
    if not url:
        from tests.redis_server import RedisServer

        server = RedisServer()
        url = server.url
    try:
        store = TaskStore(connect(url))
        seed(store, "bench-small", SMALL, compact=False)
        seed(store, "bench-big", BIG, compact=True)
        builds: dict[str, Callable[[], int]] = {
            "anchor": lambda: build_compacted(store, "bench-small"),
            "compacted": lambda: build_compacted(store, "bench-big"),
        }
        measure(builds, 5)  # warm up: connection open
        rows = measure(builds, args.repeat)
        # apart, so its garbage does not land on the others' clocks
        rows.update(measure({"uncompacted": lambda: build_uncompacted(store, "bench-big")}, max(5, args.repeat // 10)))
        for task_id in ("bench-small", "bench-big"):
            store.delete_task(task_id)
    finally:
        if server is not None:
            server.stop()
    anchor = rows["anchor"]["ms"]
    ratio = rows["compacted"]["ms"] / anchor
    before = rows["uncompacted"]["ms"] / anchor
    load = os.getloadavg()
    labels = {
        "anchor": f"{SMALL} stored, no compaction (anchor)",
        "compacted": f"{BIG:,} stored, newest compaction leaves {TAIL}",
        "uncompacted": f"{BIG:,} stored, whole history loaded (before compaction)",
    }
    lines = ["| request build | messages read | ms (median) | vs anchor |", "|---|---:|---:|---:|"]
    for name, row in rows.items():
        lines.append(f"| {labels[name]} | {int(row['read']):,} | {row['ms']:.3f} | {row['ms'] / anchor:.2f}x |")
    result = "\n".join(lines)
    verdict = (f"After compaction a request for a task with {BIG:,} stored messages takes {ratio:.2f}x the time of "
               f"one with {SMALL} (target: at most 2x); loading the whole history instead takes {before:.0f}x. "
               f"Load average during the run: {load[0]:.2f} (1 min), {load[1]:.2f} (5 min).")
    print(result)
    print(verdict)
    if not args.no_write:
        doc = "\n".join([
            SECTION,
            "",
            f"Command: `.venv/bin/python bench/bench_request_build.py --repeat {args.repeat}` (median of "
            f"{args.repeat} builds of the two compared kinds, interleaved, then {max(5, args.repeat // 10)} of the "
            "whole-history build; a build = read the newest compaction record and the "
            "messages after it, shape them with the summary first, estimate the tokens; messages of ~250 "
            "characters; a private redis-server on a unix socket).",
            f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on a shared 2-core machine.",
            "",
            result,
            "",
            verdict,
        ])
        print(f"written to {write_section(SECTION, doc)}")
    return 0 if ratio <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
