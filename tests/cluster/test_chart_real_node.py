"""`helm install` and `helm uninstall` of helm/unicore on the real node (issue 12 #4): the chart as a platform team
installs it, with the images built here (no registry: imported into the node's containerd, pullPolicy Never), into a
namespace that enforces Pod Security "restricted".

- the release runs: the operator Deployment's pod and the bundled Redis StatefulSet's pod are Ready (their probes
  pass in the kubelet), Redis keeps its AOF on a PersistentVolumeClaim of the local-path StorageClass, the
  operator serves at once (no minute of Kopf retrying a namespace list it may not make), the example tree
  (examples/demo.yaml) runs to Ready as real containers on the real node, `kubectl logs` shows a turn's output and
  `kubectl agenttask logs` the transcript (through the chart's APIService to the operator pod);
- after the tree is deleted and the release uninstalled, nothing of it is left but what is kept on purpose: the CRD
  and Redis' claim (with its volume), and the Secret with the namespace's Redis identity that the operator (not
  Helm) wrote (docs/install.md, "Upgrade and uninstall").
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster.chart_release import OPERATOR, REDIS, installed_release, kubectl, pod_of, ready
from tests.cluster.operator_harness import REPO, VENV_BIN, Tasks
from tests.cluster.test_chart_render import helm
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

TREE = ("demo", "demo-a", "demo-b", "demo-c")
# What stays in the namespace after the tree is deleted and the release uninstalled (besides Events): Kubernetes'
# own objects, Redis' claim (StatefulSet claims are never deleted with their StatefulSet), and the Secret the operator
# wrote with the namespace's Redis identity.
KEPT = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default"),
        ("PersistentVolumeClaim", "data-unicore-redis-0"), ("Secret", "unicore-redis-agent")}

CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "MutatingWebhookConfiguration", "PriorityClass",
                  "CustomResourceDefinition", "StorageClass", "PersistentVolume", "Namespace"}


@pytest.fixture(scope="module")
def release(real_node_session: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The chart installed into a fresh namespace enforcing "restricted" (helm --wait: operator and Redis Ready)."""
    with installed_release(real_node_session, tmp_path_factory) as installed:
        yield installed


def test_the_release_runs_the_operator_redis_and_the_example_tree_as_real_containers(
    release: dict[str, Any],
) -> None:
    cluster, namespace = release["cluster"], release["namespace"]
    core = client.CoreV1Api(release["api"])
    node = cluster.real_node.name
    output = release["install"].stdout + release["install"].stderr
    assert "PodSecurity" not in output and "would violate" not in output, output

    # the operator and Redis: Ready (their readiness probes pass in the kubelet), never restarted (liveness)
    operator, redis_pod = pod_of(core, namespace, OPERATOR), pod_of(core, namespace, REDIS)
    for pod in (operator, redis_pod):
        assert ready(pod) and pod.spec.node_name == node, pod.metadata.name
        (status,) = pod.status.container_statuses
        assert status.container_id.startswith("containerd://") and status.restart_count == 0
        assert status.image in {image.ref for image in release["images"].values()}
        container = pod.spec.containers[0]
        assert container.readiness_probe and container.liveness_probe and container.image_pull_policy == "Never"
    # Redis: AOF on, on its claim of the default (local-path) class; the kubelet's exec reaches it
    claim = core.read_namespaced_persistent_volume_claim("data-unicore-redis-0", namespace)
    assert claim.status.phase == "Bound" and claim.spec.storage_class_name == "local-path"
    appendonly = kubectl(cluster, "exec", "-n", namespace, "unicore-redis-0", "--",
                         "redis-cli", "config", "get", "appendonly").stdout.split()
    assert appendonly == ["appendonly", "yes"], appendonly
    volume = core.read_persistent_volume(claim.spec.volume_name)
    assert (Path(volume.spec.host_path.path) / "appendonlydir").is_dir()

    # Pod Security "restricted" is enforced here: a pod that would run as root with privilege escalation is refused
    loose = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "loose"}, "spec": {"containers": [
        {"name": "c", "image": "unicore-agent:0.1.0", "securityContext": {"privileged": True}}]}}
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, loose, dry_run="All")
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted' in json.loads(refused.value.body)["message"], refused.value.body

    # the example tree, as a user applies it
    kubectl(cluster, "apply", "-n", namespace, "-f", str(REPO / "examples" / "demo.yaml"))
    tasks = Tasks(release["api"], namespace)

    def tree_ready() -> bool:
        phases = tasks.all_phases()
        return set(phases) == set(TREE) and set(phases.values()) == {"Idle"}

    wait_for(tree_ready, timeout=180, interval=0.5, what=f"the demo tree Idle (have {tasks.all_phases()})")
    kubectl(cluster, "wait", "--for=condition=Ready", "agenttask/demo", "-n", namespace, "--timeout=60s")
    root = tasks.get("demo")
    assert root is not None and root["status"]["lastResponse"].startswith("Report: here is what my three researchers")
    turn_pods = [p for p in core.list_namespaced_pod(namespace).items if p.metadata.labels.get("job-name")]
    assert len(turn_pods) == sum(t["status"]["turns"] for t in tasks.all()) >= 5
    for pod in turn_pods:  # real containers of the agent image, on the real node, as the chart's ServiceAccount
        assert pod.status.phase == "Succeeded" and pod.spec.node_name == node, pod.metadata.name
        assert pod.status.container_statuses[0].container_id.startswith("containerd://")
        assert pod.spec.service_account_name == "unicore-agent"
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    wide = kubectl(cluster, "get", "pods", "-n", namespace, "-o", "wide").stdout
    assert all(node in line for line in wide.splitlines()[1:]), wide
    logs = kubectl(cluster, "logs", "-n", namespace, "job/demo-t1").stdout
    assert "turn 1 (new, 1 new messages)" in logs and "spawned child AgentTask" in logs, logs
    # the transcript through the chart's APIService to the operator pod's task API (kubectl agenttask, the plugin)
    plugin = subprocess.run([str(cluster.bin_dir / "kubectl"), "agenttask", "logs", "demo", "-n", namespace],
                            env={**os.environ, **cluster.env(), "PATH": f"{VENV_BIN}:{os.environ['PATH']}"},
                            capture_output=True, text=True, timeout=60, check=False)
    assert plugin.returncode == 0 and "Researcher A: water boils at 100 C" in plugin.stdout, plugin.stderr
    # the operator served at once: Kopf never retried a namespace list its namespaced RBAC forbids
    operator_log = kubectl(cluster, "logs", "-n", namespace, "deploy/unicore-operator").stdout
    assert 'cannot list resource "namespaces"' not in operator_log and "Traceback" not in operator_log, operator_log


def test_the_agents_example_runs_with_a_real_mcp_server_pod(release: dict[str, Any]) -> None:
    """examples/agents/ as a user applies it (issue 17): the Agents, the MCP time server (a Deployment of the
    unicore-mcp-time image, its Service and MCPServer) and an AgentTask with agentRef; the writer spawns the
    researcher by agent name through the chart's webhook, and the researcher's turn pod calls the server pod's tool."""
    cluster, namespace = release["cluster"], release["namespace"]
    api = release["api"]
    tasks = Tasks(api, namespace)
    examples = REPO / "examples" / "agents"
    kubectl(cluster, "apply", "-n", namespace, "-f", str(examples))
    try:
        def tree_idle() -> bool:
            phases = tasks.all_phases()
            root = tasks.get("report") or {}
            return (phases.get("report") == phases.get("report-facts") == "Idle"
                    and (root.get("status") or {}).get("turns", 0) >= 2)

        wait_for(tree_idle, timeout=300, interval=0.5, what=f"report and report-facts Idle ({tasks.all_phases()})")
        child = tasks.get("report-facts") or {}
        assert child["spec"]["agentRef"] == {"name": "researcher"}
        transcript = subprocess.run(
            [str(cluster.bin_dir / "kubectl"), "agenttask", "logs", "report-facts", "-n", namespace, "--tools"],
            env={**os.environ, **cluster.env(), "PATH": f"{VENV_BIN}:{os.environ['PATH']}"},
            capture_output=True, text=True, timeout=60, check=False)
        assert transcript.returncode == 0, transcript.stderr
        # the time server's answer (mcp-server-time's JSON), not an error: the pod reached the server pod
        [result] = [line for line in transcript.stdout.splitlines() if line.startswith("Tool result")]
        assert ", success): " in result and '"timezone": "Etc/UTC"' in transcript.stdout, transcript.stdout
        root = tasks.get("report") or {}
        assert root["status"]["lastResponse"] == "Report written to report.md.", root["status"]
        server = kubectl(cluster, "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/name=mcp-time",
                         "-o", "jsonpath={.items[0].status.containerStatuses[0].containerID}").stdout
        assert server.startswith("containerd://"), server
    finally:  # the uninstall test expects only the release's own leftovers
        kubectl(cluster, "delete", "-n", namespace, "-f", str(examples), "--wait=true", "--timeout=120s",
                check=False)


def namespaced_objects(cluster: Any, namespace: str) -> set[tuple[str, str]]:
    """(kind, name) of every object in the namespace, of every listable kind but Events."""
    kinds = kubectl(cluster, "api-resources", "--verbs=list", "--namespaced", "-o", "name").stdout.split()
    kinds = [k for k in kinds if k not in ("events", "events.events.k8s.io")]
    items = json.loads(kubectl(cluster, "get", ",".join(kinds), "-n", namespace, "-o", "json").stdout)["items"]
    return {(item["kind"], item["metadata"]["name"]) for item in items}


def test_uninstall_leaves_only_what_is_kept_on_purpose(release: dict[str, Any]) -> None:
    cluster, namespace, env = release["cluster"], release["namespace"], release["env"]
    api = release["api"]
    core = client.CoreV1Api(api)
    tasks = Tasks(api, namespace)
    # the tree first, while the operator still runs to remove its finalizers (and its Jobs go with it)
    kubectl(cluster, "delete", "agenttasks", "--all", "-n", namespace, "--wait=true", "--timeout=120s")
    helm("uninstall", "unicore", "--namespace", namespace, "--wait", "--timeout", "120s", env=env)
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, timeout=120, interval=0.5,
             what="every pod of the release gone")

    def gone(obj: dict[str, Any]) -> bool:
        group, _, _version = obj["apiVersion"].rpartition("/")
        where = [] if obj["kind"] in CLUSTER_SCOPED else ["-n", obj["metadata"].get("namespace") or namespace]
        proc = kubectl(cluster, "get", f"{obj['kind']}.{group}" if group else obj["kind"], obj["metadata"]["name"],
                       *where, "--ignore-not-found", "-o", "name", check=False)
        return proc.returncode == 0 and not proc.stdout.strip()

    left = [f"{o['kind']}/{o['metadata']['name']}" for o in release["objects"] if not gone(o)]
    assert not left, f"objects of the release left after helm uninstall: {left}"
    wait_for(lambda: namespaced_objects(cluster, namespace) <= KEPT, timeout=60, interval=0.5,
             what=f"only {sorted(KEPT)} left (have {sorted(namespaced_objects(cluster, namespace))})")
    assert namespaced_objects(cluster, namespace) == KEPT
    secret = core.read_namespaced_secret("unicore-redis-agent", namespace)
    assert secret.metadata.labels["app.kubernetes.io/managed-by"] == "unicore-operator"  # the operator's, not Helm's
    # kept on purpose: the CRD (and so any AgentTasks elsewhere), Redis' claim and its volume
    client.ApiextensionsV1Api(api).read_custom_resource_definition("agenttasks.unicore.dev")
    claim = core.read_namespaced_persistent_volume_claim("data-unicore-redis-0", namespace)
    assert claim.status.phase == "Bound" and core.read_persistent_volume(claim.spec.volume_name)
    assert not tasks.all()
