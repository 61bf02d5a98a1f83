"""``unicore schedule FILE...``: local mode runs the AgentSchedules of ``FILE``s (docs/schedules.md) while it runs.

The same documents ``kubectl apply`` takes, decided by the same functions as the operator (``unicore.schedules``):
each run is a local root task named ``<schedule>-<minutes since the epoch>`` (a second ``unicore schedule`` over the
same Redis, or a restart within the minute, starts it once: the second create finds the task), run by a supervisor
thread of its own until its tree settles. A run counts as active while that thread runs (``concurrencyPolicy``).
Runs due before the command started are not started (nothing records them across commands); the history limits
are the operator's alone: local runs stay until ``unicore gc`` retires them.
"""

from __future__ import annotations

import argparse
import datetime
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ValidationError
from unicore.api.contract import GROUP, SCHEDULE_KIND
from unicore.api.schema import TaskSpec
from unicore.api.spec import AgentTaskSpec, ScheduleSpec, SpecInvalid, to_task_spec
from unicore.cron import Cron, CronError, zone
from unicore.launch.embedded_redis import redis_url, unicore_home
from unicore.schedules import decide, run_name
from unicore.store.client import RedisClient
from unicore.store.tasks import TaskStore, connect
from unicore.terminal import printable
from unicore.traces import anchors

from unicore_client.arguments import UsageError, read_yaml_documents

TICK_SECONDS = 1.0
Model = TypeVar("Model", bound=BaseModel)


@dataclass
class LocalSchedule:
    """One schedule of the files: its spec, parsed cron and zone, the last time it handled and its runs' threads."""

    name: str
    spec: ScheduleSpec
    cron: Cron
    zone: ZoneInfo
    task: AgentTaskSpec
    since: datetime.datetime
    threads: dict[str, threading.Thread] = field(default_factory=dict)

    def active(self) -> list[str]:
        return sorted(name for name, thread in self.threads.items() if thread.is_alive())


def read_schedules(paths: list[str], now: datetime.datetime) -> list[LocalSchedule]:
    """The AgentSchedules of ``paths``; UsageError for the first bad one (nothing runs)."""
    found: dict[str, LocalSchedule] = {}
    for path in paths:
        documents = read_yaml_documents(path, "schedule file")
        for position, document in enumerate(documents, start=1):
            where = path if len(documents) == 1 else f"{path} (document {position})"
            schedule = _read_document(document, where, now)
            if schedule is None:
                continue
            if schedule.name in found:
                raise UsageError(f"{where}: a second AgentSchedule named {schedule.name!r}")
            found[schedule.name] = schedule
    if not found:
        raise UsageError(f"{', '.join(paths)}: no {SCHEDULE_KIND} document found")
    return list(found.values())


def _read_document(document: Any, where: str, now: datetime.datetime) -> LocalSchedule | None:
    if not isinstance(document, dict):
        raise UsageError(f"{where}: a document is a mapping with apiVersion, kind, metadata and spec")
    if document.get("kind") != SCHEDULE_KIND:
        return None  # Agents and others of the same file: not this command's
    if not str(document.get("apiVersion") or "").startswith(f"{GROUP}/"):
        raise UsageError(f"{where}: apiVersion must be {GROUP}/<version>")
    name = str((document.get("metadata") or {}).get("name") or "")
    if not name or "/" in name:
        raise UsageError(f"{where}: metadata.name is required and has no '/'")
    spec = _validated(ScheduleSpec, document.get("spec") or {}, f"{where}: spec.")
    task = _validated(AgentTaskSpec, spec.task_template.spec, f"{where}: spec.taskTemplate.spec.")
    try:
        cron, tz = Cron.parse(spec.schedule), zone(spec.time_zone)
    except CronError as exc:
        raise UsageError(f"{where}: {exc}") from None
    if not (task.prompt or "").strip():
        raise UsageError(f"{where}: spec.taskTemplate.spec.prompt is required")
    if task.mcp_servers:
        raise UsageError(f"{where}: local schedules run no MCP servers (spec.taskTemplate.spec.mcpServers)")
    return LocalSchedule(name, spec, cron, tz, task, since=now)


def _validated(model: type[Model], data: Any, prefix: str) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise UsageError(f"{prefix}{'.'.join(str(p) for p in error['loc'])}: {error['msg']}") from None


def local_task_spec(task_id: str, task: AgentTaskSpec) -> TaskSpec:
    """The local root task of a run: the template's spec, its agent by its bare (local) name."""
    try:
        built = to_task_spec("local", task_id, task, None)
    except SpecInvalid as exc:
        raise UsageError(str(exc)) from None
    update: dict[str, Any] = {"id": task_id, "prompt": task.prompt}
    if task.agent_ref is not None:
        update["agent"] = task.agent_ref.name
    return built.model_copy(update=update)


class LocalScheduler:
    """Starts the runs of ``schedules`` as they come due (``tick``), each in a supervisor thread of its own."""

    def __init__(self, client: RedisClient, url: str, schedules: list[LocalSchedule],
                 say: Callable[[str], None]) -> None:
        self.client, self.url, self.schedules, self.say = client, url, schedules, say
        self.store = TaskStore(client)

    def tick(self, now: datetime.datetime) -> list[str]:
        """Start what is due at ``now``; the runs started."""
        started: list[str] = []
        for schedule in self.schedules:
            decision = decide(schedule.spec, schedule.cron, schedule.zone, now=now, since=schedule.since,
                              active=schedule.active(), name=schedule.name, started=schedule.threads.keys())
            at = decision.at
            if at is None or decision.action == "none":
                continue
            if decision.action == "wait":
                continue  # Forbid: the same run is due again at the next tick, until the active one ends
            schedule.since = at
            if decision.action == "skip":
                self.say(f"schedule {schedule.name}: the run of {at:%Y-%m-%d %H:%M} UTC is skipped (past its "
                         "starting deadline)")
                continue
            if decision.action == "replace":
                self.say(f"schedule {schedule.name}: concurrencyPolicy Replace: local mode does not stop "
                         f"{', '.join(decision.replace)}; it runs on beside the new run")
            name = run_name(schedule.name, at)
            if not self.store.create_task(local_task_spec(name, schedule.task),
                                          trace_parent=anchors.for_new_task(name, name, parent=None)):
                continue  # another scheduler (or this one before a restart) started it
            self.store.activate(name, "schedule")
            thread = threading.Thread(target=self._settle, args=(name,), name=f"schedule-{name}", daemon=True)
            schedule.threads[name] = thread
            thread.start()
            started.append(name)
            self.say(f"schedule {schedule.name}: started {name} (run of {at:%Y-%m-%d %H:%M} UTC)")
        return started

    def _settle(self, root: str) -> None:
        from unicore.launch.local import LocalSupervisor

        supervisor = LocalSupervisor(self.client, self.url, log_dir=unicore_home() / "logs")
        report = supervisor.run_until_settled(root)
        outcome = "failed" if report.failures else "settled"
        self.say(f"{root}: {outcome}")

    def next_times(self, now: datetime.datetime) -> list[str]:
        return [f"schedule {s.name}: next run {s.cron.next_after(now, s.zone):%Y-%m-%d %H:%M} UTC"
                + (" (suspended)" if s.spec.suspend else "") for s in self.schedules]


def cmd_schedule(args: argparse.Namespace) -> int:
    now = datetime.datetime.now(datetime.UTC)
    schedules = read_schedules(args.files, now)
    url = redis_url()
    client = connect(url)

    def say(text: str) -> None:
        if not args.quiet:
            print(f"[unicore] {printable(text)}", file=sys.stderr, flush=True)

    scheduler = LocalScheduler(client, url, schedules, say)
    try:
        for line in scheduler.next_times(now):
            say(line)
    except CronError as exc:
        raise UsageError(str(exc)) from None
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    while not stop.wait(TICK_SECONDS):
        scheduler.tick(datetime.datetime.now(datetime.UTC))
    say("stopped: runs in progress stop with this process")
    return 0


def add_schedule_command(sub: Any) -> None:
    schedule = sub.add_parser("schedule", help="run the AgentSchedules of files while this command runs")
    schedule.add_argument("files", nargs="+", metavar="FILE", help="YAML files with AgentSchedule documents")
    schedule.add_argument("--quiet", action="store_true", help="print nothing but errors")
    schedule.set_defaults(func=cmd_schedule)


__all__ = ["LocalSchedule", "LocalScheduler", "add_schedule_command", "cmd_schedule", "local_task_spec",
           "read_schedules"]
