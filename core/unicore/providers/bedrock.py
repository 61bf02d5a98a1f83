"""Amazon Bedrock through boto3 ``bedrock-runtime`` ConverseStream (the answer's text reaches the call's
``AnswerSink`` as it arrives; ``unicore.providers.bedrock_stream`` folds the events into one answer; a stream that
breaks off before ``messageStop`` is retried like a transient failure, never returned as half an answer).

Configuration (``BedrockSettings.from_env``, the variables of ``BedrockEnvironment``): ``AWS_REGION`` /
``AWS_DEFAULT_REGION``, ``AWS_PROFILE`` (or any credential boto3 finds: env keys, IRSA / Pod Identity on
Kubernetes), and ``UNICORE_BEDROCK_ENDPOINT_URL``, ``UNICORE_BEDROCK_READ_TIMEOUT`` (s, default 300),
``UNICORE_BEDROCK_MAX_ATTEMPTS`` (default 8), ``UNICORE_BEDROCK_RPM`` / ``UNICORE_BEDROCK_TPM`` (proactive
limits per model per minute, shared through Redis; unset = none), ``UNICORE_BEDROCK_LIMITS`` (JSON: per model,
keyed by short name or id, e.g. ``{"claude-sonnet-4": {"max_requests": 50, "max_tokens": 400000}}``),
``UNICORE_BEDROCK_MODEL_CACHE_TTL`` (s, default 21600), ``UNICORE_BEDROCK_DISCOVERY`` (``0`` disables discovery).

botocore's own retries are switched off: ``unicore.providers.retry`` is the one retry policy.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar

import boto3
import redis
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
)
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import NoDecode

from unicore.errors import ConfigError, ModelError
from unicore.log import get_logger
from unicore.providers.base import AnswerSink, ModelRequest, ModelResponse, NoSink
from unicore.providers.bedrock_stream import STREAM_CUT_ERRORS, StreamCut, stream_response
from unicore.providers.calling import CallRunner, Retryable, flatten_tool_blocks, has_tool_blocks
from unicore.providers.model_names import (
    ModelNameResolver,
    aws_credentials_hint,
    is_full_model_id,
    short_name,
)
from unicore.providers.retry import RetryPolicy, Sleeper, Uniform, is_retryable, real_sleep
from unicore.providers.throttle import ThrottleCoordinator, ThrottleLimits
from unicore.settings import EnvSettings, Flag

log = get_logger("bedrock")

# Errors worth another try that are not throttling: "retry your request" (the stream broke on the server side).
TRANSIENT_CODES = frozenset({"ModelStreamErrorException", "InternalServerException"})

ClientFactory = Callable[[str], Any]  # service name ("bedrock-runtime" | "bedrock") -> boto3 client


class BedrockSettings(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    region: str | None = None
    profile: str | None = None
    endpoint_url: str | None = None
    read_timeout: float = Field(default=300.0, gt=0)
    connect_timeout: float = Field(default=10.0, gt=0)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    limits: ThrottleLimits = Field(default_factory=ThrottleLimits)
    model_limits: dict[str, ThrottleLimits] = Field(default_factory=dict)
    model_cache_ttl: int = Field(default=6 * 3600, ge=0)
    discover_models: bool = True
    client_factory: ClientFactory | None = Field(
        default=None, exclude=True, description="tests: inject (stubbed) clients"
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> BedrockSettings:
        """The settings :class:`BedrockEnvironment` reads from ``env`` (default ``os.environ``)."""
        return BedrockEnvironment.from_env(env).settings()

    def limits_for(self, name: str, model_id: str) -> ThrottleLimits:
        for key in (name, model_id, short_name(model_id)):
            if key in self.model_limits:
                return self.model_limits[key]
        return self.limits

    def client(self, service: str) -> Any:
        """A boto3 client for ``service``; clear ConfigErrors for a missing region or profile."""
        if self.client_factory is not None:
            return self.client_factory(service)
        try:
            session = boto3.Session(profile_name=self.profile, region_name=self.region)
            config = Config(
                read_timeout=self.read_timeout,
                connect_timeout=self.connect_timeout,
                retries={"total_max_attempts": 1, "mode": "standard"},
            )
            return session.client(service, endpoint_url=self.endpoint_url, config=config)
        except (NoRegionError, ProfileNotFound, NoCredentialsError, PartialCredentialsError) as exc:
            raise ConfigError(aws_credentials_hint(exc)) from exc


class BedrockEnvironment(EnvSettings):
    """The bedrock provider's environment variables (README "Configuration"); :meth:`settings` builds
    :class:`BedrockSettings` from them. boto3 reads its credentials itself."""

    what: ClassVar[str] = "Bedrock settings in the environment"

    region: str | None = Field(None, validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION"))
    profile: str | None = Field(None, validation_alias="AWS_PROFILE")
    endpoint_url: str | None = Field(None, validation_alias="UNICORE_BEDROCK_ENDPOINT_URL")
    read_timeout: float = Field(300.0, gt=0, validation_alias="UNICORE_BEDROCK_READ_TIMEOUT")
    max_attempts: int = Field(8, ge=1, le=50, validation_alias="UNICORE_BEDROCK_MAX_ATTEMPTS")
    rpm: int | None = Field(None, ge=0, validation_alias="UNICORE_BEDROCK_RPM")
    tpm: int | None = Field(None, ge=0, validation_alias="UNICORE_BEDROCK_TPM")
    # Per model (keyed by short name or id): a JSON object of ThrottleLimits fields (rpm / tpm allowed), parsed by
    # settings() on top of rpm / tpm, hence NoDecode.
    limits: Annotated[dict[str, Any], NoDecode] = Field(default_factory=dict, validation_alias="UNICORE_BEDROCK_LIMITS")
    model_cache_ttl: int = Field(6 * 3600, ge=0, validation_alias="UNICORE_BEDROCK_MODEL_CACHE_TTL")
    discovery: Flag = Field(True, validation_alias="UNICORE_BEDROCK_DISCOVERY")

    @field_validator("limits", mode="before")
    @classmethod
    def _json_object(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON ({exc.msg})") from None
        if not isinstance(value, dict):
            raise ValueError("must be a JSON object")
        return value

    def settings(self) -> BedrockSettings:
        limits = ThrottleLimits(max_requests=self.rpm, max_tokens=self.tpm)
        per_model: dict[str, ThrottleLimits] = {}
        for name, raw in self.limits.items():
            try:
                per_model[name] = _model_limits(limits, raw)
            except ValidationError as exc:
                problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            except (ValueError, TypeError) as exc:
                problem = str(exc)
            else:
                continue
            raise ConfigError(f"invalid {self.what}: UNICORE_BEDROCK_LIMITS[{name!r}]: {problem}")
        return BedrockSettings(
            region=self.region,
            profile=self.profile,
            endpoint_url=self.endpoint_url,
            read_timeout=self.read_timeout,
            retry=RetryPolicy(max_attempts=self.max_attempts),
            limits=limits,
            model_limits=per_model,
            model_cache_ttl=self.model_cache_ttl,
            discover_models=self.discovery,
        )


def _model_limits(base: ThrottleLimits, raw: Any) -> ThrottleLimits:
    if not isinstance(raw, dict):
        raise ValueError(f"per-model limits must be JSON objects, got {raw!r}")
    aliases = {"rpm": "max_requests", "tpm": "max_tokens"}
    return ThrottleLimits.model_validate(
        {**base.model_dump(), **{aliases.get(k, k): v for k, v in raw.items()}}
    )


# request mapping ----------


def converse_request(model_id: str, request: ModelRequest) -> dict[str, Any]:
    """ModelRequest -> keyword arguments of ``bedrock-runtime.converse_stream`` (the same as ``converse``'s)."""
    messages = [{"role": m["role"], "content": list(m.get("content", []))} for m in request.messages]
    if not request.tools and has_tool_blocks(messages):
        # Converse rejects toolUse/toolResult blocks without a toolConfig (e.g. a summary call): show them
        # as text.
        messages = flatten_tool_blocks(messages)
    params: dict[str, Any] = {"modelId": model_id, "messages": messages}
    if request.system:
        params["system"] = [{"text": request.system}]
    inference: dict[str, Any] = {"maxTokens": request.max_tokens}
    if request.temperature is not None:
        inference["temperature"] = request.temperature
    params["inferenceConfig"] = inference
    if request.tools:
        tools = []
        for tool in request.tools:
            spec: dict[str, Any] = {"name": tool.name, "inputSchema": {"json": tool.input_schema}}
            if tool.description:
                spec["description"] = tool.description
            tools.append({"toolSpec": spec})
        params["toolConfig"] = {"tools": tools}
    return params


# the model ----------


class BedrockModel:
    """A Bedrock model behind the Model protocol."""

    provider = "bedrock"

    def __init__(
        self,
        model_id: str,
        runtime_client: Any,
        *,
        policy: RetryPolicy | None = None,
        coordinator: ThrottleCoordinator | None = None,
        redis_client: redis.Redis | None = None,
        sleep: Sleeper = real_sleep,
        uniform: Uniform = random.uniform,
    ) -> None:
        self.name = model_id
        self._client = runtime_client
        self.runner = CallRunner(
            "bedrock",
            model_id,
            policy=policy,
            coordinator=coordinator,
            redis_client=redis_client,
            sleep=sleep,
            uniform=uniform,
        )

    def converse(self, request: ModelRequest, sink: AnswerSink | None = None) -> ModelResponse:
        params = converse_request(self.name, request)
        live = sink if sink is not None else NoSink()
        return self.runner.run(request, lambda: self._send(params, live))

    def _send(self, params: dict[str, Any], sink: AnswerSink) -> ModelResponse:
        sink.attempt_started()  # whatever an earlier try published is void
        try:
            raw = self._client.converse_stream(**params)
            return stream_response(self.name, raw["stream"], sink)
        except ClientError as exc:  # also EventStreamError: an exception event inside the stream
            error = exc.response.get("Error", {})
            code = str(error.get("Code", "Unknown"))
            code = code[:1].upper() + code[1:]  # stream exception events name the member: throttlingException
            message = str(error.get("Message", exc))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if is_retryable(code, status):
                raise Retryable(code, message, status) from exc
            if code in TRANSIENT_CODES:
                raise Retryable(code, message, status, throttle=False) from exc
            raise ModelError(f"Bedrock {code} for model {self.name}: {message}") from exc
        except (NoCredentialsError, PartialCredentialsError, NoRegionError) as exc:
            raise ConfigError(aws_credentials_hint(exc)) from exc
        except StreamCut as exc:
            raise Retryable("stream cut", f"Bedrock {self.name}: {exc}", throttle=False) from exc
        except STREAM_CUT_ERRORS as exc:  # the connection broke or timed out mid-stream
            raise Retryable("stream cut", f"Bedrock {self.name}: {exc!r}", throttle=False) from exc
        except BotoCoreError as exc:
            raise ModelError(f"Bedrock call to {self.name} failed: {exc}") from exc


def build_bedrock_model(
    name: str,
    *,
    settings: BedrockSettings | None = None,
    redis_client: redis.Redis | None = None,
    sleep: Sleeper = real_sleep,
    uniform: Uniform = random.uniform,
) -> BedrockModel:
    """``bedrock:<name>`` -> a BedrockModel: resolve the name, build clients, attach the shared throttle."""
    settings = settings or BedrockSettings.from_env()
    runtime = settings.client("bedrock-runtime")
    region = settings.region or getattr(getattr(runtime, "meta", None), "region_name", None) or "us-east-1"
    control = None
    if settings.discover_models and not is_full_model_id(name.strip()):
        control = settings.client("bedrock")
    resolver = ModelNameResolver(
        region,
        control_client=control,
        redis_client=redis_client,
        cache_ttl=settings.model_cache_ttl,
        discover=settings.discover_models,
    )
    model_id = resolver.resolve(name)
    log.info("bedrock model %s -> %s", name, model_id)
    coordinator = None
    if redis_client is not None:
        coordinator = ThrottleCoordinator(
            redis_client, model_id, settings.limits_for(name, model_id), sleep=sleep, uniform=uniform
        )
    return BedrockModel(
        model_id,
        runtime,
        policy=settings.retry,
        coordinator=coordinator,
        redis_client=redis_client,
        sleep=sleep,
        uniform=uniform,
    )
