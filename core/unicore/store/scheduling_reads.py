"""What local mode's scheduling decision (``unicore.scheduling``) reads of a task, from Redis.

``read_observation`` reads the facts in one pipelined round trip (the inbox length, the lease, the record's fields,
the counters of what the task waits for from people), then, as they matter, whether the newest turn ended and the
types of the queued messages. ``observation_from`` makes the observation of what was read (pure, so the agreement
with the operator's reading, ``unicore.store.operator_state``, is tested without Redis).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import redis

from unicore.scheduling import Observation, turn_unfinished
from unicore.store import approvals
from unicore.store.approval_records import WAITING_FIELDS, waiting_from_counters
from unicore.store.codec import text, to_int
from unicore.store.command_jobs import outstanding_count
from unicore.store.keys import TaskKeys
from unicore.store.records import turn_meta_field

RECORD_FIELDS = ("status", "turns", "report_id", "suspended")  # of the task record (``uc:{T}:task``)


def observation_from(record: Mapping[str, str | None], *, queued: int, lease_held: bool,
                     waiting_counters: Sequence[object], inbox_types: Sequence[str], last_turn_ended: bool | None,
                     jobs_outstanding: int = 0) -> Observation:
    """The observation of a task from what was read: ``record`` its fields (``RECORD_FIELDS``, None when absent),
    ``waiting_counters`` the counters of what it waits for from people (``WAITING_FIELDS``, as HMGET returns them),
    ``inbox_types`` the types of its queued messages (needed only while it waits for people), ``last_turn_ended``
    whether its newest turn has an end (None: no turn yet). Local mode knows no failed task: the supervisor keeps
    the turns that failed in this run to itself."""
    waiting_for = waiting_from_counters(waiting_counters)
    return Observation(
        suspended=record.get("suspended") == "1",
        lease_held=lease_held,
        queued=queued,
        waiting_for=waiting_for,
        queued_wakes=approvals.wakes(waiting_for, inbox_types) if waiting_for is not None and queued else True,
        unfinished_turn=turn_unfinished(record.get("status"), last_turn_ended),
        owes_report=bool(record.get("report_id")),
        jobs_outstanding=jobs_outstanding,
    )


def read_observation(client: redis.Redis, task_id: str) -> Observation:
    """The observation of ``task_id`` as stored now (a missing task: nothing queued, nothing to do)."""
    keys = TaskKeys(task_id)
    pipe = client.pipeline(transaction=False)
    pipe.llen(keys.inbox)
    pipe.exists(keys.lease)
    pipe.hmget(keys.task, list(RECORD_FIELDS))
    pipe.hmget(keys.approvals, list(WAITING_FIELDS))
    pipe.hkeys(keys.command_jobs)
    pipe.hkeys(keys.operator_command_jobs)
    queued, leased, values, counters, requested, done = pipe.execute()
    record = dict(zip(RECORD_FIELDS, values, strict=True))
    last = to_int(record["turns"]) - 1
    ended = bool(client.hexists(keys.turnmeta, turn_meta_field(last, "ended_at"))) if last >= 0 else None
    waiting = waiting_from_counters(counters) is not None
    types = approvals.inbox_types(client, task_id) if waiting and queued else []
    jobs = outstanding_count([text(f) for f in requested or ()], [text(f) for f in done or ()])
    return observation_from(record, queued=int(queued or 0), lease_held=bool(leased), waiting_counters=counters,
                            inbox_types=types, last_turn_ended=ended, jobs_outstanding=jobs)


__all__ = ["RECORD_FIELDS", "observation_from", "read_observation"]
