"""`helm lint` and `helm template` of helm/unicore for the default values and a matrix of options.

Assertions are on the parsed objects, never on golden text. The helm binary comes from the control-plane
binary folder (hack/build-k8s.sh, KUBEBUILDER_ASSETS), so these tests carry the `cluster` marker; they start
no server.
Helpers here are shared with tests/cluster/test_chart_install.py.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "unicore"
KUBE_VERSION = "1.36.3"  # our helm is built without ldflags: its offline default (v1.20) is below kubeVersion

# name -> helm arguments; the matrix the issue asks for, plus the provider and NetworkPolicy options
MATRIX: dict[str, list[str]] = {
    "default": [],
    "external-redis": [
        "--set",
        "redis.enabled=false",
        "--set",
        "redis.external.url=redis://redis.example:6379/2",
        "--set",
        "redis.external.password=s3cret",
    ],
    "external-redis-secret": [
        "--set",
        "redis.enabled=false",
        "--set",
        "redis.external.existingSecret=my-redis",
    ],
    "no-gpu": ["--set", "agent.gpu.count=0", "--set", "agent.gpu.toleration=false"],
    "triggers": ["--set", "triggers.enabled=true", "--set", "triggers.tls=true", "--set", "networkPolicy.enabled=true"],
    "cluster-wide": ["--set", "rbac.clusterWide=true", "--set", "agent.extraNamespaces={team-a,team-b}"],
    "service-monitor": [
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.labels.release=prom",
    ],
    "bedrock-irsa": [
        "--set",
        "provider.aws.region=us-west-2",
        "--set",
        "provider.aws.irsaRoleArn=arn:aws:iam::123456789012:role/unicore-agent",
    ],
    "provider-secret": ["--set", "provider.existingSecret=llm-creds"],
    "network-policy": [
        "--set-json", 'networkPolicy.apiServerFrom=[{"ipBlock":{"cidr":"10.0.0.0/24"}}]',
        "--set-json", 'networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"team":"obs"}}}]',
    ],
    "no-admission-no-network-policy": ["--set", "admission.policy.enabled=false", "--set",
                                       "admission.webhook.enabled=false", "--set", "networkPolicy.enabled=false"],
    "workspace-claim": [
        "--set",
        "agent.workspace.claimName=unicore-workspace",
        "--set",
        "agent.workspace.create.enabled=true",
        "--set",
        "agent.workspace.create.size=50Gi",
    ],
}


def helm_bin() -> Path:
    from unicore_devcluster.binaries import find_bin_dir

    path = find_bin_dir() / "helm"
    if not path.exists():
        pytest.fail(f"helm not found in {path.parent} (hack/build-k8s.sh installs it)")
    return path


def helm(
    *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    import os

    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run([str(helm_bin()), *args], capture_output=True, text=True, timeout=300, env=full_env)
    if check:
        assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def render(*args: str, namespace: str = "uc", release: str = "uc") -> list[dict[str, Any]]:
    out = helm(
        "template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION, *args
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(
    objs: list[dict[str, Any]], kind: str, name: str | None = None, namespace: str | None = None
) -> list[dict]:
    return [
        o
        for o in objs
        if o["kind"] == kind
        and (name is None or o["metadata"]["name"] == name)
        and (namespace is None or o["metadata"].get("namespace") == namespace)
    ]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None, namespace: str | None = None) -> dict:
    found = find(objs, kind, name, namespace)
    assert len(found) == 1, (
        f"expected one {kind} {name or ''} in {namespace or 'any namespace'}, got {len(found)}"
    )
    return found[0]


def env_of(deployment: dict[str, Any]) -> dict[str, Any]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def secret_data(secret: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def pod_templates(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (o["metadata"]["name"], o["spec"]["template"]["spec"])
        for o in objs
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")
    ]


def assert_restricted(name: str, pod: dict[str, Any]) -> None:
    """The Pod Security "restricted" rules that a pod template controls."""
    psc = pod.get("securityContext", {})
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), name
    for vol in pod.get("volumes", []):
        allowed = {
            "name",
            "emptyDir",
            "configMap",
            "secret",
            "projected",
            "persistentVolumeClaim",
            "downwardAPI",
            "ephemeral",
            "csi",
        }
        assert set(vol) <= allowed, f"{name}: volume type {set(vol) - allowed} not allowed by restricted"
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc = c.get("securityContext", {})
        assert sc.get("allowPrivilegeEscalation") is False, f"{name}/{c['name']}"
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], f"{name}/{c['name']}"
        assert not sc.get("capabilities", {}).get("add"), f"{name}/{c['name']}"
        assert not sc.get("privileged"), f"{name}/{c['name']}"
        assert (sc.get("runAsNonRoot", psc.get("runAsNonRoot"))) is True, f"{name}/{c['name']}"
        assert sc.get("runAsUser", psc.get("runAsUser", 1)) != 0, f"{name}/{c['name']}"
        seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
        assert seccomp in ("RuntimeDefault", "Localhost"), f"{name}/{c['name']}"
        assert not c.get("ports") or all("hostPort" not in p for p in c["ports"]), f"{name}/{c['name']}"
        image = c["image"]
        assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), (
            f"{name}: image {image} not pinned"
        )


def rules_of(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{o['kind']}/{o['metadata']['name']}", r)
        for o in objs
        if o["kind"] in ("Role", "ClusterRole")
        for r in o.get("rules", [])
    ]


# The operator's only rights on Secrets (redis.identities): create the namespace's Secret, read and rewrite that one.
IDENTITY_SECRET_RULES = [
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["unicore-redis-agent"], "verbs": ["get", "update"]},
]
# ... and with triggers.enabled: read the one Secret name of the AgentTriggers' HMAC keys
TRIGGER_SECRET_RULE = {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["unicore-triggers"],
                       "verbs": ["get"]}


# --------------------------------------------------------------------------------------------------- lint
@pytest.mark.parametrize("variant", sorted(MATRIX))
def test_helm_lint(variant: str) -> None:
    proc = helm(
        "lint", str(CHART), "--strict", "--namespace", "uc", "--kube-version", KUBE_VERSION, *MATRIX[variant]
    )
    assert "0 chart(s) failed" in proc.stdout


# -------------------------------------------------------------------------------------- every variant
@pytest.mark.parametrize("variant", sorted(MATRIX))
def test_every_variant_is_restricted_and_least_privilege(variant: str) -> None:
    objs = render(*MATRIX[variant])
    for name, pod in pod_templates(objs):
        assert_restricted(name, pod)
    assert_metadata_values_are_strings(objs)
    for where, rule in rules_of(objs):
        assert "*" not in rule.get("verbs", []) and "*" not in rule.get("resources", []), where
        if "secrets" in rule.get("resources", []):  # only redis.identities: create, and read/rewrite one name
            allowed = IDENTITY_SECRET_RULES + ([TRIGGER_SECRET_RULE] if variant == "triggers" else [])
            assert rule in allowed, f"{where} grants access to Secrets: {rule}"
        # the task API is an aggregated API now: nobody needs the operator's service proxy
        assert not any(r.startswith("services/proxy") for r in rule.get("resources", [])), where
    deployment = one(objs, "Deployment", "unicore-operator")
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    container = spec["template"]["spec"]["containers"][0]
    assert container["command"] == ["unicore-operator"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    off = variant == "no-admission-no-network-policy"
    http = {"name": "http", "containerPort": 8080, "protocol": "TCP"}
    webhook = {"name": "webhook", "containerPort": 8443, "protocol": "TCP"}
    task_api = {"name": "task-api", "containerPort": 9443, "protocol": "TCP"}
    triggers = [{"name": "triggers", "containerPort": 8090, "protocol": "TCP"}] if variant == "triggers" else []
    assert container["ports"] == ([http, task_api] if off else [http, webhook, *triggers, task_api])
    assert container["resources"]["requests"] and container["resources"]["limits"]
    names = [e["name"] for e in container["env"]]
    assert len(names) == len(set(names)), "duplicate env names"
    service = one(objs, "Service", "unicore-operator")
    assert service["spec"]["ports"][0]["name"] == "http" and service["spec"]["ports"][0]["port"] == 8080
    assert service["spec"]["ports"][-1] == {"name": "task-api", "port": 9443, "targetPort": "task-api",
                                            "protocol": "TCP"}
    assert one(objs, "APIService", "v1alpha1.tasks.unicore.dev")["spec"]["service"]["port"] == 9443
    if off:
        assert len(service["spec"]["ports"]) == 2 and not find(objs, "NetworkPolicy")
        assert not find(objs, "ValidatingAdmissionPolicy") and not find(objs, "ValidatingWebhookConfiguration")
    else:  # admission control and NetworkPolicies are on unless turned off
        assert service["spec"]["ports"][1] == {"name": "webhook", "port": 443, "targetPort": "webhook",
                                               "protocol": "TCP"}
        assert find(objs, "ValidatingAdmissionPolicy") and find(objs, "ValidatingWebhookConfiguration")
        assert {"unicore-operator", "unicore-agent"} <= {o["metadata"]["name"] for o in find(objs, "NetworkPolicy")}
    cluster_scoped = ("ClusterRole", "ClusterRoleBinding", "APIService", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration")
    assert all(o["metadata"].get("namespace") for o in objs if o["kind"] not in cluster_scoped)
    # cluster-scoped objects carry the release namespace, so two releases never collide
    assert all(o["metadata"]["name"].endswith("-uc") for o in objs
               if o["kind"] in cluster_scoped[3:])  # (one APIService per cluster: taskApi.enabled)


def assert_metadata_values_are_strings(objs: list[dict[str, Any]]) -> None:
    """The API server refuses a label or annotation that YAML reads as a number or a boolean."""

    def metadatas(obj: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
        found = []
        if isinstance(obj, dict):
            if isinstance(obj.get("metadata"), dict):
                found.append((where, obj["metadata"]))
            for key, value in obj.items():
                found += metadatas(value, f"{where}.{key}")
        elif isinstance(obj, list):
            for i, value in enumerate(obj):
                found += metadatas(value, f"{where}[{i}]")
        return found

    for obj in objs:
        for where, meta in metadatas(obj, f"{obj['kind']}/{obj['metadata']['name']}"):
            for field in ("labels", "annotations"):
                for key, value in (meta.get(field) or {}).items():
                    assert isinstance(value, str), f"{where}.{field}[{key}] renders as {type(value).__name__}"


def digits_only_checksum_url(tmp_path: Path) -> str:
    """A Redis URL whose checksum/config is digits only with this chart as it is: the chart's own hash input (the URL,
    the provider and operator env, as templates/operator-deployment.yaml joins them) read through a copy of the
    chart with one more template, then ``?n=<N>`` searched until the SHA-256 starts with 16 digits (1 in 1800)."""
    import hashlib

    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-hash-input.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hash-input}\ndata:\n'
        '  provider: {{ include "unicore.providerEnv" . | b64enc | quote }}\n'
        '  operator: {{ include "unicore.operatorEnv" . | b64enc | quote }}\n')
    out = helm("template", "uc", str(chart), "--namespace", "uc", "--kube-version", KUBE_VERSION, "--set",
               "redis.enabled=false", "--set", "redis.external.url=redis://r.example:6379/0",
               "--show-only", "templates/zz-hash-input.yaml").stdout
    data = yaml.safe_load(out)["data"]
    provider, operator_env = (base64.b64decode(data[key]).decode() for key in ("provider", "operator"))
    for n in range(1_000_000):
        url = f"redis://r.example:6379/0?n={n}"
        if hashlib.sha256(f"{url}|{provider}|{operator_env}".encode()).hexdigest()[:16].isdigit():
            return url
    raise AssertionError("no URL with a digits-only checksum among a million")


def test_a_config_checksum_of_digits_only_still_renders_as_a_string(tmp_path: Path) -> None:
    # a URL whose checksum is digits only; unquoted, YAML read it as a number and the API server refused the
    # Deployment (CI: the bundled Redis' random password did the same about once in 800 installs)
    objs = render("--set", "redis.enabled=false", "--set", f"redis.external.url={digits_only_checksum_url(tmp_path)}")
    annotations = one(objs, "Deployment", "unicore-operator")["spec"]["template"]["metadata"]["annotations"]
    checksum = annotations["checksum/config"]
    assert isinstance(checksum, str), f"checksum/config renders as {type(checksum).__name__}: {checksum!r}"
    assert checksum.isdigit(), f"the search above computes the chart's checksum no more ({checksum})"
    assert_metadata_values_are_strings(objs)


# ---------------------------------------------------------------------------------------------- defaults
def test_defaults() -> None:
    objs = render(namespace="agents")
    env = env_of(one(objs, "Deployment", "unicore-operator"))
    assert env["UNICORE_NAMESPACES"] == "agents"
    assert env["REDIS_URL"] == {"secretKeyRef": {"name": "unicore-redis", "key": "redis-url"}}
    assert env["UNICORE_AGENT_REDIS_SECRET"] == "unicore-redis"
    assert env["UNICORE_AGENT_SERVICE_ACCOUNT"] == "unicore-agent"
    assert env["UNICORE_AGENT_IMAGE"] == "unicore-agent:0.1.0"
    assert env["UNICORE_AGENT_ENV_SECRET"] == ""
    assert (env["UNICORE_DEFAULT_GPUS"], env["UNICORE_GPU_RESOURCE"], env["UNICORE_GPU_TOLERATION"]) == (
        "1",
        "nvidia.com/gpu",
        "true",
    )
    assert env["UNICORE_HTTP_PORT"] == "8080"
    for var in (
        "UNICORE_JOB_TTL_SECONDS",
        "UNICORE_MAX_TURN_RETRIES",
        "UNICORE_HEARTBEAT_TIMEOUT_SECONDS",
        "UNICORE_PENDING_TIMEOUT_SECONDS",
        "UNICORE_ADMISSION_TIMEOUT_SECONDS",
        "UNICORE_MAX_REAPS",
        "UNICORE_WATCHDOG_INTERVAL_SECONDS",
        "UNICORE_RESYNC_SECONDS",
        "UNICORE_REDIS_RETENTION_SECONDS",
    ):
        assert env[var].isdigit(), var

    # the operator's settings model accepts exactly what the chart renders
    from unicore_operator.settings import load_settings

    plain = {k: v for k, v in env.items() if isinstance(v, str)}
    settings = load_settings({**plain, "REDIS_URL": "redis://x:6379/0"})
    assert settings.namespaces == ("agents",) and settings.agent_env_secret is None
    assert env["UNICORE_WORKSPACE_CLAIM"] == "" and settings.workspace_claim is None  # emptyDir workspaces
    # turn pods: requests and a memory limit; no provisioning of agent RBAC (the chart creates it in its namespace)
    assert json.loads(env["UNICORE_AGENT_RESOURCES"]) == settings.agent_resources == {
        "requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    assert env["UNICORE_PROVISION_AGENT_RBAC"] == "false" and not settings.provisions_agent_rbac
    assert env["UNICORE_AGENT_SERVICE_ACCOUNT_ANNOTATIONS"] == "{}"

    # bundled Redis: AOF, password from the Secret, PVC, restricted uid 999
    sts = one(objs, "StatefulSet", "unicore-redis")
    pod = sts["spec"]["template"]["spec"]
    redis = pod["containers"][0]
    assert "--appendonly yes" in redis["args"][0] and "requirepass ${REDIS_PASSWORD}" in redis["args"][0]
    assert pod["securityContext"]["runAsUser"] == 999 and pod["automountServiceAccountToken"] is False
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    data = secret_data(one(objs, "Secret", "unicore-redis", "agents"))
    assert len(data["redis-password"]) == 32
    assert data["redis-url"] == f"redis://:{data['redis-password']}@unicore-redis.agents.svc:6379/0"

    # RBAC: namespaced operator Role; turn pods only create/get/list/watch agenttasks
    role = one(objs, "Role", "unicore-operator", "agents")
    assert {r["resources"][0] for r in role["rules"]} >= {
        "agenttasks",
        "agenttasks/status",
        "jobs",
        "pods",
        "events",
    }
    assert not provisioning_rules(role)
    # AgentSchedules and AgentTriggers create tasks, and schedules delete those beyond their history
    assert [r for r in role["rules"] if r["resources"] == ["agenttasks"]] == [
        {"apiGroups": ["unicore.dev"], "resources": ["agenttasks"],
         "verbs": ["get", "list", "watch", "patch", "update", "create", "delete"]}]
    assert not find(objs, "ClusterRole", "unicore-operator-agents")
    agent = one(objs, "Role", "unicore-agent", "agents")
    assert agent["rules"] == [
        {
            "apiGroups": ["unicore.dev"],
            "resources": ["agenttasks"],
            "verbs": ["create", "get", "list", "watch"],
        }
    ]
    binding = one(objs, "RoleBinding", "unicore-agent", "agents")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "unicore-agent", "namespace": "agents"}]
    read = one(objs, "ClusterRole", "unicore-operator-agents-cluster-read")
    assert [r["resources"] for r in read["rules"]] == [["customresourcedefinitions"]]
    assert read["rules"][0]["verbs"] == ["get", "list", "watch"]

    # user roles
    editor = one(objs, "ClusterRole", "unicore-agenttask-editor")
    assert editor["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    viewer = one(objs, "ClusterRole", "unicore-agenttask-viewer")
    assert viewer["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert set(viewer["rules"][0]["verbs"]) == {"get", "list", "watch"}
    # reader and messenger: ClusterRoles to bind per namespace (test_chart_task_api.py checks what they grant)
    for role in ("unicore-agenttask-messenger", "unicore-agenttask-reader"):
        assert one(objs, "ClusterRole", role) and not find(objs, "Role", role)

    # optional objects are off by default; dashboards, NetworkPolicies and admission control are on
    assert not find(objs, "ServiceMonitor")
    assert {o["metadata"]["name"] for o in find(objs, "NetworkPolicy")} == {
        "unicore-operator", "unicore-agent", "unicore-redis"}
    assert env["UNICORE_WEBHOOK_PORT"] == "8443" and settings.webhook_port == 8443
    assert env["UNICORE_WEBHOOK_CLIENT_AUTH"] == "apiserver" and settings.webhook_client_auth == "apiserver"
    assert not find(objs, "PersistentVolumeClaim")
    dashboards = find(objs, "ConfigMap")
    assert dashboards and all(c["metadata"]["labels"]["grafana_dashboard"] == "1" for c in dashboards)
    files = {p.name for p in (CHART / "dashboards").glob("*.json")}
    assert {k for c in dashboards for k in c["data"]} == files
    for c in dashboards:
        for text in c["data"].values():
            json.loads(text)


@pytest.mark.parametrize(("args", "reader"), [
    ((), True),
    (("--set", "taskApi.enabled=false"), True),  # the webhook alone still reads the request-header CA
    (("--set", "taskApi.enabled=false", "--set", "admission.webhook.clientAuth=none"), False),
    (("--set", "taskApi.enabled=false", "--set", "admission.webhook.enabled=false"), False),
])
def test_the_operator_reads_the_request_header_ca_for_the_task_api_and_the_webhook(args: tuple[str, ...],
                                                                                     reader: bool) -> None:
    objs = render(*args)
    bindings = [o for o in find(objs, "RoleBinding")
                if o["roleRef"]["name"] == "extension-apiserver-authentication-reader"]
    assert [(b["metadata"]["namespace"], b["metadata"]["name"]) for b in bindings] == (
        [("kube-system", "unicore-operator-uc-auth-reader")] if reader else [])
    env = env_of(one(objs, "Deployment", "unicore-operator"))
    assert env["UNICORE_WEBHOOK_CLIENT_AUTH"] == ("none" if "admission.webhook.clientAuth=none" in args
                                                  else "apiserver")


def test_generated_password_is_stable_within_one_render() -> None:
    objs = render()
    url = secret_data(one(objs, "Secret", "unicore-redis"))["redis-url"]
    pw = secret_data(one(objs, "Secret", "unicore-redis"))["redis-password"]
    assert f":{pw}@" in url


# ------------------------------------------------------------------------------------------------ matrix
def test_external_redis() -> None:
    objs = render(*MATRIX["external-redis"])
    assert not find(objs, "StatefulSet") and not find(objs, "Service", "unicore-redis")
    assert (
        secret_data(one(objs, "Secret", "unicore-redis"))["redis-url"]
        == "redis://:s3cret@redis.example:6379/2"
    )
    objs = render(*MATRIX["external-redis-secret"])
    assert not find(objs, "Secret", "unicore-redis")
    env = env_of(one(objs, "Deployment", "unicore-operator"))
    assert env["REDIS_URL"] == {"secretKeyRef": {"name": "my-redis", "key": "redis-url"}}
    assert env["UNICORE_AGENT_REDIS_SECRET"] == "my-redis"


def test_external_redis_needs_a_url() -> None:
    proc = helm(
        "template",
        "uc",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "redis.enabled=false",
        check=False,
    )
    assert proc.returncode != 0


def test_no_gpu() -> None:
    env = env_of(one(render(*MATRIX["no-gpu"]), "Deployment", "unicore-operator"))
    assert (env["UNICORE_DEFAULT_GPUS"], env["UNICORE_GPU_TOLERATION"]) == ("0", "false")


def test_cluster_wide() -> None:
    objs = render(*MATRIX["cluster-wide"], namespace="unicore-system")
    env = env_of(one(objs, "Deployment", "unicore-operator"))
    assert env["UNICORE_NAMESPACES"] == ""
    assert not find(objs, "Role", "unicore-operator")
    role = one(objs, "ClusterRole", "unicore-operator-unicore-system")
    assert any("jobs" in r["resources"] for r in role["rules"])
    binding = one(objs, "ClusterRoleBinding", "unicore-operator-unicore-system")
    assert binding["subjects"][0]["namespace"] == "unicore-system"
    read = one(objs, "ClusterRole", "unicore-operator-unicore-system-cluster-read")
    assert ["namespaces"] in [r["resources"] for r in read["rules"]]
    for ns in ("unicore-system", "team-a", "team-b"):
        one(objs, "ServiceAccount", "unicore-agent", ns)
        one(objs, "Role", "unicore-agent", ns)
        one(objs, "RoleBinding", "unicore-agent", ns)
    # the admin URL stays in the release namespace (redis.identities, on with the bundled Redis): turn pods in team-a
    # and team-b get their namespace's own user from the operator's Secret unicore-redis-agent
    assert "redis-password" in secret_data(one(objs, "Secret", "unicore-redis", "unicore-system"))
    assert not find(objs, "Secret", "unicore-redis", "team-a") and not find(objs, "Secret", "unicore-redis", "team-b")
    assert [r for r in role["rules"] if "secrets" in r["resources"]] == IDENTITY_SECRET_RULES


def test_redis_identities_are_on_with_the_bundled_redis_and_off_with_an_external_one_unless_asked() -> None:
    from unicore_operator.settings import load_settings

    def identities(*args: str) -> tuple[bool, list[dict[str, Any]], list[str]]:
        objs = render(*MATRIX["cluster-wide"], *args, namespace="unicore-system")
        env = env_of(one(objs, "Deployment", "unicore-operator"))
        settings = load_settings({**{k: v for k, v in env.items() if isinstance(v, str)}, "REDIS_URL": "redis://x"})
        assert env["UNICORE_REDIS_IDENTITY_SECRET"] == settings.redis_identity_secret == "unicore-redis-agent"
        rules = [r for r in one(objs, "ClusterRole", "unicore-operator-unicore-system")["rules"]
                 if "secrets" in r["resources"]]
        admin_urls = sorted(o["metadata"]["namespace"] for o in find(objs, "Secret", "unicore-redis"))
        assert env["UNICORE_REDIS_IDENTITIES"] == str(settings.redis_identities).lower()
        return settings.redis_identities, rules, admin_urls

    assert identities() == (True, IDENTITY_SECRET_RULES, ["unicore-system"])
    assert identities("--set", "redis.identities.resyncSeconds=7")[0]
    everywhere = ["team-a", "team-b", "unicore-system"]
    assert identities("--set", "redis.identities.enabled=false") == (False, [], everywhere)
    external = ["--set", "redis.enabled=false", "--set", "redis.external.url=redis://r.example:6379/0"]
    assert identities(*external) == (False, [], everywhere)
    assert identities(*external, "--set", "redis.identities.enabled=true") == (
        True, IDENTITY_SECRET_RULES, ["unicore-system"])
    # namespaced: the operator's Role in the release namespace gets the same two rules
    role = one(render(namespace="agents"), "Role", "unicore-operator", "agents")
    assert [r for r in role["rules"] if "secrets" in r["resources"]] == IDENTITY_SECRET_RULES


def provisioning_rules(role: dict[str, Any]) -> list[dict[str, Any]]:
    """The rules that let the operator provision the agent ServiceAccount, Role and RoleBinding (its right to
    create agenttasks, which the agent Role grants, it holds anyway: schedules and triggers create tasks)."""
    return [r for r in role["rules"] if {"serviceaccounts", "roles", "rolebindings"} & set(r["resources"])]


def test_cluster_wide_the_operator_provisions_agent_rbac_in_new_namespaces() -> None:
    from unicore_operator.agent_rbac import build_role_binding_spec, build_role_spec
    from unicore_operator.settings import load_settings

    objs = render(*MATRIX["cluster-wide"], namespace="unicore-system")
    env = env_of(one(objs, "Deployment", "unicore-operator"))
    assert env["UNICORE_PROVISION_AGENT_RBAC"] == "true"
    plain = {k: v for k, v in env.items() if isinstance(v, str)}
    settings = load_settings({**plain, "REDIS_URL": "redis://x:6379/0"})
    assert settings.provisions_agent_rbac
    # what it creates is what the chart creates
    for ns in ("team-a", "team-b"):
        assert one(objs, "Role", "unicore-agent", ns)["rules"] == build_role_spec(ns, settings)["rules"]
        chart_binding = one(objs, "RoleBinding", "unicore-agent", ns)
        built = build_role_binding_spec(ns, settings)
        assert (chart_binding["roleRef"], chart_binding["subjects"]) == (built["roleRef"], built["subjects"])
    # and exactly these rights for it: create only, no escalate or bind (it holds the agent Role's permissions)
    role = one(objs, "ClusterRole", "unicore-operator-unicore-system")
    assert provisioning_rules(role) == [
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["create"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create"]},
    ]
    assert not [r for r in role["rules"] if {"escalate", "bind", "impersonate"} & set(r["verbs"])]
    # off: no such rights, and the setting says so
    off = render(*MATRIX["cluster-wide"], "--set", "rbac.provisionAgent=false", namespace="unicore-system")
    assert env_of(one(off, "Deployment", "unicore-operator"))["UNICORE_PROVISION_AGENT_RBAC"] == "false"
    assert not provisioning_rules(one(off, "ClusterRole", "unicore-operator-unicore-system"))


def test_agent_resources_reach_the_turn_jobs() -> None:
    from unicore_operator.job_builder import build_turn_job_spec
    from unicore_operator.settings import load_settings

    objs = render("--set", "agent.resources.limits.cpu=2", "--set", "agent.resources.requests.memory=512Mi",
                  "--set", "agent.gpu.count=0")
    env = env_of(one(objs, "Deployment", "unicore-operator"))
    plain = {k: v for k, v in env.items() if isinstance(v, str)}
    settings = load_settings({**plain, "REDIS_URL": "redis://x:6379/0"})
    task = {"metadata": {"name": "t", "namespace": "uc", "uid": "u"}, "spec": {"prompt": "hi"}}
    resources = build_turn_job_spec(task, 1, settings)["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    # a default dropped with null
    none = env_of(one(render("--set", "agent.resources.limits.memory=null"), "Deployment", "unicore-operator"))
    assert json.loads(none["UNICORE_AGENT_RESOURCES"])["limits"] == {}


def test_service_monitor() -> None:
    sm = one(render(*MATRIX["service-monitor"]), "ServiceMonitor", "unicore-operator")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]
    assert sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"


def test_bedrock_with_irsa() -> None:
    objs = render(*MATRIX["bedrock-irsa"])
    sa = one(objs, "ServiceAccount", "unicore-agent")
    assert (
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
        == "arn:aws:iam::123456789012:role/unicore-agent"
    )
    assert secret_data(one(objs, "Secret", "unicore-agent-env")) == {
        "AWS_REGION": "us-west-2",
        "AWS_DEFAULT_REGION": "us-west-2",
    }
    assert (
        env_of(one(objs, "Deployment", "unicore-operator"))["UNICORE_AGENT_ENV_SECRET"] == "unicore-agent-env"
    )
    # ServiceAccounts the operator provisions get the same annotations
    env = env_of(one(objs, "Deployment", "unicore-operator"))
    assert json.loads(env["UNICORE_AGENT_SERVICE_ACCOUNT_ANNOTATIONS"]) == sa["metadata"]["annotations"]


def test_provider_existing_secret() -> None:
    objs = render(*MATRIX["provider-secret"])
    assert not find(objs, "Secret", "unicore-agent-env")
    assert env_of(one(objs, "Deployment", "unicore-operator"))["UNICORE_AGENT_ENV_SECRET"] == "llm-creds"


def test_workspace_claim() -> None:
    objs = render(*MATRIX["workspace-claim"], namespace="agents")
    env = env_of(one(objs, "Deployment", "unicore-operator"))
    assert env["UNICORE_WORKSPACE_CLAIM"] == "unicore-workspace"
    from unicore_operator.settings import load_settings

    plain = {k: v for k, v in env.items() if isinstance(v, str)}
    assert load_settings({**plain, "REDIS_URL": "redis://x:6379/0"}).workspace_claim == "unicore-workspace"
    claim = one(objs, "PersistentVolumeClaim", "unicore-workspace", "agents")
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "50Gi"}}}
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # "" binds a pre-created PV (no class); null (the default) leaves the cluster's default class
    no_class = render(*MATRIX["workspace-claim"], "--set", "agent.workspace.create.storageClassName=")
    assert one(no_class, "PersistentVolumeClaim", "unicore-workspace")["spec"]["storageClassName"] == ""
    # a claim that exists already: only the operator setting
    existing = render("--set", "agent.workspace.claimName=team-files")
    assert env_of(one(existing, "Deployment", "unicore-operator"))["UNICORE_WORKSPACE_CLAIM"] == "team-files"
    assert not find(existing, "PersistentVolumeClaim")
    proc = helm("template", "uc", str(CHART), "--kube-version", KUBE_VERSION,
                "--set", "agent.workspace.create.enabled=true", check=False)
    assert proc.returncode != 0 and "needs agent.workspace.claimName" in proc.stderr, proc.stderr


def test_extra_env_overrides_a_setting_without_duplicates() -> None:
    objs = render("--set-json", 'operator.extraEnv=[{"name":"UNICORE_HTTP_PORT","value":"18080"}]')
    assert env_of(one(objs, "Deployment", "unicore-operator"))["UNICORE_HTTP_PORT"] == "18080"


@pytest.mark.parametrize(
    "bad",
    [
        ["--set", "operator.image.tag=latest"],
        ["--set", "rbac.clusterwide=true"],  # typo: the schema rejects unknown keys
        ["--set", "agent.gpu.count=-1"],
        ["--set", "redis.external.url=http://nope"],
        ["--set", "agent.workspace.claimName=Team_Files"],
        ["--set", "agent.resources.limits.memory=1GB"],
        ["--set", "agent.resources.requests.nvidia\\.com/gpu=1"],
        ["--set", "agent.resources.claims=x"],
        ["--set", "rbac.provisionAgent=yes"],
        ["--set", "redis.identities.enabled=maybe"],
        ["--set", "redis.identities.resyncSeconds=0"],
        ["--set", "admission.webhook.clientAuth=token"],
    ],
)
def test_schema_rejects_bad_values(bad: list[str]) -> None:
    proc = helm("template", "uc", str(CHART), "--kube-version", KUBE_VERSION, *bad, check=False)
    assert proc.returncode != 0 and (
        "values don't meet the specifications" in proc.stderr or "not allowed" in proc.stderr
    ), proc.stderr



class _RedisForProbes:
    """A real redis-server with a password on a unix socket in ``directory`` (also its data directory), and the
    environment in which the chart's probe commands reach it as they reach the bundled Redis in its pod: ``redis-cli``
    on PATH (a shim first on PATH adds ``-s <socket>`` to the real one) and ``REDISCLI_AUTH`` set."""

    PASSWORD = "probe-s3cret"

    def __init__(self, directory: Path, *extra: str) -> None:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if server is None or cli is None:
            pytest.fail("redis-server and redis-cli are needed (hack/bootstrap.sh installs them)")
        self.socket = directory / "redis.sock"
        shim = directory / "bin" / "redis-cli"
        shim.parent.mkdir()
        shim.write_text(f'#!/bin/sh\nexec {cli} -s {self.socket} "$@"\n')
        shim.chmod(0o755)
        self.env = {"PATH": f"{shim.parent}:{os.environ['PATH']}", "REDISCLI_AUTH": self.PASSWORD}
        self.proc = subprocess.Popen(
            [server, "--port", "0", "--unixsocket", str(self.socket), "--dir", str(directory), "--save", "",
             "--appendonly", "no", "--requirepass", self.PASSWORD, *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket), password=self.PASSWORD, decode_responses=True)

    def loading(self) -> bool:
        return bool(int(self.client().info("persistence")["loading"]))

    def probe(self, probe: dict[str, Any]) -> int:
        """Run a probe's exec command as the kubelet would: its exit code, within the probe's timeout."""
        return subprocess.run(probe["exec"]["command"], env=self.env, capture_output=True,
                              timeout=probe["timeoutSeconds"]).returncode

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def test_redis_readiness_fails_while_redis_loads_its_data_and_liveness_does_not(tmp_path: Path) -> None:
    """issue 11: both probes were `redis-cli ping`, which exits 0 on "LOADING Redis is loading the dataset in memory",
    so a Redis still reading its data was Ready. The rendered probes run against real redis-servers: one serving, one
    loading a dump (slowed down per key with Redis's test-only `key-load-delay`, and answering while it loads with
    `loading-process-events-interval-bytes`, so the load lasts seconds and is observed, not raced)."""
    container = one(render(), "StatefulSet", "unicore-redis")["spec"]["template"]["spec"]["containers"][0]
    liveness, readiness = container["livenessProbe"], container["readinessProbe"]
    assert liveness["exec"]["command"] == ["redis-cli", "ping"]  # cheap, and tolerates LOADING
    assert "REDISCLI_AUTH" in {e["name"] for e in container["env"]}

    (tmp_path / "serving").mkdir()
    serving = _RedisForProbes(tmp_path / "serving")
    try:
        wait_for(lambda: serving.client().ping(), timeout=20, what="the serving redis-server")
        pipe = serving.client().pipeline(transaction=False)
        for n in range(20_000):
            pipe.set(f"key:{n}", "x" * 100)
        pipe.execute()
        assert (serving.probe(liveness), serving.probe(readiness)) == (0, 0)
        serving.client().save()  # the dump the next server loads
    finally:
        serving.stop()

    (tmp_path / "loading").mkdir()
    shutil.copy(tmp_path / "serving" / "dump.rdb", tmp_path / "loading" / "dump.rdb")
    loading = _RedisForProbes(tmp_path / "loading", "--key-load-delay", "500",
                              "--loading-process-events-interval-bytes", "1024")
    try:
        wait_for(loading.loading, timeout=20, what="the redis-server to be loading its dump")
        assert loading.probe(liveness) == 0, "liveness must tolerate LOADING (a long load is not a dead Redis)"
        assert loading.probe(readiness) != 0, "readiness must fail while Redis answers LOADING"
        assert loading.loading(), "the load ended before the probes ran: the test proved nothing"
    finally:
        loading.stop()
