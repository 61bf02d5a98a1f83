"""The watchdog's Redis read: the scan's plan and thresholds turned into one ``unicore.store.heartbeats.read_turns``
(the O(stale) read of ``uc:heartbeats`` plus the flagged tasks; see that module). The fenced clean-up of a reaped
turn is ``unicore.store.heartbeats.TurnReset``. This module touches no key: the layout's owner does."""

from __future__ import annotations

import redis
from unicore.store.heartbeats import ReadResult, read_turns

from unicore_operator.watchdog.scan import RedisPlan, Thresholds

__all__ = ["ReadResult", "read_states"]


def read_states(client: redis.Redis, plan: RedisPlan, now: float, thresholds: Thresholds) -> ReadResult:
    """Read what ``scan`` needs at ``now`` (the same ``now`` the scan gets): entries of ``uc:heartbeats`` older than
    ``now - min(heartbeat timeout, absence grace)`` are stale; a beat-checked task is beating when its entry is newer
    than ``now - heartbeat timeout``."""
    return read_turns(
        client, read=plan.read, beat_check=plan.beat_check,
        stale_cutoff=now - min(thresholds.heartbeat_timeout, thresholds.absence_grace),
        beat_cutoff=now - thresholds.heartbeat_timeout,
    )
