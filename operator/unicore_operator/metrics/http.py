"""/metrics: the route on the operator's HTTP server, and standalone handlers for other servers or tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import redis
from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.exposition import choose_encoder

from unicore_operator.metrics.operator_metrics import REGISTRY
from unicore_operator.metrics.redis_collector import RedisTelemetryCollector
from unicore_operator.metrics.state_collector import TaskStateCollector

_attached: dict[str, Any] = {}


def attach_collectors(client: redis.Redis, tasks: Any = None, *, registry: CollectorRegistry = REGISTRY,
                      max_trees: int = 100, watched: Iterable[str] = ()) -> None:
    """Register the Redis telemetry collector and the task-state collector (once per process).

    ``tasks`` is a callable returning compact AgentTask bodies, or a kopf index of them (values are stores);
    ``watched``: the namespaces the operator watches (empty = all), exported at 0 before any task exists there.
    """
    for old in _attached.values():
        registry.unregister(old)
    _attached.clear()
    _attached["redis"] = RedisTelemetryCollector(client)
    _attached["tasks"] = TaskStateCollector(_task_source(tasks), client, max_trees=max_trees, watched=watched)
    for collector in _attached.values():
        registry.register(collector)


def _task_source(tasks: Any) -> Any:
    if tasks is None:
        return lambda: ()
    if callable(tasks):
        return tasks

    def from_index() -> Iterable[Mapping[str, Any]]:
        return [value for store in list(tasks.values()) for value in store]

    return from_index


def render(registry: CollectorRegistry = REGISTRY) -> bytes:
    return generate_latest(registry)


def render_for(accept: str, registry: CollectorRegistry = REGISTRY) -> tuple[bytes, str]:
    """(body, content type) for a scrape's Accept header: OpenMetrics, with the histograms' exemplars (trace ids),
    when the scraper asks for it (Prometheus with exemplar storage does), else the classic text format."""
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


async def metrics_handler(request: Any) -> Any:
    """aiohttp handler; the scrape runs in a thread (the collectors do one synchronous Redis read each)."""
    from aiohttp import web

    body, content_type = await asyncio.to_thread(render_for, request.headers.get("Accept", ""))
    return web.Response(body=body, headers={"Content-Type": content_type})


def make_wsgi(registry: CollectorRegistry = REGISTRY) -> Any:
    """A WSGI app serving the same metrics (for servers other than the operator's aiohttp one)."""
    return make_wsgi_app(registry)
