"""Gauges computed at scrape time from the operator's AgentTask cache and one Redis read of inbox depths.

- ``unicore_tasks{namespace,phase}``: every phase of the CRD is always present (0 when empty), for every namespace
  the operator watches (known from the start) and every namespace a task is in;
- ``unicore_inbox_messages{namespace}``: sum of inbox lengths (one server-side script call per 1,000 tasks), 0 for a
  watched namespace without tasks;
- ``unicore_approvals_pending``: tool calls awaiting a user's decision, from the status of tasks in phase
  WaitingForApproval (``status.waitingFor.calls``); 0 without any;
- ``unicore_tree_*{namespace,root}``: per task tree, for at most ``max_trees`` roots (the ones with the most
  tasks), so the label stays bounded however many trees exist.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import redis
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from unicore.api import contract
from unicore.store.reads import inbox_lengths

from unicore_operator.log import logger
from unicore_operator.metrics.catalog import BY_NAME, TASK_PHASES

PHASES = TASK_PHASES
ROOT_LABEL = contract.ROOT_LABEL

TaskSource = Callable[[], Iterable[Mapping[str, Any]]]


def _gauge(name: str) -> GaugeMetricFamily:
    spec = BY_NAME[name]
    return GaugeMetricFamily(name, spec.help, labels=list(spec.labels))


def inbox_depths(client: redis.Redis, task_ids: list[str]) -> dict[str, int]:
    """Inbox length of every task with a non-empty inbox (``unicore.store.reads.inbox_lengths``)."""
    return inbox_lengths(client, task_ids)


def task_families(tasks: Iterable[Mapping[str, Any]], depths: Mapping[str, int], max_trees: int,
                  watched: Iterable[str] = ()) -> list[Metric]:
    """Pure: the families above from compact AgentTask bodies and inbox depths by task id; ``watched``: the
    namespaces the operator watches (empty when it watches all), whose series exist with or without tasks."""
    by_phase: Counter[tuple[str, str]] = Counter()
    namespaces: set[str] = set(watched)
    inbox_by_ns: Counter[str] = Counter()
    tree_phase: Counter[tuple[str, str, str]] = Counter()
    tree_size: Counter[tuple[str, str]] = Counter()
    tree_sums: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
    approvals_pending = 0
    for body in tasks:
        meta, status = body.get("metadata") or {}, body.get("status") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        root = str((meta.get("labels") or {}).get(ROOT_LABEL) or name)
        phase = str(status.get("phase") or "Pending")
        namespaces.add(ns)
        by_phase[(ns, phase)] += 1
        depth = depths.get(contract.task_id(ns, name), 0)
        inbox_by_ns[ns] += depth
        tree = (ns, root)
        tree_size[tree] += 1
        tree_phase[(ns, root, phase)] += 1
        tree_sums["tokens"][tree] += int(status.get("tokens") or 0)
        tree_sums["turns"][tree] += int(status.get("turns") or 0)
        tree_sums["inbox"][tree] += depth
        tree_sums["jobs"][tree] += 1 if status.get("activeJob") else 0
        if phase == "WaitingForApproval":
            approvals_pending += _calls(status.get("waitingFor"))

    tasks_g = _gauge("unicore_tasks")
    inbox_g = _gauge("unicore_inbox_messages")
    for ns in sorted(namespaces):
        for phase in PHASES:
            tasks_g.add_metric([ns, phase], by_phase.get((ns, phase), 0))
        for (other_ns, phase), count in by_phase.items():
            if other_ns == ns and phase not in PHASES:
                tasks_g.add_metric([ns, phase], count)
        inbox_g.add_metric([ns], inbox_by_ns.get(ns, 0))

    trees = [tree for tree, _ in sorted(tree_size.items(), key=lambda kv: (-kv[1], kv[0]))[:max_trees]]
    tree_tasks = _gauge("unicore_tree_tasks")
    families: dict[str, GaugeMetricFamily] = {
        "tokens": _gauge("unicore_tree_tokens"), "turns": _gauge("unicore_tree_turns"),
        "inbox": _gauge("unicore_tree_inbox_messages"), "jobs": _gauge("unicore_tree_active_jobs"),
    }
    for ns, root in trees:
        for phase in PHASES:
            tree_tasks.add_metric([ns, root, phase], tree_phase.get((ns, root, phase), 0))
        for key, fam in families.items():
            fam.add_metric([ns, root], tree_sums[key][(ns, root)])
    pending_g = _gauge("unicore_approvals_pending")
    pending_g.add_metric([], approvals_pending)
    return [tasks_g, inbox_g, pending_g, tree_tasks, *families.values()]


def _calls(waiting: Any) -> int:
    """Tool calls a WaitingForApproval status waits for (at least 1: the phase says one waits)."""
    try:
        return max(1, int((waiting or {}).get("calls") or 1))
    except (TypeError, ValueError, AttributeError):
        return 1


class TaskStateCollector(Collector):
    def __init__(self, tasks: TaskSource, client: redis.Redis | None, *, max_trees: int = 100,
                 watched: Iterable[str] = ()) -> None:
        self._tasks = tasks
        self._redis = client
        self._max_trees = max_trees
        self._watched = tuple(watched)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        bodies = list(self._tasks())
        depths: dict[str, int] = {}
        if self._redis is not None and bodies:
            ids = [contract.task_id(str((b.get("metadata") or {}).get("namespace")),
                                    str((b.get("metadata") or {}).get("name"))) for b in bodies]
            try:
                depths = inbox_depths(self._redis, ids)
            except redis.RedisError as exc:
                logger.warning("metrics: cannot read inbox depths: %s", exc)
        yield from task_families(bodies, depths, self._max_trees, self._watched)
