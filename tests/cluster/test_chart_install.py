"""The chart on the real local control plane: server-side dry run, a real `helm install` into namespaces that
enforce Pod Security "restricted", least-privilege RBAC checked with real tokens, and the operator run from
the chart's own Deployment (command, env, ServiceAccount token) driving a scripted AgentTask tree to the end.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from tests.cluster.test_chart_render import CHART, helm, render
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
RESTRICTED = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
HOLD = '{"unicore.dev/chart-test": "hold"}'  # a nodeSelector no node has: the pod is admitted but never runs

DRY_RUN_VARIANTS: dict[str, list[str]] = {
    "default": [],
    "external-redis": [
        "--set",
        "redis.enabled=false",
        "--set",
        "redis.external.url=redis://r.example:6379/0",
    ],
    "no-gpu": ["--set", "agent.gpu.count=0"],
    "cluster-wide": ["--set", "rbac.clusterWide=true"],
    "service-monitor": ["--set", "metrics.serviceMonitor.enabled=true"],
    "network-policy": ["--set", "networkPolicy.enabled=true"],
}


def make_namespace(api: client.ApiClient, labels: dict[str, str] | None = None) -> str:
    name = f"chart-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels or {})))
    wait_for(lambda: core.read_namespaced_service_account("default", name), timeout=30, what="default SA")
    return name


def helm_env(control_plane: Any, tmp: Path) -> dict[str, str]:
    return {
        "KUBECONFIG": str(control_plane.kubeconfig),
        "HELM_CACHE_HOME": str(tmp / "helm-cache"),
        "HELM_CONFIG_HOME": str(tmp / "helm-config"),
        "HELM_DATA_HOME": str(tmp / "helm-data"),
    }


def token_client(control_plane: Any, namespace: str, service_account: str) -> client.ApiClient:
    """An ApiClient authenticated as the ServiceAccount with a TokenRequest token (what a pod would get)."""
    admin = control_plane.api_client()
    try:
        token = (
            client.CoreV1Api(admin)
            .create_namespaced_service_account_token(
                service_account,
                namespace,
                client.AuthenticationV1TokenRequest(
                    spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
                ),
            )
            .status.token
        )
    finally:
        admin.close()
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(control_plane.kubeconfig), client_configuration=cfg)
    cfg.cert_file = cfg.key_file = None
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


def uninstall(namespace: str, api: client.ApiClient, env: dict[str, str]) -> None:
    """Tear down a release installed by a test: helm uninstall, then the namespace."""
    helm("uninstall", "unicore", "--namespace", namespace, "--wait", "--timeout", "60s", env=env, check=False)
    client.CoreV1Api(api).delete_namespace(namespace)
    api.close()


def status_of(call: Any) -> int:
    try:
        call()
    except ApiException as exc:
        return int(exc.status)
    return 200


# ------------------------------------------------------------------------------------------- dry run
@pytest.mark.parametrize("variant", sorted(DRY_RUN_VARIANTS))
def test_rendered_manifests_pass_a_server_side_dry_run(control_plane: Any, variant: str) -> None:
    api = control_plane.api_client()
    try:
        namespace = make_namespace(api, RESTRICTED)
        dyn = DynamicClient(api)
        objs = render(*DRY_RUN_VARIANTS[variant], namespace=namespace)
        objs.append(yaml.safe_load((CHART / "crds" / "agenttask.yaml").read_text()))
        not_served = []
        for obj in objs:
            try:
                resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            except ResourceNotFoundError:
                not_served.append(obj["kind"])
                continue
            resource.server_side_apply(
                body=obj,
                name=obj["metadata"]["name"],
                namespace=obj["metadata"].get("namespace"),
                field_manager="unicore-chart-test",
                force_conflicts=True,
                dry_run="All",
            )
        # the Prometheus Operator's CRDs are not installed on our control plane
        assert set(not_served) <= {"ServiceMonitor"}, not_served
        assert ("ServiceMonitor" in not_served) == (variant == "service-monitor")
        client.CoreV1Api(api).delete_namespace(namespace)
    finally:
        api.close()


# ------------------------------------------------------------------------------------ a real install
@pytest.fixture(scope="module")
def installed(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`helm install` with the default values into a namespace enforcing "restricted". The operator pod is
    held off the nodes (this install has no reachable Redis); the end-to-end test below runs it for real."""
    tmp = tmp_path_factory.mktemp("helm")
    api = control_plane.api_client()
    namespace = make_namespace(api, RESTRICTED)
    env = helm_env(control_plane, tmp)
    proc = helm(
        "install",
        "unicore",
        str(CHART),
        "--namespace",
        namespace,
        "--set-json",
        f"operator.nodeSelector={HOLD}",
        env=env,
    )
    try:
        yield {"namespace": namespace, "api": api, "install": proc, "env": env}
    finally:
        uninstall(namespace, api, env)


def test_install_is_accepted_by_pod_security_restricted(installed: dict[str, Any]) -> None:
    namespace, api = installed["namespace"], installed["api"]
    output = installed["install"].stdout + installed["install"].stderr
    assert "PodSecurity" not in output and "would violate" not in output, output
    core = client.CoreV1Api(api)

    def pods() -> dict[str, Any]:
        found = core.list_namespaced_pod(namespace).items
        return (
            {p.metadata.labels.get("app.kubernetes.io/component"): p for p in found}
            if len(found) >= 2
            else {}
        )

    # the ReplicaSet and StatefulSet controllers created the pods: admission (Pod Security) accepted them
    created = wait_for(pods, timeout=60, what="operator and redis pods created")
    assert set(created) == {"operator", "redis"}
    events = core.list_namespaced_event(namespace).items
    failed = [e.message for e in events if e.reason in ("FailedCreate",) and "forbidden" in (e.message or "")]
    assert not failed, failed
    assert core.read_namespaced_secret("unicore-redis", namespace).data["redis-url"]


def test_servicemonitor_is_not_rendered_by_default(installed: dict[str, Any]) -> None:
    groups = [g.name for g in client.ApisApi(installed["api"]).get_api_versions().groups]
    assert "monitoring.coreos.com" not in groups  # the CRD is absent, and the default install still works
    manifest = helm(
        "get", "manifest", "unicore", "--namespace", installed["namespace"], env=installed["env"]
    ).stdout
    kinds = {doc["kind"] for doc in yaml.safe_load_all(manifest) if doc}
    assert "ServiceMonitor" not in kinds
    assert {"Deployment", "StatefulSet", "Service", "Role", "RoleBinding", "ServiceAccount"} <= kinds


def test_turn_pod_service_account_is_least_privilege(control_plane: Any, installed: dict[str, Any]) -> None:
    namespace = installed["namespace"]
    agent = token_client(control_plane, namespace, "unicore-agent")
    try:
        core, batch = client.CoreV1Api(agent), client.BatchV1Api(agent)
        custom = client.CustomObjectsApi(agent)
        group, version, plural = "unicore.dev", "v1alpha1", "agenttasks"
        # what turn pods need: create and read AgentTasks of their own namespace
        task = {
            "apiVersion": f"{group}/{version}",
            "kind": "AgentTask",
            "metadata": {"name": "probe"},
            "spec": {"prompt": "hi", "model": "scripted"},
        }
        review = client.AuthorizationV1Api(agent).create_self_subject_access_review({"spec": {"resourceAttributes": {
            "group": group, "resource": plural, "verb": "create", "namespace": namespace}}})
        assert review.status.allowed
        # ... but only children (spec.parentRef): the chart's admission policy refuses a root from them (the API
        # server starts enforcing a new ValidatingAdmissionPolicy once its policy informer has it: wait for that)
        def refusal() -> ApiException | None:
            try:
                custom.create_namespaced_custom_object(group, version, namespace, plural, task, dry_run="All")
            except ApiException as exc:
                return exc
            return None

        refused = wait_for(refusal, timeout=30, interval=0.5, what="the admission policy refusing a root")
        assert refused.status == 403
        assert "may create only child AgentTasks" in refused.body
        assert (
            status_of(lambda: custom.list_namespaced_custom_object(group, version, namespace, plural)) == 200
        )
        # and nothing more
        assert status_of(lambda: core.read_namespaced_secret("unicore-redis", namespace)) == 403
        assert status_of(lambda: core.list_namespaced_secret(namespace)) == 403
        assert (
            status_of(
                lambda: custom.delete_namespaced_custom_object(group, version, namespace, plural, "probe")
            )
            == 403
        )
        assert (
            status_of(
                lambda: custom.patch_namespaced_custom_object(
                    group, version, namespace, plural, "probe", {"spec": {"suspend": True}}
                )
            )
            == 403
        )
        assert (
            status_of(lambda: custom.list_namespaced_custom_object(group, version, "default", plural)) == 403
        )
        assert (
            status_of(
                lambda: custom.create_namespaced_custom_object(
                    group, version, "default", plural, task, dry_run="All"
                )
            )
            == 403
        )
        assert status_of(lambda: core.list_namespaced_pod("default")) == 403
        assert status_of(lambda: core.list_namespaced_pod(namespace)) == 403
        assert status_of(lambda: batch.list_namespaced_job(namespace)) == 403
        assert status_of(lambda: custom.list_cluster_custom_object(group, version, plural)) == 403
    finally:
        agent.close()


def test_operator_service_account_reads_no_secrets(control_plane: Any, installed: dict[str, Any]) -> None:
    namespace = installed["namespace"]
    operator = token_client(control_plane, namespace, "unicore-operator")
    try:
        core, batch = client.CoreV1Api(operator), client.BatchV1Api(operator)
        assert status_of(lambda: batch.list_namespaced_job(namespace)) == 200
        assert status_of(lambda: core.list_namespaced_pod(namespace)) == 200
        assert status_of(lambda: core.read_namespaced_secret("unicore-redis", namespace)) == 403
        assert status_of(lambda: core.list_namespaced_secret(namespace)) == 403
        # namespaced by default: nothing in other namespaces
        assert status_of(lambda: batch.list_namespaced_job("default")) == 403
        assert status_of(lambda: core.list_namespace()) == 403
    finally:
        operator.close()


# ------------------------------------------------------------------- the operator from the chart, end to end
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


TREE_SCRIPT = {
    "default": "Done.",
    "tasks": {
        "tree": [
            {
                "tool_use": [
                    {"name": "spawn_task", "input": {"name": "a", "prompt": "Report A."}},
                    {"name": "spawn_task", "input": {"name": "b", "prompt": "Report B."}},
                ]
            },
            {"text": "Waiting for a and b."},
            {"echo": True},
        ],
        "tree-a": [{"text": "A reporting."}],
        "tree-b": [{"text": "B reporting."}],
    },
}


def test_chart_operator_runs_a_scripted_tree_with_the_charts_rbac(
    control_plane: Any, redis_server: Any, tmp_path: Path
) -> None:
    """The devcluster's pod runner starts the chart's operator pod as a local process: the Deployment's
    command, its env (REDIS_URL from the chart's Secret) and a TokenRequest token
    of the chart's ServiceAccount."""
    api = control_plane.api_client()
    namespace = make_namespace(api, RESTRICTED)
    env = helm_env(control_plane, tmp_path)
    custom = client.CustomObjectsApi(api)
    group, version, plural = "unicore.dev", "v1alpha1", "agenttasks"
    try:
        helm(
            "install",
            "unicore",
            str(CHART),
            "--namespace",
            namespace,
            "--set",
            "redis.enabled=false",
            "--set",
            f"redis.external.url={redis_server.url}",
            "--set",
            "rbac.userRoles=false",  # cluster-scoped; another release may hold them
            # The pod runner runs the operator pod as a host process, which the API server cannot reach through the
            # Service's ClusterIP (no kube-proxy): the webhook stays off here (test_admission.py points the chart's
            # webhook at a host-process operator); the admission policy is on, and the children pass it.
            "--set",
            "admission.webhook.enabled=false",
            "--set",
            "taskApi.enabled=false",  # the same for the aggregated task API (test_task_api_tenancy.py serves it)
            "--set",
            "operator.resyncSeconds=2",
            "--set",
            "agent.turnRetryBackoffSeconds=1",
            "--set-json",
            f'operator.extraEnv=[{{"name":"UNICORE_HTTP_PORT","value":"{_free_port()}"}}]',
            env=env,
        )
        core = client.CoreV1Api(api)

        def operator_running() -> bool:
            pods = core.list_namespaced_pod(
                namespace, label_selector="app.kubernetes.io/component=operator"
            ).items
            return any(p.status.phase == "Running" for p in pods)

        wait_for(operator_running, timeout=90, interval=0.5, what="the chart's operator pod running")
        task = {
            "apiVersion": f"{group}/{version}",
            "kind": "AgentTask",
            "metadata": {"name": "tree"},
            "spec": {"prompt": "Ask a and b, then report.", "model": "scripted", "script": TREE_SCRIPT},
        }
        custom.create_namespaced_custom_object(group, version, namespace, plural, task)

        def settled() -> dict[str, str] | None:
            items = custom.list_namespaced_custom_object(group, version, namespace, plural)["items"]
            phases = {i["metadata"]["name"]: i.get("status", {}).get("phase") for i in items}
            done = len(phases) == 3 and all(p == "Idle" for p in phases.values())
            root = next((i for i in items if i["metadata"]["name"] == "tree"), {})
            return phases if done and root.get("status", {}).get("turns", 0) >= 2 else None

        try:
            phases = wait_for(
                settled, timeout=240, interval=1, what="the tree tree, tree-a, tree-b settled Idle"
            )
        except AssertionError:
            pods = core.list_namespaced_pod(
                namespace, label_selector="app.kubernetes.io/component=operator"
            ).items
            for pod in pods:
                print(
                    f"--- operator pod {pod.metadata.name} log:\n"
                    + control_plane.read_log(namespace, pod.metadata.name)
                )
            raise
        assert set(phases) == {"tree", "tree-a", "tree-b"}
        jobs = client.BatchV1Api(api).list_namespaced_job(namespace).items
        assert jobs and all(j.spec.template.spec.service_account_name == "unicore-agent" for j in jobs)
    finally:
        uninstall(namespace, api, env)
