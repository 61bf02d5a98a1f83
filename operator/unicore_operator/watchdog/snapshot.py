"""Assemble a :class:`Snapshot` from the operator's Kopf indexes (any ``Mapping[key, Iterable[view]]``).

Kopf's ``Index`` maps each key to a ``Store`` (an iterable of the values indexed under it); a plain
``dict[str, list]`` has the same shape, which is what the unit tests and the benchmark use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Set
from typing import Any, TypeVar

from unicore_operator.watchdog.scan import Snapshot
from unicore_operator.watchdog.views import AgentTaskView, JobView, PodView, RedisTaskState

V = TypeVar("V")


def _first_by_key(index: Mapping[str, Iterable[V]]) -> dict[str, V]:
    out: dict[str, V] = {}
    for key, store in index.items():
        for value in store:
            out[key] = value
            break
    return out


def _values(index: Mapping[Any, Iterable[V]]) -> list[V]:
    return [value for store in index.values() for value in store]


def agent_task_views(index: Mapping[str, Iterable[AgentTaskView]]) -> dict[str, AgentTaskView]:
    return _first_by_key(index)


def build_snapshot(
    tasks: Mapping[str, Iterable[AgentTaskView]],
    jobs: Mapping[Any, Iterable[JobView]],
    pods: Mapping[Any, Iterable[PodView]],
    redis_states: Mapping[str, RedisTaskState],
) -> Snapshot:
    return Snapshot(tasks=_first_by_key(tasks), jobs=_values(jobs), pods=_values(pods), redis=redis_states)


def with_redis(snapshot: Snapshot, redis_states: Mapping[str, RedisTaskState],
               beating: Set[str] = frozenset()) -> Snapshot:
    """``snapshot`` with what the Redis read found (see ``redis_state.read_states``)."""
    return dataclasses.replace(snapshot, redis=redis_states, beating=frozenset(beating))
