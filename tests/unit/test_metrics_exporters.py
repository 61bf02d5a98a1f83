"""The exporters' pure parts: Redis telemetry hashes -> Prometheus families, task cache -> gauges."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from unicore_operator.metrics.catalog import (
    CATALOG,
    JOB_FAILURE_REASONS,
    MODEL_CALL_OUTCOMES,
    REAP_REASONS,
    TASK_PHASES,
    TOOL_CALL_OUTCOMES,
    TURN_FAILURE_REASONS,
    known_series,
)
from unicore_operator.metrics.redis_collector import families_from_hashes
from unicore_operator.metrics.state_collector import task_families


class Static(Collector):
    def __init__(self, families: list) -> None:  # type: ignore[type-arg]
        self.families = families

    def collect(self):  # type: ignore[no-untyped-def]
        return iter(self.families)


def scrape(families: list) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:  # type: ignore[type-arg]
    registry = CollectorRegistry()
    registry.register(Static(families))
    text = generate_latest(registry).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_counters_gauges_and_cumulative_histograms() -> None:
    counters = {b"turns_finished_total|": b"3", "model_tokens_total|kind=input,model=m,provider=p": "120"}
    gauges = {"throttle_multiplier|model=m": "2.5"}
    # observations 0.07 and 4.0 as Telemetry writes them (cumulative, only bounds >= value)
    hist = {}
    for value in (0.07, 4.0):
        for bound in ("0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"):
            if bound == "+Inf" or value <= float(bound):
                key = f"turn_duration_seconds||le={bound}"
                hist[key] = str(float(hist.get(key, 0)) + 1)
    hist["turn_duration_seconds||sum"] = "4.07"
    hist["turn_duration_seconds||count"] = "2"
    samples = scrape(families_from_hashes(counters, hist, gauges))
    assert samples[("unicore_turns_finished_total", ())] == 3
    assert samples[("unicore_model_tokens_total", (("kind", "input"), ("model", "m"), ("provider", "p")))] == 120
    assert samples[("unicore_throttle_multiplier", (("model", "m"),))] == 2.5
    assert samples[("unicore_turn_duration_seconds_bucket", (("le", "0.1"),))] == 1
    assert samples[("unicore_turn_duration_seconds_bucket", (("le", "2.5"),))] == 1
    assert samples[("unicore_turn_duration_seconds_bucket", (("le", "5.0"),))] == 2
    assert samples[("unicore_turn_duration_seconds_bucket", (("le", "+Inf"),))] == 2
    assert samples[("unicore_turn_duration_seconds_count", ())] == 2
    assert abs(samples[("unicore_turn_duration_seconds_sum", ())] - 4.07) < 1e-9


def test_every_runtime_metric_is_named_even_before_any_turn() -> None:
    registry = CollectorRegistry()
    registry.register(Static(families_from_hashes({}, {}, {})))
    text = generate_latest(registry).decode()
    for spec in CATALOG:
        if spec.source == "runtime":
            assert f"# TYPE {spec.name} {spec.kind}" in text


def test_malformed_fields_are_skipped() -> None:
    samples = scrape(families_from_hashes({"nobar": "1", "x_total|": "not-a-number"}, {"h|": "1"}, {}))
    assert not any(name.startswith("unicore_x") or name.startswith("unicore_h") for name, _ in samples)


def test_task_gauges_by_phase_inbox_and_bounded_trees() -> None:
    def body(ns: str, name: str, phase: str, root: str, **status: object) -> dict:  # type: ignore[type-arg]
        return {"metadata": {"namespace": ns, "name": name, "labels": {"unicore.dev/root": root}},
                "status": {"phase": phase, **status}}

    tasks = [body("a", "r1", "Waiting", "r1", tokens=10, turns=2), body("a", "r1-x", "Running", "r1", tokens=5,
                                                                        activeJob="r1-x-t1"),
             body("a", "r1-y", "Idle", "r1"), body("a", "r2", "Idle", "r2", tokens=7), body("b", "r3", "Failed", "r3")]
    samples = scrape(task_families(tasks, {"a/r1": 2, "a/r2": 1}, max_trees=2))
    assert samples[("unicore_tasks", (("namespace", "a"), ("phase", "Idle")))] == 2
    assert samples[("unicore_tasks", (("namespace", "a"), ("phase", "Suspended")))] == 0
    assert samples[("unicore_tasks", (("namespace", "b"), ("phase", "Failed")))] == 1
    assert samples[("unicore_inbox_messages", (("namespace", "a"),))] == 3
    assert samples[("unicore_tree_tokens", (("namespace", "a"), ("root", "r1")))] == 15
    assert samples[("unicore_tree_active_jobs", (("namespace", "a"), ("root", "r1")))] == 1
    assert samples[("unicore_tree_tasks", (("namespace", "a"), ("phase", "Running"), ("root", "r1")))] == 1
    roots = {dict(labels)["root"] for name, labels in samples if name == "unicore_tree_tokens"}
    assert len(roots) == 2 and "r1" in roots  # bounded to max_trees, largest tree first


def test_catalog_series_names() -> None:
    series = known_series()
    assert {"unicore_turn_duration_seconds_bucket", "unicore_turns_finished_total", "unicore_build_info",
            "unicore_jobs_reaped_total", "unicore_tasks"} <= series


def test_every_known_label_set_has_a_resting_series_and_real_values_win() -> None:
    """issue 11: a series exists before its first event. Label-free metrics and every failure reason from the start;
    for each model a turn has used, every outcome, token kind and throttle series (the multiplier at rest is 1)."""
    fresh = scrape(families_from_hashes({}, {}, {}))
    assert fresh[("unicore_turns_started_total", ())] == 0
    assert fresh[("unicore_turns_finished_total", ())] == 0
    for reason in TURN_FAILURE_REASONS:
        assert fresh[("unicore_turns_failed_total", (("reason", reason),))] == 0
    assert fresh[("unicore_turn_duration_seconds_bucket", (("le", "+Inf"),))] == 0
    assert fresh[("unicore_turn_duration_seconds_bucket", (("le", "0.05"),))] == 0
    assert fresh[("unicore_turn_duration_seconds_count", ())] == 0
    assert not any(name.startswith(("unicore_model_", "unicore_throttle_")) for name, _ in fresh)  # no model yet

    counters = {"turns_failed_total|reason=failed": "2",
                "model_calls_total|model=m1,outcome=ok,provider=bedrock": "5",
                "throttle_events_total|model=m2": "1"}
    samples = scrape(families_from_hashes(counters, {}, {"throttle_multiplier|model=m2": "3.5"}))
    assert samples[("unicore_turns_failed_total", (("reason", "failed"),))] == 2  # the real value, not a 0
    assert samples[("unicore_turns_failed_total", (("reason", "lease_lost"),))] == 0
    m1 = (("model", "m1"), ("provider", "bedrock"))
    assert samples[("unicore_model_calls_total", (m1[0], ("outcome", "ok"), m1[1]))] == 5
    for outcome in ("throttled", "unavailable", "error"):
        assert samples[("unicore_model_calls_total", (m1[0], ("outcome", outcome), m1[1]))] == 0
    for kind in ("input", "output"):
        assert samples[("unicore_model_tokens_total", (("kind", kind), *m1))] == 0
    assert samples[("unicore_model_call_duration_seconds_bucket", (("le", "+Inf"), *m1))] == 0
    assert samples[("unicore_throttle_events_total", (("model", "m1"),))] == 0
    assert samples[("unicore_throttle_wait_seconds_total", (("model", "m1"),))] == 0
    assert samples[("unicore_throttle_multiplier", (("model", "m1"),))] == 1.0  # no back-off yet
    assert samples[("unicore_throttle_events_total", (("model", "m2"),))] == 1
    assert samples[("unicore_throttle_multiplier", (("model", "m2"),))] == 3.5
    # a model known only from throttling has no provider label: no model_calls series is invented for it
    assert not any(dict(labels).get("model") == "m2" for name, labels in samples if name.startswith("unicore_model_"))


def test_operator_counters_have_every_known_reason_from_the_start() -> None:
    from unicore_operator.metrics import REGISTRY

    samples = {(s.name, tuple(sorted(s.labels.items()))) for fam in text_string_to_metric_families(
        generate_latest(REGISTRY).decode()) for s in fam.samples}
    for reason in JOB_FAILURE_REASONS:
        assert ("unicore_jobs_failed_total", (("reason", reason),)) in samples
    for reason in REAP_REASONS:
        assert ("unicore_jobs_reaped_total", (("reason", reason),)) in samples


def test_watched_namespaces_have_task_series_before_any_task() -> None:
    samples = scrape(task_families([], {}, max_trees=10, watched=("team-a",)))
    assert samples[("unicore_tasks", (("namespace", "team-a"), ("phase", "Failed")))] == 0
    assert samples[("unicore_inbox_messages", (("namespace", "team-a"),))] == 0


def test_the_catalogs_closed_label_sets_are_the_codes() -> None:
    """The known values are declared in the catalog; each must be what the code that records the metric uses."""
    from unicore.turn import model_calls, outcome
    from unicore_operator.phases import Phase
    from unicore_operator.watchdog.scan import ReapReason

    assert set(REAP_REASONS) == {reason.value for reason in ReapReason}
    assert set(TASK_PHASES) == {str(phase) for phase in Phase}
    exit_codes = (outcome.EXIT_FAILED, outcome.EXIT_LEASE_LOST, outcome.EXIT_CANCELLED)
    assert {outcome.exit_reason(code) for code in exit_codes} == set(TURN_FAILURE_REASONS)
    # every outcome the runtime records (outcome="..." / "outcome": "..." / the throttled-or-unavailable choice)
    import inspect
    import re

    from unicore.providers import calling

    code = inspect.getsource(model_calls) + inspect.getsource(calling)
    recorded = set(re.findall(r'outcome(?:=|": )"(\w+)"', code)) | set(re.findall(r'what = "(\w+)" if .* else "(\w+)"',
                                                                                     code)[0])
    assert recorded == set(MODEL_CALL_OUTCOMES)

    from unicore.tools import call_metrics, registry

    assert TOOL_CALL_OUTCOMES == call_metrics.OUTCOMES
    # every outcome run_tool_call records is one of them (call_metrics.OK / ERROR / REFUSED / CANCELLED)
    used = set(re.findall(r"call_metrics\.([A-Z]+)\b", inspect.getsource(registry))) - {"OUTCOMES"}
    assert {getattr(call_metrics, name) for name in used} == set(TOOL_CALL_OUTCOMES)


def test_a_bucket_carries_its_exemplar_trace_in_openmetrics_only() -> None:
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

    trace, span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    hist = {"turn_duration_seconds||le=0.5": 0, "turn_duration_seconds||le=1": 1,
            "turn_duration_seconds||le=+Inf": 1, "turn_duration_seconds||sum": 0.7,
            "turn_duration_seconds||count": 1,
            "turn_duration_seconds||ex=1": f"{trace} {span} 0.7 1790000000.000",
            "turn_duration_seconds||ex=0.5": "not an exemplar"}
    registry = CollectorRegistry()
    registry.register(Static(families_from_hashes({}, hist, {}, empty_known=False)))
    text = openmetrics(registry).decode()
    [line] = [line for line in text.splitlines() if line.startswith('unicore_turn_duration_seconds_bucket{le="1.0"}')]
    assert f'# {{span_id="{span}",trace_id="{trace}"}} 0.7 1790000000.0' in line, line
    assert "# {" not in "".join(line for line in text.splitlines() if 'le="0.5"' in line)  # the malformed one
    assert "trace_id" not in generate_latest(registry).decode()  # the classic format has no exemplars
