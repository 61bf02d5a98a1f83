"""Every metric UniCore exports on /metrics: name (with the ``unicore_`` prefix), type, help, and who measures it.

``runtime`` metrics are written to Redis by turn Jobs (``unicore.store.telemetry``) and exported by the operator's
Redis collector; ``operator`` metrics are measured in the operator process. The dashboards may only use these.

``known`` lists the closed set of values of a label (a failure reason, an outcome, a phase). Prometheus practice is
to export every known label set at 0 from the start, so a panel shows 0 rather than "No data" until the first
failure, reap or throttle: the exporters do (``operator_metrics``, ``redis_collector.families_from_hashes``,
``state_collector``). Labels without a closed set (``model``, ``provider``, ``tool``/``source``/``server``, ``root``,
and ``namespace`` when the operator watches every namespace) get their values from the first series that carries them;
from then on every known label set of that model, tool or tree is exported too. The built-in tools' labels are known
before any call (``unicore.tools.call_metrics.builtin_label_sets``): their series are there from the first scrape.
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
    known: tuple[tuple[str, tuple[str, ...]], ...] = ()  # label -> every value it can take
    initial: float = 0.0  # the value of a series nothing has measured yet (a gauge's resting value)

    @property
    def known_values(self) -> dict[str, tuple[str, ...]]:
        return dict(self.known)

    @property
    def open_labels(self) -> tuple[str, ...]:
        """The labels whose values are not known in advance (learned from the series that carry them)."""
        return tuple(label for label in self.labels if label not in self.known_values)

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


# Closed label value sets (tests/unit/test_metrics_exporters.py checks each against the code that produces it).
TURN_FAILURE_REASONS = ("failed", "lease_lost", "cancelled")  # unicore.turn.outcome.exit_reason
MODEL_CALL_OUTCOMES = ("ok", "throttled", "unavailable", "error")  # unicore.providers.calling
TOOL_CALL_OUTCOMES = ("ok", "error", "refused", "cancelled")  # unicore.tools.call_metrics.OUTCOMES
COMMAND_OUTCOMES = ("ok", "failed", "timed_out", "cancelled", "error")  # unicore.tools.run_command.OUTCOMES
COMMAND_JOB_OUTCOMES = ("succeeded", "failed", "cancelled", "refused")
TURN_STARTS = ("warm", "cold", "local")
# what became of a schedule's due run (unicore_operator.schedules): started, missed (an older due time skipped for a
# newer one), skipped (past its starting deadline), replaced (an active run deleted for it, Replace), failed (its
# AgentTask could not be created)
SCHEDULE_RUN_OUTCOMES = ("started", "missed", "skipped", "replaced", "failed")
# what became of a webhook delivery to an AgentTrigger (unicore_operator.triggers): created (a task), duplicate (an
# event id seen before: nothing new), message (sent to the trigger's task), refused (a 4xx/5xx answer: signature,
# size, rate, content type...), failed (its task could not be created or does not exist)
TRIGGER_OUTCOMES = ("created", "duplicate", "message", "refused", "failed")
# A2A calls (unicore_operator.a2a_server): the JSON-RPC method (other: one not served, or none readable) and how it
# ended: ok, refused (401/403/404: no token, no right, no such agent), error (a JSON-RPC error answer)
A2A_METHODS = ("SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "other")
A2A_OUTCOMES = ("ok", "refused", "error")  # unicore.turn.defaults.start_kind
WARM_TURN_OUTCOMES = ("assigned", "missed")  # unicore_operator.warm_pools
# why a pool deleted an idle warm Job (unicore_operator.warm_pools.keep_pool): an old template, beyond the size, its
# pod silent (no record in Redis), or it ended unused (its longest wait, or it failed)
WARM_REPLACED_REASONS = ("template", "surplus", "silent", "ended")  # unicore.store.command_jobs.JobOutcome
# The Job conditions' reasons a turn Job fails with (backoffLimit 0, activeDeadlineSeconds), and FailedCreate: the
# attempt the operator gives up when the Job controller cannot create its pod (turn_ends.give_up_pod_creation).
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedCreate")
REAP_REASONS = ("orphan_job", "deadline_exceeded", "pending_timeout", "admission_timeout", "heartbeat_stale",
                "lease_holder_gone", "running_without_job", "workbench_failed")  # watchdog.scan.ReapReason
APPROVAL_DECISIONS = ("approved", "denied", "expired")  # unicore_operator.approval_waits.DECISIONS
TASK_PHASES = ("Pending", "Running", "WaitingForApproval", "WaitingForInput", "WaitingForJobs", "Waiting", "Idle",
               "Suspended", "Failed", "Archived")  # unicore_operator.phases.Phase

CATALOG: tuple[MetricSpec, ...] = (
    # --- measured by turn Jobs, exported from Redis
    MetricSpec("unicore_turns_started_total", "counter", "Turns started by turn processes.", "runtime"),
    MetricSpec("unicore_turns_finished_total", "counter", "Turns that ended normally.", "runtime"),
    MetricSpec("unicore_turns_failed_total", "counter", "Turns that ended with an error, by reason.", "runtime",
               ("reason",), known=(("reason", TURN_FAILURE_REASONS),)),
    MetricSpec("unicore_turn_duration_seconds", "histogram", "Wall time of one turn.", "runtime"),
    MetricSpec("unicore_turn_start_seconds", "histogram",
               "From the oldest message a turn drained being queued (a prompt, a reply, a child's report) to the "
               "turn's start, by how its process started: warm (a warm pod was given the turn), cold (a turn pod "
               "started for it), local (a local-mode process).", "runtime", ("start",),
               known=(("start", TURN_STARTS),)),
    MetricSpec("unicore_compactions_total", "counter",
               "Compaction records written: a request passed UNICORE_COMPACT_AT of the model's context window and "
               "the history before a cut was summarized.", "runtime"),
    MetricSpec("unicore_model_calls_total", "counter", "Model calls by model, provider and outcome.", "runtime",
               ("model", "provider", "outcome"), known=(("outcome", MODEL_CALL_OUTCOMES),)),
    MetricSpec("unicore_model_call_duration_seconds", "histogram", "Latency of successful model calls.", "runtime",
               ("model", "provider")),
    MetricSpec("unicore_model_tokens_total", "counter", "Tokens by model, provider and kind (input/output).",
               "runtime", ("model", "provider", "kind"), known=(("kind", ("input", "output")),)),
    # Tool calls, built-in and MCP alike, counted once each by unicore.tools.registry.run_tool_call. Bounded labels:
    # source builtin (built-in and UNICORE_EXTRA_TOOLS tools: tool = its name, server ""), mcp (tool "mcp", server =
    # the MCPServer's name: a tenant's server may list any tools, so its tool names would be an unbounded label) or
    # unknown (a name the model made up: tool "unknown", always refused).
    MetricSpec("unicore_tool_calls_total", "counter",
               "Tool calls by tool, source (builtin, mcp, unknown), MCP server and outcome: ok, error (the tool ran "
               "and failed: a ToolError, an MCP error result, an MCP server slow or dead mid-call), refused (not run: "
               "not one of the task's tools, outside an MCP allow-list, its MCP server unreachable, invalid input), "
               "cancelled (the turn was stopping). An MCP tool is counted as tool=\"mcp\" under its server: the "
               "tools a tenant's server lists are no bounded label.", "runtime",
               ("tool", "source", "server", "outcome"), known=(("outcome", TOOL_CALL_OUTCOMES),)),
    MetricSpec("unicore_tool_call_duration_seconds", "histogram",
               "Wall time of tool calls that ran (ok, error, or cancelled while running; refused calls are not "
               "timed), by tool, source and MCP server (labels as unicore_tool_calls_total).", "runtime",
               ("tool", "source", "server")),
    # run_command's commands (unicore.tools.run_command), besides their tool call series: how each ended and how long
    # it ran (the exec server's or the local runner's measure).
    MetricSpec("unicore_command_calls_total", "counter",
               "run_command calls by outcome: ok (exit code 0), failed (another exit code, or killed by a signal), "
               "timed_out, cancelled (the turn was stopping), error (it could not start: bad workdir, the "
               "workbench's exec server gone or unusable).", "runtime",
               ("outcome",), known=(("outcome", COMMAND_OUTCOMES),)),
    MetricSpec("unicore_command_duration_seconds", "histogram",
               "Wall time of run_command's commands that ran (every outcome but error).", "runtime", ()),
    MetricSpec("unicore_throttle_events_total", "counter", "Throttling responses from model providers.", "runtime",
               ("model",)),
    MetricSpec("unicore_throttle_wait_seconds_total", "counter", "Time spent waiting because of throttling.",
               "runtime", ("model",)),
    MetricSpec("unicore_throttle_multiplier", "gauge", "Current shared throttle back-off multiplier per model.",
               "runtime", ("model",), initial=1.0),  # 1 = no back-off, the multiplier's value until a throttle
    # --- measured by the operator
    MetricSpec("unicore_tasks", "gauge", "AgentTasks by namespace and phase (from the operator's cache).",
               "operator", ("namespace", "phase"), known=(("phase", TASK_PHASES),)),
    MetricSpec("unicore_inbox_messages", "gauge", "Messages waiting in task inboxes, by namespace.", "operator",
               ("namespace",)),
    MetricSpec("unicore_tree_tasks", "gauge", "AgentTasks of a task tree by phase (bounded set of roots).",
               "operator", ("namespace", "root", "phase"), known=(("phase", TASK_PHASES),)),
    MetricSpec("unicore_tree_tokens", "gauge", "Tokens used by a task tree (sum of status.tokens).", "operator",
               ("namespace", "root")),
    MetricSpec("unicore_tree_turns", "gauge", "Turns run by a task tree (sum of status.turns).", "operator",
               ("namespace", "root")),
    MetricSpec("unicore_tree_inbox_messages", "gauge", "Messages waiting in the inboxes of a task tree.",
               "operator", ("namespace", "root")),
    MetricSpec("unicore_tree_active_jobs", "gauge", "Running turn Jobs of a task tree.", "operator",
               ("namespace", "root")),
    MetricSpec("unicore_approvals_total", "counter",
               "Decisions on tool calls that needed approval: approved or denied by a user (task API), or denied "
               "because nobody decided in time (expired).", "operator", ("decision",),
               known=(("decision", APPROVAL_DECISIONS),)),
    MetricSpec("unicore_approvals_pending", "gauge",
               "Tool calls waiting for a user's approval, over the tasks the operator watches (from their status).",
               "operator"),
    MetricSpec("unicore_jobs_created_total", "counter", "Turn Jobs created by the operator.", "operator"),
    MetricSpec("unicore_warm_turns_total", "counter",
               "Turns of tasks whose Agent has a warm pool, by how they started: assigned (a waiting warm pod took "
               "the turn) or missed (no waiting pod of the task's template: a cold Job).", "operator", ("outcome",),
               known=(("outcome", WARM_TURN_OUTCOMES),)),
    MetricSpec("unicore_warm_pods_created_total", "counter", "Warm turn Jobs the operator created for pools.",
               "operator"),
    MetricSpec("unicore_schedule_runs_total", "counter",
               "Due runs of AgentSchedules by what became of them: started (its AgentTask created), missed (an older "
               "due time skipped for a newer one), skipped (past startingDeadlineSeconds), replaced (an active task "
               "deleted for a new run, concurrencyPolicy Replace), failed (its AgentTask could not be created).",
               "operator", ("outcome",), known=(("outcome", SCHEDULE_RUN_OUTCOMES),)),
    MetricSpec("unicore_trigger_events_total", "counter",
               "Webhook deliveries to AgentTriggers by outcome: created (a new task), duplicate (an event id seen "
               "before: nothing new), message (sent to the trigger's task), refused (answered 4xx/5xx: signature, "
               "size, rate, content type, suspended), failed (the task could not be created or does not exist).",
               "operator", ("outcome",), known=(("outcome", TRIGGER_OUTCOMES),)),
    MetricSpec("unicore_a2a_requests_total", "counter",
               "A2A JSON-RPC calls to Agents with spec.a2a, by method and outcome: ok, refused (no token, no right, "
               "no such agent: 401/403/404) or error (a JSON-RPC error: no such task, not cancelable, bad params).",
               "operator", ("method", "outcome"), known=(("method", A2A_METHODS), ("outcome", A2A_OUTCOMES))),
    MetricSpec("unicore_warm_pods_replaced_total", "counter",
               "Idle warm turn Jobs a pool deleted, by why: template (the Agent or the operator's settings changed "
               "its pods), surplus (above its size), silent (its pod had no record in Redis for the heartbeat "
               "timeout: it never connected, or hangs), ended (it exited unused at its longest wait, or failed).",
               "operator", ("reason",), known=(("reason", WARM_REPLACED_REASONS),)),
    MetricSpec("unicore_warm_pool_idle_pods", "gauge",
               "Idle warm turn Jobs of each Agent's pool (of its current template, not yet given a turn), at the "
               "pool's last check.", "operator", ("namespace", "pool")),
    MetricSpec("unicore_warm_pool_idle_pod_seconds_total", "counter",
               "Pod-seconds warm pods spent idle (what a pool costs: each holds its requests and GPUs meanwhile), "
               "counted at each pool check.", "operator"),
    MetricSpec("unicore_command_jobs_total", "counter",
               "Command Jobs (submit_job) whose result was delivered, by outcome: succeeded, failed, cancelled "
               "(the task was suspended or stopped), refused (over limits.maxJobGPUs).", "operator",
               ("outcome",), known=(("outcome", COMMAND_JOB_OUTCOMES),)),
    MetricSpec("unicore_command_job_gpu_seconds_total", "counter",
               "GPU-seconds command Jobs used: the GPUs each asked for times how long its container ran.",
               "operator"),
    MetricSpec("unicore_command_job_queued_seconds", "histogram",
               "How long command Jobs waited from creation to their start (Kueue's admission, scheduling).",
               "operator"),
    MetricSpec("unicore_jobs_failed_total", "counter", "Turn Jobs that failed, by reason.", "operator",
               ("reason",), known=(("reason", JOB_FAILURE_REASONS),)),
    MetricSpec("unicore_jobs_reaped_total", "counter", "Stuck turn work reaped by the watchdog, by reason.",
               "operator", ("reason",), known=(("reason", REAP_REASONS),)),
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
