"""Prometheus metrics of UniCore, served on the operator's /metrics.

``install()`` (called by ``unicore-operator`` once every module is loaded, see ``main.import_handlers``) registers the
/metrics route on the operator's HTTP server and a startup hook that attaches the Redis telemetry and task-state
collectors.
Other operator modules record through the functions re-exported here::

    from unicore_operator import metrics
    metrics.job_created(); metrics.job_failed(reason); metrics.observe_activation_latency(seconds)
"""

from __future__ import annotations

from typing import Any

from unicore_operator.metrics.operator_metrics import (
    REGISTRY,
    job_created,
    job_failed,
    job_reaped,
    observe_activation,
    observe_activation_latency,
    observe_watchdog_scan,
)

__all__ = ["REGISTRY", "job_created", "job_failed", "job_reaped", "observe_activation",
           "observe_activation_latency", "observe_watchdog_scan", "install"]


def install() -> None:
    """Hook /metrics and the collectors into the operator (idempotent; a no-op outside the operator)."""
    try:
        from unicore_operator import http_server
        from unicore_operator.handlers import lifecycle
    except ImportError:  # the operator's server/handlers are not importable: standalone use of the exporters
        return
    from unicore_operator.metrics.http import attach_collectors, metrics_handler

    def routes(app: Any, ctx: Any) -> None:
        app.router.add_get("/metrics", metrics_handler)

    async def startup(ctx: Any) -> None:
        attach_collectors(ctx.redis.sync, ctx.agenttasks)

    if not getattr(install, "done", False):
        http_server.add_routes(routes)
        lifecycle.startup_hooks.append(startup)
        install.done = True  # type: ignore[attr-defined]
