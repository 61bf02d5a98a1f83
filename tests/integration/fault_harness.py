"""The fault-injection harness: run a scripted task tree while every turn process is SIGKILLed at every named
step once (``UNICORE_FAULTS=kill-once``, see ``unicore.faults``), then check what survived.

Reusable: ``run_tree_under_faults`` works for any script whose tasks spawn children; ``check_tree`` verifies the
exactly-once properties on the stored state; ``bench``-style figures come from ``FaultReport``. The same checks
apply to a tree run by the operator (the pods get ``UNICORE_FAULTS`` through ``UNICORE_AGENT_EXTRA_ENV``).
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from unicore.api.schema import TaskSpec
from unicore.faults import ENV, LOG_KEY
from unicore.launch.local import LocalSupervisor, SettleReport
from unicore.store.task_reads import history_messages
from unicore.store.tasks import TaskStore
from unicore.turn.history import INTERRUPTED_TEXT, build_request_messages

from tests.converse_check import converse_problems

COMPLETION_RE = re.compile(r"^\[SYSTEM\] Child task (\S+) has (completed successfully|FAILED)")


def leafy_tree_script(children: int = 3, grandchildren: int = 2) -> dict[str, Any]:
    """Root ``r`` -> children ``r-a``.. -> grandchildren ``r-a-a``..: three levels. Every task's first answer is a
    harmless tool call (``list_files``), so a kill right after an answer interrupts a tool call; parents spawn, say
    they wait, then report what their children said."""
    letters = "abcdefgh"

    def parent_steps(n: int) -> list[dict[str, Any]]:
        # One spawn per answer: a kill after a tool result then interrupts no other call of the same answer.
        spawns = [{"tool_use": [{"name": "spawn_task", "input": {"name": letters[i], "prompt": f"part {letters[i]}"}}]}
                  for i in range(n)]
        return [
            {"tool_use": [{"name": "list_files", "input": {}}]},
            *spawns,
            {"text": "waiting for my children"},
            {"text": "report:", "echo": True},
        ]

    return {
        "default": "done",
        "tasks": {
            "r": parent_steps(children),
            "r-?": parent_steps(grandchildren),
            "r-?-?": [{"tool_use": [{"name": "list_files", "input": {}}]}, {"text": "leaf result"}],
        },
    }


@dataclass
class FaultReport:
    settled: bool
    kill_points: int
    kills_by_step: dict[str, int]
    tasks: int
    messages_checked: int
    losses: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    synthetic_results: int = 0


def run_tree_under_faults(client: redis.Redis, redis_url: str, home: Path, script: dict[str, Any],
                          *, faults: str = "kill-once", timeout: float = 900) -> SettleReport:
    """Run the tree under root ``r`` with ``UNICORE_FAULTS=faults`` until it settles (Redis must start empty)."""
    store = TaskStore(client)
    store.create_task(TaskSpec(id="r", prompt="split the work", script=script))
    store.activate("r", "test")
    env = {ENV: faults, "UNICORE_HOME": str(home), "UNICORE_WORKSPACE": str(home / "ws")}
    supervisor = LocalSupervisor(client, redis_url, env=env, scan_seconds=0.2, max_crash_restarts=100,
                                 on_event=lambda _text: None)
    return supervisor.run_until_settled("r", timeout=timeout)


def check_tree(client: redis.Redis, root: str, settled: bool) -> FaultReport:
    """Exactly-once checks over the stored tree (see the module docstring)."""
    store = TaskStore(client)
    kills = client.lrange(LOG_KEY, 0, -1)
    by_step = collections.Counter(point.rsplit(":", 1)[1] for point in kills)
    report = FaultReport(settled=settled, kill_points=len(kills), kills_by_step=dict(by_step), tasks=0,
                         messages_checked=0)
    tree = store.tree(root)
    report.tasks = len(tree)
    for _depth, record in tree:
        messages = history_messages(store.load_history(record.id))
        texts = [b["text"] for m in messages if m.role == "user" for b in m.content if "text" in b]
        report.messages_checked += len(messages)
        if store.pending_count(record.id):
            report.losses.append(f"{record.id}: {store.pending_count(record.id)} message(s) never drained")
        # the prompt: exactly once
        prompt = "split the work" if record.parent is None else f"part {record.id.rsplit('-', 1)[-1]}"
        seen = texts.count(prompt)
        if seen != 1:
            (report.losses if seen == 0 else report.duplicates).append(f"{record.id}: prompt seen {seen} times")
        # every child's reports: one per ended turn of the child, none twice
        reports = collections.Counter(m.group(1) for t in texts if (m := COMPLETION_RE.match(t)))
        for child in store.children(record.id):
            ended = sum(1 for turn in store.load_history(child) if turn.ended_at is not None)
            got = reports.get(child, 0)
            if got < ended:
                report.losses.append(f"{record.id}: {got} report(s) of {child}, {ended} turn(s) ended")
            elif got > ended:
                report.duplicates.append(f"{record.id}: {got} report(s) of {child}, {ended} turn(s) ended")
        # every tool call answered at most once in storage; the request the model sees is valid
        stored_results = collections.Counter(
            b["toolResult"]["toolUseId"] for m in messages if m.role == "user" for b in m.content if "toolResult" in b
        )
        report.duplicates += [
            f"{record.id}: result of {i} stored {n} times" for i, n in stored_results.items() if n > 1
        ]
        request = build_request_messages(messages)
        report.problems += [f"{record.id}: {p}" for p in converse_problems(request)]
        report.synthetic_results += sum(
            1 for m in request for b in m["content"]
            if "toolResult" in b and b["toolResult"]["content"][0].get("text") == INTERRUPTED_TEXT
        )
        if record.status != "idle":
            report.problems.append(f"{record.id}: status {record.status}")
    return report


__all__ = ["FaultReport", "check_tree", "leafy_tree_script", "run_tree_under_faults"]
