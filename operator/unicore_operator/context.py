"""OperatorContext: what every handler and background loop shares (put on Kopf's ``memo`` at startup)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from unicore_operator.indexes import TaskKey
from unicore_operator.kube import KubeClients
from unicore_operator.redis_state import RedisState
from unicore_operator.settings import OperatorSettings


@dataclass
class OperatorContext:
    settings: OperatorSettings
    redis: RedisState
    kube: KubeClients
    store: Any  # unicore.state.store.TaskStore (sync; called through asyncio.to_thread)
    # Live kopf indexes (kopf.Index mappings), captured in the startup handler.
    agenttasks: Any = None
    children: Any = None
    turnjobs: Any = None
    locks: dict[TaskKey, asyncio.Lock] = field(default_factory=lambda: defaultdict(asyncio.Lock))
    # Jobs created by this process that the watch has not shown yet (closes the create -> index gap).
    inflight_jobs: dict[TaskKey, str] = field(default_factory=dict)
    # Pending delayed re-checks (retry backoff, lease still held), one per task.
    rechecks: dict[TaskKey, asyncio.TimerHandle] = field(default_factory=dict)
    background: list[asyncio.Task[Any]] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def watches(self, namespace: str) -> bool:
        return self.settings.cluster_wide or namespace in self.settings.namespaces
