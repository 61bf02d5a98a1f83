"""The real Jaeger v2 binary (hack/build-jaeger.sh, tests/jaeger_binary.py) run by ``JaegerServer``: spans the
OpenTelemetry SDK exports over OTLP/HTTP to ``otlp_endpoint`` (as ``OTEL_EXPORTER_OTLP_ENDPOINT``, the way UniCore's
processes are configured) come back through the query API with their names, parents and attributes; the UI pages of
an assets folder are served; stop ends the process and removes its private folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags
from unicore_client.traces.jaeger import JaegerServer, request

from tests.jaeger_binary import jaeger_binary

SERVICE = "unicore-jaeger-test"
# a span stored elsewhere (a task's traceparent in Redis): the exported span's parent, never itself exported
REMOTE_TRACE, REMOTE_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def jaeger() -> Iterator[JaegerServer]:
    server = JaegerServer(jaeger_binary()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def provider(jaeger: JaegerServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[TracerProvider]:
    """A tracer provider exporting each span at its end to the endpoint ``OTEL_EXPORTER_OTLP_ENDPOINT`` names."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.otlp_endpoint)
    tracer_provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))  # adds /v1/traces itself
    yield tracer_provider
    tracer_provider.shutdown()


def hex_ids(span: trace.Span) -> tuple[str, str]:
    context = span.get_span_context()
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def test_a_span_comes_back_with_its_name_and_parent(jaeger: JaegerServer, provider: TracerProvider) -> None:
    remote = SpanContext(int(REMOTE_TRACE, 16), int(REMOTE_SPAN, 16), is_remote=True,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED))
    assert jaeger.get_trace(REMOTE_TRACE) is None  # nothing yet: None, not an error
    tracer = provider.get_tracer("unicore.tests")
    with tracer.start_as_current_span("invoke_agent root", context=trace.set_span_in_context(NonRecordingSpan(remote)),
                                      attributes={"unicore.task.id": "root", "unicore.turn.number": 1}) as span:
        pass
    trace_id, span_id = hex_ids(span)
    assert trace_id == REMOTE_TRACE

    found = jaeger.wait_for_spans(trace_id, 1, timeout=30)
    assert found == jaeger.get_trace(trace_id.upper())  # ids in either case
    assert found["traceID"] == trace_id
    [stored] = found["spans"]
    assert stored["spanID"] == span_id and stored["operationName"] == "invoke_agent root"
    assert stored["references"] == [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": REMOTE_SPAN}]
    tags = {tag["key"]: tag["value"] for tag in stored["tags"]}
    assert tags["unicore.task.id"] == "root" and tags["unicore.turn.number"] == 1
    assert stored["duration"] >= 0 and stored["startTime"] > 1_600_000_000 * 1_000_000  # microseconds
    assert found["processes"][stored["processID"]]["serviceName"] == SERVICE
    assert SERVICE in jaeger.services()
    assert trace_id in {listed["traceID"] for listed in jaeger.find_traces(SERVICE, limit=50)}


def test_children_and_links_in_one_trace(jaeger: JaegerServer, provider: TracerProvider) -> None:
    tracer = provider.get_tracer("unicore.tests")
    with tracer.start_as_current_span("task") as task:
        with tracer.start_as_current_span("turn 1") as first:
            pass
        with tracer.start_as_current_span("turn 2", links=[Link(first.get_span_context())]) as second:
            with tracer.start_as_current_span("chat model") as chat:
                pass
    trace_id, task_id = hex_ids(task)
    found = jaeger.wait_for_spans(trace_id, 4, timeout=30)
    by_name = {span["operationName"]: span for span in found["spans"]}
    assert set(by_name) == {"task", "turn 1", "turn 2", "chat model"}

    def references(name: str) -> list[tuple[str, str]]:
        return [(ref["refType"], ref["spanID"]) for ref in by_name[name]["references"]]

    assert references("task") == []
    assert references("turn 1") == [("CHILD_OF", task_id)]
    assert references("turn 2") == [("CHILD_OF", task_id), ("FOLLOWS_FROM", hex_ids(first)[1])]
    assert references("chat model") == [("CHILD_OF", hex_ids(second)[1])]
    assert by_name["chat model"]["spanID"] == hex_ids(chat)[1]


def test_ui_pages_come_from_the_assets_folder(tmp_path: Path) -> None:
    assets = tmp_path / "viewer"
    (assets / "static").mkdir(parents=True)
    (assets / "index.html").write_text('<!doctype html><html><head><base href="/"></head><body>viewer</body></html>')
    (assets / "static" / "app.js").write_text("console.log('viewer');\n")
    with JaegerServer(jaeger_binary(), assets_dir=assets) as server:
        status, page = request(server.trace_url(REMOTE_TRACE))  # every page that is not an API: index.html
        assert status == 200 and b"<body>viewer</body>" in page
        assert request(f"{server.query_url}/static/app.js") == (200, b"console.log('viewer');\n")
        assert request(f"{server.query_url}/api/traces/{REMOTE_TRACE}")[0] == 404  # the API is still the API
        folder, proc = server.state_dir, server.proc
        assert folder is not None and proc is not None
        assert '"assets_path"' in (folder / "jaeger.json").read_text()
    assert proc.poll() is not None and not folder.exists()  # stopped, its private folder gone
    assert not server.ready()


def test_given_ports_and_state_folder(tmp_path: Path) -> None:
    from unicore_client.traces.jaeger import free_port

    otlp, query = free_port(), free_port()
    while query == otlp:
        query = free_port()
    server = JaegerServer(jaeger_binary(), state_dir=tmp_path / "state", otlp_port=otlp, query_port=query).start()
    try:
        assert server.otlp_endpoint == f"http://127.0.0.1:{otlp}" and server.query_url == f"http://127.0.0.1:{query}"
        assert server.grpc_port not in (0, otlp, query)
        assert server.services() == []
    finally:
        server.stop()
    assert (tmp_path / "state" / "jaeger.json").is_file()  # a folder given is kept, with its log
    assert (tmp_path / "state" / "jaeger.log").is_file()
