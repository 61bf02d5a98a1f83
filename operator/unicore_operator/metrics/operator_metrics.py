"""Metrics measured inside the operator process, and the functions other operator modules call to record them.

All live on :data:`REGISTRY` (not prometheus-client's global one), which /metrics serves together with the
Redis telemetry and task-state collectors. Every known label set (the catalog's ``known`` values, e.g. each reap
reason) is exported at 0 from the moment the registry is built, so dashboards show 0, not "No data", until the
first failure or reap.
"""

from __future__ import annotations

import time
from importlib import metadata
from itertools import product

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.process_collector import ProcessCollector

from unicore_operator.metrics.catalog import A2A_METHODS, BY_NAME, MetricSpec

REGISTRY = CollectorRegistry(auto_describe=False)
ProcessCollector(registry=REGISTRY, namespace="unicore_operator")

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SCAN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


def _help(name: str) -> str:
    return BY_NAME[name].help


JOBS_CREATED = Counter("unicore_jobs_created", _help("unicore_jobs_created_total"), registry=REGISTRY)
JOBS_FAILED = Counter("unicore_jobs_failed", _help("unicore_jobs_failed_total"), ["reason"], registry=REGISTRY)
JOBS_REAPED = Counter("unicore_jobs_reaped", _help("unicore_jobs_reaped_total"), ["reason"], registry=REGISTRY)
ACTIVATION_LATENCY = Histogram("unicore_activation_latency_seconds", _help("unicore_activation_latency_seconds"),
                               buckets=LATENCY_BUCKETS, registry=REGISTRY)
WATCHDOG_SCAN = Histogram("unicore_watchdog_scan_duration_seconds",
                          _help("unicore_watchdog_scan_duration_seconds"), buckets=SCAN_BUCKETS, registry=REGISTRY)
WATCHDOG_LAST_SCAN = Gauge("unicore_watchdog_last_scan_timestamp_seconds",
                           _help("unicore_watchdog_last_scan_timestamp_seconds"), registry=REGISTRY)
APPROVALS = Counter("unicore_approvals", _help("unicore_approvals_total"), ["decision"], registry=REGISTRY)
COMMAND_JOBS = Counter("unicore_command_jobs", _help("unicore_command_jobs_total"), ["outcome"], registry=REGISTRY)
COMMAND_JOB_GPU_SECONDS = Counter("unicore_command_job_gpu_seconds", _help("unicore_command_job_gpu_seconds_total"),
                                  registry=REGISTRY)
COMMAND_JOB_QUEUED = Histogram("unicore_command_job_queued_seconds", _help("unicore_command_job_queued_seconds"),
                               buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600), registry=REGISTRY)
WARM_TURNS = Counter("unicore_warm_turns", _help("unicore_warm_turns_total"), ["outcome"], registry=REGISTRY)
WARM_PODS_CREATED = Counter("unicore_warm_pods_created", _help("unicore_warm_pods_created_total"), registry=REGISTRY)
A2A_REQUESTS = Counter("unicore_a2a_requests", _help("unicore_a2a_requests_total"), ["method", "outcome"],
                       registry=REGISTRY)
TRIGGER_EVENTS = Counter("unicore_trigger_events", _help("unicore_trigger_events_total"), ["outcome"],
                         registry=REGISTRY)
SCHEDULE_RUNS = Counter("unicore_schedule_runs", _help("unicore_schedule_runs_total"), ["outcome"], registry=REGISTRY)
WARM_PODS_REPLACED = Counter("unicore_warm_pods_replaced", _help("unicore_warm_pods_replaced_total"), ["reason"],
                             registry=REGISTRY)
WARM_POOL_IDLE = Gauge("unicore_warm_pool_idle_pods", _help("unicore_warm_pool_idle_pods"), ["namespace", "pool"],
                       registry=REGISTRY)
WARM_IDLE_SECONDS = Counter("unicore_warm_pool_idle_pod_seconds", _help("unicore_warm_pool_idle_pod_seconds_total"),
                            registry=REGISTRY)
BUILD = Info("unicore_build", _help("unicore_build"), registry=REGISTRY)


def declare_known(metric: Counter, spec: MetricSpec) -> None:
    """Create the child of every known label set of ``metric`` (at 0): a labelled counter has no series at all
    until its first ``labels(...)`` call otherwise."""
    known = spec.known_values
    assert spec.labels and set(spec.labels) == set(known), f"{spec.name}: every label needs its known values"
    for values in product(*(known[label] for label in spec.labels)):
        metric.labels(*values)


declare_known(JOBS_FAILED, BY_NAME["unicore_jobs_failed_total"])
declare_known(JOBS_REAPED, BY_NAME["unicore_jobs_reaped_total"])
declare_known(APPROVALS, BY_NAME["unicore_approvals_total"])
declare_known(COMMAND_JOBS, BY_NAME["unicore_command_jobs_total"])
declare_known(WARM_TURNS, BY_NAME["unicore_warm_turns_total"])
declare_known(WARM_PODS_REPLACED, BY_NAME["unicore_warm_pods_replaced_total"])
declare_known(SCHEDULE_RUNS, BY_NAME["unicore_schedule_runs_total"])
declare_known(TRIGGER_EVENTS, BY_NAME["unicore_trigger_events_total"])
declare_known(A2A_REQUESTS, BY_NAME["unicore_a2a_requests_total"])

FAILURE_REASON_MAX = 40


def _version() -> str:
    try:
        return metadata.version("unicore")
    except metadata.PackageNotFoundError:
        return "unknown"


BUILD.info({"version": _version()})


def job_created() -> None:
    """Call once per turn Job the operator created (not for 409 AlreadyExists)."""
    JOBS_CREATED.inc()


def job_failed(reason: str) -> None:
    """Call once per turn Job accounted as failed; ``reason`` is the Job condition's reason (e.g. BackoffLimitExceeded,
    DeadlineExceeded). Only the part before ':' is used, so the label stays bounded."""
    JOBS_FAILED.labels(reason=(reason.split(":", 1)[0].strip() or "Failed")[:FAILURE_REASON_MAX]).inc()


def job_reaped(reason: str) -> None:
    JOBS_REAPED.labels(reason=reason).inc()


def warm_turn(outcome: str) -> None:
    """Call once per turn of a task whose Agent has a warm pool: ``assigned`` or ``missed``."""
    WARM_TURNS.labels(outcome=outcome).inc()


def warm_pod_created() -> None:
    WARM_PODS_CREATED.inc()


def schedule_run(outcome: str, count: int = 1) -> None:
    """Call once per due run of a schedule: ``catalog.SCHEDULE_RUN_OUTCOMES``."""
    if count > 0:
        SCHEDULE_RUNS.labels(outcome=outcome).inc(count)


def a2a_request(method: str, outcome: str) -> None:
    """Call once per A2A JSON-RPC call: ``catalog.A2A_METHODS`` (others counted as ``other``), ``A2A_OUTCOMES``."""
    A2A_REQUESTS.labels(method=method if method in A2A_METHODS else "other", outcome=outcome).inc()


def trigger_event(outcome: str) -> None:
    """Call once per delivery to the trigger endpoint: ``catalog.TRIGGER_OUTCOMES``."""
    TRIGGER_EVENTS.labels(outcome=outcome).inc()


def warm_pod_replaced(reason: str) -> None:
    """Call once per idle warm Job a pool deleted: ``catalog.WARM_REPLACED_REASONS``."""
    WARM_PODS_REPLACED.labels(reason=reason).inc()


def warm_pool_checked(namespace: str, pool: str, idle: int, idle_pod_seconds: float) -> None:
    """Call at each check of a pool: its idle warm Jobs now, and the pod-seconds they idled since the last check."""
    WARM_POOL_IDLE.labels(namespace=namespace, pool=pool).set(idle)
    if idle_pod_seconds > 0:
        WARM_IDLE_SECONDS.inc(idle_pod_seconds)


def warm_pool_gone(namespace: str, pool: str) -> None:
    try:
        WARM_POOL_IDLE.remove(namespace, pool)
    except KeyError:
        pass


def command_job_ended(outcome: str, gpus: int, ran_seconds: float | None, queued_seconds: float | None) -> None:
    """Call once per command Job whose result was delivered."""
    COMMAND_JOBS.labels(outcome=outcome).inc()
    if ran_seconds is not None and gpus > 0:
        COMMAND_JOB_GPU_SECONDS.inc(gpus * max(0.0, ran_seconds))
    if queued_seconds is not None:
        COMMAND_JOB_QUEUED.observe(max(0.0, queued_seconds))


def approval_decided(decision: str, count: int = 1) -> None:
    """Call once per tool call decided: ``decision`` approved or denied (by a user), expired (denied on timeout)."""
    if count > 0:
        APPROVALS.labels(decision=decision).inc(count)


def observe_activation_latency(seconds: float) -> None:
    """Activation stream entry timestamp -> turn Job created, in seconds."""
    ACTIVATION_LATENCY.observe(max(0.0, seconds))


def observe_activation(activation_ts: float, now: float | None = None) -> None:
    """Same as :func:`observe_activation_latency`, from the activation's unix timestamp."""
    observe_activation_latency((time.time() if now is None else now) - activation_ts)


def observe_watchdog_scan(seconds: float, ended_at: float | None = None) -> None:
    WATCHDOG_SCAN.observe(seconds)
    WATCHDOG_LAST_SCAN.set(time.time() if ended_at is None else ended_at)
