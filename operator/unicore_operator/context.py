"""OperatorContext: what every handler and background loop shares (put on Kopf's ``memo`` at startup)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from unicore.store.tasks import TaskStore

from unicore_operator.indexes import TaskKey
from unicore_operator.kube import KubeClients
from unicore_operator.reconcile_queue import ReconcileQueue
from unicore_operator.redis_state import RedisState
from unicore_operator.settings import OperatorSettings


@dataclass(frozen=True)
class CreateFailure:
    """The last FailedCreate Event of a task's turn Job: the pod cannot be created (since ``since``, unix time)."""

    job: str
    message: str
    since: float


@dataclass(frozen=True)
class WrittenStatus:
    """A status this process patched onto AgentTask ``uid`` (``status``: the object's status after the merge patch)
    and the indexed status it replaced (``over``): while the index still shows ``over``, the watch event of the
    patch is on its way and the object's status is ``status`` (see ``reconcile.known_status``)."""

    uid: str
    over: dict[str, Any]
    status: dict[str, Any]


@dataclass
class OperatorContext:
    settings: OperatorSettings
    redis: RedisState
    kube: KubeClients
    store: TaskStore  # sync: called through asyncio.to_thread
    # Live kopf indexes (kopf.Index mappings), captured in the startup handler.
    agenttasks: Any = None
    turnjobs: Any = None
    turnpods: Any = None
    commandjobs: Any = None  # a task's command Jobs (indexes.commandjob_index)
    mcpservers: Any = None
    agents: Any = None  # Agents (indexes.agent_index)
    warmjobs: Any = None  # warm turn Jobs by (namespace, pool) (indexes.warmjob_index)
    warmpods: Any = None  # their pods (indexes.warmpod_index)
    triggers: Any = None  # AgentTriggers (indexes.trigger_index)
    locks: dict[TaskKey, asyncio.Lock] = field(default_factory=lambda: defaultdict(asyncio.Lock))
    # Jobs created by this process that the watch has not shown yet (closes the create -> index gap).
    inflight_jobs: dict[TaskKey, str] = field(default_factory=dict)
    # Turn Jobs whose pod the Job controller cannot create (FailedCreate Events), by task (see job_events.py).
    create_failures: dict[TaskKey, CreateFailure] = field(default_factory=dict)
    # Pending delayed re-checks (retry backoff, lease still held), one per task.
    rechecks: dict[TaskKey, asyncio.TimerHandle] = field(default_factory=dict)
    background: list[asyncio.Task[Any]] = field(default_factory=list)
    # Status patches whose watch event the AgentTask index has not shown yet, by task (dropped when it has).
    written_status: dict[TaskKey, WrittenStatus] = field(default_factory=dict)
    # What the last reconciled event of each turn Job (namespace, name, uid) showed: (outcome, deleting, suspended).
    job_states: dict[tuple[str, str, str], tuple[str, bool, bool]] = field(default_factory=dict)
    # Turn pods (uid) whose end was seen and their lease checked: their later events need no lease check.
    ended_pods: set[str] = field(default_factory=set)
    # Threads for the turn Job POST only: the activation path never queues behind the status patches, Event
    # posts and Redis calls that share asyncio.to_thread's default executor (a resync, a burst of creations).
    job_executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=4, thread_name_prefix="unicore-job-create")
    )
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # Reconcile requests of the watch handlers, run by the workers the startup handler starts (reconcile_queue.py).
    reconciles: ReconcileQueue = field(default_factory=ReconcileQueue)
    # redis_identities.RedisIdentities when UNICORE_REDIS_IDENTITIES is on (set by its start-up hook), else None.
    redis_identities: Any = None

    def indexed_task(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The AgentTask ``namespace/name`` from the index (compact body); None when the index does not hold it."""
        if self.agenttasks is None:
            return None
        for body in self.agenttasks.get((namespace, name)) or ():
            return dict(body)
        return None

    def indexed_agent(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Agent ``namespace/name`` from the index (compact: metadata and spec); None when it does not hold it."""
        for body in (self.agents.get((namespace, name)) or ()) if self.agents is not None else ():
            return dict(body)
        return None

    def watches(self, namespace: str) -> bool:
        return self.settings.cluster_wide or namespace in self.settings.namespaces
