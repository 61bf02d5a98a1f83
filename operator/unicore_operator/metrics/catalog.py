"""Every metric UniCore exports on /metrics: name (with the ``unicore_`` prefix), type, help, and who measures it.

``runtime`` metrics are written to Redis by turn Jobs (``unicore.state.telemetry``) and exported by the operator's
Redis collector; ``operator`` metrics are measured in the operator process. The dashboards may only use these.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "unicore_"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str  # full name; counters end in _total
    kind: str  # counter | gauge | histogram | info
    help: str
    source: str  # runtime | operator
    labels: tuple[str, ...] = ()

    @property
    def series_names(self) -> tuple[str, ...]:
        """The sample names Prometheus stores for this metric."""
        if self.kind == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        if self.kind == "info":
            return (f"{self.name}_info",)
        if self.kind == "counter":
            return (self.name, self.name.removesuffix("_total") + "_created")
        return (self.name,)


CATALOG: tuple[MetricSpec, ...] = (
    # --- measured by turn Jobs, exported from Redis
    MetricSpec("unicore_turns_started_total", "counter", "Turns started by turn processes.", "runtime"),
    MetricSpec("unicore_turns_finished_total", "counter", "Turns that ended normally.", "runtime"),
    MetricSpec("unicore_turns_failed_total", "counter", "Turns that ended with an error, by reason.", "runtime",
               ("reason",)),
    MetricSpec("unicore_turn_duration_seconds", "histogram", "Wall time of one turn.", "runtime"),
    MetricSpec("unicore_model_calls_total", "counter", "Model calls by model, provider and outcome.", "runtime",
               ("model", "provider", "outcome")),
    MetricSpec("unicore_model_call_duration_seconds", "histogram", "Latency of successful model calls.", "runtime",
               ("model", "provider")),
    MetricSpec("unicore_model_tokens_total", "counter", "Tokens by model, provider and kind (input/output).",
               "runtime", ("model", "provider", "kind")),
    MetricSpec("unicore_throttle_events_total", "counter", "Throttling responses from model providers.", "runtime",
               ("model",)),
    MetricSpec("unicore_throttle_wait_seconds_total", "counter", "Time spent waiting because of throttling.",
               "runtime", ("model",)),
    MetricSpec("unicore_throttle_multiplier", "gauge", "Current shared throttle back-off multiplier per model.",
               "runtime", ("model",)),
    # --- measured by the operator
    MetricSpec("unicore_tasks", "gauge", "AgentTasks by namespace and phase (from the operator's cache).",
               "operator", ("namespace", "phase")),
    MetricSpec("unicore_inbox_messages", "gauge", "Messages waiting in task inboxes, by namespace.", "operator",
               ("namespace",)),
    MetricSpec("unicore_tree_tasks", "gauge", "AgentTasks of a task tree by phase (bounded set of roots).",
               "operator", ("namespace", "root", "phase")),
    MetricSpec("unicore_tree_tokens", "gauge", "Tokens used by a task tree (sum of status.tokens).", "operator",
               ("namespace", "root")),
    MetricSpec("unicore_tree_turns", "gauge", "Turns run by a task tree (sum of status.turns).", "operator",
               ("namespace", "root")),
    MetricSpec("unicore_tree_inbox_messages", "gauge", "Messages waiting in the inboxes of a task tree.",
               "operator", ("namespace", "root")),
    MetricSpec("unicore_tree_active_jobs", "gauge", "Running turn Jobs of a task tree.", "operator",
               ("namespace", "root")),
    MetricSpec("unicore_jobs_created_total", "counter", "Turn Jobs created by the operator.", "operator"),
    MetricSpec("unicore_jobs_failed_total", "counter", "Turn Jobs that failed, by reason.", "operator",
               ("reason",)),
    MetricSpec("unicore_jobs_reaped_total", "counter", "Stuck turn work reaped by the watchdog, by reason.",
               "operator", ("reason",)),
    MetricSpec("unicore_activation_latency_seconds", "histogram",
               "Activation (stream entry) to turn Job created.", "operator"),
    MetricSpec("unicore_watchdog_scan_duration_seconds", "histogram",
               "Duration of one watchdog scan (snapshot, Redis read and decision).", "operator"),
    MetricSpec("unicore_watchdog_last_scan_timestamp_seconds", "gauge", "When the last watchdog scan ended.",
               "operator"),
    MetricSpec("unicore_build", "info", "Build information of the operator.", "operator", ("version",)),
)

BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in CATALOG}
RUNTIME_BY_SHORT_NAME: dict[str, MetricSpec] = {
    spec.name.removeprefix(PREFIX): spec for spec in CATALOG if spec.source == "runtime"
}


def known_series() -> set[str]:
    return {series for spec in CATALOG for series in spec.series_names}
