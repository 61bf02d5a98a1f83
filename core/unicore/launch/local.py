"""Local mode (one process per turn): run a task tree on this machine until it settles.

The supervisor consumes ``uc:activations`` with the consumer group ``local`` (plus a periodic scan of the tree as
a safety net) and starts one ``unicore-turn <task>`` process per task that should run a turn (``unicore.scheduling``,
the decision the operator takes too: pending inbox or an unfinished turn whose process died, no live lease) and that
no process of ours runs already, or that still owes its parent a report (its turn ended, its process died before
delivering it: the next turn process delivers it first; for a suspended task, which runs none, the supervisor
delivers it itself, as the operator does). Children run in parallel. It returns when every task of the tree is
idle with an empty inbox (or waits for a person, ``state.approvals.blocked``: a waiting task runs no process), no
process is left and no command Job (``submit_job``) of the tree is outstanding: the supervisor runs those itself, in
threads, and delivers their results (``launch.local_jobs``). Approvals that waited past their task's timeout are denied
here, as the operator's timer does on Kubernetes.

Batching of child completions: a parent whose inbox holds only child completions is held
while other children of it are still busy, so it reads their answers together in one turn instead of one turn per
child. Any other message (user, tool result) starts the parent at once.

Suspended tasks (``state.suspension``: ``unicore suspend|stop``, the web UI) start no turn, and a running turn of
one is stopped as the operator stops a suspended task's Job: SIGTERM (the turn stops at a safe point, its unanswered
tool calls recorded as cancelled), SIGKILL after ``SUSPEND_GRACE_SECONDS``. Checked on the task's activation (a
suspend activates it) and on every scan, so whichever supervisor runs the turn stops it within a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from unicore.api import pod_env
from unicore.errors import TaskNotFound
from unicore.launch.local_jobs import LocalJobs
from unicore.log import get_logger
from unicore.scheduling import Reason
from unicore.store import approvals
from unicore.store.activations import ActivationConsumer, missing_group
from unicore.store.reads import busy, last_error
from unicore.store.suspension import suspended_flags
from unicore.store.tasks import TaskStore
from unicore.turn.reports import deliver_report, post_to_conversations, report_failure

log = get_logger("launch.local")

CONSUMER_GROUP = "local"
DEFAULT_HOLD_SECONDS = 120.0
# A turn killed by a signal (OOM killer, kill -9) is restarted this many times in a row before the task counts as
# failed for the rest of the run (the operator's equivalent is UNICORE_MAX_TURN_RETRIES).
DEFAULT_CRASH_RESTARTS = 3
SUSPEND_GRACE_SECONDS = 30.0  # a suspended turn's SIGTERM -> SIGKILL (a pod's default termination grace period)


@dataclass
class TurnRun:
    task_id: str
    process: subprocess.Popen[bytes]
    started: float
    log_path: Path | None
    holder_host: str = ""  # the first part of the turn's lease holder id (``unicore.store.task_leases._holder_id``)


@dataclass
class SettleReport:
    settled: bool
    turns_run: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # task id -> exit code of its failed turn
    exit_codes: list[tuple[str, int]] = field(default_factory=list)


MAX_FILE_NAME_BYTES = 255


def turn_log_name(task_id: str) -> str:
    """The file name of a task's turn log: ``<id>.log`` ('/' as '__') when that is a plain, short enough file
    name; otherwise (any id, e.g. a 253-character name in a namespace) a readable start of it plus a hash of the
    whole id, within the 255-byte file name limit."""
    plain = task_id.replace("/", "__")
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", plain) and len(plain) + 4 <= MAX_FILE_NAME_BYTES:
        return f"{plain}.log"
    digest = hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    head = re.sub(r"[^A-Za-z0-9._-]", "_", plain)[: MAX_FILE_NAME_BYTES - len(digest) - 5].lstrip(".")
    return f"{head}-{digest}.log"


def turn_command(task_id: str) -> list[str]:
    """``unicore-turn TASK`` from this interpreter's environment."""
    script = Path(sys.executable).with_name("unicore-turn")
    if script.exists():
        return [str(script), task_id]
    return [
        sys.executable,
        "-c",
        "import sys; from unicore.turn.entry import main; sys.exit(main())",
        task_id,
    ]


class LocalSupervisor:
    def __init__(
        self,
        client: redis.Redis,
        redis_url: str,
        *,
        log_dir: Path | None = None,
        poll_seconds: float = 0.2,
        scan_seconds: float = 1.0,
        batch_completions: bool = True,
        hold_seconds: float = DEFAULT_HOLD_SECONDS,
        env: dict[str, str] | None = None,
        on_event: Callable[[str], None] | None = None,
        max_crash_restarts: int = DEFAULT_CRASH_RESTARTS,
    ) -> None:
        self.store = TaskStore(client)
        self.redis = client
        self.redis_url = redis_url
        self.log_dir = log_dir
        self.poll_seconds = poll_seconds
        self.scan_seconds = scan_seconds
        self.batch_completions = batch_completions
        self.hold_seconds = hold_seconds
        self.env = env or {}
        self.on_event = on_event or (lambda text: log.info("%s", text))
        self.consumer = f"local-{os.getpid()}"
        self.running: dict[str, TurnRun] = {}
        self.held_since: dict[str, float] = {}
        self.failed: dict[str, int] = {}
        self.max_crash_restarts = max_crash_restarts
        self.crashes: dict[str, int] = {}  # task id -> turns in a row killed by a signal
        self.stopping: dict[str, float] = {}  # task id -> when its turn was told to stop (the task was suspended)
        self.activations = ActivationConsumer(client, CONSUMER_GROUP, self.consumer)
        self.activations.ensure_group()
        self.jobs = LocalJobs(self.store, self.env, self.on_event)  # the tree's command Jobs (submit_job)

    # ---- scope

    def tree_ids(self, root_id: str) -> list[str]:
        ids, stack = [], [root_id]
        while stack:
            task_id = stack.pop()
            ids.append(task_id)
            stack.extend(self.store.children(task_id))
        return ids

    # ---- processes

    def _mcp_env(self, task_id: str) -> dict[str, str]:
        """UNICORE_MCP_SERVERS for a turn of the tree: the MCP server definitions stored on its root by `unicore
        run --mcp-server` (docs/mcp.md); none stored: the supervisor's own environment decides."""
        try:
            root = self.store.get_task(self.store.get_task(task_id).root)
        except TaskNotFound:
            return {}
        if root.mcp_definitions is None:
            return {}
        return {pod_env.MCP_SERVERS: json.dumps(root.mcp_definitions, separators=(",", ":"))}

    def _start(self, task_id: str) -> None:
        env = {
            **os.environ,
            **self.env,
            pod_env.REDIS_URL: self.redis_url,
            pod_env.TASK_ID: task_id,
            pod_env.SPAWNER: "local",
            **self._mcp_env(task_id),
        }
        log_path = None
        stdout: int | object = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / turn_log_name(task_id)
            stdout = open(log_path, "ab")  # noqa: SIM115 - closed when the process is reaped
        process = subprocess.Popen(turn_command(task_id), env=env, stdout=stdout, stderr=subprocess.STDOUT)  # type: ignore[arg-type]
        if self.log_dir is not None:
            stdout.close()  # type: ignore[union-attr]
        holder_host = env.get(pod_env.POD_NAME) or socket.gethostname()
        self.running[task_id] = TurnRun(task_id, process, time.monotonic(), log_path, holder_host)
        self.held_since.pop(task_id, None)
        self.on_event(f"turn started: {task_id} (pid {process.pid})")

    def _reap(self, report: SettleReport) -> None:
        for task_id, run in list(self.running.items()):
            code = run.process.poll()
            if code is None:
                continue
            del self.running[task_id]
            # Its process is gone: a lease it still holds (killed before it could release) is broken at once, so
            # the next turn need not wait for the lease to expire (fencing keeps any write of it out).
            self.store.break_lease(task_id, f"{run.holder_host}:{run.process.pid}")
            post_to_conversations(self.store, task_id)  # what a turn killed before its end owed them
            report.turns_run += 1
            report.exit_codes.append((task_id, code))
            if self.stopping.pop(task_id, None) is not None:  # suspended: stopped on purpose, not a failure
                self.crashes.pop(task_id, None)
                self.on_event(f"turn stopped: {task_id} (suspended; exit {code})")
            elif code in (0, 3):  # 3: another live turn holds the lease; it will finish the work
                self.crashes.pop(task_id, None)
                self.on_event(
                    f"turn finished: {task_id} (exit {code}, {time.monotonic() - run.started:.1f}s)"
                )
            elif code < 0 and -code not in (signal.SIGTERM, signal.SIGINT) and self._may_restart(task_id):
                # Killed (OOM, kill -9): the task is runnable (its turn is unfinished); the next scan restarts it.
                self.on_event(f"turn CRASHED: {task_id} (signal {-code}); restarting it")
            else:
                report.failures[task_id] = code
                self.failed[task_id] = code
                where = f"; log: {run.log_path}" if run.log_path else ""
                self.on_event(f"turn FAILED: {task_id} (exit {code}){where}")
                if code == 1:  # the turn failed (not cancelled, not a lost lease): its parent is told why
                    reason = last_error(self.redis, task_id) or f"exit code {code}"
                    report_failure(self.store, task_id, reason)

    def _may_restart(self, task_id: str) -> bool:
        """Count a crash of ``task_id``'s turn; True while it is within ``max_crash_restarts`` in a row."""
        self.crashes[task_id] = self.crashes.get(task_id, 0) + 1
        return self.crashes[task_id] <= self.max_crash_restarts

    def _stop_suspended(self, task_ids: list[str]) -> None:
        """SIGTERM the running turns of those of ``task_ids`` that are suspended; SIGKILL one still running after
        the grace period."""
        now = time.monotonic()
        for task_id, since in self.stopping.items():
            run = self.running.get(task_id)
            if run is not None and run.process.poll() is None and now - since > SUSPEND_GRACE_SECONDS:
                run.process.kill()
        candidates = [t for t in task_ids if t in self.running and t not in self.stopping]
        if not candidates:
            return
        for task_id, suspended in zip(candidates, suspended_flags(self.redis, candidates), strict=True):
            if suspended:
                self.stopping[task_id] = now
                self.running[task_id].process.terminate()
                self.on_event(f"turn stopping: {task_id} (suspended)")

    def stop_all(self, timeout: float = 10.0) -> None:
        """SIGTERM every running turn (they stop at a safe point), then wait."""
        for run in self.running.values():
            if run.process.poll() is None:
                run.process.terminate()
        deadline = time.monotonic() + timeout
        for run in self.running.values():
            try:
                run.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                run.process.kill()
                run.process.wait()
        self.running.clear()

    # ---- decisions

    def _held(self, task_id: str) -> bool:
        """Hold a parent whose inbox holds only child completions while other children are still busy."""
        if not self.batch_completions:
            return False
        entries = self.store.inbox(task_id)
        if not entries or any(entry.type != "completion" for entry in entries):
            return False
        busy = [
            child
            for child in self.store.children(task_id)
            if child not in self.failed and (child in self.running or self._busy(child))
        ]
        if not busy:
            return False
        first = self.held_since.setdefault(task_id, time.monotonic())
        return time.monotonic() - first < self.hold_seconds

    def _busy(self, task_id: str) -> bool:
        """Pending inbox, a live lease, or a turn not finished (status running)."""
        return busy(self.store, task_id)

    def _expire_approvals(self, task_id: str) -> None:
        """Deny the task's approvals that waited past its ``approval.timeout_seconds`` (the operator's timer does
        this on Kubernetes); the denial wakes the task like any decision."""
        if approvals.waiting_for(self.redis, task_id) != "approval":
            return
        timeout = approvals.recorded_timeout(self.redis, task_id)
        for call_id in approvals.expire_overdue(self.redis, task_id, now=time.time(), timeout_seconds=timeout):
            self.on_event(f"approval of {task_id} call {call_id} denied: no decision within {timeout:g}s")

    def _maybe_start(self, task_id: str, report: SettleReport) -> bool:
        """Act on the task's next action (``unicore.scheduling``, the operator's too): start a turn process for a
        turn to run or a report owed to the parent (the turn delivers it before anything else), unless the task's
        child completions are held (``_held``). A suspended task runs no turn: its owed report is delivered here,
        as the operator's reconcile delivers it."""
        if task_id in self.running or task_id in self.failed:
            return False
        self._expire_approvals(task_id)
        action = self.store.next_action(task_id)
        if action.deliver_report and action.reason is Reason.SUSPENDED:
            deliver_report(self.store, task_id)
            return False
        if not (action.run_turn or action.deliver_report) or self._held(task_id):
            return False
        self._start(task_id)
        return True

    def _read_activations(self, block_ms: int) -> list[str]:
        try:
            entries = self.activations.read(count=100, block=block_ms)
        except redis.ResponseError as exc:
            if missing_group(exc):
                self.activations.ensure_group()
                return []
            raise
        self.activations.ack(entries)
        return [entry.task_id for entry in entries if entry.task_id]

    # ---- the loop

    def trees_ids(self, roots: Sequence[str]) -> list[str]:
        """The tasks of every tree under ``roots``, each once."""
        return list(dict.fromkeys(task_id for root in roots for task_id in self.tree_ids(root)))

    def run_until_settled(self, root_id: str | Sequence[str], *, timeout: float | None = None) -> SettleReport:
        """Run turns of the tree under ``root_id`` (or of every tree under a list of roots: a conversation's
        participants') until they settle (or ``timeout`` seconds pass)."""
        roots = [root_id] if isinstance(root_id, str) else list(root_id)
        report = SettleReport(settled=False)
        deadline = None if timeout is None else time.monotonic() + timeout
        next_scan = 0.0
        try:
            while True:
                self._reap(report)
                now = time.monotonic()
                started = False
                if now >= next_scan or not self.running:
                    self._stop_suspended(list(self.running))
                    tree = self.trees_ids(roots)
                    jobs_outstanding = sum(self.jobs.step(root, self.tree_ids(root)) for root in roots)
                    for task_id in tree:
                        started |= self._maybe_start(task_id, report)
                    next_scan = now + self.scan_seconds
                    if not self.running and not started and not jobs_outstanding:
                        if not any(self._busy(t) for t in tree if t not in self.failed):
                            report.settled = True
                            return report
                if deadline is not None and time.monotonic() > deadline:
                    self.jobs.stop_all()  # none outlives the run: delivered as failed (ended before it did)
                    return report
                tree_set = set(self.trees_ids(roots))
                activated = self._read_activations(int(self.poll_seconds * 1000))
                self._stop_suspended([t for t in activated if t in tree_set])
                for task_id in activated:
                    if task_id in tree_set:
                        self._maybe_start(task_id, report)
        except KeyboardInterrupt:
            self.on_event("interrupted: stopping running turns and jobs")
            self.stop_all()
            self.jobs.stop_all()
            raise
