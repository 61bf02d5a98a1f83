"""The local control plane is real: scheduler, Job controller, GC, PodSecurity, RBAC, pod lifecycle, cleanup.

Everything runs against real etcd / kube-apiserver / kube-controller-manager / kube-scheduler processes
started by ``unicore_devcluster`` (fixture ``control_plane``). No fixed sleeps: every wait polls observable
state.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from unicore_devcluster import GPU_NODE, DevCluster
from unicore_devcluster.procs import alive

from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture
def api(control_plane: DevCluster) -> Iterator[Any]:
    api_client = control_plane.api_client()
    yield api_client
    api_client.close()


@pytest.fixture
def core(api: Any) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def python_pod(name: str, code: str, **spec: Any) -> dict[str, Any]:
    """A pod whose only container runs ``python -c code`` (``python`` resolves to the project venv)."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "unicore/agent:test",
        "command": ["python", "-c", textwrap.dedent(code)],
    }
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def pod_phase(core: client.CoreV1Api, ns: str, name: str) -> str:
    return str(core.read_namespaced_pod(name, ns).status.phase)


def gone(core: client.CoreV1Api, ns: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, ns)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_version_is_the_pinned_release(api: Any) -> None:
    info = client.VersionApi(api).get_code()
    assert info.git_version == "v1.36.3"
    assert (info.major, info.minor.rstrip("+")) == ("1", "36")


def test_gpu_job_runs_on_gpu_node_and_completes(
    control_plane: DevCluster, api: Any, core: client.CoreV1Api, k8s_namespace: str
) -> None:
    ns = k8s_namespace
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "gpu-job"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [GPU_TOLERATION],
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "containers": [
                        {
                            "name": "turn",
                            "image": "unicore/agent:test",
                            "command": ["python", "-c"],
                            "args": [
                                "import os; "
                                "print('turn ran in', os.environ['POD_NAME'], 'gpu', os.environ['G'])"
                            ],
                            "env": [
                                {"name": "G", "value": "one"},
                                {
                                    "name": "POD_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                                },
                            ],
                            "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}},
                        }
                    ],
                }
            },
        },
    }
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(ns, job)

    def complete() -> bool:
        conditions = batch.read_namespaced_job_status("gpu-job", ns).status.conditions or []
        failed = [c for c in conditions if c.type == "Failed" and c.status == "True"]
        assert not failed, f"job failed: {failed}"
        return any(c.type == "Complete" and c.status == "True" for c in conditions)

    wait_for(complete, timeout=60, what="the GPU Job to complete")
    pods = core.list_namespaced_pod(ns, label_selector="job-name=gpu-job").items
    assert len(pods) == 1
    pod = pods[0]
    assert pod.spec.node_name == GPU_NODE.name
    assert pod.status.phase == "Succeeded"
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0 and terminated.reason == "Completed"
    log = control_plane.read_log(ns, pod.metadata.name)
    assert f"turn ran in {pod.metadata.name} gpu one" in log
    # the same output through the API server (kubelet log endpoint), as `kubectl logs` reads it
    assert "turn ran in" in core.read_namespaced_pod_log(pod.metadata.name, ns)


def test_failed_command_reports_exit_code(core: client.CoreV1Api, k8s_namespace: str) -> None:
    ns = k8s_namespace
    core.create_namespaced_pod(ns, python_pod("fails", "import sys; sys.exit(3)"))
    wait_for(lambda: pod_phase(core, ns, "fails") == "Failed", timeout=30, what="pod Failed")
    state = core.read_namespaced_pod("fails", ns).status.container_statuses[0].state.terminated
    assert (state.exit_code, state.reason) == (3, "Error")


def test_too_many_gpus_stays_pending_with_failed_scheduling(
    core: client.CoreV1Api, k8s_namespace: str
) -> None:
    ns = k8s_namespace
    pod = python_pod(
        "greedy",
        "print('must not run')",
        tolerations=[GPU_TOLERATION],
        container={"resources": {"limits": {"nvidia.com/gpu": "5"}}},
    )
    core.create_namespaced_pod(ns, pod)

    def failed_scheduling() -> list[Any]:
        events = core.list_namespaced_event(ns, field_selector="involvedObject.name=greedy").items
        return [e for e in events if e.reason == "FailedScheduling"]

    events = wait_for(failed_scheduling, timeout=30, what="a FailedScheduling event")
    assert "nvidia.com/gpu" in events[0].message
    pod_now = core.read_namespaced_pod("greedy", ns)
    assert pod_now.status.phase == "Pending" and not pod_now.spec.node_name
    scheduled = next(c for c in pod_now.status.conditions if c.type == "PodScheduled")
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")


def test_deleting_owner_garbage_collects_dependents(core: client.CoreV1Api, k8s_namespace: str) -> None:
    ns = k8s_namespace
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}, "data": {"a": "1"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    for i in range(3):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"dep-{i}", "ownerReferences": [ref]}})
    core.delete_namespaced_config_map("owner", ns, propagation_policy="Background")

    def dependents_gone() -> bool:
        names = {cm.metadata.name for cm in core.list_namespaced_config_map(ns).items}
        return not any(name.startswith("dep-") for name in names)

    wait_for(dependents_gone, timeout=60, what="the garbage collector to delete the dependents")


def test_restricted_namespace_rejects_privileged_pod(
    core: client.CoreV1Api, control_plane: DevCluster
) -> None:
    name = f"restricted-{os.getpid()}-{time.monotonic_ns() % 100000}"
    core.create_namespace(
        {"metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    try:
        pod = python_pod("priv", "print(1)", container={"securityContext": {"privileged": True}})
        with pytest.raises(ApiException) as info:
            core.create_namespaced_pod(name, pod)
        assert info.value.status == 403
        assert "violates PodSecurity" in info.value.body and "privileged" in info.value.body
    finally:
        core.delete_namespace(name)


def test_pod_process_has_exactly_its_service_account_rbac(
    control_plane: DevCluster, api: Any, core: client.CoreV1Api, k8s_namespace: str
) -> None:
    ns = k8s_namespace
    core.create_namespaced_service_account(ns, {"metadata": {"name": "narrow"}})
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        ns,
        {
            "metadata": {"name": "read-configmaps"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "narrow-reads"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-configmaps"},
            "subjects": [{"kind": "ServiceAccount", "name": "narrow", "namespace": ns}],
        },
    )
    code = """
        import json, os
        from kubernetes import client, config
        from kubernetes.client.rest import ApiException
        config.load_kube_config()  # KUBECONFIG holds the pod's ServiceAccount token
        core = client.CoreV1Api()
        ns = os.environ["NS"]
        out = {"listed": len(core.list_namespaced_config_map(ns).items)}
        for what, call in (
            ("create", lambda: core.create_namespaced_config_map(ns, {"metadata": {"name": "x"}})),
            ("pods", lambda: core.list_namespaced_pod(ns)),
        ):
            try:
                call()
                out[what] = 200
            except ApiException as exc:
                out[what] = exc.status
        print("RESULT", json.dumps(out), flush=True)
    """
    pod = python_pod(
        "rbac-probe",
        code,
        serviceAccountName="narrow",
        container={"env": [{"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]},
    )
    core.create_namespaced_pod(ns, pod)
    wait_for(
        lambda: pod_phase(core, ns, "rbac-probe") in ("Succeeded", "Failed"), timeout=60, what="probe to end"
    )
    log = control_plane.read_log(ns, "rbac-probe")
    assert pod_phase(core, ns, "rbac-probe") == "Succeeded", log
    result = json.loads(log.split("RESULT", 1)[1])
    assert isinstance(result["listed"], int)  # the granted verb works...
    assert (result["create"], result["pods"]) == (403, 403)  # ...and nothing else does


SIGTERM_PROBE = """
    import os, signal, sys, time
    def on_term(signum, frame):
        print("got SIGTERM", flush=True)
        if os.environ["MODE"] == "graceful":
            sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print("pid", os.getpid(), flush=True)
    while True:
        time.sleep(0.1)
"""


@pytest.mark.parametrize("mode", ["graceful", "stubborn"])
def test_deleting_running_pod_sends_sigterm_then_sigkill(
    control_plane: DevCluster, core: client.CoreV1Api, k8s_namespace: str, mode: str
) -> None:
    ns = k8s_namespace
    grace = 4
    pod = python_pod(
        "sleeper",
        SIGTERM_PROBE,
        terminationGracePeriodSeconds=grace,
        container={"env": [{"name": "MODE", "value": mode}]},
    )
    core.create_namespaced_pod(ns, pod)
    wait_for(lambda: pod_phase(core, ns, "sleeper") == "Running", timeout=30, what="pod Running")
    started = wait_for(
        lambda: "pid " in control_plane.read_log(ns, "sleeper"), timeout=30, what="the pid line"
    )
    assert started
    pid = int(control_plane.read_log(ns, "sleeper").split("pid ", 1)[1].split()[0])
    assert alive(pid)

    t0 = time.monotonic()
    core.delete_namespaced_pod("sleeper", ns)
    wait_for(lambda: gone(core, ns, "sleeper"), timeout=grace + 30, what="the pod to be removed")
    elapsed = time.monotonic() - t0
    assert not alive(pid), "the pod's process outlived the pod"
    assert "got SIGTERM" in control_plane.read_log(ns, "sleeper")
    if mode == "stubborn":  # ignored SIGTERM: killed only after the grace period
        assert elapsed >= grace - 0.5
    else:
        assert elapsed < grace


def test_the_api_server_runs_the_aggregation_layer(core: client.CoreV1Api, control_plane: DevCluster) -> None:
    """The front-proxy CA, the allowed client name and the identity headers are published where aggregated API
    servers (the operator's tasks.unicore.dev) read them, and the API server's proxy client certificate is one that
    CA signed, with that name."""
    from cryptography import x509

    data = core.read_namespaced_config_map("extension-apiserver-authentication", "kube-system").data
    pki = control_plane.control_plane.data_dir / "pki"
    assert data["requestheader-client-ca-file"].strip() == (pki / "front-proxy-ca.crt").read_text().strip()
    assert json.loads(data["requestheader-allowed-names"]) == ["front-proxy-client"]
    assert json.loads(data["requestheader-username-headers"]) == ["X-Remote-User"]
    assert json.loads(data["requestheader-uid-headers"]) == ["X-Remote-Uid"]
    assert json.loads(data["requestheader-group-headers"]) == ["X-Remote-Group"]
    assert json.loads(data["requestheader-extra-headers-prefix"]) == ["X-Remote-Extra-"]
    ca = x509.load_pem_x509_certificate((pki / "front-proxy-ca.crt").read_bytes())
    proxy_client = x509.load_pem_x509_certificate((pki / "front-proxy-client.crt").read_bytes())
    proxy_client.verify_directly_issued_by(ca)
    assert proxy_client.subject.rfc4514_string() == "CN=front-proxy-client"
    assert data["client-ca-file"].strip() != data["requestheader-client-ca-file"].strip()  # users' CA is another


def test_cli_up_down_leaves_no_process(control_plane: DevCluster, tmp_path: Path) -> None:
    """A second, detached cluster (the `make cluster-up` path): it runs a pod; `down` ends every process."""
    data_dir = Path(f"/tmp/unicore-devcluster-cli-{os.getpid()}")
    env = {**os.environ, **control_plane.env()}  # reuse the binaries
    cli = [sys.executable, "-m", "unicore_devcluster.cli"]
    pids: dict[str, int] = {}
    up = subprocess.run(
        [*cli, "up", "--detach", "--node", "runner", "--data-dir", str(data_dir)],  # the pod runner's CLI path
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = up.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=")
        assert Path(kubeconfig).is_file()
        state = json.loads((data_dir / "devcluster.json").read_text())
        pids.update({name: p["pid"] for name, p in state["processes"].items()})
        pids["supervisor"] = state["supervisor"]["pid"]
        assert set(pids) == {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "supervisor",
        }
        assert all(alive(pid) for pid in pids.values())

        kubectl = ["kubectl", "--kubeconfig", kubeconfig]
        nodes = subprocess.run(
            [*kubectl, "get", "nodes", "-o", "json"], capture_output=True, text=True, check=True
        )
        assert {n["metadata"]["name"] for n in json.loads(nodes.stdout)["items"]} == {
            "unicore-gpu-0",
            "unicore-cpu-0",
        }
        manifest = json.dumps(
            python_pod(
                "idle",
                "import time\nprint('pid', __import__('os').getpid(), flush=True)\nwhile True: time.sleep(1)",
            )
        )
        subprocess.run(
            [*kubectl, "apply", "-n", "default", "-f", "-"],
            input=manifest,
            text=True,
            check=True,
            capture_output=True,
        )

        def pod_pid() -> int | None:
            logs = list((data_dir / "pods").glob("default_idle_*/main.log"))
            text = logs[0].read_text() if logs else ""
            return int(text.split("pid ", 1)[1].split()[0]) if "pid " in text else None

        pids["pod"] = wait_for(pod_pid, timeout=60, what="the pod process to start")
        assert alive(pids["pod"])
    finally:
        down = subprocess.run(
            [*cli, "down", "--data-dir", str(data_dir)], env=env, capture_output=True, text=True, timeout=120
        )
    assert down.returncode == 0, down.stderr
    left = {name: pid for name, pid in pids.items() if alive(pid)}
    assert not left, f"processes left after down: {left}"
    assert not (data_dir / "devcluster.json").exists()
    shutil.rmtree(data_dir, ignore_errors=True)
