"""UniCore's trace viewer (client/unicore_client/traces/viewer) in a real browser (Debian's chromium via Playwright),
served by the real Jaeger v2 binary (``extensions.jaeger_query.ui.assets_path``) from spans the OpenTelemetry SDK
sent over OTLP/HTTP: the page reads the trace back through Jaeger's own query API. The binary: tests/jaeger_binary.py.
UNICORE_UI_SCREENSHOTS=1 refreshes docs/trace-viewer.png."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags
from playwright.sync_api import expect
from unicore_client.traces.jaeger import JaegerServer

from tests.jaeger_binary import jaeger_binary
from tests.ui.conftest import REPO
from tests.ui.test_ui_browser import screenshot

pytestmark = pytest.mark.ui
VIEWER = REPO / "client" / "unicore_client" / "traces" / "viewer"
LOAD = 30_000  # ms: the page's two requests to Jaeger on a busy 2-core machine
HOSTILE = '<img src=x onerror="alert(1)"> <script>alert(2)</script>'
HOSTILE_INPUT = "<b>not bold</b>"
MS = 1_000_000  # ns


@pytest.fixture(scope="module")
def jaeger() -> Iterator[JaegerServer]:
    with JaegerServer(jaeger_binary(), assets_dir=VIEWER) as server:  # UNICORE_NO_JAEGER=1: skipped
        yield server


@pytest.fixture
def viewer(browser: Any) -> Iterator[tuple[Any, list[str]]]:
    """A page and what it reported: dialogs (a script injected by a span's text would open one) and errors."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    reported: list[str] = []
    page.on("dialog", lambda dialog: (reported.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    page.on("pageerror", lambda error: reported.append(f"page error: {error}"))
    page.on("console", lambda message: message.type == "error" and reported.append(f"console: {message.text}"))
    try:
        yield page, reported
    finally:
        context.close()


def send_trace(jaeger: JaegerServer) -> tuple[str, dict[str, str]]:
    """A task's trace from two services, three levels deep (task > turn > model call and tool call), with an event,
    an error, a link (turn 2 follows from turn 1) and a span whose parent never arrives. Explicit times, so the
    picture is the same on every run. Returns the trace id and the span ids by name."""
    exporter_endpoint = f"{jaeger.otlp_endpoint}/v1/traces"
    providers = []

    def tracer(service: str) -> trace.Tracer:
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=exporter_endpoint)))
        providers.append(provider)
        return provider.get_tracer("unicore.tests")

    operator, model = tracer("unicore-operator"), tracer("unicore-model")
    t0 = time.time_ns() - 5_000 * MS
    ids: dict[str, str] = {}
    ends: list[tuple[Any, int]] = []  # ended last, after their events and status, children first

    def span(source: trace.Tracer, name: str, start: int, end: int, parent: Any = None, **options: Any) -> Any:
        context = trace.set_span_in_context(parent) if parent is not None else None
        made = source.start_span(name, context=context, start_time=t0 + start * MS, **options)
        ends.insert(0, (made, end))
        ids[name] = format(made.get_span_context().span_id, "016x")
        return made

    root = span(operator, "task water", 0, 1200, attributes={"unicore.task": "water", "k8s.namespace": "default"})
    turn1 = span(operator, "turn 1", 10, 700, root, attributes={"unicore.turn": 1})
    turn1.add_event("prompt sent", {"messages": 3}, timestamp=t0 + 12 * MS)
    span(model, "chat qwen2.5-1.5b-instruct", 20, 520, turn1,
         attributes={"gen_ai.request.model": "qwen2.5-1.5b-instruct", "gen_ai.usage.output_tokens": 48})
    tool = span(operator, HOSTILE, 540, 690, turn1, attributes={"tool.input": HOSTILE_INPUT})
    tool.set_status(Status(StatusCode.ERROR, "the tool failed"))
    tool.add_event("exception", {"exception.type": "ToolError", "exception.message": "exit status 2"},
                   timestamp=t0 + 689 * MS)
    span(operator, "turn 2", 720, 1180, root, links=[Link(turn1.get_span_context(), {"reason": "follow-up"})],
                 attributes={"unicore.turn": 2})
    lost_parent = SpanContext(root.get_span_context().trace_id, 0x0BADC0FFEE0DDF00, is_remote=True,
                              trace_flags=TraceFlags(TraceFlags.SAMPLED))
    span(operator, "late report", 1150, 1195, NonRecordingSpan(lost_parent))
    for made, end in ends:
        made.end(end_time=t0 + end * MS)
    for provider in providers:
        provider.shutdown()
    return format(root.get_span_context().trace_id, "032x"), ids


# name: (depth, parent name or None for a root); in the page's order (children under parents, by start time)
TREE = {
    "task water": (0, None),
    "turn 1": (1, "task water"),
    "chat qwen2.5-1.5b-instruct": (2, "turn 1"),
    HOSTILE: (2, "turn 1"),
    "turn 2": (1, "task water"),
    "late report": (0, None),
}


def test_a_trace_shows_as_a_nested_waterfall_with_span_text_as_text(jaeger: JaegerServer, viewer, tmp_path: Path):
    page, reported = viewer
    trace_id, ids = send_trace(jaeger)
    stored = jaeger.wait_for_spans(trace_id, len(TREE))
    parents = {span["spanID"]: next((ref["spanID"] for ref in span["references"] if ref["refType"] == "CHILD_OF"),
                                    None) for span in stored["spans"]}
    assert parents[ids["turn 1"]] == ids["task water"]  # what the page is drawn from: Jaeger's references

    page.goto(jaeger.trace_url(trace_id))
    expect(page.locator("body")).to_have_attribute("data-state", "ready", timeout=LOAD)
    rows = page.locator("#app .span")
    expect(rows).to_have_count(len(TREE))
    assert rows.evaluate_all("rows => rows.map(row => row.dataset.spanId)") == [ids[name] for name in TREE]
    indents = {}
    for name, (depth, parent) in TREE.items():
        row = page.locator(f'.span[data-span-id="{ids[name]}"]')
        expect(row).to_have_attribute("data-depth", str(depth))
        expect(row.locator(".name")).to_have_text(name)
        if parent is not None:
            assert parents[ids[name]] == ids[parent]
        indents[name] = row.locator(".name").bounding_box()["x"]
    assert indents["task water"] < indents["turn 1"] < indents["chat qwen2.5-1.5b-instruct"] == indents[HOSTILE]
    expect(page.locator("h1")).to_have_text("task water")

    # the hostile name: literal text, nothing injected, no script run
    hostile = page.locator(f'.span[data-span-id="{ids[HOSTILE]}"]')
    assert hostile.locator(".name").evaluate("node => node.textContent") == HOSTILE
    assert page.locator("#app img, #app script").count() == 0
    expect(hostile).to_have_attribute("data-error", "true")
    expect(page.locator(f'.span[data-span-id="{ids["chat qwen2.5-1.5b-instruct"]}"]')).not_to_have_attribute(
        "data-error", "true")
    # the span whose parent never arrived, flagged; the link, noted
    orphan = page.locator(f'.span[data-span-id="{ids["late report"]}"]')
    expect(orphan).to_have_attribute("data-parent-missing", "true")
    expect(orphan.locator(".flag")).to_have_text("parent missing")
    expect(page.locator(f'.span[data-span-id="{ids["turn 2"]}"] .note')).to_have_text("linked from turn 1")

    # a click shows the span's attributes and events
    detail = page.locator("#detail")
    expect(detail).to_be_hidden()
    hostile.click()
    expect(detail).to_be_visible()
    expect(page.locator("#detail-title")).to_have_text(HOSTILE)
    attributes = detail.get_by_role("table", name="Attributes")
    expect(attributes.get_by_role("row").filter(has_text="tool.input").locator("td")).to_have_text(HOSTILE_INPUT)
    expect(attributes.get_by_role("row").filter(has_text="otel.status_code").locator("td")).to_have_text("ERROR")
    expect(detail).to_contain_text("Error: the tool failed")
    expect(detail).to_contain_text("exit status 2")
    assert detail.locator("b, img, script").count() == 0

    chat = page.locator(f'.span[data-span-id="{ids["chat qwen2.5-1.5b-instruct"]}"]')
    chat.click()
    expect(chat).to_have_attribute("aria-selected", "true")
    expect(hostile).to_have_attribute("aria-selected", "false")
    expect(page.locator("#detail-title")).to_have_text("chat qwen2.5-1.5b-instruct")
    expect(detail.get_by_role("table", name="Attributes").get_by_role("row").filter(
        has_text="gen_ai.request.model").locator("td")).to_have_text("qwen2.5-1.5b-instruct")
    expect(detail.locator(".facts")).to_contain_text("unicore-model")
    screenshot(page, "trace-viewer.png", tmp_path)

    page.locator(f'.span[data-span-id="{ids["turn 1"]}"]').press("Enter")  # the keyboard too
    expect(page.locator("#detail-title")).to_have_text("turn 1")
    expect(detail.locator(".events")).to_contain_text("prompt sent")
    assert reported == []


def test_the_recent_traces_link_to_their_waterfall(jaeger: JaegerServer, viewer):
    page, reported = viewer
    trace_id, _ = send_trace(jaeger)
    jaeger.wait_for_spans(trace_id, len(TREE))
    page.goto(f"{jaeger.query_url}/")
    expect(page.locator("body")).to_have_attribute("data-state", "ready", timeout=LOAD)
    listed = page.locator(f'.traces li[data-trace-id="{trace_id}"]')
    expect(listed).to_contain_text(f"{len(TREE)} spans")
    expect(listed).to_contain_text("1 error")
    listed.get_by_role("link", name="task water").click()
    expect(page).to_have_url(jaeger.trace_url(trace_id))
    expect(page.locator("body")).to_have_attribute("data-state", "ready", timeout=LOAD)
    expect(page.locator("#app .span")).to_have_count(len(TREE))

    page.goto(f"{jaeger.query_url}/trace/{'0' * 31}1")  # well formed, never sent
    expect(page.locator("body")).to_have_attribute("data-state", "error", timeout=LOAD)
    expect(page.locator("#app [role=alert]")).to_contain_text("not found")
    assert [line for line in reported if "404" not in line] == []  # the browser logs the API's 404 itself
