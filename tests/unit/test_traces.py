"""The pure parts of traces (issue 32): which OTEL_* settings turn tracing on, traceparents as stored, the GenAI
names, the operator's pod-start spans from a Job's and a pod's timestamps, trace page links."""

from __future__ import annotations

import pytest
from unicore.traces import genai, spans
from unicore.traces.links import trace_status, trace_url
from unicore.traces.setup import TracingConfigError, configured, exporters_of
from unicore_operator.turn_traces import JOB_SCHEDULE, start_spans
from unicore_operator.watchdog.views import pod_view

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@pytest.mark.parametrize(("env", "expected"), [
    ({}, []),  # nothing configured: no exporter, although the SDK's default would be otlp
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4318"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://j:4318/v1/traces"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, []),
    ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
    ({"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4318"}, ["otlp", "console"]),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4318"}, []),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4318"}, []),
])
def test_tracing_is_on_only_when_an_exporter_is_configured(env: dict[str, str], expected: list[str]) -> None:
    assert exporters_of(env) == expected
    assert configured(env) is bool(expected)


@pytest.mark.parametrize("env", [
    {"OTEL_TRACES_EXPORTER": "zipkin"},
    {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
])
def test_what_unicore_cannot_export_with_is_refused_in_one_line(env: dict[str, str]) -> None:
    with pytest.raises(TracingConfigError) as refused:
        exporters_of(env)
    assert "\n" not in str(refused.value)
    assert configured(env)  # configured (wrongly): start() logs why and leaves tracing off


def test_a_stored_traceparent_is_read_exactly_and_never_guessed() -> None:
    ref = spans.parse(f"00-{TRACE}-{SPAN}-01")
    assert ref == spans.SpanRef(TRACE, SPAN) and ref.traceparent == f"00-{TRACE}-{SPAN}-01"
    assert spans.parse(f"00-{TRACE.upper()}-{SPAN}-01") == ref
    for bad in (None, "", "garbage", f"01-{TRACE}-{SPAN}-01", f"00-{'0' * 32}-{SPAN}-01", f"00-{TRACE}-{'0' * 16}-01",
                f"00-{TRACE}-{SPAN}"):
        assert spans.parse(bad) is None, bad


def test_with_tracing_off_every_helper_is_a_no_op() -> None:
    assert not spans.active()
    with spans.span("x", {"a": 1}) as span:
        assert span is spans.NO_SPAN and span.ref is None
    assert spans.emit("x", start=1.0, end=2.0, parent=None) is None
    assert spans.current() is None
    opened = spans.start("x")
    assert opened.live is spans.NO_SPAN
    opened.close()


def test_genai_values() -> None:
    assert genai.provider_name("bedrock") == "aws.bedrock" and genai.provider_name("openai") == "openai"
    assert genai.finish_reason("tool_use") == "tool_call" and genai.finish_reason("end_turn") == "stop"
    assert genai.capture_content({}) is False
    assert genai.capture_content({genai.CAPTURE_CONTENT: "true"}) is True
    long = "x" * (genai.CONTENT_LIMIT + 10)
    assert genai.content(long).endswith("...(cut)") and len(genai.content(long)) < len(long)
    assert genai.content({"a": 1}) == '{"a": 1}'


def _pod(**status: object) -> dict[str, object]:
    return {"metadata": {"name": "t-t1-abc", "namespace": "ns", "labels": {"job-name": "t-t1"},
                         "creationTimestamp": "2026-11-28T10:00:01Z"}, "status": status}


def test_a_cold_turns_schedule_wait_and_pod_start_come_from_the_job_and_pod_timestamps() -> None:
    job = {"metadata": {"name": "t-t1", "creationTimestamp": "2026-11-28T10:00:00Z"}}
    pod = pod_view(_pod(
        conditions=[{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-28T10:00:03Z"}],
        containerStatuses=[{"name": "turn", "state": {"terminated": {"startedAt": "2026-11-28T10:00:07Z"}}}]))
    found = start_spans(job, pod)
    assert [(name, end - start) for name, start, end in found] == [(JOB_SCHEDULE, 3.0), (genai.POD_START, 4.0)]
    unscheduled = pod_view(_pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]))
    assert start_spans(job, unscheduled) == []
    assert start_spans(job, None) == []
    warm = pod_view({**_pod(), "metadata": {**_pod()["metadata"],  # type: ignore[dict-item]
                                            "annotations": {"unicore.dev/assigned-at": "2026-11-28T10:00:05Z"}}})
    assert start_spans(job, warm) == []  # a warm pod started before its turn existed


def test_trace_links_are_built_from_a_template_with_the_trace_id() -> None:
    assert trace_url(TRACE, "https://j/trace/{trace_id}") == f"https://j/trace/{TRACE}"
    assert trace_url(TRACE, "") == "" and trace_url("nope", "https://j/trace/{trace_id}") == ""
    assert trace_url(TRACE, env={"UNICORE_TRACE_URL": "http://x/{trace_id}"}) == f"http://x/{TRACE}"
    assert trace_status(TRACE, "") == {"id": TRACE}
    assert trace_status(TRACE, "https://j/trace/{trace_id}") == {"id": TRACE, "url": f"https://j/trace/{TRACE}"}
    assert trace_status("", "https://j/trace/{trace_id}") is None
