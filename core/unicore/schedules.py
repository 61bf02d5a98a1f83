"""Schedules (issue 31, docs/schedules.md): when an AgentSchedule starts an AgentTask, decided by pure functions that
the operator (``unicore_operator.schedules``) and local mode (``unicore schedule``) share.

The semantics are Kubernetes CronJob's:

- a run's task is named after its schedule and its scheduled time (``run_name``): an operator that restarts, or two
  that overlap, create it once (the second create answers 409);
- the due times are those after the last one handled (``status.lastScheduleTime``, else the schedule's creation) up
  to now; only the most recent is acted on, the older ones are *missed* (an Event says how many);
- ``startingDeadlineSeconds``: a due time older than that is skipped (an Event), not started late;
- ``concurrencyPolicy`` when a task of the schedule is still active (not Idle, Failed or Archived): ``Allow`` starts
  another; ``Forbid`` waits (the run starts late once the active one ends, if still within its deadline and before
  the next time, else it is missed); ``Replace`` deletes the active ones and starts the new one;
- history: the newest ``successfulTasksHistoryLimit`` Idle and ``failedTasksHistoryLimit`` Failed tasks are kept.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from zoneinfo import ZoneInfo

from unicore.api.contract import label_value
from unicore.api.spec import ScheduleSpec
from unicore.cron import Cron

MISSED_LIMIT = 100  # due times kept at most (the newest); the Event counts them all
LOOKBACK = datetime.timedelta(days=7)  # due times older than this (an operator down that long) are not counted
ACTIVE_PHASES_DONE = frozenset({"Idle", "Failed", "Archived"})  # a task in one of these is no longer active

Action = Literal["none", "start", "wait", "skip", "replace"]


@dataclass(frozen=True)
class Decision:
    """What to do now: ``start`` the run of ``at``; ``wait`` (Forbid: a task is active); ``skip`` it (past its
    starting deadline); ``replace`` (delete ``replace``, then start the run of ``at``); ``none`` (nothing due).
    ``missed``: due times before ``at`` that are skipped; ``next_time``: the next scheduled time after now."""

    action: Action
    at: datetime.datetime | None = None
    missed: int = 0
    replace: tuple[str, ...] = ()
    next_time: datetime.datetime | None = None


def run_name(schedule: str, at: datetime.datetime) -> str:
    """The AgentTask of ``schedule``'s run at ``at``: ``<schedule>-<minutes since the epoch>`` (as a CronJob names
    its Jobs), the same whoever creates it."""
    return f"{schedule}-{int(at.timestamp()) // 60}"


def schedule_label(schedule: str) -> str:
    """The ``unicore.dev/schedule`` label value of a schedule's tasks."""
    return label_value(schedule)


def decide(spec: ScheduleSpec, cron: Cron, tz: ZoneInfo, *, now: datetime.datetime, since: datetime.datetime,
           active: Sequence[str], name: str = "", started: Collection[str] = ()) -> Decision:
    """What schedule ``name`` does at ``now``, its last handled time being ``since``, ``active`` its active tasks
    and ``started`` the runs' tasks that exist. A due run whose task exists was started (by an operator that died
    before recording it): ``start`` again (the create is a 409), whatever the concurrency policy; it is not
    waiting for itself."""
    next_time = cron.next_after(now, tz)
    if spec.suspend:
        return Decision("none", next_time=next_time)
    times, total = cron.times_between(max(since, now - LOOKBACK), now, tz, limit=MISSED_LIMIT)
    if not times:
        return Decision("none", next_time=next_time)
    at, missed = times[-1], total - 1
    if run_name(name, at) in started:
        return Decision("start", at, missed, next_time=next_time)
    deadline = spec.starting_deadline_seconds
    if deadline is not None and (now - at).total_seconds() > deadline:
        return Decision("skip", at, missed, next_time=next_time)
    if active and spec.concurrency_policy == "Forbid":
        return Decision("wait", at, missed, next_time=next_time)
    if active and spec.concurrency_policy == "Replace":
        return Decision("replace", at, missed, replace=tuple(active), next_time=next_time)
    return Decision("start", at, missed, next_time=next_time)


@dataclass(frozen=True)
class Run:
    """A task a schedule started: its name, its phase and its scheduled time."""

    name: str
    phase: str
    at: datetime.datetime

    @property
    def active(self) -> bool:
        return self.phase not in ACTIVE_PHASES_DONE


def beyond_history(runs: Iterable[Run], *, successful: int, failed: int) -> list[str]:
    """The runs to delete: all but the newest ``successful`` Idle ones and the newest ``failed`` Failed ones."""
    ordered = sorted(runs, key=lambda run: run.at, reverse=True)
    idle = [run.name for run in ordered if run.phase == "Idle"]
    failing = [run.name for run in ordered if run.phase == "Failed"]
    return idle[successful:] + failing[failed:]


__all__ = ["ACTIVE_PHASES_DONE", "LOOKBACK", "MISSED_LIMIT", "Decision", "Run", "beyond_history", "decide", "run_name",
           "schedule_label"]
