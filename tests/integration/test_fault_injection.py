"""Kill every turn process of a 3-level local tree at every named step once; nothing is lost or duplicated.

Rounds: every step of every turn armed (``kill-once``), then half of them by two seeds (so turns also get past
their early steps and are killed at the late ones: after notify, after release). See
tests/integration/fault_harness.py (the reusable harness) and docs/benchmarks.md (the figures).

Local mode has no retry backoff to shorten (the pods' test sets the operator's short): the supervisor restarts a
killed turn at its next scan (every 0.2 s here), so a round's time is its turn processes' starts and runs, printed
with the report."""

from __future__ import annotations

import json
import time
from pathlib import Path

import redis
from unicore.faults import STEPS

from tests.integration.fault_harness import check_tree, leafy_tree_script, run_tree_under_faults

ROUNDS = ["kill-once", "kill-once:50:1", "kill-once:50:2"]


def test_a_tree_killed_at_every_step_of_every_turn_settles_with_every_report_delivered_once(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """The rounds in one test (their totals are checked together: one test runs whole on one xdist worker)."""
    steps: set[str] = set()
    kills = 0
    for faults in ROUNDS:
        redis_client.flushall()  # each round's tree has the same task ids
        started = time.monotonic()
        settle = run_tree_under_faults(redis_client, redis_url, tmp_path / faults.replace(":", "-"),
                                       leafy_tree_script(3, 2), faults=faults)
        report = check_tree(redis_client, "r", settle.settled)
        print(f"\nfault injection (local mode, {faults}): {report}; {settle.turns_run} turn processes in "
              f"{time.monotonic() - started:.1f} s")
        assert report.settled, (faults, settle)
        assert report.tasks == 1 + 3 + 3 * 2, faults
        assert report.losses == [] and report.duplicates == [] and report.problems == [], faults
        assert not settle.failures, (faults, settle.failures)
        assert report.kill_points >= (5 if faults == "kill-once" else 2) * report.tasks, faults
        if faults == "kill-once":
            assert report.synthetic_results >= report.tasks  # each task's first tool call was interrupted once
        steps.update(report.kills_by_step)
        kills += report.kill_points
    assert steps == set(STEPS), steps  # every named step was a kill point in some round
    assert kills >= 200, kills


def test_the_checks_see_a_lost_report_and_a_duplicated_one(redis_client: redis.Redis, redis_url: str,
                                                           tmp_path: Path) -> None:
    """The harness's checks can fail: a report taken out of the parent's history is a loss, one stored twice a
    duplicate."""
    settle = run_tree_under_faults(redis_client, redis_url, tmp_path, leafy_tree_script(1, 1), faults="off")
    assert check_tree(redis_client, "r", settle.settled).losses == []
    messages = redis_client.lrange("uc:{r}:messages", 0, -1)
    report = next(raw for raw in messages
                  if json.loads(raw)["content"][0].get("text", "").startswith("[SYSTEM] Child task r-a has completed"))
    redis_client.lrem("uc:{r}:messages", 1, report)
    assert any("report(s) of r-a" in loss for loss in check_tree(redis_client, "r", True).losses)
    redis_client.rpush("uc:{r}:messages", report, report)
    assert any("report(s) of r-a" in dup for dup in check_tree(redis_client, "r", True).duplicates)
