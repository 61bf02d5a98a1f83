"""The operator's environment variables: every documented name sets its OperatorSettings field, and nothing else.

The names come from pydantic-settings' ``env_prefix`` rule, so renaming a field would silently rename (and so break) a
documented variable; these tests pin the names to docs/CONTRACT.md, the README and the chart.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from unicore.archive import ArchiveEnvironment
from unicore.errors import ConfigError
from unicore.providers.endpoints import parse_endpoints
from unicore.store import client as redis_client
from unicore_operator.phases import RETRY_DELAY_CAP_SECONDS, retry_delay
from unicore_operator.settings import OperatorSettings, env_var, load_settings
from unicore_operator.watchdog.adapter import thresholds_from

ROOT = Path(__file__).resolve().parents[2]
ENV_NAME = re.compile(r"`((?:UNICORE_[A-Z0-9_]+)|REDIS_URL)`")

# documented variable -> (a value to set, the field it sets, the value the field then has, which is not its default)
SAMPLES: dict[str, tuple[str, str, Any]] = {
    "REDIS_URL": ("redis://elsewhere:6379/2", "redis_url", "redis://elsewhere:6379/2"),
    "UNICORE_NAMESPACES": ("a, b,", "namespaces", ("a", "b")),
    "UNICORE_AGENT_IMAGE": ("example/agent:2", "agent_image", "example/agent:2"),
    "UNICORE_AGENT_IMAGE_PULL_POLICY": ("Always", "agent_image_pull_policy", "Always"),
    "UNICORE_AGENT_SERVICE_ACCOUNT": ("robots", "agent_service_account", "robots"),
    "UNICORE_AGENT_REDIS_SECRET": ("redis-creds", "agent_redis_secret", "redis-creds"),
    "UNICORE_REDIS_IDENTITIES": ("true", "redis_identities", True),
    "UNICORE_REDIS_IDENTITY_SECRET": ("tenant-redis", "redis_identity_secret", "tenant-redis"),
    "UNICORE_REDIS_IDENTITY_RESYNC_SECONDS": ("5", "redis_identity_resync_seconds", 5.0),
    "UNICORE_AGENT_ENV_SECRET": ("model-creds", "agent_env_secret", "model-creds"),
    "UNICORE_DEFAULT_GPUS": ("2", "default_gpus", 2),
    "UNICORE_GPU_RESOURCE": ("amd.com/gpu", "gpu_resource", "amd.com/gpu"),
    "UNICORE_GPU_TOLERATION": ("false", "gpu_toleration", False),
    "UNICORE_JOB_TTL_SECONDS": ("30", "job_ttl_seconds", 30),
    "UNICORE_MAX_TURN_RETRIES": ("7", "max_turn_retries", 7),
    "UNICORE_TURN_RETRY_BACKOFF_SECONDS": ("0.5", "turn_retry_backoff_seconds", 0.5),
    "UNICORE_DEFAULT_TURN_TIMEOUT_SECONDS": ("120", "default_turn_timeout_seconds", 120),
    "UNICORE_POD_CREATE_RETRY_SECONDS": ("5", "pod_create_retry_seconds", 5.0),
    "UNICORE_RESYNC_SECONDS": ("3", "resync_seconds", 3.0),
    "UNICORE_APPROVAL_TIMEOUT_SECONDS": ("600", "approval_timeout_seconds", 600),
    "UNICORE_REDIS_RETENTION_SECONDS": ("600", "redis_retention_seconds", 600),
    "UNICORE_RETENTION_TTL_SECONDS": ("86400", "retention_ttl_seconds", 86400.0),
    "UNICORE_RETENTION_ARCHIVE_URL": ("s3://archive/unicore", "retention_archive_url", "s3://archive/unicore"),
    "UNICORE_RETENTION_INTERVAL_SECONDS": ("60", "retention_interval_seconds", 60.0),
    "UNICORE_HTTP_PORT": ("0", "http_port", 0),
    "UNICORE_WEBHOOK_PORT": ("8443", "webhook_port", 8443),
    "UNICORE_WEBHOOK_CERT_DIR": ("/run/certs", "webhook_cert_dir", "/run/certs"),
    "UNICORE_WEBHOOK_CLIENT_AUTH": ("none", "webhook_client_auth", "none"),
    "UNICORE_TASK_API_PORT": ("9443", "task_api_port", 9443),
    "UNICORE_TASK_API_CERT_DIR": ("/run/api-certs", "task_api_cert_dir", "/run/api-certs"),
    "UNICORE_HEARTBEAT_TIMEOUT_SECONDS": ("45", "heartbeat_timeout_seconds", 45.0),
    "UNICORE_PENDING_TIMEOUT_SECONDS": ("90", "pending_timeout_seconds", 90.0),
    "UNICORE_ADMISSION_TIMEOUT_SECONDS": ("7200", "admission_timeout_seconds", 7200.0),
    "UNICORE_MAX_REAPS": ("1", "max_reaps", 1),
    "UNICORE_WATCHDOG_INTERVAL_SECONDS": ("2.5", "watchdog_interval_seconds", 2.5),
    "UNICORE_WATCHDOG_GRACE_SECONDS": ("5", "watchdog_grace_seconds", 5.0),
    "UNICORE_STALL_SECONDS": ("120", "stall_seconds", 120.0),
    "UNICORE_AGENT_EXTRA_ENV": ('{"PYTHONPATH": "/opt/tools"}', "agent_extra_env", {"PYTHONPATH": "/opt/tools"}),
    "UNICORE_WORKSPACE_CLAIM": ("ws.team-a", "workspace_claim", "ws.team-a"),
    "UNICORE_AGENT_RESOURCES": ('{"requests": {"cpu": "250m"}, "limits": {"cpu": 2, "memory": "2Gi"}}',
                                "agent_resources",
                                {"requests": {"cpu": "250m"}, "limits": {"cpu": "2", "memory": "2Gi"}}),
    "UNICORE_PROVISION_AGENT_RBAC": ("false", "provision_agent_rbac", False),
    "UNICORE_TRIGGER_PORT": ("8090", "trigger_port", 8090),
    "UNICORE_PUBLIC_URL": ("https://agents.example.com", "public_url", "https://agents.example.com"),
    "UNICORE_TRACE_URL": ("https://jaeger.example.com/trace/{trace_id}", "trace_url",
                          "https://jaeger.example.com/trace/{trace_id}"),
    "UNICORE_TRIGGER_CERT_DIR": ("/etc/unicore/triggers", "trigger_cert_dir", "/etc/unicore/triggers"),
    "UNICORE_WARM_POOLS": ('{"team-a": 2, "team-b": 0}', "warm_pools", {"team-a": 2, "team-b": 0}),
    "UNICORE_WARM_POOL_MAX_WAIT_SECONDS": ("600", "warm_pool_max_wait_seconds", 600),
    "UNICORE_AGENT_SERVICE_ACCOUNT_ANNOTATIONS": ('{"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}',
                                                  "agent_service_account_annotations",
                                                  {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}),
    "UNICORE_OPENAI_ENDPOINTS": ('[{"models": ["llama-*"], "baseUrl": "http://vllm:8000/v1"}]', "openai_endpoints",
                                 parse_endpoints([{"models": ["llama-*"], "baseUrl": "http://vllm:8000/v1"}])),
}
# Read by modules the operator shares with the runtime, not by OperatorSettings.
SHARED_RUNTIME_VARS = {redis_client.RETRY_SECONDS_ENV, redis_client.SOCKET_TIMEOUT_ENV, "UNICORE_LOG_LEVEL",
                       ArchiveEnvironment.env_var("s3_endpoint_url")}


def contract_operator_vars() -> set[str]:
    """The variables the "Process:" item of docs/CONTRACT.md's operator contract lists."""
    text = (ROOT / "docs" / "CONTRACT.md").read_text()
    item = re.search(r"^- Process: .*?(?=^- )", text, re.MULTILINE | re.DOTALL)
    assert item is not None, "docs/CONTRACT.md has no '- Process:' item"
    return set(ENV_NAME.findall(item.group(0)))


def readme_operator_vars() -> set[str]:
    """The variables of the README's configuration table whose 'where' column names the operator."""
    found: set[str] = set()
    for line in (ROOT / "README.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and "operator" in cells[1]:
            found |= set(ENV_NAME.findall(cells[0]))
    return found


def chart_operator_vars() -> set[str]:
    """The variables the chart's ``unicore.operatorEnv`` template gives the operator."""
    text = (ROOT / "helm" / "unicore" / "templates" / "_helpers.tpl").read_text()
    block = re.search(r'define "unicore.operatorEnv".*?end \}\}', text, re.DOTALL)
    assert block is not None, "the chart has no unicore.operatorEnv template"
    return set(re.findall(r'"(UNICORE_[A-Z0-9_]+)"', block.group(0)))


def test_the_contract_lists_exactly_the_settings_variables() -> None:
    assert contract_operator_vars() == {env_var(field) for field in OperatorSettings.model_fields}


def test_every_field_has_a_sample() -> None:
    assert {field for _, field, _ in SAMPLES.values()} == set(OperatorSettings.model_fields)


@pytest.mark.parametrize("var", sorted(SAMPLES))
def test_each_documented_variable_sets_its_field(var: str) -> None:
    raw, field, expected = SAMPLES[var]
    default = getattr(OperatorSettings(redis_url="redis://r"), field)
    assert expected != default, f"the sample for {var} must differ from the default"
    settings = load_settings({"REDIS_URL": "redis://r", var: raw})
    assert getattr(settings, field) == expected
    assert env_var(field) == var


def test_readme_and_chart_variables_are_all_read() -> None:
    settings_vars = set(SAMPLES)
    readme = readme_operator_vars()
    assert {"REDIS_URL", "UNICORE_AGENT_EXTRA_ENV", "UNICORE_WORKSPACE_CLAIM"} <= readme  # the parser found the rows
    assert readme <= settings_vars | SHARED_RUNTIME_VARS
    chart = chart_operator_vars()
    assert "UNICORE_NAMESPACES" in chart
    assert chart <= settings_vars | SHARED_RUNTIME_VARS


def test_only_the_given_mapping_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICORE_DEFAULT_GPUS", "5")
    monkeypatch.setenv("REDIS_URL", "redis://from-process:6379/0")
    assert load_settings({"REDIS_URL": "redis://r"}).default_gpus == 1
    assert OperatorSettings(redis_url="redis://r").default_gpus == 1
    from_process = load_settings()
    assert from_process.default_gpus == 5 and from_process.redis_url == "redis://from-process:6379/0"


def test_unknown_variables_with_the_prefix_are_ignored() -> None:
    settings = load_settings({"REDIS_URL": "redis://r", "UNICORE_LOG_LEVEL": "DEBUG", "UNICORE_NO_SUCH_KNOB": "1"})
    assert settings == OperatorSettings(redis_url="redis://r")


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, "REDIS_URL is required"),
        ({"REDIS_URL": ""}, "REDIS_URL: String should have at least 1 character"),
        ({"REDIS_URL": "redis://r", "UNICORE_HTTP_PORT": "http"}, "UNICORE_HTTP_PORT: Input should be a valid integer"),
        ({"REDIS_URL": "redis://r", "UNICORE_WATCHDOG_GRACE_SECONDS": "-1"}, "UNICORE_WATCHDOG_GRACE_SECONDS: "),
        ({"REDIS_URL": "redis://r", "UNICORE_NAMESPACES": 'not ["json"]'}, None),
    ],
)
def test_errors_name_the_variable(environ: dict[str, str], message: str | None) -> None:
    if message is None:  # a comma list is not parsed as JSON
        assert load_settings(environ).namespaces == ('not ["json"]',)
        return
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(environ)


@pytest.mark.parametrize(("value", "message"), [
    ("-0.5", "Input should be greater than or equal to 0"),
    ("301", "Input should be less than or equal to 300"),
    ("inf", "Input should be a finite number"),
    ("nan", "Input should be a finite number"),
    ("5s", "Input should be a valid number"),
])
def test_a_bad_turn_retry_backoff_is_refused_in_one_line(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"REDIS_URL": "redis://r", "UNICORE_TURN_RETRY_BACKOFF_SECONDS": value})
    text = str(caught.value)
    assert text.startswith("invalid operator settings: UNICORE_TURN_RETRY_BACKOFF_SECONDS: ") and "\n" not in text
    assert message in text, text


def test_the_turn_retry_backoff_takes_its_bounds_and_defaults_to_five_seconds() -> None:
    assert OperatorSettings(redis_url="redis://r").turn_retry_backoff_seconds == 5.0
    for value, expected in (("0", 0.0), ("0.01", 0.01), ("300", 300.0)):  # 0: no wait; 300: the cap itself
        backoff = load_settings({"REDIS_URL": "redis://r", "UNICORE_TURN_RETRY_BACKOFF_SECONDS": value})
        assert backoff.turn_retry_backoff_seconds == expected
    assert RETRY_DELAY_CAP_SECONDS == 300.0 and retry_delay(30, 300.0) == retry_delay(1, 300.0) == 300.0


def test_watchdog_grace_comes_from_the_settings() -> None:
    thresholds = thresholds_from(load_settings({"REDIS_URL": "redis://r", "UNICORE_WATCHDOG_GRACE_SECONDS": "7"}))
    assert thresholds.deadline_grace == 7 and thresholds.absence_grace == 7
    assert thresholds_from(OperatorSettings(redis_url="redis://r")).deadline_grace == 30


def test_turn_pods_get_requests_and_a_memory_limit_by_default() -> None:
    defaults = OperatorSettings(redis_url="redis://r").agent_resources
    assert defaults == {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    assert load_settings({"REDIS_URL": "redis://r", "UNICORE_AGENT_RESOURCES": " "}).agent_resources == defaults
    assert load_settings({"REDIS_URL": "redis://r", "UNICORE_AGENT_RESOURCES": "{}"}).agent_resources == {}


@pytest.mark.parametrize(("value", "message"), [
    ('{"requests": {"cpu": "1x"}}', "requests.cpu: '1x' is not a non-negative Kubernetes quantity"),
    ('{"limits": {"memory": "-1Gi"}}', "limits.memory: '-1Gi' is not a non-negative Kubernetes quantity"),
    ('{"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}', "requests.memory (2Gi) is more than limits"),
    ('{"requests": {"example.com/fpga": 1}}', "requests may only name cpu, memory, ephemeral-storage"),
    ('{"limits": {"gpu": 1}}', "limits: 'gpu' is not a resource name"),
    ('{"limits": {"example.com/fpga": "0.5"}}', "must be a whole number"),
    ('{"limits": {"nvidia.com/gpu": 1}}', "GPUs per turn pod come from UNICORE_DEFAULT_GPUS"),
    ('{"cpu": "1"}', "unknown keys ['cpu'] (only requests and limits)"),
    ('{"requests": {"cpu": 0.5}}', "0.5 is not a Kubernetes quantity"),
    ("cpu=1", "not valid JSON"),
])
def test_bad_agent_resources_are_refused_in_one_line(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"REDIS_URL": "redis://r", "UNICORE_AGENT_RESOURCES": value})
    text = str(caught.value)
    assert text.startswith("invalid operator settings: UNICORE_AGENT_RESOURCES: ") and "\n" not in text
    assert message in text, text


def test_agent_rbac_provisioning_is_on_by_default_only_cluster_wide() -> None:
    assert load_settings({"REDIS_URL": "redis://r"}).provisions_agent_rbac is True
    assert load_settings({"REDIS_URL": "redis://r", "UNICORE_NAMESPACES": "a"}).provisions_agent_rbac is False
    explicit = {"REDIS_URL": "redis://r", "UNICORE_NAMESPACES": "a", "UNICORE_PROVISION_AGENT_RBAC": "true"}
    assert load_settings(explicit).provisions_agent_rbac is True
    off = {"REDIS_URL": "redis://r", "UNICORE_PROVISION_AGENT_RBAC": "false"}
    assert load_settings(off).provisions_agent_rbac is False
    blank = {"REDIS_URL": "redis://r", "UNICORE_PROVISION_AGENT_RBAC": ""}  # the chart's "unset"
    assert load_settings(blank).provisions_agent_rbac is True
    with pytest.raises(ConfigError, match="UNICORE_PROVISION_AGENT_RBAC: Input should be a valid boolean"):
        load_settings({"REDIS_URL": "redis://r", "UNICORE_PROVISION_AGENT_RBAC": "maybe"})


def test_bad_service_account_annotations_are_refused() -> None:
    with pytest.raises(ConfigError, match=re.escape("invalid annotation keys ['bad key']")):
        load_settings({"REDIS_URL": "redis://r", "UNICORE_AGENT_SERVICE_ACCOUNT_ANNOTATIONS": '{"bad key": "x"}'})
    with pytest.raises(ConfigError, match="must be a JSON object of string values"):
        load_settings({"REDIS_URL": "redis://r", "UNICORE_AGENT_SERVICE_ACCOUNT_ANNOTATIONS": '{"a": 1}'})
    for bad in ('{"team-a": 65}', '{"team-a": "2"}', '{"Team_A": 1}', '[1]', '{"team-a": true}'):
        with pytest.raises(ConfigError, match="UNICORE_WARM_POOLS"):
            load_settings({"REDIS_URL": "redis://r", "UNICORE_WARM_POOLS": bad})
