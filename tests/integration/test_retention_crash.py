"""Retention survives a crash (issue 15, item 4): ``unicore gc`` SIGKILLed at each step between the archive and the
end of the removal (``UNICORE_FAULTS=kill:<step>``, ``unicore.faults``); the next pass finishes the removal, the
archive holds the whole tree, exactly one archive object exists, and nothing half-removed is left runnable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from unicore.archive import read_document
from unicore.faults import ENV
from unicore.store import retention as state
from unicore.store.keys import RETENTION_JOURNAL, TASKS_INDEX, TaskKeys
from unicore.store.tasks import TaskStore

from tests.integration.conftest import TurnRunner
from tests.integration.test_retention import make_tree, stored
from tests.waiting import wait_for

TTL = 1.0
STEPS = ["retention after archive", "retention after journal", "retention after retire", "retention after purge"]
UNICORE = str(Path(sys.executable).with_name("unicore"))


def gc(redis_url: str, archive: Path, home: Path, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "UNICORE_HOME": str(home)}
    env.pop(ENV, None)
    if fault:
        env[ENV] = f"kill:{fault}"
    return subprocess.run([UNICORE, "gc", "--ttl", str(TTL), "--archive", archive.as_uri()], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("step", STEPS)
def test_a_pass_killed_mid_removal_is_finished_by_the_next(
    step: str, store: TaskStore, turn: TurnRunner, redis_client: redis.Redis, redis_url: str, tmp_path: Path,
) -> None:
    ids = make_tree(store, turn, "crash", children=2)
    messages = {task_id: stored(redis_client, task_id) for task_id in ids}
    tree = state.read_tree(redis_client, "crash")
    assert tree is not None
    wait_for(lambda: time.time() > tree.last_activity() + TTL, timeout=10, what="the tree to pass its TTL")
    archive = tmp_path / "archive"

    killed = gc(redis_url, archive, tmp_path / "home", fault=step)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    files = list(archive.rglob("*.jsonl"))
    assert len(files) == 1  # the archive is always written before anything else
    if step != "retention after archive":
        assert redis_client.hexists(RETENTION_JOURNAL, "crash")
    if step in ("retention after retire", "retention after purge"):
        # Every task is retired: none exists for a turn or a producer, so none can run half-removed.
        assert not any(store.exists(task_id) for task_id in ids)
        assert not any(store.needs_turn(task_id) for task_id in ids)

    finished = gc(redis_url, archive, tmp_path / "home")
    assert finished.returncode == 0, finished.stderr
    assert "crash: removed 3 task(s), archived to file://" in finished.stdout
    assert list(archive.rglob("*.jsonl")) == files  # the same object (named by its content), never a second
    header, tasks = read_document(files[0].read_bytes())
    assert header["tasks"] == ids
    assert {task["task"]: task["keys"]["messages"]["value"] for task in tasks} == messages  # nothing lost
    for task_id in ids:
        assert [key for key in TaskKeys(task_id).all() if redis_client.exists(key)] == [TaskKeys(task_id).archived]
        assert redis_client.zscore(TASKS_INDEX, task_id) is None
        note = state.archived_note(store, task_id)
        assert note is not None and note.url == files[0].as_uri()
    assert not redis_client.exists(RETENTION_JOURNAL)


def test_gc_refuses_bad_settings_in_one_line(redis_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "UNICORE_HOME": str(tmp_path)}
    env.pop("UNICORE_RETENTION_TTL_SECONDS", None)
    off = subprocess.run([UNICORE, "gc"], env=env, capture_output=True, text=True, timeout=60)
    assert off.returncode == 2 and off.stderr.count("\n") == 1 and "retention is off" in off.stderr
    env["UNICORE_RETENTION_TTL_SECONDS"] = "60"
    env["UNICORE_RETENTION_ARCHIVE_URL"] = "ftp://nowhere"
    bad = subprocess.run([UNICORE, "gc"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
    assert "UNICORE_RETENTION_ARCHIVE_URL" in bad.stderr and "Traceback" not in bad.stderr
