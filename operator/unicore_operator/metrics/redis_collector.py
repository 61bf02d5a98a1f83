"""Export the metrics short-lived turn Jobs wrote to Redis (``unicore.store.telemetry``) as Prometheus families.

Three hashes, read in one pipelined round trip per scrape: counters (``<name>|<labels>`` -> value), histograms
(``<name>|<labels>|le=<bound>`` cumulative counts, ``|sum``, ``|count``) and gauges. ``families_from_hashes`` is
pure (unit-tested); :class:`RedisTelemetryCollector` does the read.

Every known label set is exported from the first scrape, at its resting value (0, a gauge's ``initial``) until a
turn writes it: the metrics without labels, every failure reason, for each model a turn has used (a ``model`` /
``provider`` seen on any series) every call outcome, token kind and throttle series, and for each tool (its
``tool``/``source``/``server``) every tool call outcome: the built-in tools' and the unknown tool's from the start
(``call_metrics.builtin_label_sets``), any other (an MCP server's, a custom tool's) once it was called. A panel then
shows 0 instead of "No data" until the first failure or throttle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from itertools import product
from typing import Any

import redis
from prometheus_client.core import Exemplar, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from unicore.store.codec import text
from unicore.store.telemetry import BUCKETS, DEFAULT_BUCKETS, parse_labels, read_telemetry
from unicore.tools.call_metrics import builtin_label_sets

from unicore_operator.log import logger
from unicore_operator.metrics.catalog import PREFIX, RUNTIME_BY_SHORT_NAME, MetricSpec


def _float(value: Any) -> float | None:
    try:
        return float(text(value))
    except (TypeError, ValueError):
        return None


def _family(short_name: str, kind: str) -> Metric:
    spec = RUNTIME_BY_SHORT_NAME.get(short_name)
    base = PREFIX + short_name
    if kind == "counter":
        base = base.removesuffix("_total")
    doc = spec.help if spec else f"{short_name} (written by turn processes)"
    return Metric(base, doc, kind)


def _split(field: str) -> tuple[str, str] | None:
    if "|" not in field:
        return None
    name, labels = field.split("|", 1)
    return name, labels


def exemplar_of(raw: str) -> Exemplar | None:
    """A bucket's exemplar as stored (``<trace id> <span id> <value> <unix time>``); None when malformed."""
    parts = raw.split()
    if len(parts) != 4 or len(parts[0]) != 32 or len(parts[1]) != 16:
        return None
    try:
        int(parts[0], 16), int(parts[1], 16)
        value, stamp = float(parts[2]), float(parts[3])
    except ValueError:
        return None
    return Exemplar({"trace_id": parts[0], "span_id": parts[1]}, value, stamp)


def _le_value(text: str) -> float:
    return math.inf if text in ("+Inf", "inf", "Inf") else float(text)


def known_label_sets(spec: MetricSpec, seen: Iterable[Mapping[str, str]]) -> list[dict[str, str]]:
    """Every label set of ``spec`` that can be named now: each combination of its known values, for each
    combination of its open labels (``model``, ``provider``) found on a series in ``seen`` (none without labels)."""
    opened = spec.open_labels
    combos = {tuple(labels[name] for name in opened) for labels in seen if all(name in labels for name in opened)}
    known = spec.known_values
    out = []
    for combo in sorted(combos) if opened else [()]:
        fixed = dict(zip(opened, combo, strict=True))
        for values in product(*(known[name] for name in spec.labels if name in known)):
            closed = dict(zip((name for name in spec.labels if name in known), values, strict=True))
            out.append({name: {**fixed, **closed}[name] for name in spec.labels})
    return out


def _add_resting_series(fam: Metric, spec: MetricSpec, labels: dict[str, str]) -> None:
    """The samples of a series nothing has written yet: a counter or gauge at ``spec.initial``, a histogram with
    every bucket (the runtime's ``BUCKETS`` of it, else ``DEFAULT_BUCKETS``), its count and its sum at 0."""
    if spec.kind == "counter":
        fam.add_sample(fam.name + "_total", labels, spec.initial)
    elif spec.kind == "gauge":
        fam.add_sample(fam.name, labels, spec.initial)
    elif spec.kind == "histogram":
        for bound in (*BUCKETS.get(spec.name.removeprefix("unicore_"), DEFAULT_BUCKETS), math.inf):
            fam.add_sample(fam.name + "_bucket", {**labels, "le": floatToGoString(bound)}, 0.0)
        fam.add_sample(fam.name + "_count", labels, 0.0)
        fam.add_sample(fam.name + "_sum", labels, 0.0)


def families_from_hashes(counters: Mapping[Any, Any], histograms: Mapping[Any, Any],
                         gauges: Mapping[Any, Any], *, empty_known: bool = True,
                         known_labels: Iterable[Mapping[str, str]] = ()) -> list[Metric]:
    """Prometheus families from the three telemetry hashes.

    With ``empty_known`` every runtime metric of the catalog is present, and every label set it can name
    (:func:`known_label_sets`, its open labels' values taken from the series written and from ``known_labels``, those
    known before anything is written) has a series from the start: at rest (:func:`_add_resting_series`) until some
    turn writes it. So /metrics always names the same metric set, and a dashboard query finds a series.
    """
    families: dict[str, Metric] = {}

    def family(short: str, kind: str) -> Metric:
        if short not in families:
            families[short] = _family(short, kind)
        return families[short]

    for raw_field, raw_value in counters.items():
        parts, value = _split(text(raw_field)), _float(raw_value)
        if parts is None or value is None:
            continue
        short, labels = parts
        fam = family(short, "counter")
        fam.add_sample(fam.name + "_total", parse_labels(labels), value)

    for raw_field, raw_value in gauges.items():
        parts, value = _split(text(raw_field)), _float(raw_value)
        if parts is None or value is None:
            continue
        short, labels = parts
        fam = family(short, "gauge")
        fam.add_sample(fam.name, parse_labels(labels), value)

    series: dict[tuple[str, str], dict[str, float]] = {}
    exemplars: dict[tuple[str, str, str], Exemplar] = {}
    for raw_field, raw_value in histograms.items():
        field = text(raw_field)
        pieces = field.split("|")
        if len(pieces) == 3 and pieces[2].startswith("ex="):
            found = exemplar_of(text(raw_value))
            if found is not None:
                exemplars[(pieces[0], pieces[1], floatToGoString(_le_value(pieces[2][3:])))] = found
            continue
        value = _float(raw_value)
        if len(pieces) != 3 or value is None:
            continue
        short, labels, part = pieces
        series.setdefault((short, labels), {})[part] = value
    for (short, labels), points in sorted(series.items()):
        fam = family(short, "histogram")
        label_map = parse_labels(labels)
        bounds = sorted((_le_value(p[3:]), v) for p, v in points.items() if p.startswith("le="))
        count = points.get("count", 0.0)
        running = 0.0
        saw_inf = False
        for bound, cumulative in bounds:
            running = max(running, cumulative)  # cumulative by construction; max() guards a torn write
            saw_inf = saw_inf or math.isinf(bound)
            fam.add_sample(fam.name + "_bucket", {**label_map, "le": floatToGoString(bound)}, running,
                           exemplar=exemplars.get((short, labels, floatToGoString(bound))))
        if not saw_inf:
            fam.add_sample(fam.name + "_bucket", {**label_map, "le": "+Inf"}, max(running, count))
        fam.add_sample(fam.name + "_count", label_map, count)
        fam.add_sample(fam.name + "_sum", label_map, points.get("sum", 0.0))

    if empty_known:
        seen = [sample.labels for short, fam in families.items() if short in RUNTIME_BY_SHORT_NAME
                for sample in fam.samples] + [dict(labels) for labels in known_labels]
        for short, spec in RUNTIME_BY_SHORT_NAME.items():
            fam = family(short, spec.kind)
            written = {frozenset((k, v) for k, v in sample.labels.items() if k != "le") for sample in fam.samples}
            for label_set in known_label_sets(spec, seen):
                if frozenset(label_set.items()) not in written:
                    _add_resting_series(fam, spec, label_set)
    return [families[k] for k in sorted(families)]


class RedisTelemetryCollector(Collector):
    """A custom collector: on each scrape, one pipelined read of the three telemetry hashes."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._known_labels = builtin_label_sets()  # the built-in tools: a series each before any call

    def describe(self) -> list[Metric]:
        return []  # no collect() at registration time (it would read Redis)

    def collect(self) -> Iterator[Metric]:
        try:
            counters, histograms, gauges = read_telemetry(self._redis)
        except redis.RedisError as exc:
            logger.warning("metrics: cannot read runtime telemetry from Redis: %s", exc)
            counters = histograms = gauges = {}
        yield from families_from_hashes(counters, histograms, gauges, known_labels=self._known_labels)
