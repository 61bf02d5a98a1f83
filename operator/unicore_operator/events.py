"""Event reasons posted on AgentTasks (issue 5). The watchdog adds PodReaped."""

from __future__ import annotations

TURN_STARTED = "TurnStarted"
TURN_ENDED = "TurnEnded"
TURN_FAILED = "TurnFailed"
CHILD_SPAWNED = "ChildSpawned"
SUSPENDED = "Suspended"
RESUMED = "Resumed"
INVALID_SPEC = "InvalidSpec"
RETRIES_EXHAUSTED = "RetriesExhausted"

NORMAL = "Normal"
WARNING = "Warning"
