"""The one way UniCore makes spans. Off (no exporter configured, ``unicore.traces.setup``): every function returns at
once, ``span`` yields the shared ``NO_SPAN`` and the OpenTelemetry SDK is never imported.

Parents and links cross processes, pods and hours as W3C ``traceparent`` strings (``00-<trace id>-<span id>-01``)
stored with the task or the inbox message they belong to; ``parse`` is their one reader.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

AttributeValue = str | bool | int | float | Sequence[str]
Attributes = Mapping[str, AttributeValue | None]

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")

_tracer: Any = None  # an opentelemetry Tracer while tracing is on (``install``)
_next_span_id = threading.local()  # a span id ``emit`` asks the id generator for (``preset_ids``)


@dataclass(frozen=True)
class SpanRef:
    """A span as stored: its trace id and span id (hex), from a ``traceparent``."""

    trace_id: str
    span_id: str

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-01"


def parse(traceparent: str | None) -> SpanRef | None:
    """The span a stored ``traceparent`` names; None for None, "" or anything malformed (never guessed)."""
    if not traceparent:
        return None
    match = TRACEPARENT.match(traceparent.strip().lower())
    if match is None or match.group(1) == "0" * 32 or match.group(2) == "0" * 16:
        return None
    return SpanRef(match.group(1), match.group(2))


def active() -> bool:
    """Whether spans are exported in this process."""
    return _tracer is not None


def install(tracer: Any) -> None:
    """``unicore.traces.setup`` sets (or clears) the process's tracer."""
    global _tracer
    _tracer = tracer


def preset_ids() -> Any:
    """The provider's id generator: random ids, except a span id ``emit`` presets (a lost turn's span is emitted
    later under the id its children already name as their parent)."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class PresetIds(RandomIdGenerator):
        def generate_span_id(self) -> int:
            preset = getattr(_next_span_id, "value", None)
            if preset is not None:
                _next_span_id.value = None
                return int(preset)
            return int(super().generate_span_id())

    return PresetIds()


class NoSpan:
    """What ``span`` yields while tracing is off: every method does nothing."""

    def set(self, key: str, value: AttributeValue | None) -> None:
        pass

    def set_many(self, attributes: Attributes) -> None:
        pass

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        pass

    def fail(self, error_type: str, message: str = "") -> None:
        pass

    def link(self, traceparent: str | None) -> None:
        pass

    def name(self, name: str) -> None:
        pass

    @property
    def ref(self) -> SpanRef | None:
        return None


NO_SPAN = NoSpan()


def _clean(attributes: Attributes | None) -> dict[str, Any]:
    return {key: value for key, value in (attributes or {}).items() if value is not None}


class LiveSpan(NoSpan):
    """A recording span (tracing on)."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, key: str, value: AttributeValue | None) -> None:
        if value is not None:
            self._span.set_attribute(key, value)

    def set_many(self, attributes: Attributes) -> None:
        self._span.set_attributes(_clean(attributes))

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        self._span.add_event(name, _clean(attributes))

    def fail(self, error_type: str, message: str = "") -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR, message[:500] or error_type))

    def link(self, traceparent: str | None) -> None:
        context = _span_context(parse(traceparent))
        if context is not None:
            self._span.add_link(context)

    def name(self, name: str) -> None:
        self._span.update_name(name)

    @property
    def ref(self) -> SpanRef | None:
        context = self._span.get_span_context()
        return SpanRef(f"{context.trace_id:032x}", f"{context.span_id:016x}")


def _span_context(ref: SpanRef | None) -> Any:
    if ref is None:
        return None
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(int(ref.trace_id, 16), int(ref.span_id, 16), is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _parent_context(parent: str | None) -> Any:
    """The OpenTelemetry context to start a span in: under the stored ``parent`` when given, else the current one."""
    ref = parse(parent)
    if ref is None:
        return None
    from opentelemetry.trace import NonRecordingSpan, set_span_in_context

    return set_span_in_context(NonRecordingSpan(_span_context(ref)))


def _kind(kind: str) -> Any:
    from opentelemetry.trace import SpanKind

    return {"client": SpanKind.CLIENT, "server": SpanKind.SERVER, "producer": SpanKind.PRODUCER}.get(
        kind, SpanKind.INTERNAL)


@contextmanager
def span(name: str, attributes: Attributes | None = None, *, parent: str | None = None,
         links: Sequence[str] = (), kind: str = "internal", root: bool = False) -> Iterator[NoSpan]:
    """A span around the block, current inside it (spans started in the block are its children). ``parent``: a
    stored ``traceparent`` to hang under instead of the current span; ``root``: start a new trace. An exception
    leaving the block marks the span failed (``error.type``: its class) and goes on."""
    tracer = _tracer
    if tracer is None:
        yield NO_SPAN
        return
    from opentelemetry import context as otel_context
    from opentelemetry.trace import Link, use_span

    context = otel_context.Context() if root else _parent_context(parent)
    span_links = [Link(ctx) for ctx in (_span_context(parse(link)) for link in links) if ctx is not None]
    otel_span = tracer.start_span(name, context=context, kind=_kind(kind), attributes=_clean(attributes),
                                  links=span_links, record_exception=False, set_status_on_exception=False)
    live = LiveSpan(otel_span)
    with use_span(otel_span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
        try:
            yield live
        except BaseException as exc:
            live.fail(type(exc).__name__, str(exc))
            raise


class OpenSpan:
    """A span started by ``start`` and current until ``close`` (spans across methods: a turn attempt)."""

    def __init__(self, otel_span: Any = None, token: Any = None) -> None:
        self._span = otel_span
        self._token = token
        self.live: NoSpan = LiveSpan(otel_span) if otel_span is not None else NO_SPAN

    def close(self) -> None:
        if self._span is None:
            return
        from opentelemetry import context as otel_context

        span, self._span = self._span, None
        span.end()
        try:
            otel_context.detach(self._token)
        except ValueError:  # closed in another context than it was opened in: the span ended all the same
            pass


def start(name: str, attributes: Attributes | None = None, *, parent: str | None = None) -> OpenSpan:
    """Start a span and make it current until its ``close`` (tracing off: an OpenSpan that does nothing)."""
    tracer = _tracer
    if tracer is None:
        return OpenSpan()
    from opentelemetry import context as otel_context
    from opentelemetry.trace import set_span_in_context

    otel_span = tracer.start_span(name, context=_parent_context(parent), attributes=_clean(attributes),
                                  record_exception=False, set_status_on_exception=False)
    return OpenSpan(otel_span, otel_context.attach(set_span_in_context(otel_span)))


def emit(name: str, *, start: float, end: float, parent: str | None, attributes: Attributes | None = None,
         span_id: str | None = None, error: tuple[str, str] | None = None, root: bool = False) -> SpanRef | None:
    """A span that already happened (unix times ``start``..``end``): queue waits, pod starts, a lost turn. ``span_id``
    (hex): the id it must have (children that name it as parent were exported before it). Returns its ref."""
    tracer = _tracer
    if tracer is None:
        return None
    from opentelemetry import context as otel_context

    context = otel_context.Context() if root else _parent_context(parent)
    if span_id is not None:
        _next_span_id.value = int(span_id, 16)
    try:
        otel_span = tracer.start_span(name, context=context, attributes=_clean(attributes),
                                      start_time=int(start * 1e9))
    finally:
        _next_span_id.value = None
    live = LiveSpan(otel_span)
    if error is not None:
        live.fail(*error)
    otel_span.end(end_time=int(max(end, start) * 1e9))
    return live.ref


def current() -> str | None:
    """The ``traceparent`` of the current span (None: none, or tracing off)."""
    if _tracer is None:
        return None
    from opentelemetry.trace import get_current_span

    context = get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return SpanRef(f"{context.trace_id:032x}", f"{context.span_id:016x}").traceparent


def current_event(name: str, attributes: Attributes | None = None) -> None:
    """An event on the current span (a model call's retry)."""
    if _tracer is None:
        return
    from opentelemetry.trace import get_current_span

    get_current_span().add_event(name, _clean(attributes))


__all__ = ["NO_SPAN", "LiveSpan", "NoSpan", "OpenSpan", "SpanRef", "active", "current", "current_event", "emit",
           "install", "parse", "preset_ids", "span", "start"]
