"""An OpenAI-compatible chat-completions endpoint (vLLM, llama.cpp server, TGI, OpenAI itself), stdlib HTTP
only.

Configuration (``OpenAISettings.from_env``, the variables of ``OpenAIEnvironment``): ``OPENAI_BASE_URL``
(required, e.g. ``http://vllm:8000/v1``), ``OPENAI_API_KEY`` (optional; vLLM usually needs none),
``UNICORE_OPENAI_TIMEOUT`` (s, default 600), ``UNICORE_OPENAI_MAX_ATTEMPTS`` (default 8), ``UNICORE_OPENAI_RPM`` /
``UNICORE_OPENAI_TPM`` (shared limits).

Conversations stay in Bedrock Converse shape everywhere else; this module translates at the edge:
assistant ``toolUse`` blocks <-> ``tool_calls``, user ``toolResult`` blocks -> ``role: tool`` messages (placed
before the user's text, as the chat-completions format requires).
"""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, ClassVar

import redis
from pydantic import BaseModel, Field

from unicore.errors import ConfigError, ModelError
from unicore.log import get_logger
from unicore.providers.base import AnswerSink, ModelRequest, ModelResponse
from unicore.providers.calling import CallRunner, Retryable, tool_result_text
from unicore.providers.retry import RetryPolicy, Sleeper, Uniform, is_retryable, real_sleep
from unicore.providers.throttle import ThrottleCoordinator, ThrottleLimits
from unicore.schema import Usage
from unicore.settings import EnvSettings

log = get_logger("openai")

FINISH_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filtered",
}


# Server errors worth another try that are not throttling (429/503 are: see ``retry.is_retryable``).
TRANSIENT_STATUSES = frozenset({408, 500, 502, 504})


class OpenAISettings(BaseModel):
    base_url: str
    api_key: str | None = Field(default=None, repr=False)
    timeout: float = Field(default=600.0, gt=0)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    limits: ThrottleLimits = Field(default_factory=ThrottleLimits)

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


def chat_request(model: str, request: ModelRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(request),
        "max_tokens": request.max_tokens,
    }
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


def chat_response(model: str, raw: Mapping[str, Any]) -> ModelResponse:
    """A chat.completions answer -> ModelResponse in Converse shape."""
    choices = raw.get("choices") or []
    if not choices:
        raise ModelError(f"openai model {model} returned no choices: {json.dumps(raw)[:500]}")
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments") or "{}"
        try:
            tool_input = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            tool_input = {
                "_unparsed_arguments": arguments
            }  # the tool's input validation reports it to the model
        if not isinstance(tool_input, dict):
            tool_input = {"_unparsed_arguments": arguments}
        content.append(
            {
                "toolUse": {
                    "toolUseId": call.get("id") or "",
                    "name": function.get("name", ""),
                    "input": tool_input,
                }
            }
        )
    has_calls = any("toolUse" in b for b in content)
    stop = "tool_use" if has_calls else FINISH_REASONS.get(str(choice.get("finish_reason")), "end_turn")
    usage = raw.get("usage") or {}
    inp, out = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    return ModelResponse(
        content=content,
        stop_reason=stop,
        usage=Usage(
            input_tokens=inp, output_tokens=out, total_tokens=int(usage.get("total_tokens") or inp + out)
        ),
        model_id=str(raw.get("model") or model),
    )


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

    def converse(self, request: ModelRequest, sink: AnswerSink | None = None) -> ModelResponse:
        body = json.dumps(chat_request(self.name, request)).encode()
        return self.runner.run(request, lambda: self._send(body))

    def _send(self, body: bytes) -> ModelResponse:
        url = f"{self.settings.base_url}/chat/completions"
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.settings.timeout) as answer:
                raw = json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            if is_retryable(None, exc.code):
                raise Retryable(f"HTTP {exc.code}", detail, exc.code) from exc
            if exc.code in TRANSIENT_STATUSES:
                raise Retryable(f"HTTP {exc.code}", detail, exc.code, throttle=False) from exc
            raise ModelError(
                f"openai endpoint {url} answered HTTP {exc.code} for model {self.name}: {detail}"
            ) from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            # refused / reset / timed out: the server restarts or is overloaded (a vLLM pod rolling); try again
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise Retryable("unreachable", f"openai endpoint {url}: {reason}", throttle=False) from exc
        except ValueError as exc:
            raise ModelError(f"openai endpoint {url} returned invalid JSON: {exc}") from exc
        return chat_response(self.name, raw)


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
    except ValueError:
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
