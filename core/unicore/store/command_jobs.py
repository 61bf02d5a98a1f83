"""Command Jobs (issue 29): long GPU work a task hands to the cluster's queue (``submit_job``) and waits for with no
turn running; its result comes back as a message, exactly once.

Keys (the task's hash tag):

- ``uc:{T}:cmdjobs`` (``TaskKeys.command_jobs``), written by the task's turns: number -> the request (JSON: command,
  image, gpus, timeout_seconds, requested_at, turn) and ``#next``, the last number given. A request is written by a
  fenced script (``REQUEST``): a turn that lost its lease requests nothing.
- ``uc:{T}:opcmdjobs`` (``TaskKeys.operator_command_jobs``), written only by who runs the Jobs (the operator on
  Kubernetes, the supervisor in local mode; a namespace's Redis user cannot write it): ``created:<n>`` (the Job's
  uid, or ``local``) and ``ended:<n>`` (how it ended, JSON), the latter set once its result is in the inbox.

The result is an inbox message (type ``completion``, sender ``job:<name>``) with the id ``cmdjob:<task>:<n>``, so the
inbox's seen set makes a delivery that is repeated (an operator that crashed after queueing it, before marking it
ended) a no-op: the task gets each result once. A request is *outstanding* until its ``ended:<n>`` is set: while a
task has outstanding jobs and nothing queued it waits with no turn (``unicore.scheduling``, WAITING_FOR_JOBS).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from unicore.api.schema import InboxMessage, job_result_message_id
from unicore.store.client import RedisClient
from unicore.store.codec import text, text_hash
from unicore.store.keys import TaskKeys
from unicore.store.lua import LEASE_LOST

NEXT = "#next"
JOB_NAME_INFIX = "-j"

# KEYS: lease, cmdjobs   ARGV: fence, the request's JSON object without its number (starts with '{')
REQUEST = """
local fence_token = string.match(ARGV[1], '^([^/]*)/') or ARGV[1]
if redis.call('HGET', KEYS[1], 'token') ~= fence_token then
  return redis.error_reply('UC_LEASE_LOST')
end
local n = redis.call('HINCRBY', KEYS[2], '#next', 1)
redis.call('HSET', KEYS[2], tostring(n), '{"n":' .. n .. ',' .. string.sub(ARGV[2], 2))
return n
"""


@dataclass(frozen=True)
class JobRequest:
    """One command Job as the turn asked for it."""

    n: int
    command: str
    image: str | None = None
    gpus: int = 0
    timeout_seconds: int = 3600
    requested_at: float = 0.0
    turn: int = 0

    @classmethod
    def of(cls, raw: str) -> JobRequest | None:
        try:
            data: dict[str, Any] = json.loads(raw)
            return cls(n=int(data["n"]), command=str(data["command"]), image=data.get("image") or None,
                       gpus=int(data.get("gpus") or 0), timeout_seconds=int(data.get("timeout_seconds") or 3600),
                       requested_at=float(data.get("requested_at") or 0.0), turn=int(data.get("turn") or 0))
        except (ValueError, TypeError, KeyError):
            return None


@dataclass(frozen=True)
class JobOutcome:
    """How a command Job ended: ``state`` succeeded, failed or cancelled; the exit code when known; why; how long it
    ran; the end of its log."""

    state: str
    exit_code: int | None = None
    reason: str = ""
    duration_seconds: float | None = None
    log_tail: str = ""
    queued_seconds: float | None = None  # from the Job's creation to its start, where known (metrics only)

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "exit_code": self.exit_code, "reason": self.reason,
                "duration_seconds": self.duration_seconds}


@dataclass(frozen=True)
class JobState:
    """A request and what became of it."""

    request: JobRequest
    created: str | None  # the Job's uid (or ``local``); None: not created yet
    ended: dict[str, Any] | None  # the outcome delivered; None: outstanding


def job_name(task_name: str, n: int) -> str:
    """``<task name>-j<n>``: the Job's name (the operator shortens long ones, as turn Jobs)."""
    return f"{task_name}{JOB_NAME_INFIX}{n}"


def request_job(store: Any, lease: Any, request: dict[str, Any]) -> int:
    """Record a request (``command``, ``image``, ``gpus``, ``timeout_seconds``, ``turn``) of the lease holder's task;
    its number. Fenced: raises ``unicore.errors.LeaseLost`` when the lease is no longer the caller's."""
    import redis

    from unicore.errors import LeaseLost

    keys = TaskKeys(lease.task_id)
    body = json.dumps({**request, "requested_at": time.time()}, separators=(",", ":"))
    client: RedisClient = store.redis
    try:
        return int(client.eval(REQUEST, 2, keys.lease, keys.command_jobs, lease.fence, body))
    except redis.ResponseError as exc:
        if LEASE_LOST in str(exc):
            raise LeaseLost(f"lease of {lease.task_id} lost: job request refused") from None
        raise


def job_states(store: Any, task_id: str) -> list[JobState]:
    """Every request of the task (``store``: a TaskStore), oldest first, with what became of it (two reads,
    pipelined)."""
    keys = TaskKeys(task_id)
    client: RedisClient = store.redis
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.command_jobs)
    pipe.hgetall(keys.operator_command_jobs)
    raw_requests, raw_done = pipe.execute()
    return states_of(text_hash(raw_requests), text_hash(raw_done))


def states_of(requests: dict[str, str], done: dict[str, str]) -> list[JobState]:
    """The states from the two hashes as read (pure)."""
    states = []
    for field, raw in requests.items():
        if field == NEXT:
            continue
        request = JobRequest.of(raw)
        if request is None:
            continue
        ended_raw = done.get(f"ended:{request.n}")
        ended: dict[str, Any] | None = None
        if ended_raw is not None:
            try:
                ended = dict(json.loads(ended_raw))
            except (ValueError, TypeError):
                ended = {"state": "unknown"}
        states.append(JobState(request, done.get(f"created:{request.n}"), ended))
    return sorted(states, key=lambda state: state.request.n)


def shown_state(state: JobState, *, queued: bool = False) -> str:
    """How a job is shown (``status.jobs``, the tree, the web UI): Requested (not created yet), Queued (held by its
    queue: ``queued``), Running, or how it ended (Succeeded, Failed, Cancelled, Refused)."""
    if state.ended is not None:
        return str(state.ended.get("state") or "ended").capitalize()
    if state.created is None:
        return "Requested"
    return "Queued" if queued else "Running"


def shown(task_name: str, state: JobState, *, queued: bool = False) -> dict[str, Any]:
    """One job for people: name, state (``shown_state``), GPUs, its command (clipped) and, once ended, its exit code."""
    entry: dict[str, Any] = {"name": job_name(task_name, state.request.n), "state": shown_state(state, queued=queued),
                             "gpus": state.request.gpus, "command": state.request.command[:200]}
    if state.ended is not None and state.ended.get("exit_code") is not None:
        entry["exitCode"] = int(state.ended["exit_code"])
    return entry


def outstanding_count(request_fields: list[str], done_fields: list[str]) -> int:
    """How many requests have no ``ended:<n>`` yet, from the two hashes' field names (pure)."""
    ended = {field.split(":", 1)[1] for field in done_fields if field.startswith("ended:")}
    return sum(1 for field in request_fields if field != NEXT and field not in ended)


def outstanding(states: list[JobState]) -> list[JobState]:
    return [state for state in states if state.ended is None]


def tree_job_states(store: Any, task_ids: list[str]) -> list[tuple[str, list[JobState], bool]]:
    """For each of ``task_ids``: its outstanding jobs and whether it is suspended (local mode's supervisor; one
    pipelined round trip)."""
    client: RedisClient = store.redis
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        keys = TaskKeys(task_id)
        pipe.hgetall(keys.command_jobs)
        pipe.hgetall(keys.operator_command_jobs)
        pipe.hget(keys.task, "suspended")
    replies = pipe.execute()
    read = []
    for index, task_id in enumerate(task_ids):
        requests, done, suspended = replies[3 * index: 3 * index + 3]
        states = states_of(text_hash(requests), text_hash(done))
        read.append((task_id, outstanding(states), suspended is not None and text(suspended) == "1"))
    return read


def claim(store: Any, task_id: str, n: int, marker: str) -> bool:
    """Mark request ``n`` created by ``marker`` unless someone did already (HSETNX): True when this caller runs it."""
    client: RedisClient = store.redis
    return bool(client.hsetnx(TaskKeys(task_id).operator_command_jobs, f"created:{n}", marker))


def mark_created(store: Any, task_id: str, n: int, uid: str) -> None:
    store.redis.hset(TaskKeys(task_id).operator_command_jobs, f"created:{n}", uid)


def result_text(name: str, request: JobRequest, outcome: JobOutcome) -> str:
    """The message the task gets when its Job ended."""
    how = outcome.state + (f", exit code {outcome.exit_code}" if outcome.exit_code is not None else "")
    if outcome.duration_seconds is not None:
        how += f", after {outcome.duration_seconds:.0f} s"
    lines = [f"Job {name} ({request.command!r}) ended: {how}."]
    if outcome.reason:
        lines.append(f"Reason: {outcome.reason}")
    lines.append("The end of its log:\n" + outcome.log_tail if outcome.log_tail else "It printed nothing.")
    return "\n".join(lines)


def deliver_result(store: Any, task_id: str, name: str, request: JobRequest, outcome: JobOutcome) -> bool:
    """Queue the result of Job ``name`` (request ``request``) into the task's inbox, mark it ended and wake the task;
    True when this call queued it. Safe to repeat (the message id makes a second queue a no-op), so whoever notices
    the end first delivers it and a crash between the steps loses nothing."""
    message = InboxMessage(id=job_result_message_id(task_id, request.n), type="completion",
                           content=result_text(name, request, outcome), sender=f"job:{name}")
    queued = bool(store.queue_message(task_id, message))
    store.redis.hset(TaskKeys(task_id).operator_command_jobs, f"ended:{request.n}",
                     json.dumps(outcome.as_dict(), separators=(",", ":")))
    if queued:
        store.activate(task_id, f"job-ended:{name}")
    return queued


__all__ = ["JobOutcome", "JobRequest", "JobState", "claim", "deliver_result", "job_name", "job_states",
           "mark_created", "outstanding", "outstanding_count", "request_job", "result_text", "shown", "shown_state",
           "states_of",
           "tree_job_states"]
