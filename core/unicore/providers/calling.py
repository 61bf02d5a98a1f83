"""The call loop every provider shares: limiter -> call -> retry throttling -> telemetry.

``CallRunner`` is the one owner of the model metrics: every provider (the scripted model too) runs its calls
through it and the turn records none, so one model call is counted once.

Metrics (written to Redis through ``unicore.store.telemetry.Telemetry``; the operator exports them with the
``unicore_`` prefix):

* ``model_calls_total{provider,model,outcome}`` counter, outcome ``ok`` | ``throttled`` | ``error``
* ``model_call_duration_seconds{provider,model}`` histogram (successful calls)
* ``model_tokens_total{provider,model,kind}`` counter, kind ``input`` | ``output``
* ``throttle_events_total{model}`` counter, ``throttle_multiplier{model}`` gauge,
  ``throttle_wait_seconds_total{model}`` counter (proactive waits), from ``unicore.providers.throttle``
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import redis

from unicore.errors import ModelError
from unicore.log import get_logger
from unicore.providers.base import ModelRequest, ModelResponse
from unicore.providers.retry import RetryPolicy, Sleeper, Uniform, real_sleep
from unicore.providers.throttle import ThrottleCoordinator
from unicore.store.telemetry import Telemetry
from unicore.traces import spans
from unicore.traces.genai import ERROR_TYPE

log = get_logger("providers")


class Retryable(Exception):
    """Raised by a provider's send function for answers worth another try (retried with backoff).

    ``throttle`` True (the default): throttling / overload; the try counts as a throttle event and slows every
    process calling the model (the shared multiplier). False: a transient failure of the connection or the server
    (refused, reset, timed out, HTTP 500/502/504): retried the same way, but no reason to slow anyone down."""

    def __init__(
        self,
        code: str,
        message: str,
        status: int | None = None,
        *,
        throttle: bool = True,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.throttle = throttle
        self.retry_after = retry_after  # seconds the server asked for (HTTP Retry-After); used as the backoff


class Metrics:
    """Telemetry that quietly does nothing without Redis."""

    def __init__(self, client: redis.Redis | None) -> None:
        self._telemetry = Telemetry(client) if client is not None else None

    def incr(self, name: str, labels: Mapping[str, str], by: float = 1.0) -> None:
        if self._telemetry is not None:
            self._telemetry.incr(name, labels, by)

    def observe(self, name: str, value: float, labels: Mapping[str, str]) -> None:
        if self._telemetry is not None:
            self._telemetry.observe(name, value, labels)


CHARS_PER_TOKEN = 4


def estimate_text_tokens(chars: int) -> int:
    """Tokens of ``chars`` characters of request text (~4 characters per token)."""
    return chars // CHARS_PER_TOKEN


def estimate_input_tokens(request: ModelRequest) -> int:
    """Input tokens of a request (system prompt, messages as JSON, tool definitions): the one estimator the limiter
    and context compaction (``unicore.turn.compaction``) share."""
    chars = len(request.system) + len(json.dumps(request.messages, default=str))
    chars += sum(len(t.name) + len(t.description) + len(json.dumps(t.input_schema)) for t in request.tools)
    return estimate_text_tokens(chars)


def estimate_tokens(request: ModelRequest) -> int:
    """Tokens a call may consume, for the proactive limiter: the input estimate plus max_tokens (Bedrock reserves
    max_tokens against the tokens-per-minute quota when a call starts)."""
    return estimate_input_tokens(request) + request.max_tokens


class CallRunner:
    """Runs one logical model call for ``provider``/``model`` with retries, shared throttling and metrics."""

    def __init__(
        self,
        provider: str,
        model: str,
        *,
        policy: RetryPolicy | None = None,
        coordinator: ThrottleCoordinator | None = None,
        redis_client: redis.Redis | None = None,
        sleep: Sleeper = real_sleep,
        uniform: Uniform = random.uniform,
    ) -> None:
        self.provider = provider
        self.model = model
        self.policy = policy or RetryPolicy()
        self.coordinator = coordinator
        self.metrics = Metrics(redis_client)
        self.sleep = sleep
        self.uniform = uniform
        self.delays: list[float] = []  # backoff delays of the last run (for logs and tests)

    def _labels(self, **extra: str) -> dict[str, str]:
        return {"provider": metric_label(self.provider), "model": metric_label(self.model), **extra}

    def run(self, request: ModelRequest, send: Callable[[], ModelResponse]) -> ModelResponse:
        self.delays = []
        estimate = estimate_tokens(request)
        last: Retryable | None = None
        for attempt in range(1, self.policy.max_attempts + 1):
            admission = self.coordinator.acquire(estimate) if self.coordinator is not None else None
            started = time.monotonic()
            try:
                response = send()
            except Retryable as exc:
                last = exc
                what = "throttled" if exc.throttle else "unavailable"
                self.metrics.incr("model_calls_total", self._labels(outcome=what))
                if self.coordinator is not None and admission is not None:
                    self.coordinator.commit(admission, 0)
                if attempt == self.policy.max_attempts:
                    break
                delay = self.policy.delay(attempt, self.uniform)
                if exc.retry_after is not None:  # the server said when: honour it, within the policy's cap
                    delay = min(max(exc.retry_after, 0.0), self.policy.max_retry_after)
                if exc.throttle:  # only throttling slows down every caller of the model
                    if self.coordinator is not None:
                        self.coordinator.throttled(delay)
                    else:
                        self.metrics.incr("throttle_events_total", {"model": self.model})
                log.warning(
                    "%s %s %s (%s), try %d/%d, retrying in %.1fs",
                    self.provider,
                    self.model,
                    what,
                    exc.code,
                    attempt,
                    self.policy.max_attempts,
                    delay,
                )
                self.delays.append(delay)
                spans.current_event("retry", {"unicore.retry.attempt": attempt, "unicore.retry.delay_seconds": delay,
                                              ERROR_TYPE: exc.code, "http.response.status_code": exc.status})
                self.sleep(delay)
                continue
            except BaseException:
                self.metrics.incr("model_calls_total", self._labels(outcome="error"))
                if self.coordinator is not None and admission is not None:
                    self.coordinator.commit(admission, 0)
                raise
            duration = time.monotonic() - started
            response.latency_seconds = duration
            self._record_success(response, duration)
            if self.coordinator is not None and admission is not None:
                self.coordinator.commit(admission, response.usage.total_tokens)
                self.coordinator.succeeded()
            return response
        assert last is not None
        raise ModelError(
            f"{self.provider} model {self.model} still {'throttled' if last.throttle else 'unavailable'} after "
            f"{self.policy.max_attempts} tries: "
            f"{last.code}: {last.message}"
        )

    def _record_success(self, response: ModelResponse, duration: float) -> None:
        self.metrics.incr("model_calls_total", self._labels(outcome="ok"))
        self.metrics.observe("model_call_duration_seconds", duration, self._labels())
        usage = response.usage
        if usage.input_tokens:
            self.metrics.incr("model_tokens_total", self._labels(kind="input"), usage.input_tokens)
        if usage.output_tokens:
            self.metrics.incr("model_tokens_total", self._labels(kind="output"), usage.output_tokens)


def metric_label(value: str) -> str:
    """A label value telemetry accepts (``|``, ``,`` and ``=`` separate its fields)."""
    return "".join("_" if ch in "|,=" else ch for ch in value)


def flatten_tool_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rewrite toolUse / toolResult blocks as text (for calls made without tool definitions, e.g.
    summaries)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        blocks: list[dict[str, Any]] = []
        for block in message.get("content", []):
            if "toolUse" in block:
                use = block["toolUse"]
                blocks.append(
                    {"text": f"[called tool {use.get('name')} with {json.dumps(use.get('input'))}]"}
                )
            elif "toolResult" in block:
                result = block["toolResult"]
                blocks.append(
                    {"text": f"[tool {result.get('status', 'success')}: {tool_result_text(result)}]"}
                )
            else:
                blocks.append(block)
        out.append({**message, "content": blocks})
    return out


def tool_result_text(result: dict[str, Any]) -> str:
    parts = []
    for item in result.get("content", []):
        if "text" in item:
            parts.append(str(item["text"]))
        elif "json" in item:
            parts.append(json.dumps(item["json"]))
    return "\n".join(parts)


def has_tool_blocks(messages: list[dict[str, Any]]) -> bool:
    return any("toolUse" in b or "toolResult" in b for m in messages for b in m.get("content", []))
