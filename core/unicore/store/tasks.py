"""TaskStore: every read and write of task state in Redis (schema version 1).

Data flows inbox -> turn -> history -> status:
- producers ``queue_message`` (idempotent by message id) and ``activate`` the task (``inbox``);
- the lease holder (``task_leases``) ``drain``s the inbox into the conversation (one fenced Lua script),
  ``append_message``s the model's answers, ``end_turn``s (``turn_writes``) and ``release``s;
- readers ``load_history`` / ``get_task`` / ``list_tasks`` / ``tree`` (``task_reads``).

``TaskStore`` is put together from those parts, each a module of its own on ``task_store_base``; here are what it
answers about the calls waiting for people and about what the task does next. Every method costs a constant number of
round trips, whatever the history length.
"""

from __future__ import annotations

import os

from unicore.api import pod_env
from unicore.api.schema import Approval
from unicore.errors import ConfigError
from unicore.scheduling import NextAction, next_action
from unicore.store import approvals
from unicore.store.approval_records import PendingCall, PendingKind
from unicore.store.client import RedisClient, build_client
from unicore.store.inbox import TaskInbox
from unicore.store.scheduling_reads import read_observation
from unicore.store.task_leases import TaskLeases
from unicore.store.task_writes import TaskWrites
from unicore.store.turn_writes import TurnWrites


def connect(url: str | None = None) -> RedisClient:
    """A client that decodes responses to str (what TaskStore expects). ``url`` defaults to ``$REDIS_URL``.

    It retries through connection blips (resets, restarts, failovers) for ``UNICORE_REDIS_RETRY_SECONDS``; see
    ``unicore.store.client``.
    """
    chosen = url or os.environ.get(pod_env.REDIS_URL)
    if not chosen:
        raise ConfigError(f"{pod_env.REDIS_URL} is not set")
    return build_client(chosen, decode_responses=True)


class TaskStore(TaskWrites, TaskInbox, TaskLeases, TurnWrites):
    """All task state operations. ``client`` must decode responses (``connect()`` makes such a client)."""

    @classmethod
    def from_url(cls, url: str | None = None) -> TaskStore:
        return cls(connect(url))

    # ------------------------------------------------------------------ calls waiting for people

    def approval_calls(self, task_id: str) -> list[PendingCall]:
        """Every call of the task that waited or waits for a person, decided or not (``approvals.calls``)."""
        return approvals.calls(self.redis, task_id)

    def pending_calls(self, task_id: str) -> list[PendingCall]:
        """The calls a person may still decide (``approvals.pending_calls``, the task's own timeout)."""
        return approvals.pending_calls(self.redis, task_id)

    def waiting_for(self, task_id: str) -> PendingKind | None:
        """What the task waits for from people: "approval", "input" or None (``approvals.waiting_for``)."""
        return approvals.waiting_for(self.redis, task_id)

    def recorded_approval(self, task_id: str) -> Approval | None:
        """The ``approval`` setting the task's record holds (``approvals.recorded_approval``)."""
        return approvals.recorded_approval(self.redis, task_id)

    def decide(self, task_id: str, call_id: str | None, approve: bool, *, by: str, reason: str = "",
               timeout_seconds: float | None = None) -> list[PendingCall]:
        """A person's decision on ``call_id`` (None: every pending approval); ``approvals.decide`` says the rest."""
        return approvals.decide(self.redis, task_id, call_id, approve, by=by, reason=reason,
                                timeout_seconds=timeout_seconds)

    # ------------------------------------------------------------------ scheduling

    def next_action(self, task_id: str) -> NextAction:
        """What the task does next (``unicore.scheduling``): run a turn, deliver a report it owes its parent (its
        turn ended, its process died before the report reached the parent's inbox), both or neither."""
        return next_action(read_observation(self.redis, task_id))

    def needs_turn(self, task_id: str) -> bool:
        """True when the task has something to do now (``next_action``): a turn to run and none holds the lease
        (queued messages, unless it waits for people and none of them answers: ``store.approvals.blocked``; an
        unfinished turn, its process died or was cancelled before the turn ended), or a report still owed to the
        parent. Never a turn for a suspended task (``store.suspension``); its owed report is delivered all the same."""
        action = self.next_action(task_id)
        return action.run_turn or action.deliver_report


__all__ = ["TaskStore", "connect"]
