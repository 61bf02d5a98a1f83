"""The real node (unicore_devcluster.realnode): pods run as containerd containers under a real kubelet, reach the
API server and each other through kube-proxy's ClusterIP Services and cluster DNS, claims are provisioned by the
local-path provisioner, GPU Jobs schedule on it, and its tear-down leaves nothing behind on the host.

The session's real node (``real_node_session``: a control plane with the real node only, no fake nodes, no pod
runner); the stop test stops it and checks the host, and runs after every other test (marker stops_real_node), as
does the test of ``up`` and ``down`` with a node of their own. On a host that cannot run a real node (not root, no
cgroup v1, no containerd: node_host.unavailable_reason) the tests fail with the reason, or skip with
UNICORE_NO_CONTAINERS=1 (as tests/node).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from unicore_devcluster import node_host
from unicore_devcluster.binaries import find_bin_dir
from unicore_devcluster.cluster import DevCluster
from unicore_devcluster.node_config import BRIDGE, CGROUP_ROOT, LOCAL_PATH_PROVISIONER
from unicore_devcluster.node_teardown import pids_naming
from unicore_devcluster.procs import alive
from unicore_devcluster.realnode import NODE_NAME

from tests.waiting import wait_for as _wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]


def wait_for(predicate: Any, *, timeout: float, what: str) -> Any:
    return _wait_for(predicate, timeout=timeout, what=what, interval=0.25)


@pytest.fixture
def real(real_node_session: Any) -> Iterator[dict[str, Any]]:
    cluster = real_node_session.cluster()
    api = cluster.api_client()
    try:
        yield {"cluster": cluster, "api": api, "netns_before": real_node_session.netns_before,
               "data_dir": real_node_session.data_dir}
    finally:
        api.close()


@pytest.fixture
def ns(k8s_namespace: str) -> str:
    return k8s_namespace


def kubectl(cluster: DevCluster, *args: str) -> str:
    proc = subprocess.run(
        [str(cluster.bin_dir / "kubectl"), *args],
        env={**os.environ, **cluster.env()},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def busybox_pod(real: dict[str, Any], name: str, script: str, **spec: Any) -> dict[str, Any]:
    node = real["cluster"].real_node
    container = {
        "name": "main",
        "image": node.busybox_image,
        "imagePullPolicy": "Never",  # imported, never pulled: there is no registry
        "command": ["sh", "-c", script],
        **spec.pop("container", {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": spec.pop("labels", {})},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def wait_phase(core: Any, ns: str, name: str, phases: tuple[str, ...], timeout: float = 90) -> Any:
    def done() -> Any:
        pod = core.read_namespaced_pod(name, ns)
        return pod if pod.status.phase in phases else None

    return wait_for(done, timeout=timeout, what=f"pod {ns}/{name} in {phases}")


def logs(core: Any, ns: str, name: str) -> str:
    return str(core.read_namespaced_pod_log(name, ns))


def test_a_pod_runs_to_completion_as_a_containerd_container_on_the_real_node(real: dict[str, Any], ns: str) -> None:
    core = client.CoreV1Api(real["api"])
    core.create_namespaced_pod(ns, busybox_pod(real, "hello", "echo hello-from-a-container; id -u; hostname"))
    pod = wait_phase(core, ns, "hello", ("Succeeded", "Failed"))
    assert pod.status.phase == "Succeeded", logs(core, ns, "hello")
    wide = kubectl(real["cluster"], "get", "pod", "hello", "-n", ns, "-o", "wide")
    assert NODE_NAME in wide, wide
    (status,) = pod.status.container_statuses
    assert status.container_id.startswith("containerd://"), status.container_id
    assert status.state.terminated.exit_code == 0 and status.state.terminated.reason == "Completed"
    out = kubectl(real["cluster"], "logs", "hello", "-n", ns)  # through the API server and the kubelet
    assert out.splitlines() == ["hello-from-a-container", "0", "hello"], out
    assert pod.status.pod_ip.startswith("10.244.0."), pod.status.pod_ip


def test_pods_resolve_cluster_names_and_reach_cluster_ip_services(real: dict[str, Any], ns: str) -> None:
    core = client.CoreV1Api(real["api"])
    core.create_namespaced_pod(
        ns,
        busybox_pod(
            real,
            "web",
            "mkdir /tmp/www && echo ok-from-web > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www",
            labels={"app": "web"},
            container={"ports": [{"containerPort": 8080}]},
        ),
    )
    core.create_namespaced_service(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    wait_phase(core, ns, "web", ("Running",))
    service_ip = core.read_namespaced_service("web", ns).spec.cluster_ip
    # each check retried for up to 30 s inside the pod (kube-proxy applies a new Service within about a second)
    script = (
        'retry() { i=0; until "$@"; do i=$((i+1)); [ $i -ge 30 ] && return 1; sleep 1; done; }; '
        "set -e; cat /etc/resolv.conf; "
        "retry nslookup kubernetes.default.svc.cluster.local; "
        f"retry nslookup web.{ns}.svc.cluster.local; "
        # HTTP by hand: the static busybox's wget crashes (SIGSEGV) in these containers, its nc does not
        'get() { printf \'GET / HTTP/1.0\\r\\n\\r\\n\' | nc -w 3 "$1" 80 > "$2" && grep -q ok-from-web "$2"; }; '
        "retry get web /tmp/by-name; "
        f"retry get web.{ns}.svc.cluster.local /tmp/by-fqdn; "
        "cat /tmp/by-name /tmp/by-fqdn; "
        # the API server through the kubernetes Service (10.0.0.1:443 -> node IP); busybox's nc has no -z
        "retry sh -c 'echo | nc -w 3 kubernetes.default.svc.cluster.local 443'; "
        "echo ALL-OK"
    )
    core.create_namespaced_pod(ns, busybox_pod(real, "client", script))
    pod = wait_phase(core, ns, "client", ("Succeeded", "Failed"), timeout=150)
    out = logs(core, ns, "client")
    assert pod.status.phase == "Succeeded", out
    assert "nameserver 10.0.0.10" in out and f"search {ns}.svc.cluster.local" in out
    assert "Address: 10.0.0.1" in out  # kubernetes.default
    assert f"Address: {service_ip}" in out  # web.<ns>
    assert out.count("ok-from-web") == 2 and out.rstrip().endswith("ALL-OK"), out


def test_a_claim_is_provisioned_by_local_path_and_deleted_with_its_claim(real: dict[str, Any], ns: str) -> None:
    core = client.CoreV1Api(real["api"])
    core.create_namespaced_persistent_volume_claim(
        ns,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
        },
    )
    claim = core.read_namespaced_persistent_volume_claim("data", ns)
    assert claim.spec.storage_class_name == "local-path"  # the default class
    assert claim.status.phase == "Pending"  # WaitForFirstConsumer: nothing until a pod uses it
    core.create_namespaced_pod(
        ns,
        busybox_pod(
            real,
            "writer",
            "echo kept > /data/file && id -u",
            container={
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "securityContext": {"runAsUser": 1000, "runAsNonRoot": True, "allowPrivilegeEscalation": False},
            },
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        ),
    )
    pod = wait_phase(core, ns, "writer", ("Succeeded", "Failed"))
    assert pod.status.phase == "Succeeded", logs(core, ns, "writer")
    claim = core.read_namespaced_persistent_volume_claim("data", ns)
    assert claim.status.phase == "Bound"
    volume = core.read_persistent_volume(claim.spec.volume_name)
    assert volume.metadata.annotations["pv.kubernetes.io/provisioned-by"] == LOCAL_PATH_PROVISIONER
    folder = Path(volume.spec.host_path.path)
    assert (folder / "file").read_text() == "kept\n"
    assert folder.is_relative_to(real["data_dir"])

    core.delete_namespaced_pod("writer", ns)
    wait_for(lambda: not core.list_namespaced_pod(ns).items, timeout=60, what="writer pod gone")
    core.delete_namespaced_persistent_volume_claim("data", ns)

    def volume_gone() -> bool:
        return not any(v.metadata.name == volume.metadata.name for v in core.list_persistent_volume().items)

    wait_for(volume_gone, timeout=60, what="the released volume deleted")
    assert not folder.exists()


def test_a_gpu_job_schedules_on_the_real_node(real: dict[str, Any], ns: str) -> None:
    core = client.CoreV1Api(real["api"])
    node = core.read_node(NODE_NAME)
    assert node.status.allocatable["nvidia.com/gpu"] == "4"
    pod = busybox_pod(real, "gpu", "echo gpu-turn")
    container = pod["spec"]["containers"][0]
    container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "gpu"},
        "spec": {"backoffLimit": 0, "template": {"spec": pod["spec"]}},
    }
    client.BatchV1Api(real["api"]).create_namespaced_job(ns, job)

    def complete() -> bool:
        status = client.BatchV1Api(real["api"]).read_namespaced_job("gpu", ns).status
        return bool(status.succeeded)

    wait_for(complete, timeout=90, what="the GPU Job complete")
    (pod_obj,) = core.list_namespaced_pod(ns, label_selector="job-name=gpu").items
    assert pod_obj.spec.node_name == NODE_NAME


CLI = [sys.executable, "-m", "unicore_devcluster.cli"]


def cli_up(data_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "up", "--detach", "--data-dir", str(data_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def cli_down(data_dir: Path, env: dict[str, str]) -> None:
    subprocess.run([*CLI, "down", "--data-dir", str(data_dir)], env=env, capture_output=True, timeout=180, check=False)


def test_up_says_why_it_falls_back_to_the_pod_runner(real: dict[str, Any]) -> None:
    """While this module's real node runs, a second one cannot (one kubelet per host): `up` says so in one line and
    runs the fake nodes and the pod runner."""
    data_dir = Path(tempfile.mkdtemp(prefix="unicore-devcluster-fallback-"))
    env = {**os.environ, **real["cluster"].env()}
    try:
        up = cli_up(data_dir, env)
        assert up.returncode == 0, up.stderr
        (line,) = [ln for ln in up.stderr.splitlines() if ln.startswith("devcluster: ")]
        assert line.startswith("devcluster: no real node (a kubelet already runs on this host"), line
        assert line.endswith("; pods run on the pod runner (fake GPU/CPU nodes)"), line
        state = json.loads((data_dir / "devcluster.json").read_text())
        assert state["real_node"] is None and set(state["nodes"]) == {"unicore-gpu-0", "unicore-cpu-0"}
    finally:
        cli_down(data_dir, env)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.mark.stops_real_node
def test_stop_leaves_nothing_behind(real: dict[str, Any], real_node_session: Any) -> None:
    cluster: DevCluster = real["cluster"]
    node = cluster.real_node
    assert node is not None
    state_dir = node.state_dir
    pids = cluster.pids()
    assert {"node:kubelet", "node:kube-proxy", "node:coredns"} <= set(pids), pids
    assert node_host.link_exists(BRIDGE)
    assert node_host.own_chains(("KUBE-SERVICES",))  # kube-proxy's
    assert node_host.own_chains((node_host.ISOLATION_CHAIN,))  # pods' traffic kept on the machine

    real_node_session.stop()

    left = {name: pid for name, pid in pids.items() if alive(pid)}
    assert not left, f"processes left: {left}"
    assert_host_clean(state_dir, real["data_dir"], real["netns_before"])


def assert_host_clean(state_dir: Path, data_dir: Path, netns_before: set[str]) -> None:
    strays = pids_naming(f"{state_dir}/")
    assert not strays, f"processes naming {state_dir}: {strays}"
    assert not node_host.link_exists(BRIDGE)
    assert node_host.own_chains() == {}
    assert node_host.mounts_under(data_dir) == []
    assert not [h / CGROUP_ROOT for h in node_host.cgroup_hierarchies() if (h / CGROUP_ROOT).exists()]
    assert node_host.netns_names() <= netns_before


@pytest.mark.stops_real_node
def test_up_runs_the_real_node_and_down_cleans_up_after_a_killed_supervisor(real_node_session: Any) -> None:
    """`up` (auto) on this host starts the real node and says so; a pod runs; the supervisor is SIGKILLed (its
    children die with it, the container and its shim do not); `down` removes the container, its network namespace,
    the rules, mounts and cgroups."""
    real_node_session.stop()  # one real node per host: the session's gives way (stopped by the previous test)
    data_dir = Path(tempfile.mkdtemp(prefix="unicore-devcluster-real-"))
    bin_dir = find_bin_dir()
    env = {**os.environ, "KUBEBUILDER_ASSETS": str(bin_dir)}
    netns_before = node_host.netns_names()
    try:
        up = cli_up(data_dir, env)
        assert up.returncode == 0, up.stderr
        (line,) = {ln for ln in up.stderr.splitlines() if ln.startswith("devcluster: ")}
        assert line.startswith(f"devcluster: real node {NODE_NAME} (containerd + kubelet) on "), line
        state = json.loads((data_dir / "devcluster.json").read_text())
        assert state["nodes"] == [] and state["real_node"]["name"] == NODE_NAME
        state_dir = Path(state["real_node"]["state_dir"])
        kubeconfig = state["kubeconfig"]
        kubectl_ = [str(bin_dir / "kubectl"), "--kubeconfig", kubeconfig]
        nodes = json.loads(subprocess.check_output([*kubectl_, "get", "nodes", "-o", "json"], text=True))
        assert [n["metadata"]["name"] for n in nodes["items"]] == [NODE_NAME]
        image = (Path(state["real_node"]["bin_dir"]) / "images" / "busybox.name").read_text().strip()
        subprocess.run(
            [*kubectl_, "run", "idle", f"--image={image}", "--image-pull-policy=Never", "--restart=Never",
             "--", "sleep", "3600"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

        def running() -> bool:
            phase = subprocess.check_output(
                [*kubectl_, "get", "pod", "idle", "-o", "jsonpath={.status.phase}"], text=True
            )
            return phase == "Running"

        wait_for(running, timeout=90, what="pod idle Running")
        assert node_host.netns_names() - netns_before  # the pod's network namespace

        os.kill(state["supervisor"]["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(state["supervisor"]["pid"]), timeout=10, what="supervisor gone")
        # the container outlived everything (containerd's shim is not a child of the supervisor)
        assert pids_naming(f"{state_dir}/")
    finally:
        cli_down(data_dir, env)
    assert_host_clean(state_dir, data_dir, netns_before)
    shutil.rmtree(data_dir, ignore_errors=True)
