"""Turn pods fit for a real cluster (issue 12 #3), on the local control plane.

- Every turn pod has CPU and memory requests and a memory limit (Burstable, not BestEffort): the operator's defaults,
  with an AgentTask's spec.resources winning key by key; a bad quantity is refused by the API server in one line.
- In a namespace without the agent ServiceAccount, the operator creates it with its Role and RoleBinding and the
  task's turns run (a child spawned with that Role included). The operator runs with the chart's own cluster-wide
  RBAC (a ServiceAccount token, not the admin's client certificate), so RBAC's escalation check is real: it may
  create exactly the agent Role and nothing more powerful. Without those rights the task's status and an Event say
  what is missing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.cluster.operator_harness import (
    AGENT_SA,
    OperatorProcess,
    Tasks,
    kubectl,
    operator_factory,
    task_events,
)
from tests.cluster.test_chart_render import render
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

SETTLE = 120.0
DEFAULTS = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
TREE_SCRIPT = {"default": "Done.", "tasks": {
    "tree": [{"tool_use": [{"name": "spawn_task", "input": {"name": "a", "prompt": "Report."}}]},
             {"text": "Waiting for a."}, {"echo": True}],
    "tree-a": [{"text": "A reporting."}],
}}


def job_resources(job: Any) -> dict[str, dict[str, str]]:
    found = job.spec.template.spec.containers[0].resources
    return {name: dict(value) for name, value in (("requests", found.requests), ("limits", found.limits)) if value}


def idle(tasks: Tasks, *names: str) -> bool:
    phases = tasks.all_phases()
    return all(phases.get(name) == "Idle" for name in names)


# ------------------------------------------------------------------------------------------- requests and limits
@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env={"UNICORE_DEFAULT_GPUS": "0"}) as start:
        yield start


def test_turn_pods_get_the_default_requests_and_limits_and_a_tasks_own_win(
    start_operator: Callable[..., Any], tasks: Tasks,
) -> None:
    start_operator()
    tasks.create("plain", {"prompt": "hi", "model": "scripted", "script": {"default": "ok"}})
    tasks.create("sized", {"prompt": "hi", "model": "scripted", "script": {"default": "ok"},
                           "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": 1, "memory": "512Mi"}}})
    wait_for(lambda: idle(tasks, "plain", "sized"), timeout=SETTLE, what=f"both Idle ({tasks.all_phases()})")
    jobs = {job.metadata.labels["unicore.dev/task"]: job for job in tasks.jobs()}
    assert job_resources(jobs["plain"]) == DEFAULTS
    assert job_resources(jobs["sized"]) == {"requests": {"cpu": "250m", "memory": "256Mi"},
                                            "limits": {"cpu": "1", "memory": "512Mi"}}
    pods = tasks.pods()
    assert len(pods) == 2 and {pod.status.qos_class for pod in pods} == {"Burstable"}  # not BestEffort any more


@pytest.mark.parametrize(("resources", "fragment"), [
    ({"limits": {"memory": "1GB"}},
     'spec.resources.limits[memory]: Invalid value: "1GB": must be a non-negative Kubernetes quantity'),
    ({"requests": {"cpu": "-100m"}},
     'spec.resources.requests[cpu]: Invalid value: "-100m": must be a non-negative Kubernetes quantity'),
    ({"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}},
     "spec.resources.requests may not exceed spec.resources.limits of the same resource"),
    ({"requests": {"nvidia.com/gpu": 1}}, "spec.resources.requests may only name cpu, memory and ephemeral-storage"),
    ({"limits": {"nvidia.com/gpu": "0.5"}}, "extended resources (such as nvidia.com/gpu) must be whole numbers"),
    ({"limits": {"gpu": 1}}, "spec.resources.limits keys must be cpu, memory, ephemeral-storage, hugepages-<size>"),
])
def test_bad_resources_are_refused_by_the_api_server_in_one_line(
    crd: Any, tasks: Tasks, resources: dict[str, Any], fragment: str,
) -> None:
    with pytest.raises(ApiException) as caught:
        tasks.create("bad", {"prompt": "hi", "model": "scripted", "resources": resources})
    assert caught.value.status == 422
    message = json.loads(caught.value.body)["message"]
    assert fragment in message and "\n" not in message, message
    assert tasks.get("bad") is None


# ------------------------------------------------------------------------- the agent ServiceAccount, provisioned
def chart_operator_kubeconfig(crd: Any, namespace: str, tmp_path: Path, *values: str) -> Path:
    """The chart's cluster-wide operator RBAC (``values`` added) for ServiceAccount unicore-operator in ``namespace``,
    and a kubeconfig with a token of it. The cluster-scoped objects are named after ``namespace``."""
    objs = render("--set", "rbac.clusterWide=true", "--set", "rbac.userRoles=false", *values, namespace=namespace)
    wanted = [obj for obj in objs if obj["kind"] in ("ClusterRole", "ClusterRoleBinding")
              or (obj["kind"] == "ServiceAccount" and obj["metadata"]["name"] == "unicore-operator")]
    assert all(namespace in obj["metadata"]["name"] for obj in wanted if obj["kind"].startswith("Cluster"))
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": wanted})
    kubectl(crd.kubeconfig, "apply", "-f", "-", input_text=manifest)
    token = kubectl(crd.kubeconfig, "create", "token", "unicore-operator", "-n", namespace,
                    "--duration", "3600s").stdout.strip()
    admin = yaml.safe_load(Path(crd.kubeconfig).read_text())
    from unicore_devcluster.kubeconfig import write_kubeconfig

    return write_kubeconfig(tmp_path / "operator.kubeconfig", server=admin["clusters"][0]["cluster"]["server"],
                            ca_file=Path(admin["clusters"][0]["cluster"]["certificate-authority"]),
                            user=f"system:serviceaccount:{namespace}:unicore-operator", token=token)


@pytest.fixture
def chart_rbac_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path
                        ) -> Iterator[Callable[..., tuple[OperatorProcess, Path]]]:
    """``start(*chart values)``: the operator for the test namespace, run as the chart's operator ServiceAccount with
    the chart's cluster-wide RBAC, with agent RBAC provisioning on; the namespace has no agent ServiceAccount."""
    started: list[OperatorProcess] = []

    def start(*values: str) -> tuple[OperatorProcess, Path]:
        kubeconfig = chart_operator_kubeconfig(crd, k8s_namespace, tmp_path, *values)
        proc = OperatorProcess(kubeconfig, redis_url, k8s_namespace, tmp_path / "operator.log",
                               UNICORE_DEFAULT_GPUS="0", UNICORE_PROVISION_AGENT_RBAC="true").start()
        started.append(proc)
        return proc, kubeconfig

    try:
        yield start
    finally:
        for proc in started:
            proc.stop()
            print(f"--- operator log ({proc.log_path}):\n{proc.log(200)}")
        if started:
            for kind in ("clusterrolebinding", "clusterrole"):
                kubectl(crd.kubeconfig, "delete", kind, f"unicore-operator-{k8s_namespace}",
                        f"unicore-operator-{k8s_namespace}-cluster-read", "--ignore-not-found", check=False)


def agent_objects(tasks: Tasks) -> dict[str, Any]:
    """The agent ServiceAccount, Role and RoleBinding of the tasks' namespace that exist, by kind."""
    rbac = client.RbacAuthorizationV1Api(tasks.core.api_client)
    found: dict[str, Any] = {}
    for kind, read in (("ServiceAccount", tasks.core.read_namespaced_service_account),
                       ("Role", rbac.read_namespaced_role), ("RoleBinding", rbac.read_namespaced_role_binding)):
        try:
            found[kind] = read(AGENT_SA, tasks.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return found


def status_of(call: Callable[[], Any]) -> int:
    try:
        call()
    except ApiException as exc:
        return int(exc.status)
    return 200


def test_a_namespace_without_the_agent_service_account_gets_one_and_its_tree_runs(
    chart_rbac_operator: Callable[..., tuple[OperatorProcess, Path]], tasks: Tasks, k8s_namespace: str,
) -> None:
    assert agent_objects(tasks) == {}
    _, kubeconfig = chart_rbac_operator()
    # the operator's rights are minimal: RBAC lets it create the agent Role, never a Role or RoleBinding that
    # grants more than it holds (no escalate, no bind)
    as_operator = config.new_client_from_config(config_file=str(kubeconfig))
    rbac = client.RbacAuthorizationV1Api(as_operator)
    meta = {"name": "probe", "namespace": k8s_namespace}
    secrets = {"metadata": meta, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}
    admin_binding = {"metadata": meta, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                   "name": "admin"},
                     "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": k8s_namespace}]}
    assert status_of(lambda: rbac.create_namespaced_role(k8s_namespace, secrets, dry_run="All")) == 403
    assert status_of(lambda: rbac.create_namespaced_role_binding(k8s_namespace, admin_binding, dry_run="All")) == 403
    as_operator.close()

    tasks.create("tree", {"prompt": "Ask a, then report.", "model": "scripted", "script": TREE_SCRIPT})
    wait_for(lambda: idle(tasks, "tree", "tree-a") and tasks.get("tree")["status"]["turns"] >= 2,  # type: ignore[index]
             timeout=SETTLE, what=f"tree and tree-a Idle ({tasks.all_phases()})")
    found = agent_objects(tasks)
    assert set(found) == {"ServiceAccount", "Role", "RoleBinding"}
    for obj in found.values():
        assert obj.metadata.labels["app.kubernetes.io/managed-by"] == "unicore-operator"
    assert [(r.api_groups, r.resources, r.verbs) for r in found["Role"].rules] == [
        (["unicore.dev"], ["agenttasks"], ["create", "get", "list", "watch"])]
    assert {pod.spec.service_account_name for pod in tasks.pods()} == {AGENT_SA}
    assert not task_events(tasks, "tree", "AgentRBACMissing")


def test_without_the_rights_to_provision_the_status_and_an_event_say_what_is_missing(
    chart_rbac_operator: Callable[..., tuple[OperatorProcess, Path]], tasks: Tasks, k8s_namespace: str,
) -> None:
    chart_rbac_operator("--set", "rbac.provisionAgent=false")  # the ClusterRole without the rights to create them
    tasks.create("nosa", {"prompt": "hi", "model": "scripted", "script": {"default": "ok"}})

    def says_why() -> dict[str, Any] | None:
        status = (tasks.get("nosa") or {}).get("status") or {}
        return status if 'serviceaccount "unicore-agent" not found' in str(status.get("message")) else None

    status = wait_for(says_why, timeout=60, what="the status to say the ServiceAccount is missing")
    assert status["phase"] == "Pending", status
    [event] = wait_for(lambda: task_events(tasks, "nosa", "AgentRBACMissing"), timeout=30, what="the Warning Event")
    assert event.type == "Warning"
    assert event.message.startswith(f"could not create Role unicore-agent in namespace {k8s_namespace} for turn "
                                    f"pods (403: "), event.message
    assert 'cannot create resource "roles"' in event.message, event.message
    assert agent_objects(tasks) == {}  # nothing half made
