"""Local mode's command Jobs (``submit_job``, issue 29): the supervisor runs each outstanding request of the tasks it
supervises as a background command in a thread, and delivers its result once (``unicore.store.command_jobs``).

Each scan of the tree (``LocalJobs.step``, one pipelined read for the whole tree) looks at every request without an
``ended:<n>``:

- not created yet: claimed with ``HSETNX created:<n>`` (so two supervisors never both run it; the value names this
  process: ``local:<host>:<pid>:<start>``) and started as ``LocalRunner.run`` in the tree's workspace (the folder its
  turns use), sandboxed unless ``UNICORE_COMMAND_SANDBOX=0``, with the request's timeout. A suspended task's request
  is not run: it is delivered as cancelled at once.
- created by this process: running (its thread delivers the result when it ends); a suspended task's (``unicore
  stop|suspend``) is cancelled, its result "cancelled" delivered like the others.
- created by a live supervisor process of this host: left to it (it still counts as outstanding).
- created by anything else (an earlier ``unicore run`` that was killed): delivered as failed, "the local run that
  ran it ended before it did", rather than run twice. Its sandbox normally died with that run; one left behind (the run
  killed in the milliseconds before bwrap bound itself to it) is killed first, found by its tag
  (``<created>/<task id>/<n>``, ``kill_tagged_sandboxes``).

``step`` returns how many requests of the tree are outstanding: the tree does not settle while any is. A run that
ends unsettled (its timeout, Ctrl-C) ends its jobs with ``stop_all``: they are killed and delivered as failed with the
same reason, so none outlives the run that started it.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from unicore.api.schema import task_name
from unicore.commands.result import CommandResult
from unicore.errors import ToolError
from unicore.log import get_logger
from unicore.settings import RuntimeSettings
from unicore.store import command_jobs
from unicore.store.command_jobs import JobOutcome, JobRequest
from unicore.store.tasks import TaskStore

log = get_logger("launch.local_jobs")

LOG_TAIL_BYTES = 4096
ENDED_BEFORE = "the local run that ran it ended before it did"
SUSPENDED = "the task was suspended or stopped"


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, /proc/PID/stat's 22nd field); None when there is no
    such process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_marker() -> str:
    """``local:<host>:<pid>:<start>``: this process, as the ``created:<n>`` of a job it runs."""
    return f"local:{socket.gethostname()}:{os.getpid()}:{_process_start(os.getpid()) or '?'}"


def held_by_live_process(marker: str) -> bool:
    """True when ``marker`` names another process of this host that still runs (the same pid and start time)."""
    parts = marker.split(":")
    if len(parts) != 4 or parts[0] != "local" or parts[1] != socket.gethostname() or not parts[2].isdigit():
        return False
    pid = int(parts[2])
    return pid != os.getpid() and _process_start(pid) == parts[3]


def log_tail(result: CommandResult, limit: int = LOG_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of the command's stdout then stderr (their kept tails)."""
    out = result.stdout
    if out and result.stderr and not out.endswith("\n"):
        out += "\n"
    data = (out + result.stderr).encode("utf-8", errors="replace")
    return data[-limit:].decode("utf-8", errors="ignore")


def outcome_of(result: CommandResult, request: JobRequest, *, interrupted: bool) -> JobOutcome:
    """How a finished run ended, as the job's outcome."""
    tail, duration = log_tail(result), result.duration_seconds
    if result.cancelled:
        if interrupted:
            return JobOutcome("failed", reason=ENDED_BEFORE, duration_seconds=duration, log_tail=tail)
        return JobOutcome("cancelled", reason=SUSPENDED, duration_seconds=duration, log_tail=tail)
    if result.timed_out:
        return JobOutcome("failed", reason=f"it ran past its timeout of {request.timeout_seconds} s",
                          duration_seconds=duration, log_tail=tail)
    if result.exit_code is None:
        return JobOutcome("failed", reason=f"killed by {result.signal or 'a signal'}", duration_seconds=duration,
                          log_tail=tail)
    return JobOutcome("succeeded" if result.exit_code == 0 else "failed", exit_code=result.exit_code,
                      duration_seconds=duration, log_tail=tail)


def sandbox_tag(created: str, task_id: str, n: int) -> str:
    """The tag of the sandbox that ran request ``n`` of ``task_id`` for the process ``created`` names."""
    return f"{created}/{task_id}/{n}"


def _kill_left_behind(tag: str) -> None:
    from unicore.commands.local_runner import kill_tagged_sandboxes

    if kill_tagged_sandboxes(tag):
        log.warning("killed the sandbox %s left behind by a run that ended", tag)


@dataclass
class _Job:
    task_id: str
    name: str
    request: JobRequest
    cancel: threading.Event = field(default_factory=threading.Event)
    interrupted: bool = False  # cancelled because the run ends (stop_all), not by a suspension
    thread: threading.Thread | None = None
    outcome: JobOutcome | None = None  # set when it ended; delivered: ``done``
    done: bool = False


# Every job this process started, by (task id, number); never removed, so a request this process ran is never taken
# for one of a dead run (a scan may read it outstanding just before its thread delivers it).
_started: dict[tuple[str, int], _Job] = {}
_started_lock = threading.Lock()


class LocalJobs:
    """The command Jobs a ``LocalSupervisor`` runs (see the module's docstring). ``env``: the environment its turns
    get (their workspace and sandbox settings are read from it)."""

    def __init__(self, store: TaskStore, env: Mapping[str, str], on_event: Callable[[str], None]) -> None:
        self.store = store
        self.env = dict(env)
        self.on_event = on_event
        self.marker = process_marker()
        self.jobs: dict[tuple[str, int], _Job] = {}  # this supervisor's, until delivered

    def step(self, root_id: str, task_ids: list[str]) -> int:
        """Start, cancel and collect the jobs of ``task_ids`` (the tree of ``root_id``); how many are outstanding."""
        self._deliver_finished()
        count = 0
        for task_id, outstanding, suspended in command_jobs.tree_job_states(self.store, task_ids) if task_ids else []:
            for state in outstanding:
                count += 1
                key = (task_id, state.request.n)
                with _started_lock:
                    ours = _started.get(key)
                if ours is not None:
                    if suspended and not ours.cancel.is_set():
                        self.on_event(f"job cancelling: {ours.name} ({task_id} is suspended)")
                        ours.cancel.set()
                    continue
                name = command_jobs.job_name(task_name(task_id), state.request.n)
                if state.created is None:
                    if suspended:
                        self._deliver(_Job(task_id, name, state.request),
                                      JobOutcome("cancelled", reason=f"{SUSPENDED} before it started"))
                    else:
                        self._start(root_id, task_id, name, state.request)
                elif not held_by_live_process(state.created):
                    _kill_left_behind(sandbox_tag(state.created, task_id, state.request.n))
                    self._deliver(_Job(task_id, name, state.request), JobOutcome("failed", reason=ENDED_BEFORE))
        return count

    def _start(self, root_id: str, task_id: str, name: str, request: JobRequest) -> None:
        if not command_jobs.claim(self.store, task_id, request.n, self.marker):
            return  # another supervisor claimed it since the read: the next scan sees whose it is
        job = _Job(task_id, name, request)
        with _started_lock:
            _started[(task_id, request.n)] = job
        self.jobs[(task_id, request.n)] = job
        job.thread = threading.Thread(target=self._run, args=(root_id, job), name=f"local-job-{name}", daemon=True)
        self.on_event(f"job started: {name} ({request.command[:80]!r})")
        job.thread.start()

    def _run(self, root_id: str, job: _Job) -> None:
        try:
            job.outcome = self._execute(root_id, job)
        except Exception as exc:  # noqa: BLE001 - whatever went wrong, the task gets a result and the tree settles
            log.exception("job %s of %s could not run", job.name, job.task_id)
            job.outcome = JobOutcome("failed", reason=f"it could not run: {' '.join(str(exc).split())[:500]}")
        try:
            self._deliver(job, job.outcome)
        except Exception:  # noqa: BLE001 - Redis away: the supervisor's next step delivers it
            log.exception("job %s of %s: its result could not be delivered yet", job.name, job.task_id)

    def _execute(self, root_id: str, job: _Job) -> JobOutcome:
        from unicore.commands.local_runner import LocalRunner
        from unicore.turn.commands import endpoint_key_variables
        from unicore.turn.defaults import default_workspace

        settings = RuntimeSettings.from_env({**os.environ, **self.env}, only={"workspace", "home", "command_sandbox"})
        workspace = default_workspace(root_id, settings)
        workspace.mkdir(parents=True, exist_ok=True)
        runner = LocalRunner(workspace, sandbox=settings.command_sandbox, hide=(settings.home,),
                             drop_env=endpoint_key_variables())
        try:
            result = runner.run(job.request.command, workdir=".", timeout_seconds=float(job.request.timeout_seconds),
                                cancel=job.cancel, tag=sandbox_tag(self.marker, job.task_id, job.request.n))
        except ToolError as exc:
            return JobOutcome("failed", reason=f"it could not start: {exc}")
        return outcome_of(result, job.request, interrupted=job.interrupted)

    def _deliver(self, job: _Job, outcome: JobOutcome) -> None:
        command_jobs.deliver_result(self.store, job.task_id, job.name, job.request, outcome)
        job.done = True
        how = outcome.state + (f", exit code {outcome.exit_code}" if outcome.exit_code is not None else "")
        self.on_event(f"job ended: {job.name} ({how}" + (f"; {outcome.reason}" if outcome.reason else "") + ")")

    def _deliver_finished(self) -> None:
        """Deliver results a job's thread could not (Redis was away) and forget delivered jobs."""
        for key, job in list(self.jobs.items()):
            if job.outcome is not None and not job.done and not (job.thread and job.thread.is_alive()):
                self._deliver(job, job.outcome)
            if job.done:
                del self.jobs[key]

    def running(self) -> int:
        return sum(1 for job in self.jobs.values() if not job.done)

    def stop_all(self, timeout: float = 10.0) -> None:
        """Kill every job still running (the run ends): each is delivered as failed, ``ENDED_BEFORE``."""
        for job in self.jobs.values():
            if not job.done:
                job.interrupted = True
                job.cancel.set()
        for job in self.jobs.values():
            if job.thread is not None:
                job.thread.join(timeout)
        try:
            self._deliver_finished()
        except Exception:  # noqa: BLE001 - the next run delivers them (created by a process that is gone)
            log.exception("results of stopped jobs could not be delivered")


__all__ = ["ENDED_BEFORE", "LocalJobs", "held_by_live_process", "log_tail", "outcome_of", "process_marker"]
