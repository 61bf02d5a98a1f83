"""The watchdog: finds stuck turn work from the operator's caches, reaps it, and makes the task runnable again.

- :mod:`views`  pure converters from Kubernetes bodies to small views (the operator's Job and pod indexes hold
  them, built once per watch event; ``job_view`` is the operator's one Job parser);
- :mod:`scan`   the pure decision ``scan(snapshot, now, thresholds) -> list[ReapAction]``, and ``plan_redis_reads``
  (which tasks' Redis state can change it);
- :mod:`attempts` which turn attempt (Job name) a reap counts as failed;
- :mod:`redis_state` the O(stale) Redis read (``uc:heartbeats`` + the flagged tasks) the scan's plan calls for,
  done by ``unicore.store.heartbeats`` (which also owns the fenced lease release, ``TurnReset``);
- :mod:`reaper` carries actions out (delete the Job, release the lease, record, activate or fail the task);
- :mod:`adapter` the background loop started at operator startup, scanning the operator's indexes.
"""

from unicore_operator.watchdog.scan import ReapAction, ReapReason, Snapshot, Thresholds, scan

__all__ = ["ReapAction", "ReapReason", "Snapshot", "Thresholds", "scan"]
