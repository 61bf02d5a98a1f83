"""The operator's composition root: the one place that decides what the operator is made of.

``compose()`` imports the Kopf handler modules (their ``@kopf.on``/``@kopf.index`` decorators register with Kopf's
registry when imported, and only this module imports them for that purpose), then attaches the parts by calls:

- the metrics: the ``/metrics`` route and, at start-up, the Redis telemetry and task-state collectors;
- the task API: its start-up hook, which serves it as a Kubernetes aggregated API over TLS (task_api/server.py);
- the watchdog: its start-up hook, which starts the scan loop with the operator's context;
- per-namespace Redis identities: their start-up hook (the ACL rights check, then the loop that keeps them);
- retention: its start-up hook, which starts the loop that archives and removes idle trees (when a TTL is set);
- warm pools of tasks without an Agent: their start-up hook (the loop that keeps them, ``UNICORE_WARM_POOLS``);
- the trigger endpoint: its start-up hook (AgentTriggers' webhook deliveries, when UNICORE_TRIGGER_PORT is set);
- ``kopf_patches``: Kopf's index pre-fill without its n^2 wake-ups.

Nothing registers itself at import time, no module is optional (a missing one is an error, not a silent no-op), and
the parts do not import each other, so there is no import cycle through the start-up code.
"""

from __future__ import annotations

from typing import Any

from unicore_operator import handlers, http_server, kopf_patches, redis_identities
from unicore_operator.admission import start_webhook
from unicore_operator.handlers import lifecycle
from unicore_operator.handlers.warm_pools import start_agentless_pools
from unicore_operator.metrics.http import attach_collectors, metrics_handler
from unicore_operator.retention_daemon import start_retention
from unicore_operator.task_api.server import start_task_api
from unicore_operator.trigger_server import start_triggers
from unicore_operator.watchdog import adapter as watchdog

__all__ = ["compose", "handlers"]


def metrics_routes(app: Any, _ctx: Any) -> None:
    app.router.add_get("/metrics", metrics_handler)


async def start_metrics(ctx: Any) -> None:
    attach_collectors(ctx.redis.sync, ctx.agenttasks, watched=ctx.settings.namespaces)


def compose() -> None:
    """Attach the metrics, the task API and the watchdog to the operator, and fix Kopf's index pre-fill
    (kopf_patches); calling it again changes nothing."""
    kopf_patches.apply()
    http_server.add_routes(metrics_routes)
    for hook in (redis_identities.start, start_metrics, watchdog.start_watchdog, start_task_api, start_retention,
                 start_agentless_pools, start_triggers):
        if hook not in lifecycle.startup_hooks:
            lifecycle.startup_hooks.append(hook)
    if start_webhook not in lifecycle.startup_hooks:  # the admission webhook (admission.py), when configured
        lifecycle.startup_hooks.append(start_webhook)
