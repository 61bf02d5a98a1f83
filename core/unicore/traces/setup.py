"""The tracer provider of a process, configured by the standard OpenTelemetry variables.

Tracing is on when an exporter is configured: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_ENDPOINT`` (OTLP over HTTP/protobuf), or ``OTEL_TRACES_EXPORTER=otlp|console`` said explicitly.
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` turn it off. The SDK reads the rest itself
(``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``,
``OTEL_EXPORTER_OTLP_HEADERS`` / ``_TIMEOUT`` / ``_CERTIFICATE``). Nothing configured: ``start`` imports nothing of the
SDK and returns False.

The OTLP exporter (protobuf and HTTP client, about 40 ms of imports) is imported by the batch processor's thread on
its first export, not on the turn's start-up path.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from unicore.log import get_logger

log = get_logger("traces")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
EXPORTERS = ("otlp", "console")
SCHEMA_URL = "https://opentelemetry.io/schemas/1.42.0"  # the GenAI conventions followed (gen-ai/1.42.0)
FLUSH_TIMEOUT_MILLIS = 3000  # what a process's exit waits at most for its spans to leave


class TracingConfigError(ValueError):
    """The ``OTEL_*`` variables ask for something UniCore cannot export with."""


def exporters_of(env: Mapping[str, str]) -> list[str]:
    """The span exporters ``env`` configures ([]: tracing off)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    said = [name.strip().lower() for name in env.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    if "none" in said:
        return []
    if not said:  # the SDK's default is otlp; UniCore exports only when an endpoint says where
        return ["otlp"] if any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES) else []
    unknown = [name for name in said if name not in EXPORTERS]
    if unknown:
        raise TracingConfigError(f"OTEL_TRACES_EXPORTER: {', '.join(unknown)} is not supported (otlp, console, none)")
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "").strip()
    if "otlp" in said and protocol not in ("", "http/protobuf"):
        raise TracingConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: UniCore exports OTLP as http/protobuf")
    return said


def configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``env`` (default: this process's) configures a span exporter."""
    try:
        return bool(exporters_of(os.environ if env is None else env))
    except TracingConfigError:
        return True  # configured, wrongly: ``start`` says why


class _LazyOtlpExporter:
    """An OTLP/HTTP span exporter imported on its first export (in the batch processor's thread)."""

    def __init__(self) -> None:
        self._exporter: Any = None
        self._lock = threading.Lock()

    def _target(self) -> Any:
        with self._lock:
            if self._exporter is None:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

                self._exporter = OTLPSpanExporter()  # endpoint, headers, timeout: the OTEL_* variables
            return self._exporter

    def export(self, spans: Sequence[Any]) -> Any:
        return self._target().export(spans)

    def shutdown(self) -> None:
        if self._exporter is not None:
            self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


_provider: Any = None


def start(service_name: str, env: Mapping[str, str] | None = None) -> bool:
    """Set up this process's tracer provider when ``env`` configures an exporter (True); else nothing (False).
    A wrong configuration is logged in one line and leaves tracing off: a turn never fails for its traces."""
    global _provider
    env = os.environ if env is None else env
    try:
        exporters = exporters_of(env)
    except TracingConfigError as exc:
        log.error("traces are off: %s", exc)
        return False
    if not exporters:
        return False
    if _provider is not None:
        return True
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    from unicore.traces import spans

    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or service_name})
    provider = TracerProvider(resource=resource, id_generator=spans.preset_ids(), shutdown_on_exit=False)
    for name in exporters:
        exporter: SpanExporter = ConsoleSpanExporter() if name == "console" else _LazyOtlpExporter()  # type: ignore[assignment]
        provider.add_span_processor(BatchSpanProcessor(exporter))
    _provider = provider
    spans.install(provider.get_tracer("unicore", schema_url=SCHEMA_URL))
    log.info("traces: exporting with %s as %s", ", ".join(exporters), resource.attributes.get("service.name"))
    return True


def stop() -> None:
    """Flush this process's spans (at most ``FLUSH_TIMEOUT_MILLIS``) and shut the provider down; a no-op when off."""
    global _provider
    provider, _provider = _provider, None
    if provider is None:
        return
    from unicore.traces import spans

    spans.install(None)
    try:
        provider.force_flush(FLUSH_TIMEOUT_MILLIS)
        provider.shutdown()
    except Exception as exc:  # noqa: BLE001 - a collector that is down must not fail the process's exit
        log.warning("traces: flushing failed: %s", exc)


def flush() -> None:
    """Export what is buffered now (a long-lived process: the operator, a local supervisor, between steps)."""
    if _provider is not None:
        _provider.force_flush(FLUSH_TIMEOUT_MILLIS)


__all__ = ["TracingConfigError", "configured", "exporters_of", "flush", "start", "stop"]
