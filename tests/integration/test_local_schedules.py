"""``unicore schedule`` (local mode, issue 31): the AgentSchedules of a file start local root tasks as the same
functions as the operator decide (``unicore.schedules``), against a real redis-server, with real turn processes. The
scheduler's clock is the argument of ``tick`` (a run is due at a minute; the test does not wait for one), and bad
files are one line, exit 2."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import redis
import yaml
from unicore.store.gates import open_gate
from unicore.store.tasks import TaskStore
from unicore_client.local.main import main as cli
from unicore_client.local.schedule_command import LocalScheduler, read_schedules

from tests.waiting import wait_for

UTC = datetime.UTC
T0 = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def schedule_doc(**spec: object) -> dict[str, object]:
    return {"apiVersion": "unicore.dev/v1alpha1", "kind": "AgentSchedule", "metadata": {"name": "nightly"},
            "spec": {"schedule": "*/5 * * * *", "concurrencyPolicy": "Forbid", "taskTemplate": {"spec": {
                "prompt": "Write the report.", "model": "scripted",
                "script": {"tasks": {"nightly-*": [{"gate": "go", "timeout": 60, "text": "Report done."}]}}}},
                **spec}}


def minutes(at: datetime.datetime) -> int:
    return int(at.timestamp()) // 60


def test_runs_start_once_per_scheduled_time_and_forbid_holds_one_until_the_active_run_ends(
        redis_client: redis.Redis, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICORE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("REDIS_URL", redis_url)
    path = tmp_path / "schedule.yaml"
    path.write_text(yaml.safe_dump_all([{"apiVersion": "unicore.dev/v1alpha1", "kind": "Agent",
                                         "metadata": {"name": "ignored"}, "spec": {"model": "scripted"}},
                                        schedule_doc()]))
    lines: list[str] = []
    store = TaskStore(redis_client)
    scheduler = LocalScheduler(redis_client, redis_url, read_schedules([str(path)], T0), lines.append)

    first = T0 + datetime.timedelta(minutes=5)
    assert scheduler.tick(T0 + datetime.timedelta(minutes=4, seconds=59)) == []  # nothing due yet
    assert scheduler.tick(first + datetime.timedelta(seconds=1)) == [f"nightly-{minutes(first)}"]
    assert scheduler.tick(first + datetime.timedelta(seconds=2)) == []  # handled: once per scheduled time
    task = store.get_task(f"nightly-{minutes(first)}")
    assert task.parent is None and task.model == "scripted"

    second = T0 + datetime.timedelta(minutes=10)
    assert scheduler.tick(second + datetime.timedelta(seconds=1)) == []  # Forbid: the first run is active
    open_gate(redis_client, f"nightly-{minutes(first)}", "go")
    wait_for(lambda: not scheduler.schedules[0].active(), timeout=60, what="the first run's tree to settle")
    assert store.get_task(f"nightly-{minutes(first)}").status == "idle"
    assert scheduler.tick(second + datetime.timedelta(seconds=30)) == [f"nightly-{minutes(second)}"]  # late, once

    # another scheduler over the same Redis (or this one restarted) starts nothing twice
    again = LocalScheduler(redis_client, redis_url, read_schedules([str(path)], first), lines.append)
    assert again.tick(second + datetime.timedelta(seconds=31)) == []
    assert any("started nightly-" in line for line in lines)
    open_gate(redis_client, f"nightly-{minutes(second)}", "go")
    wait_for(lambda: not scheduler.schedules[0].active(), timeout=60, what="the second run's tree to settle")


@pytest.mark.parametrize(("spec", "message"), [
    ({"schedule": "0 25 * * *"}, "cron field 'hour': 25 is out of range 0-23"),
    ({"timeZone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"concurrencyPolicy": "Sometimes"}, "spec.concurrencyPolicy"),
    ({"taskTemplate": {"spec": {"prompt": "  "}}}, "spec.taskTemplate.spec.prompt: the prompt is empty"),
    ({"taskTemplate": {"spec": {"model": "scripted"}}}, "spec.taskTemplate.spec.prompt is required"),
])
def test_a_bad_schedule_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     spec: dict[str, object], message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(schedule_doc(**spec)))
    assert cli(["schedule", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
