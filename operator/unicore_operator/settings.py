"""OperatorSettings: every knob of the operator, read once from the environment at startup (docs/CONTRACT.md).

Each field ``name`` is set by the environment variable ``UNICORE_<NAME>`` (pydantic-settings' ``env_prefix``), except
``redis_url``, which is ``REDIS_URL`` as in the runtime. :func:`env_var` gives a field's variable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    EnvSettingsSource,
    NoDecode,
    SettingsConfigDict,
)
from pydantic_settings.sources.utils import parse_env_vars
from unicore.api import pod_env
from unicore.api.resources import Resources, ResourcesInvalid, check_resources
from unicore.archive import check_archive_url
from unicore.errors import ConfigError
from unicore.providers.endpoints import EndpointMap, parse_endpoints
from unicore.settings import KeywordOnlySettings

from unicore_operator.phases import RETRY_DELAY_CAP_SECONDS

# Set by the Job builder itself; UNICORE_AGENT_EXTRA_ENV may not override them.
RESERVED_AGENT_ENV = frozenset({
    pod_env.REDIS_URL, pod_env.TASK_ID, pod_env.SPAWNER, pod_env.NAMESPACE, pod_env.WORKSPACE, pod_env.HOME,
    pod_env.POD_NAME, pod_env.STALL_SECONDS, pod_env.OPENAI_ENDPOINTS,
})
ENV_NAME_RE = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# The turn container's default requests and limits: a turn mostly waits on its model, so it reserves a little CPU
# and has no CPU limit (CPU is compressible: a limit would only throttle the bursts of JSON parsing and tool calls,
# while the request already gives it its share under contention); memory is not compressible, so a limit keeps a
# runaway turn from taking its node's memory (it is OOM-killed alone, and the watchdog's rules apply).
DEFAULT_AGENT_RESOURCES: Resources = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
# An annotation key: an optional DNS-1123 subdomain prefix and '/', then a name of at most 63 characters.
ANNOTATION_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
# A PersistentVolumeClaim name: a DNS-1123 subdomain (lowercase alphanumerics, '-' and '.', at most 253 characters).
NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS-1123 label
DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class OperatorSettings(KeywordOnlySettings):
    """Immutable operator configuration; built by :func:`load_settings` and put on Kopf's ``memo``.

    Only :func:`load_settings` reads the environment: constructing the model directly (as tests do) takes the given
    values and the defaults, nothing else.
    """

    model_config = SettingsConfigDict(env_prefix="UNICORE_", frozen=True, extra="forbid", populate_by_name=True)

    redis_url: str = Field(min_length=1, validation_alias="REDIS_URL")
    # A comma list (not JSON, hence NoDecode); empty = cluster-wide.
    namespaces: Annotated[tuple[str, ...], NoDecode] = ()
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
    # The wait before a failed turn Job's retry: this, doubled per failure in a row (phases.retry_delay), at most
    # RETRY_DELAY_CAP_SECONDS, which also bounds it (a larger base would wait the cap every time); 0 = no wait. The
    # fault-injection tests set it small, so their many kills (each a failed Job) retry fast.
    turn_retry_backoff_seconds: float = Field(5.0, ge=0, le=RETRY_DELAY_CAP_SECONDS, allow_inf_nan=False)
    default_turn_timeout_seconds: int = Field(3600, ge=10)
    resync_seconds: float = Field(30.0, gt=0)
    # A tool call waiting for approval (spec.approval) longer than this is denied ("expired") when the task's
    # spec.approval sets no timeoutSeconds (the CRD's documented default, 3600); 0 = it waits until someone decides.
    approval_timeout_seconds: int = Field(3600, ge=0)
    redis_retention_seconds: int = Field(0, ge=0)
    # Retention (unicore.retention, operator/retention.py): a task tree whose tasks are all Idle or Failed and that
    # was idle longer than this is archived to retention_archive_url (file:///path or s3://bucket/prefix; None = not
    # archived) and removed from Redis; its AgentTasks stay, phase Archived. 0 = off. Checked every interval.
    retention_ttl_seconds: float = Field(0.0, ge=0, allow_inf_nan=False)
    retention_archive_url: str | None = None
    retention_interval_seconds: float = Field(300.0, gt=0, allow_inf_nan=False)
    http_port: int = Field(8080, ge=0, le=65535)  # /healthz, /readyz and /metrics; 0 = no HTTP server
    # The admission webhook for child AgentTasks (admission.py): HTTPS on this port (0 = none), with tls.crt and
    # tls.key from webhook_cert_dir (the chart's Secret unicore-operator-webhook), reloaded when they change.
    webhook_port: int = Field(0, ge=0, le=65535)
    webhook_cert_dir: str = "/etc/unicore/webhook"
    # Who may call the webhook: "apiserver" (the API server only: a client certificate its request-header CA signed,
    # with an allowed name, as the task API checks; the API server presents one when its admission configuration
    # names a kubeconfig for webhooks: docs/install.md) or "none" (any TLS client: a control plane that cannot be
    # configured so; the NetworkPolicy is then the only guard of reviews that reveal other namespaces' tasks).
    webhook_client_auth: Literal["apiserver", "none"] = "apiserver"
    # The task API as a Kubernetes aggregated API (task_api/server.py, APIService v1alpha1.tasks.unicore.dev): HTTPS
    # on this port (0 = none), with tls.crt and tls.key from task_api_cert_dir (the chart: the same Secret as the
    # webhook's), reloaded when they change. Callers must present the API server's front-proxy client certificate
    # (kube-system/extension-apiserver-authentication); every request is authorized with a SubjectAccessReview.
    task_api_port: int = Field(0, ge=0, le=65535)
    task_api_cert_dir: str = "/etc/unicore/webhook"
    # The trigger endpoint (trigger_server.py, docs/triggers.md): webhook deliveries to AgentTriggers at
    # /triggers/<namespace>/<name> on this port (0 = none); HTTPS with tls.crt and tls.key of trigger_cert_dir when
    # set, else plain HTTP (TLS at an Ingress).
    trigger_port: int = Field(0, ge=0, le=65535)
    trigger_cert_dir: str = ""
    # The inbound endpoint's URL as its clients reach it (an Ingress: https://agents.example.com), for the URLs in
    # A2A Agent Cards (a2a_server.py); empty: from each request's Host (and X-Forwarded-Proto/-Host).
    public_url: str = ""
    # A trace's page in the tracing UI people use, with {trace_id} (e.g. https://jaeger.example.com/trace/{trace_id}):
    # AgentTask status.trace.url, shown by `kubectl agenttask describe` and the web UI; empty: the id alone.
    trace_url: str = ""
    heartbeat_timeout_seconds: float = Field(120.0, gt=0)
    pending_timeout_seconds: float = Field(300.0, gt=0)
    # How long a turn Job may stay held suspended by its queue (Kueue keeps spec.suspend true until its LocalQueue
    # admits the workload) before the watchdog gives the attempt up (admission_timeout: the Job is deleted, the
    # attempt counts as failed). 0 = as long as the queue holds it: the queue decides admission, and a reaped turn's
    # next Job would queue again behind everything created meanwhile. The Pending and heartbeat rules never apply to
    # a held Job.
    admission_timeout_seconds: float = Field(0.0, ge=0)
    max_reaps: int = Field(3, ge=1)
    watchdog_interval_seconds: float = Field(15.0, gt=0)
    # How long an object must be missing from a cache, and how long a Job may overrun its deadline, before the
    # watchdog acts.
    watchdog_grace_seconds: float = Field(30.0, ge=0)
    # Turn pods: UNICORE_STALL_SECONDS (unset = the runtime's default, 900) and extra env (a JSON object of
    # name -> value, e.g. {"UNICORE_EXTRA_TOOLS": "my_tools:TOOLS"}).
    stall_seconds: float | None = Field(None, gt=0)
    # A JSON object, parsed (with clear errors) by its validator rather than by pydantic-settings, hence NoDecode.
    agent_extra_env: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    # A PersistentVolumeClaim (ReadWriteMany on multi-node clusters) that exists in every namespace where AgentTasks
    # run: turn pods mount it at /workspace with subPath = the task tree's root, so every turn and every child of a
    # tree shares one folder that outlives the pods. None = an emptyDir per turn pod (files live for one turn).
    workspace_claim: str | None = None
    # How long the Job controller may keep failing to create a turn Job's pod (FailedCreate: no ServiceAccount, a
    # ResourceQuota, Pod Security admission) before that attempt counts as a failed turn (the Job is deleted).
    pod_create_retry_seconds: float = Field(60.0, gt=0)
    # The turn container's requests and limits, a JSON object {"requests": {...}, "limits": {...}} of Kubernetes
    # quantities (the same shape as an AgentTask's spec.resources, which wins over it key by key); GPUs come from
    # default_gpus. Empty = DEFAULT_AGENT_RESOURCES; {} = none (BestEffort pods).
    agent_resources: Annotated[Resources, NoDecode] = Field(default_factory=lambda: {
        section: dict(values) for section, values in DEFAULT_AGENT_RESOURCES.items()})
    # Create the agent ServiceAccount, Role and RoleBinding (agent_rbac.py) in a namespace the first time an
    # AgentTask appears there. None (unset or empty) = on when cluster-wide (UNICORE_NAMESPACES empty), else off.
    provision_agent_rbac: bool | None = None
    # Annotations of the ServiceAccounts the operator provisions (a JSON object, e.g. the IRSA role
    # {"eks.amazonaws.com/role-arn": "arn:aws:iam::...:role/..."}), as the chart annotates its own.
    agent_service_account_annotations: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    # Per-namespace Redis identities (redis_identities.py): every namespace with AgentTasks gets its own Redis ACL user
    # (only its tasks' keys, plus the few writes a turn makes to shared keys: unicore.store.acl), and its turn pods get
    # only that user's URL, from the Secret `redis_identity_secret` the operator writes there (key `redis-url`). The
    # operator's own Redis user must be allowed to manage ACL users (checked at start-up). Off when unset: the chart
    # turns it on with its bundled Redis (redis.identities.enabled).
    redis_identities: bool = False
    redis_identity_secret: str = "unicore-redis-agent"
    # How often the operator re-applies every namespace's user from its Secret (a Redis that restarted without them,
    # a deleted Secret: a new password) and recreates missing Secrets.
    redis_identity_resync_seconds: float = Field(30.0, gt=0)
    # OpenAI-compatible endpoints by model name (unicore.providers.endpoints): a JSON list of {"models": [names or
    # globs], "baseUrl", "apiKeySecret": {"name", "key"}, "apiKeyEnv", "rpm", "tpm", "timeout", "textToolCalls"}.
    # Turn pods get the map and, for their task's model, its endpoint's key as a secretKeyRef (optional) to the
    # Secret in the task's namespace; the operator copies no Secret between namespaces. Empty = OPENAI_BASE_URL alone.
    openai_endpoints: Annotated[EndpointMap, NoDecode] = Field(default_factory=EndpointMap)
    # Warm turn pods for the tasks without an Agent (docs/warm-pods.md; an Agent asks for its own with
    # spec.warmPool): a JSON object namespace -> pool size (0 to 64), e.g. {"team-a": 2}. Idle warm pods hold their
    # requests (and GPUs: UNICORE_DEFAULT_GPUS). Empty = none. Their longest wait: warm_pool_max_wait_seconds.
    warm_pools: Annotated[dict[str, int], NoDecode] = Field(default_factory=dict)
    warm_pool_max_wait_seconds: int = Field(1800, ge=60, le=86_400)

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

    @field_validator("retention_archive_url", mode="before")
    @classmethod
    def _archive_url(cls, value: object) -> object:
        if isinstance(value, str):
            return check_archive_url(value) if value.strip() else None
        return value

    @field_validator("redis_identity_secret", mode="before")
    @classmethod
    def _secret_name(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.strip()
            if len(value) > 253 or not DNS1123_SUBDOMAIN_RE.match(value):
                raise ValueError(f"{value!r} is not a valid Secret name (a DNS-1123 subdomain)")
        return value

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

    @field_validator("stall_seconds", "provision_agent_rbac", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("agent_resources", mode="before")
    @classmethod
    def _parse_resources(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str):
            if not value.strip():
                return {section: dict(values) for section, values in DEFAULT_AGENT_RESOURCES.items()}
            value = _json_object(value)
        try:
            checked = check_resources(value)
        except ResourcesInvalid as exc:
            raise ValueError(str(exc)) from None
        gpu = info.data.get("gpu_resource")
        if gpu in checked.get("limits", {}):
            raise ValueError(f"limits.{gpu}: GPUs per turn pod come from {env_var('default_gpus')}")
        return checked

    @field_validator("agent_service_account_annotations", mode="before")
    @classmethod
    def _parse_annotations(cls, value: object) -> object:
        if isinstance(value, str):
            value = _json_object(value) if value.strip() else {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ValueError('must be a JSON object of string values, e.g. {"example.com/owner": "team-a"}')
        bad = sorted(str(key) for key in value if not ANNOTATION_KEY_RE.match(str(key)))
        if bad:
            raise ValueError(f"invalid annotation keys {bad}")
        return value

    @field_validator("warm_pools", mode="before")
    @classmethod
    def _parse_warm_pools(cls, value: object) -> object:
        if isinstance(value, str):
            value = _json_object(value) if value.strip() else {}
        if not isinstance(value, dict) or not all(
                isinstance(size, int) and not isinstance(size, bool) and 0 <= size <= 64 for size in value.values()):
            raise ValueError('must be a JSON object of namespace -> pool size (0 to 64), e.g. {"team-a": 2}')
        bad = sorted(str(name) for name in value if not NAMESPACE_RE.match(str(name)))
        if bad:
            raise ValueError(f"not namespace names: {bad}")
        return value

    @field_validator("trace_url")
    @classmethod
    def _check_trace_url(cls, value: str) -> str:
        if value and "{trace_id}" not in value:
            raise ValueError("must contain {trace_id}, e.g. https://jaeger.example.com/trace/{trace_id}")
        return value

    @field_validator("agent_extra_env", mode="before")
    @classmethod
    def _parse_extra_env(cls, value: object) -> object:
        if isinstance(value, str):
            if not value.strip():
                return {}
            value = _json_object(value)
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ValueError('must be a JSON object of string values, e.g. {"NAME": "value"}')
        bad = sorted(name for name in value if not ENV_NAME_RE.match(str(name)))
        if bad:
            raise ValueError(f"invalid environment variable names {bad}")
        reserved = sorted(RESERVED_AGENT_ENV & set(value))
        if reserved:
            raise ValueError(f"{reserved} are set by the operator itself")
        return value

    @field_validator("openai_endpoints", mode="before")
    @classmethod
    def _parse_endpoints(cls, value: object, info: ValidationInfo) -> object:
        try:
            endpoints = parse_endpoints(value, source="")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        taken = {endpoints.key_env(i) for i in range(len(endpoints.endpoints))}
        extra = info.data.get("agent_extra_env") or {}
        clash = sorted(name for name in extra if name.startswith(pod_env.OPENAI_KEY_PREFIX) or name in taken)
        if clash:
            raise ValueError(f"{env_var('agent_extra_env')} sets {clash}, which carry the endpoint map's API keys")
        return endpoints

    @property
    def cluster_wide(self) -> bool:
        return not self.namespaces

    @property
    def provisions_agent_rbac(self) -> bool:
        return self.cluster_wide if self.provision_agent_rbac is None else self.provision_agent_rbac


def _json_object(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg})") from None


def env_var(field: str) -> str:
    """The environment variable that sets the field ``field`` of :class:`OperatorSettings`."""
    alias = OperatorSettings.model_fields[field].validation_alias
    if isinstance(alias, str):
        return alias
    return f"{OperatorSettings.model_config.get('env_prefix', '')}{field}".upper()


def _env_var_of(loc: object) -> str:
    name = str(loc)
    return env_var(name) if name in OperatorSettings.model_fields else name


def load_settings(environ: Mapping[str, str] | None = None) -> OperatorSettings:
    """Read :class:`OperatorSettings` from ``environ`` (default ``os.environ``); a bad value raises ConfigError.

    Variable names are matched as pydantic-settings does by default, ignoring case.
    """
    source = EnvSettingsSource(OperatorSettings)
    if environ is not None:
        source.env_vars = parse_env_vars(
            environ, source.case_sensitive, source.env_ignore_empty, source.env_parse_none_str
        )
    values = source()
    if "REDIS_URL" not in values:
        raise ConfigError("REDIS_URL is required (e.g. redis://redis:6379/0)")
    try:
        return OperatorSettings(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{_env_var_of(err['loc'][0])}: {err['msg']}" for err in exc.errors())
        raise ConfigError(f"invalid operator settings: {problems}") from exc
