"""Prometheus metrics of UniCore, served on the operator's /metrics.

The operator's composition root (``unicore_operator.composition``) adds the /metrics route to the operator's HTTP
server and, at start-up, attaches the Redis telemetry and task-state collectors.
Other operator modules record through the functions re-exported here::

    from unicore_operator import metrics
    metrics.job_created(); metrics.job_failed(reason); metrics.observe_activation_latency(seconds)
"""

from __future__ import annotations

from unicore_operator.metrics.operator_metrics import (
    REGISTRY,
    a2a_request,
    approval_decided,
    command_job_ended,
    job_created,
    job_failed,
    job_reaped,
    observe_activation,
    observe_activation_latency,
    observe_watchdog_scan,
    schedule_run,
    trigger_event,
    warm_pod_created,
    warm_pod_replaced,
    warm_pool_checked,
    warm_pool_gone,
    warm_turn,
)

__all__ = ["REGISTRY", "a2a_request", "approval_decided", "command_job_ended", "job_created", "job_failed",
           "job_reaped", "observe_activation", "observe_activation_latency", "observe_watchdog_scan", "schedule_run",
           "trigger_event", "warm_pod_created", "warm_pod_replaced", "warm_pool_checked", "warm_pool_gone",
           "warm_turn"]
