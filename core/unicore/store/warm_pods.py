"""Warm turn pods (issue 30): a turn pod started before its task is known waits, connected to Redis, until the
operator assigns it one turn; it then runs that turn as a cold turn pod would, and exits.

Keys (one namespace's, hash tag ``{<namespace>/}``, so the assignment script touches all of them at once):

- ``uc:{NS/}:warmpod:<pod>`` (``keys.warm_pod_key``), written by the pod (its namespace's Redis user may HSET and
  PEXPIRE it): ``state`` (``waiting``), ``pool``, ``template`` (the pod template's hash), ``since`` (unix time). It
  lives ``RECORD_TTL_SECONDS`` and the waiting pod writes it again every ``RENEW_SECONDS``: a record is the pod's
  sign of life (one that hangs, or lost Redis for good, stops being offered turns at once; one whose record a Redis
  restart lost writes it again within seconds).
- ``uc:{NS/}:warmassign:<pod>`` (``keys.warm_assignment_stream``): the pod's assignment, one entry, XADDed by the
  operator; the pod reads it with a blocking XREAD (read only for the namespace's user).
- ``uc:{NS/}:warmfence`` (``keys.warm_fence_key``), the operator's alone: ``job:<turn Job name>`` -> the pod that
  runs that (task, turn, attempt), and ``pod:<pod>`` -> the assignment (JSON). The assignment script
  (``ASSIGN``) gives a pod at most one turn and a turn at most one pod: a repeated activation of the same turn (the
  cold path's 409 on the Job's deterministic name) finds the turn taken and does nothing.

A pod the operator never assigned is not trusted for being in a pool: the operator only assigns pods of warm Jobs it
created itself (its own index), and only while their record says ``waiting``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from unicore.store.client import RedisClient
from unicore.store.codec import text, text_hash
from unicore.store.keys import warm_assignment_stream, warm_fence_key, warm_pod_key

WAITING = "waiting"
RECORD_TTL_SECONDS = 30  # a waiting pod's record expires this long after its last renewal
RENEW_SECONDS = 10  # how often a waiting pod writes its record again
READ_BLOCK_MS = 1000  # one blocking read: how soon a cancel (SIGTERM) is seen; below the socket timeout

# KEYS: the pod's record, the namespace's fence, the pod's assignment stream
# ARGV: pod, task id, turn Job name, assignment JSON
ASSIGN = """
if redis.call('HGET', KEYS[1], 'state') ~= 'waiting' then
  return {0, 'not-waiting'}
end
local holder = redis.call('HGET', KEYS[2], 'job:' .. ARGV[3])
if holder then
  return {0, 'taken:' .. holder}
end
if redis.call('HEXISTS', KEYS[2], 'pod:' .. ARGV[1]) == 1 then
  return {0, 'pod-assigned'}
end
redis.call('HSET', KEYS[2], 'job:' .. ARGV[3], ARGV[1], 'pod:' .. ARGV[1], ARGV[4])
redis.call('HSET', KEYS[1], 'state', 'assigned')
redis.call('XADD', KEYS[3], '*', 'assignment', ARGV[4])
return {1, ARGV[1]}
"""


@dataclass(frozen=True)
class Assignment:
    """The turn a warm pod runs: its task, the name of the turn Job it stands for (``job_builder.turn_job_name`` of
    the turn and attempt) and its tree's folder of the workspace claim."""

    task_id: str
    job: str
    turn: int = 0
    attempt: int = 0
    workspace: str = ""  # the tree's folder of the workspace claim, when the pod mounts the claim whole
    at: float = 0.0  # when the operator gave it (unix time; 0: unknown)

    def to_json(self) -> str:
        return json.dumps({"task_id": self.task_id, "job": self.job, "turn": self.turn, "attempt": self.attempt,
                           "workspace": self.workspace, "at": self.at})

    @classmethod
    def of(cls, raw: str) -> Assignment | None:
        try:
            data: dict[str, Any] = json.loads(raw)
            return cls(task_id=str(data["task_id"]), job=str(data["job"]), turn=int(data.get("turn") or 0),
                       attempt=int(data.get("attempt") or 0), workspace=str(data.get("workspace") or ""),
                       at=float(data.get("at") or 0.0))
        except (ValueError, TypeError, KeyError):
            return None


@dataclass(frozen=True)
class AssignResult:
    """``assigned``, or why not: ``not-waiting`` (the pod is not waiting, or gone), ``taken`` (the turn has a pod
    already: ``holder``) or ``pod-assigned`` (the pod has a turn already)."""

    assigned: bool
    reason: str = ""
    holder: str = ""


# ------------------------------------------------------------------------------------------------- the warm pod


def register_waiting(client: RedisClient, namespace: str, pod: str, *, pool: str, template: str,
                     since: float | None = None) -> None:
    """Say that ``pod`` waits for a turn since ``since`` (unix time; default now): its record, for
    ``RECORD_TTL_SECONDS``. Written again while it waits (``wait_for_assignment``'s ``renew``); once assigned, the
    record may say ``waiting`` again without harm: ``ASSIGN`` refuses a pod the fence says has a turn."""
    key = warm_pod_key(namespace, pod)
    stamp = time.time() if since is None else since
    client.hset(key, mapping={"state": WAITING, "pool": pool, "template": template, "since": f"{stamp:.3f}"})
    client.pexpire(key, RECORD_TTL_SECONDS * 1000)


def wait_for_assignment(client: RedisClient, namespace: str, pod: str, *, deadline: float,
                        cancel: threading.Event | None = None,
                        renew: Callable[[], None] | None = None,
                        renew_every: float = RENEW_SECONDS) -> Assignment | None:
    """The pod's assignment once the operator wrote it; None at ``deadline`` (``time.monotonic``) or on ``cancel``.
    A malformed entry is skipped. ``renew`` (the pod's ``register_waiting``) is called every ``renew_every``
    seconds while nothing came."""
    stream = warm_assignment_stream(namespace, pod)
    last = "0"
    renew_at = time.monotonic() + renew_every
    while not (cancel is not None and cancel.is_set()):
        now = time.monotonic()
        left_ms = int((deadline - now) * 1000)
        if left_ms <= 0:
            return None
        if renew is not None and now >= renew_at:
            renew()
            renew_at = now + renew_every
        block_ms = min(READ_BLOCK_MS, left_ms, int(renew_every * 1000)) if renew is not None else min(
            READ_BLOCK_MS, left_ms)
        reply = client.xread({stream: last}, count=1, block=max(1, block_ms))
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                last = text(entry_id)
                found = Assignment.of(text_hash(fields).get("assignment", ""))
                if found is not None:
                    return found
    return None


# ------------------------------------------------------------------------------------------------- the operator


def waiting(client: RedisClient, namespace: str, pods: list[str]) -> dict[str, dict[str, str]]:
    """Of ``pods``, those whose record says they wait: pod -> its record."""
    if not pods:
        return {}
    pipe = client.pipeline(transaction=False)
    for pod in pods:
        pipe.hgetall(warm_pod_key(namespace, pod))
    records = [text_hash(raw) for raw in pipe.execute()]
    return {pod: record for pod, record in zip(pods, records, strict=True) if record.get("state") == WAITING}


def assign(client: RedisClient, namespace: str, pod: str, assignment: Assignment) -> AssignResult:
    """Give ``pod`` the turn ``assignment`` names, atomically (``ASSIGN``)."""
    keys = [warm_pod_key(namespace, pod), warm_fence_key(namespace), warm_assignment_stream(namespace, pod)]
    ok, detail = client.eval(ASSIGN, len(keys), *keys, pod, assignment.task_id, assignment.job,  # type: ignore[misc]
                             assignment.to_json())
    reason = text(detail)
    if int(ok):
        return AssignResult(True)
    if reason.startswith("taken:"):
        return AssignResult(False, "taken", reason.split(":", 1)[1])
    return AssignResult(False, reason)


def assignment_of(client: RedisClient, namespace: str, pod: str) -> Assignment | None:
    """The turn ``pod`` was given, from the fence; None if none."""
    raw = client.hget(warm_fence_key(namespace), f"pod:{pod}")
    return Assignment.of(text(raw)) if raw is not None else None


def holder(client: RedisClient, namespace: str, job: str) -> str | None:
    """The warm pod that was given turn Job ``job``'s turn, from the fence; None if none."""
    raw = client.hget(warm_fence_key(namespace), f"job:{job}")
    return text(raw) if raw is not None else None


def forget(client: RedisClient, namespace: str, pod: str) -> None:
    """Drop what is kept of ``pod`` (its Job is gone): its record, its assignment stream and its fence entries."""
    fence = warm_fence_key(namespace)
    held = assignment_of(client, namespace, pod)
    pipe = client.pipeline(transaction=False)
    pipe.delete(warm_pod_key(namespace, pod), warm_assignment_stream(namespace, pod))
    pipe.hdel(fence, f"pod:{pod}", *([f"job:{held.job}"] if held else []))
    pipe.execute()


__all__ = ["ASSIGN", "AssignResult", "Assignment", "WAITING", "assign", "assignment_of", "forget", "holder",
           "register_waiting", "wait_for_assignment", "waiting"]
