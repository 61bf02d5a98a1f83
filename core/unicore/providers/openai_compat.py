"""An OpenAI-compatible chat-completions endpoint (vLLM, llama.cpp server, TGI, OpenAI itself), stdlib HTTP
only, streamed (``stream: true``; ``unicore.providers.openai_stream`` assembles the chunks).

Configuration (``OpenAISettings.from_env``, the variables of ``OpenAIEnvironment``): ``OPENAI_BASE_URL``
(required, e.g. ``http://vllm:8000/v1``), ``OPENAI_API_KEY`` (optional; vLLM usually needs none),
``UNICORE_OPENAI_TIMEOUT`` (s, default 600; per read while streaming), ``UNICORE_OPENAI_MAX_ATTEMPTS`` (default 8),
``UNICORE_OPENAI_RPM`` / ``UNICORE_OPENAI_TPM`` (shared limits), ``UNICORE_OPENAI_TEXT_TOOL_CALLS`` (default on: tool
calls a model wrote as text are run, ``unicore.providers.text_tool_calls``).

Conversations stay in Bedrock Converse shape everywhere else; this module translates at the edge:
assistant ``toolUse`` blocks <-> ``tool_calls``, user ``toolResult`` blocks -> ``role: tool`` messages (placed
before the user's text, as the chat-completions format requires).

What real servers do, and what happens: text deltas go to the call's ``AnswerSink`` as they arrive (an answer that
may be a tool call written as text is held back until decided); a stream cut before ``[DONE]`` or a finish reason
(reset, EOF, read timeout), an answer without any choice, HTTP 408/500/502/504 and refused connections are retried
as transient failures (no half answer is ever returned); 429/503 are throttling, and a ``Retry-After`` is the
backoff (capped by ``RetryPolicy.max_retry_after``); missing or repeated tool-call ids get fresh unique ones;
``finish_reason: length`` is ``max_tokens``; missing usage is estimated (~4 characters a token); a server that
ignores ``stream`` and answers one JSON object is read as such, and one that refuses to stream (an older
llama-server with tools) is asked without ``stream`` from then on; a model name the server does not serve (HTTP 404,
or 400 naming the model) is looked up once per process in ``/models``: the id whose basename matches, else the
only model served, is used instead (logged).
"""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, ClassVar

import redis
from pydantic import BaseModel, Field

from unicore.errors import ConfigError, ModelError
from unicore.log import get_logger
from unicore.providers.base import AnswerSink, ModelRequest, ModelResponse, NoSink
from unicore.providers.calling import CallRunner, Retryable, tool_result_text
from unicore.providers.openai_stream import (  # noqa: F401 (FINISH_REASONS: re-exported)
    FINISH_REASONS,
    HeldText,
    StreamAssembler,
    StreamError,
    answer_response,
    sse_events,
)
from unicore.providers.retry import RetryPolicy, Sleeper, Uniform, is_retryable, real_sleep
from unicore.providers.throttle import ThrottleCoordinator, ThrottleLimits
from unicore.settings import EnvSettings, Flag

log = get_logger("openai")



# Server errors worth another try that are not throttling (429/503 are: see ``retry.is_retryable``).
TRANSIENT_STATUSES = frozenset({408, 500, 502, 504})

# (base URL, configured model name) -> the model id the server serves instead (found in /models; per process)
SERVED_NAMES: dict[tuple[str, str], str] = {}
# (base URL, model id) of servers that refused to stream this request (older llama-server: "Cannot use tools with
# stream"); asked without ``stream`` from then on (per process)
NOT_STREAMING: set[tuple[str, str]] = set()


class OpenAISettings(BaseModel):
    base_url: str
    api_key: str | None = Field(default=None, repr=False)
    timeout: float = Field(default=600.0, gt=0)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    limits: ThrottleLimits = Field(default_factory=ThrottleLimits)
    text_tool_calls: bool = True  # run tool calls the model wrote as text (unicore.providers.text_tool_calls)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OpenAISettings:
        """The settings :class:`OpenAIEnvironment` reads from ``env`` (default ``os.environ``)."""
        return OpenAIEnvironment.from_env(env).settings()


class OpenAIEnvironment(EnvSettings):
    """The openai provider's environment variables (README "Configuration"); :meth:`settings` builds
    :class:`OpenAISettings` from them."""

    what: ClassVar[str] = "OpenAI-compatible settings in the environment"

    base_url: str | None = Field(None, validation_alias="OPENAI_BASE_URL")  # required by settings()
    api_key: str | None = Field(None, repr=False, validation_alias="OPENAI_API_KEY")
    timeout: float = Field(600.0, gt=0, validation_alias="UNICORE_OPENAI_TIMEOUT")
    max_attempts: int = Field(8, ge=1, le=50, validation_alias="UNICORE_OPENAI_MAX_ATTEMPTS")
    rpm: int | None = Field(None, ge=0, validation_alias="UNICORE_OPENAI_RPM")
    tpm: int | None = Field(None, ge=0, validation_alias="UNICORE_OPENAI_TPM")
    text_tool_calls: Flag = Field(True, validation_alias="UNICORE_OPENAI_TEXT_TOOL_CALLS")

    def settings(self) -> OpenAISettings:
        base_url = (self.base_url or "").strip()
        if not base_url:
            raise ConfigError(
                "the openai provider needs OPENAI_BASE_URL (e.g. http://vllm.default.svc:8000/v1); "
                "OPENAI_API_KEY is optional"
            )
        return OpenAISettings(
            base_url=base_url.rstrip("/"),
            api_key=self.api_key,
            timeout=self.timeout,
            retry=RetryPolicy(max_attempts=self.max_attempts),
            limits=ThrottleLimits(max_requests=self.rpm, max_tokens=self.tpm),
            text_tool_calls=self.text_tool_calls,
        )


# translation ----------


def chat_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Converse-shaped system + messages -> chat.completions ``messages``."""
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        blocks = message.get("content", [])
        if message["role"] == "assistant":
            texts = [b["text"] for b in blocks if "text" in b]
            calls = [
                {
                    "id": b["toolUse"]["toolUseId"],
                    "type": "function",
                    "function": {
                        "name": b["toolUse"]["name"],
                        "arguments": json.dumps(b["toolUse"].get("input", {})),
                    },
                }
                for b in blocks
                if "toolUse" in b
            ]
            entry: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            continue
        for block in blocks:
            if "toolResult" in block:
                result = block["toolResult"]
                text = tool_result_text(result)
                if result.get("status") == "error":
                    text = f"Error: {text}"
                out.append({"role": "tool", "tool_call_id": result["toolUseId"], "content": text})
        texts = [b["text"] for b in blocks if "text" in b]
        if texts:
            out.append({"role": "user", "content": "\n".join(texts)})
    return out


def chat_request(model: str, request: ModelRequest, *, stream: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(request),
        "max_tokens": request.max_tokens,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in request.tools
        ]
    return body


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds of an HTTP ``Retry-After`` (delta seconds or an HTTP date); None when absent or unreadable."""
    if not value or not value.strip():
        return None
    try:
        return max(float(value.strip()), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


def served_alias(name: str, ids: list[str]) -> str | None:
    """The id to use for a configured ``name`` the server does not serve: the one id whose basename matches
    (``/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf`` for ``qwen2.5-coder-0.5b-instruct-q4_k_m``), else the
    only id served; None when neither."""
    if name in ids:
        return name

    def base(text: str) -> str:
        tail = text.rstrip("/").rsplit("/", 1)[-1].lower()
        return tail[: -len(".gguf")] if tail.endswith(".gguf") else tail

    matches = [i for i in ids if base(i) == base(name)]
    if len(matches) == 1:
        return matches[0]
    return ids[0] if len(ids) == 1 else None


class _NotServed(ModelError):
    """The server does not know the model name (HTTP 404, or 400 naming the model)."""


class _NoStreaming(ModelError):
    """The server refused to stream (HTTP 400/500 whose message names streaming)."""


# the model ----------


class OpenAICompatModel:
    provider = "openai"

    def __init__(
        self,
        name: str,
        settings: OpenAISettings,
        *,
        coordinator: ThrottleCoordinator | None = None,
        redis_client: redis.Redis | None = None,
        sleep: Sleeper = real_sleep,
        uniform: Uniform = random.uniform,
    ) -> None:
        self.name = name
        self.settings = settings
        self.runner = CallRunner(
            "openai",
            name,
            policy=settings.retry,
            coordinator=coordinator,
            redis_client=redis_client,
            sleep=sleep,
            uniform=uniform,
        )

    @property
    def served_name(self) -> str:
        return SERVED_NAMES.get((self.settings.base_url, self.name), self.name)

    def converse(self, request: ModelRequest, sink: AnswerSink | None = None) -> ModelResponse:
        live = sink if sink is not None else NoSink()
        return self.runner.run(request, lambda: self._attempt(request, live))

    def _attempt(self, request: ModelRequest, sink: AnswerSink) -> ModelResponse:
        for _ in range(3):  # at most: the alias found, streaming turned off
            try:
                return self._send(request, sink)
            except _NotServed:
                if (self.settings.base_url, self.name) in SERVED_NAMES or not self._find_alias():
                    raise
            except _NoStreaming as exc:
                key = (self.settings.base_url, self.served_name)
                if key in NOT_STREAMING:
                    raise
                log.warning("openai endpoint %s does not stream model %s (%s); asking without streaming",
                            self.settings.base_url, self.served_name, exc)
                NOT_STREAMING.add(key)
        return self._send(request, sink)

    def _find_alias(self) -> bool:
        try:
            with self._open(f"{self.settings.base_url}/models", None) as answer:
                listed = json.loads(answer.read())
            ids = [str(m["id"]) for m in listed.get("data") or [] if isinstance(m, dict) and m.get("id")]
        except (ModelError, Retryable, ValueError, AttributeError, OSError, http.client.HTTPException) as exc:
            log.warning("openai endpoint %s: could not list its models: %s", self.settings.base_url, exc)
            return False
        alias = served_alias(self.name, ids)
        if alias is None or alias == self.name:
            return False
        log.warning("openai model %s is not served by %s; using %s (from /models)", self.name,
                    self.settings.base_url, alias)
        SERVED_NAMES[(self.settings.base_url, self.name)] = alias
        return True

    def _open(self, url: str, body: bytes | None, *, streaming: bool = False) -> http.client.HTTPResponse:
        headers = {"Accept": "text/event-stream, application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        req = urllib.request.Request(url, data=body, headers=headers, method="POST" if body else "GET")
        try:
            answer: http.client.HTTPResponse = urllib.request.urlopen(req, timeout=self.settings.timeout)
            return answer
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            wait = retry_after(exc.headers.get("Retry-After")) if exc.headers else None
            if is_retryable(None, exc.code):
                raise Retryable(f"HTTP {exc.code}", detail, exc.code, retry_after=wait) from exc
            if exc.code == 500 and streaming and "stream" in detail.lower():
                raise _NoStreaming(f"HTTP {exc.code}: {detail}") from exc
            if exc.code in TRANSIENT_STATUSES:
                raise Retryable(f"HTTP {exc.code}", detail, exc.code, throttle=False, retry_after=wait) from exc
            what = ModelError
            if body is not None and (exc.code == 404 or (exc.code == 400 and "model" in detail.lower())):
                what = _NotServed
            elif streaming and "stream" in detail.lower():
                what = _NoStreaming
            raise what(f"openai endpoint {url} answered HTTP {exc.code} for model {self.name}: {detail}") from exc
        except (urllib.error.URLError, TimeoutError, OSError, http.client.HTTPException) as exc:
            # refused / reset / timed out: the server restarts or is overloaded (a vLLM pod rolling); try again
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise Retryable("unreachable", f"openai endpoint {url}: {reason}", throttle=False) from exc

    def _send(self, request: ModelRequest, sink: AnswerSink) -> ModelResponse:
        sink.attempt_started()  # whatever an earlier try published is void
        url = f"{self.settings.base_url}/chat/completions"
        streaming = (self.settings.base_url, self.served_name) not in NOT_STREAMING
        body = json.dumps(chat_request(self.served_name, request, stream=streaming)).encode()
        text_calls = self.settings.text_tool_calls and bool(request.tools)
        assembled = StreamAssembler()
        held = HeldText(sink, hold=text_calls)
        with self._open(url, body, streaming=streaming) as answer:
            try:
                if "json" in (answer.headers.get("Content-Type") or ""):  # the server ignored stream: true
                    held.text(assembled.feed(json.loads(answer.read())))
                    assembled.done = True
                else:
                    for data in sse_events(answer):
                        held.text(assembled.feed_data(data))
                        if assembled.done:
                            break
            except StreamError as exc:
                status = exc.status
                if is_retryable(None, status):
                    raise Retryable(f"stream error {status}", str(exc), status) from exc
                if status is None or status >= 500:
                    raise Retryable("stream error", str(exc), status, throttle=False) from exc
                raise ModelError(f"openai endpoint {url} failed the stream for model {self.name}: {exc}") from exc
            except ValueError as exc:
                raise ModelError(f"openai endpoint {url} sent invalid JSON: {exc}") from exc
            except (OSError, http.client.HTTPException) as exc:
                if not assembled.complete:
                    raise Retryable("stream cut", f"openai endpoint {url}: {exc!r}", throttle=False) from exc
        if not assembled.complete:
            got = len(assembled.answer_text())
            raise Retryable("stream cut", f"the stream ended before [DONE] or a finish reason ({got} characters in)",
                            throttle=False)
        return answer_response(request, assembled, held, model=self.name, text_calls=text_calls)


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read().decode("utf-8", "replace")
    except OSError:
        return str(exc.reason)
    try:
        data = json.loads(text)
        message = (data.get("error") or {}).get("message") if isinstance(data, dict) else None
        if message:
            return str(message)
    except (ValueError, AttributeError):
        pass
    return text[:500] or str(exc.reason)


def build_openai_model(
    name: str,
    *,
    settings: OpenAISettings | None = None,
    redis_client: redis.Redis | None = None,
    sleep: Sleeper = real_sleep,
    uniform: Uniform = random.uniform,
) -> OpenAICompatModel:
    settings = settings or OpenAISettings.from_env()
    coordinator = None
    if redis_client is not None:
        coordinator = ThrottleCoordinator(
            redis_client, f"openai:{name}", settings.limits, sleep=sleep, uniform=uniform
        )
    return OpenAICompatModel(
        name, settings, coordinator=coordinator, redis_client=redis_client, sleep=sleep, uniform=uniform
    )
