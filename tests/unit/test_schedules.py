"""AgentSchedules' decisions (``unicore.schedules``, pure) and the AgentTasks the operator builds for them, with the
CronJob semantics docs/schedules.md promises; the CRD is what hack/gen-schedule-crd.py writes."""

from __future__ import annotations

import datetime
import importlib.util
from pathlib import Path
from typing import Any

import pytest
from unicore.api.spec import ScheduleSpec, task_spec_of
from unicore.cron import Cron, zone
from unicore.schedules import Run, beyond_history, decide, run_name
from unicore_operator.schedules import build_scheduled_task, runs_of

ROOT = Path(__file__).resolve().parents[2]
UTC = datetime.UTC
T0 = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=UTC)  # a minute boundary


def spec(**fields: Any) -> ScheduleSpec:
    return ScheduleSpec.model_validate({"schedule": "* * * * *", "taskTemplate": {"spec": {"prompt": "report"}},
                                        **fields})


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


def plan(schedule: ScheduleSpec, *, now: float, since: float, active: tuple[str, ...] = ()) -> Any:
    return decide(schedule, Cron.parse(schedule.schedule), zone(schedule.time_zone), now=at(now), since=at(since),
                  active=list(active))


def test_a_due_run_starts_once_and_then_nothing_is_due_until_the_next_time() -> None:
    first = plan(spec(), now=1.05, since=0.5)
    assert (first.action, first.at, first.missed, first.next_time) == ("start", at(1), 0, at(2))
    again = plan(spec(), now=1.5, since=1)  # the run of 12:01 was handled: lastScheduleTime = 12:01
    assert (again.action, again.at) == ("none", None)


def test_runs_missed_while_the_operator_was_down_start_only_the_newest_and_count_the_rest() -> None:
    late = plan(spec(), now=10.2, since=0)
    assert (late.action, late.at, late.missed) == ("start", at(10), 9)


def test_a_run_past_its_starting_deadline_is_skipped_and_one_within_it_starts_late() -> None:
    assert plan(spec(startingDeadlineSeconds=30), now=1.6, since=0).action == "skip"
    late = plan(spec(startingDeadlineSeconds=60), now=1.6, since=0)
    assert (late.action, late.at) == ("start", at(1))


def test_concurrency_policies_with_a_task_still_active() -> None:
    assert plan(spec(concurrencyPolicy="Allow"), now=2.01, since=1, active=("r-1",)).action == "start"
    waits = plan(spec(concurrencyPolicy="Forbid"), now=2.01, since=1, active=("r-1",))
    assert (waits.action, waits.at) == ("wait", at(2))
    # Forbid: once the active task ends, the same run starts late; after the next time, that one instead
    assert plan(spec(concurrencyPolicy="Forbid"), now=2.5, since=1).at == at(2)
    later = plan(spec(concurrencyPolicy="Forbid"), now=3.01, since=1)
    assert (later.action, later.at, later.missed) == ("start", at(3), 1)
    replaces = plan(spec(concurrencyPolicy="Replace"), now=2.01, since=1, active=("r-1", "r-0"))
    assert (replaces.action, replaces.replace) == ("replace", ("r-1", "r-0"))


def test_a_due_run_whose_task_exists_was_started_and_does_not_wait_for_itself() -> None:
    # an operator created the run's task, then died before recording the run: under Forbid the task is active, but
    # it is this run's own task: the run counts as started (its create again is a 409), it does not wait
    own = run_name("r", at(2))
    again = decide(spec(concurrencyPolicy="Forbid"), Cron.parse("* * * * *"), zone(None), now=at(2.1), since=at(1),
                   active=[own], name="r", started={own})
    assert (again.action, again.at) == ("start", at(2))
    other = decide(spec(concurrencyPolicy="Forbid"), Cron.parse("* * * * *"), zone(None), now=at(2.1), since=at(1),
                   active=["r-old"], name="r", started={"r-old"})
    assert other.action == "wait"


def test_a_suspended_schedule_starts_nothing_but_still_says_its_next_time() -> None:
    held = plan(spec(suspend=True), now=5.5, since=0)
    assert (held.action, held.next_time) == ("none", at(6))


def test_time_zones_schedule_in_local_time() -> None:
    berlin = spec(schedule="0 9 * * *", timeZone="Europe/Berlin")  # 09:00 in Berlin is 08:00 UTC in winter
    due = plan(berlin, now=0, since=-12 * 60)  # from 00:00 to 12:00 UTC
    assert due.at == datetime.datetime(2026, 11, 28, 8, 0, tzinfo=UTC)


def test_run_names_are_deterministic_per_scheduled_time() -> None:
    assert run_name("nightly", at(0)) == run_name("nightly", at(0)) == f"nightly-{int(T0.timestamp()) // 60}"
    assert run_name("nightly", at(1)) != run_name("nightly", at(0))


def test_history_keeps_the_newest_idle_and_failed_runs() -> None:
    runs = [Run(f"r-{i}", phase, at(i)) for i, phase in enumerate(
        ["Idle", "Failed", "Idle", "Idle", "Failed", "Running", "Idle"])]
    assert sorted(beyond_history(runs, successful=2, failed=1)) == ["r-0", "r-1", "r-2"]
    assert beyond_history(runs, successful=0, failed=0) == ["r-6", "r-3", "r-2", "r-0", "r-4", "r-1"]
    assert [run.name for run in runs if run.active] == ["r-5"]


SCHEDULE = {"apiVersion": "unicore.dev/v1alpha1", "kind": "AgentSchedule",
            "metadata": {"name": "nightly", "namespace": "team-a", "uid": "sched-uid"},
            "spec": {"schedule": "0 2 * * *", "taskTemplate": {
                "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
                "spec": {"prompt": "Write the report.", "agentRef": {"name": "writer"}, "limits": {"maxDepth": 1}}}}}


def test_a_runs_task_is_the_template_labelled_with_its_schedule_and_time_and_owned_by_it() -> None:
    when = datetime.datetime(2026, 11, 28, 2, 0, tzinfo=UTC)
    task = build_scheduled_task(SCHEDULE, ScheduleSpec.model_validate(SCHEDULE["spec"]), when)
    meta = task["metadata"]
    assert meta["name"] == run_name("nightly", when) and meta["namespace"] == "team-a"
    assert meta["labels"] == {"team": "a", "unicore.dev/schedule": "nightly"}
    assert meta["annotations"] == {"note": "x", "unicore.dev/scheduled-at": "2026-11-28T02:00:00Z"}
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("AgentSchedule", "nightly",
                                                                                 "sched-uid", True)
    parsed = task_spec_of(task)
    assert parsed.prompt == "Write the report." and parsed.agent_ref is not None and parsed.limits.max_depth == 1
    index = {("team-a", meta["name"]): [{**task, "status": {"phase": "Running"}}],
             ("team-a", "other"): [{"metadata": {"name": "other", "labels": {}}}],
             ("team-b", meta["name"]): [{**task, "metadata": {**meta, "namespace": "team-b"}}]}
    assert runs_of(index, "team-a", "nightly") == [Run(meta["name"], "Running", when)]


def test_the_crd_is_what_the_generator_writes_and_its_template_is_an_agenttask_spec() -> None:
    loaded = importlib.util.spec_from_file_location("gen_schedule_crd", ROOT / "hack" / "gen-schedule-crd.py")
    assert loaded is not None and loaded.loader is not None
    generator = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(generator)
    text = generator.render()
    for path in generator.TARGETS:
        assert path.read_text() == text, f"{path} is stale: run .venv/bin/python hack/gen-schedule-crd.py"
    crd = generator.crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(schema["properties"]) == {ScheduleSpec.model_fields[f].alias or f for f in ScheduleSpec.model_fields}
    template = schema["properties"]["taskTemplate"]["properties"]["spec"]
    assert "parentRef" not in template["properties"] and "oldSelf" not in str(template)
    assert {"prompt", "agentRef", "limits", "tools", "gpus"} <= set(template["properties"])


@pytest.mark.parametrize("bad", [{"concurrencyPolicy": "Sometimes"}, {"successfulTasksHistoryLimit": 101},
                                 {"startingDeadlineSeconds": -1}, {"schedule": ""}])
def test_the_model_refuses_what_the_crd_refuses(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        spec(**bad)


def test_a_scheduled_tasks_status_says_which_schedule_started_it_and_for_when() -> None:
    from unicore_operator.indexes import compact_task
    from unicore_operator.phases import origin_of

    when = datetime.datetime(2026, 11, 28, 2, 0, tzinfo=UTC)
    task = build_scheduled_task(SCHEDULE, ScheduleSpec.model_validate(SCHEDULE["spec"]), when)
    task["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "x" * 10_000
    indexed = compact_task(task)
    assert indexed["metadata"]["annotations"] == {"unicore.dev/scheduled-at": "2026-11-28T02:00:00Z"}  # small
    assert origin_of(indexed) == {"kind": "AgentSchedule", "name": "nightly", "at": "2026-11-28T02:00:00Z"}
    assert origin_of({"metadata": {"name": "by-hand", "labels": {}}}) is None
    assert origin_of({"metadata": {"labels": {"unicore.dev/trigger": "alerts"},
                                   "annotations": {"unicore.dev/event-id": "alert-1"}}}) == {
        "kind": "AgentTrigger", "name": "alerts", "id": "alert-1"}
    assert origin_of({"metadata": {"labels": {"unicore.dev/a2a-agent": "advisor"},
                                   "annotations": {"unicore.dev/a2a-caller": "system:serviceaccount:t:c"}}}) == {
        "kind": "A2A", "name": "advisor", "caller": "system:serviceaccount:t:c"}
