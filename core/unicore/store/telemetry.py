"""Metrics written to Redis by short-lived processes (turn Jobs), exported later by the operator.

Counters and histograms live in two hashes shared by all tasks (not per task; named in ``store.keys``):
``uc:metrics:counters`` field ``<name>|<labels>`` -> float, and ``uc:metrics:hist`` fields
``<name>|<labels>|le=<bound>`` (cumulative bucket counts), ``<name>|<labels>|sum`` and ``<name>|<labels>|count``;
while a trace is recorded, ``<name>|<labels>|ex=<bound>`` holds the newest exemplar of the bucket the value fell in
(``<trace id> <span id> <value> <unix time>``: a dashboard's panel leads to that trace).
``<labels>`` is ``k=v,k=v`` sorted by key. Gauges set by processes go to ``uc:metrics:gauges``.
Names follow Prometheus conventions without the exporter's ``unicore_`` prefix (e.g. ``model_calls_total``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import redis

from unicore.store.client import RedisClient
from unicore.store.keys import METRICS_COUNTERS, METRICS_GAUGES, METRICS_HISTOGRAMS
from unicore.traces import spans

DEFAULT_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# ``turn_start_seconds``: a warm pod starts a turn in tens of milliseconds, a cold one in about a second
START_BUCKETS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
BUCKETS: dict[str, tuple[float, ...]] = {"turn_start_seconds": START_BUCKETS}  # a histogram's own, else the default


def label_string(labels: Mapping[str, str] | None) -> str:
    if not labels:
        return ""
    for key, value in labels.items():
        if any(ch in f"{key}{value}" for ch in "|,="):
            raise ValueError(f"label {key}={value!r} may not contain '|', ',' or '='")
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def parse_labels(text: str) -> dict[str, str]:
    if not text:
        return {}
    return dict(pair.split("=", 1) for pair in text.split(","))


class Telemetry:
    """Best-effort metric writes: one pipelined round trip per call; never raises into the caller's work."""

    def __init__(self, client: RedisClient, buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        self._redis = client
        self._buckets = tuple(buckets)

    def incr(self, name: str, labels: Mapping[str, str] | None = None, by: float = 1.0) -> None:
        try:
            self._redis.hincrbyfloat(METRICS_COUNTERS, f"{name}|{label_string(labels)}", by)
        except redis.RedisError:
            pass

    def set_gauge(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        try:
            self._redis.hset(METRICS_GAUGES, f"{name}|{label_string(labels)}", value)
        except redis.RedisError:
            pass

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None = None,
                trace: str | None = None) -> None:
        """Count ``value``; ``trace``: the traceparent of its exemplar (default: the current span's, if any)."""
        base = f"{name}|{label_string(labels)}"
        ref = spans.parse(trace if trace is not None else spans.current())
        try:
            pipe = self._redis.pipeline(transaction=False)
            exemplar_bound = "+Inf"
            for bound in BUCKETS.get(name, self._buckets):
                if value <= bound:
                    pipe.hincrbyfloat(METRICS_HISTOGRAMS, f"{base}|le={bound:g}", 1)
                    exemplar_bound = exemplar_bound if exemplar_bound != "+Inf" else f"{bound:g}"
            if ref is not None:
                pipe.hset(METRICS_HISTOGRAMS, f"{base}|ex={exemplar_bound}",
                          f"{ref.trace_id} {ref.span_id} {value!r} {time.time():.3f}")
            pipe.hincrbyfloat(METRICS_HISTOGRAMS, f"{base}|le=+Inf", 1)
            pipe.hincrbyfloat(METRICS_HISTOGRAMS, f"{base}|sum", value)
            pipe.hincrbyfloat(METRICS_HISTOGRAMS, f"{base}|count", 1)
            pipe.execute()
        except redis.RedisError:
            pass


class TelemetryHashes(NamedTuple):
    """The three telemetry hashes as read (fields and values as the client returns them: bytes or str)."""

    counters: Mapping[Any, Any]
    histograms: Mapping[Any, Any]
    gauges: Mapping[Any, Any]


def read_telemetry(client: RedisClient) -> TelemetryHashes:
    """Counters, histograms and gauges in one pipelined round trip (the exporter's read; raises RedisError)."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(METRICS_COUNTERS)
    pipe.hgetall(METRICS_HISTOGRAMS)
    pipe.hgetall(METRICS_GAUGES)
    counters, histograms, gauges = pipe.execute()
    return TelemetryHashes(counters, histograms, gauges)
