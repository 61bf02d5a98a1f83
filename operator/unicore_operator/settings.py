"""OperatorSettings: every knob of the operator, read once from the environment at startup (docs/CONTRACT.md)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from unicore.errors import ConfigError

# field name -> environment variable
ENV_VARS: dict[str, str] = {
    "redis_url": "REDIS_URL",
    "namespaces": "UNICORE_NAMESPACES",
    "agent_image": "UNICORE_AGENT_IMAGE",
    "agent_image_pull_policy": "UNICORE_AGENT_IMAGE_PULL_POLICY",
    "agent_service_account": "UNICORE_AGENT_SERVICE_ACCOUNT",
    "agent_redis_secret": "UNICORE_AGENT_REDIS_SECRET",
    "agent_env_secret": "UNICORE_AGENT_ENV_SECRET",
    "default_gpus": "UNICORE_DEFAULT_GPUS",
    "gpu_resource": "UNICORE_GPU_RESOURCE",
    "gpu_toleration": "UNICORE_GPU_TOLERATION",
    "job_ttl_seconds": "UNICORE_JOB_TTL_SECONDS",
    "max_turn_retries": "UNICORE_MAX_TURN_RETRIES",
    "turn_retry_backoff_seconds": "UNICORE_TURN_RETRY_BACKOFF_SECONDS",
    "default_turn_timeout_seconds": "UNICORE_DEFAULT_TURN_TIMEOUT_SECONDS",
    "resync_seconds": "UNICORE_RESYNC_SECONDS",
    "redis_retention_seconds": "UNICORE_REDIS_RETENTION_SECONDS",
    "http_port": "UNICORE_HTTP_PORT",
    "heartbeat_timeout_seconds": "UNICORE_HEARTBEAT_TIMEOUT_SECONDS",
    "pending_timeout_seconds": "UNICORE_PENDING_TIMEOUT_SECONDS",
    "max_reaps": "UNICORE_MAX_REAPS",
    "watchdog_interval_seconds": "UNICORE_WATCHDOG_INTERVAL_SECONDS",
    "stall_seconds": "UNICORE_STALL_SECONDS",
    "agent_extra_env": "UNICORE_AGENT_EXTRA_ENV",
    "workspace_claim": "UNICORE_WORKSPACE_CLAIM",
    "pod_create_retry_seconds": "UNICORE_POD_CREATE_RETRY_SECONDS",
}
# Set by the Job builder itself; UNICORE_AGENT_EXTRA_ENV may not override them.
RESERVED_AGENT_ENV = frozenset({
    "REDIS_URL", "UNICORE_TASK_ID", "UNICORE_SPAWNER", "UNICORE_NAMESPACE", "UNICORE_WORKSPACE", "HOME",
    "UNICORE_POD_NAME", "UNICORE_STALL_SECONDS",
})
ENV_NAME_RE = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# A PersistentVolumeClaim name: a DNS-1123 subdomain (lowercase alphanumerics, '-' and '.', at most 253 characters).
DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class OperatorSettings(BaseModel):
    """Immutable operator configuration; built by :func:`load_settings` and put on Kopf's ``memo``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    redis_url: str = Field(min_length=1)
    namespaces: tuple[str, ...] = ()  # empty = cluster-wide
    agent_image: str = "unicore-agent:latest"
    agent_image_pull_policy: str = "IfNotPresent"
    agent_service_account: str = "unicore-agent"
    agent_redis_secret: str | None = None  # Secret with key `redis-url`; else REDIS_URL is passed literally
    agent_env_secret: str | None = None  # Secret with provider credentials (envFrom)
    default_gpus: int = Field(1, ge=0, le=64)
    gpu_resource: str = "nvidia.com/gpu"
    gpu_toleration: bool = True
    job_ttl_seconds: int = Field(300, ge=0)
    max_turn_retries: int = Field(3, ge=0)
    turn_retry_backoff_seconds: float = Field(5.0, ge=0)
    default_turn_timeout_seconds: int = Field(3600, ge=10)
    resync_seconds: float = Field(30.0, gt=0)
    redis_retention_seconds: int = Field(0, ge=0)
    http_port: int = Field(8080, ge=0, le=65535)  # 0 = no HTTP server
    heartbeat_timeout_seconds: float = Field(120.0, gt=0)
    pending_timeout_seconds: float = Field(300.0, gt=0)
    max_reaps: int = Field(3, ge=1)
    watchdog_interval_seconds: float = Field(15.0, gt=0)
    # Turn pods: UNICORE_STALL_SECONDS (unset = the runtime's default, 900) and extra env (a JSON object of
    # name -> value, e.g. {"UNICORE_EXTRA_TOOLS": "my_tools:TOOLS"}).
    stall_seconds: float | None = Field(None, gt=0)
    agent_extra_env: dict[str, str] = Field(default_factory=dict)
    # A PersistentVolumeClaim (ReadWriteMany on multi-node clusters) that exists in every namespace where AgentTasks
    # run: turn pods mount it at /workspace with subPath = the task tree's root, so every turn and every child of a
    # tree shares one folder that outlives the pods. None = an emptyDir per turn pod (files live for one turn).
    workspace_claim: str | None = None
    # How long the Job controller may keep failing to create a turn Job's pod (FailedCreate: no ServiceAccount, a
    # ResourceQuota, Pod Security admission) before that attempt counts as a failed turn (the Job is deleted).
    pod_create_retry_seconds: float = Field(60.0, gt=0)

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split_namespaces(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("agent_redis_secret", "agent_env_secret", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("workspace_claim", mode="before")
    @classmethod
    def _claim_name(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.strip()
            if not value:
                return None
            if len(value) > 253 or not DNS1123_SUBDOMAIN_RE.match(value):
                raise ValueError(
                    f"{value!r} is not a valid PersistentVolumeClaim name (a DNS-1123 subdomain: lowercase letters, "
                    "digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters)"
                )
        return value

    @field_validator("stall_seconds", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("agent_extra_env", mode="before")
    @classmethod
    def _parse_extra_env(cls, value: object) -> object:
        if isinstance(value, str):
            if not value.strip():
                return {}
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON ({exc.msg})") from None
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ValueError('must be a JSON object of string values, e.g. {"NAME": "value"}')
        bad = sorted(name for name in value if not ENV_NAME_RE.match(str(name)))
        if bad:
            raise ValueError(f"invalid environment variable names {bad}")
        reserved = sorted(RESERVED_AGENT_ENV & set(value))
        if reserved:
            raise ValueError(f"{reserved} are set by the operator itself")
        return value

    @property
    def cluster_wide(self) -> bool:
        return not self.namespaces


def load_settings(environ: Mapping[str, str] | None = None) -> OperatorSettings:
    """Read :class:`OperatorSettings` from ``environ`` (default ``os.environ``); a bad value raises ConfigError."""
    env = os.environ if environ is None else environ
    raw = {field: env[var] for field, var in ENV_VARS.items() if var in env}
    if "redis_url" not in raw:
        raise ConfigError("REDIS_URL is required (e.g. redis://redis:6379/0)")
    try:
        return OperatorSettings.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{ENV_VARS.get(str(err['loc'][0]), err['loc'][0])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"invalid operator settings: {problems}") from exc
