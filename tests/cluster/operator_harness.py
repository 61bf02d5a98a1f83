"""Helpers for the operator's cluster tests: CRD install, agent RBAC, the operator as a real subprocess, and small
readers of the cluster's and Redis's state shared by several test modules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from unicore_devcluster.image_inputs import app_version

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
GROUP, VERSION, PLURAL = "unicore.dev", "v1alpha1", "agenttasks"
AGENT_SA = "unicore-agent"
# The turn pods' image on the real node (hack/build-images.sh tags it with the chart's appVersion); the pod runner
# runs the command from the project's venv whatever the image.
AGENT_IMAGE = f"unicore-agent:{app_version(REPO)}"


def kubectl(kubeconfig: Path | str, *args: str, check: bool = True, input_text: str | None = None,
            ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, check=check,
                          input=input_text, timeout=60)


def install_crd(kubeconfig: Path | str) -> None:
    result = kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"), check=False)
    if result.returncode:
        raise RuntimeError(f"kubectl apply crds/ failed: {result.stderr}")
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "crd/agenttasks.unicore.dev",
            "crd/agents.unicore.dev", "crd/agentschedules.unicore.dev")


def agent_rbac(namespace: str) -> list[dict[str, Any]]:
    """ServiceAccount + Role (create/get/list/watch agenttasks) + RoleBinding for turn pods."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": AGENT_SA, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": AGENT_SA, "namespace": namespace},
         "rules": [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["create", "get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": AGENT_SA, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AGENT_SA},
         "subjects": [{"kind": "ServiceAccount", "name": AGENT_SA, "namespace": namespace}]},
    ]


def install_agent_rbac(kubeconfig: Path | str, namespace: str) -> None:
    manifest = {"apiVersion": "v1", "kind": "List", "items": agent_rbac(namespace)}
    result = kubectl(kubeconfig, "apply", "-f", "-", input_text=json.dumps(manifest), check=False)
    if result.returncode:
        raise RuntimeError(f"kubectl apply (agent RBAC) failed: {result.stderr}")


class OperatorProcess:
    """``unicore-operator`` as a real subprocess (its log goes to a file the tests print on failure)."""

    def __init__(self, kubeconfig: Path | str, redis_url: str, namespace: str, log_path: Path,
                 **extra_env: str) -> None:
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "REDIS_URL": redis_url,
            "UNICORE_NAMESPACES": namespace,
            "UNICORE_HTTP_PORT": "0",
            "UNICORE_RESYNC_SECONDS": "5",
            "UNICORE_TURN_RETRY_BACKOFF_SECONDS": "1",
            "UNICORE_JOB_TTL_SECONDS": "600",
            "POD_NAME": f"operator-{namespace}",
            "UNICORE_AGENT_IMAGE": AGENT_IMAGE,
            **extra_env,
        }
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 (kept open for the child's lifetime)
        self.proc = subprocess.Popen([str(VENV_BIN / "unicore-operator")], env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return self

    def kill(self) -> None:
        """SIGKILL: no cleanup handlers, no graceful anything."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self, lines: int = 80) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


StartOperator = Callable[..., OperatorProcess]


@contextmanager
def operator_factory(control_plane: Any, namespace: str, redis_url: str, tmp_path: Path, *,
                     env: Mapping[str, str] | None = None, agent_rbac: bool = True, log_lines: int = 300,
                     pod_logs: bool = False) -> Iterator[StartOperator]:
    """A ``start(**extra_env)`` that starts an operator for ``namespace`` with ``env`` + ``extra_env`` (``extra_env``
    wins); for a test fixture to yield. ``agent_rbac`` installs the agents' ServiceAccount and RBAC first. At the
    end every operator started is stopped and the last ``log_lines`` of their log (one file, appended to by each) are
    printed, with the namespace's turn pod logs when ``pod_logs``."""
    if agent_rbac:
        install_agent_rbac(control_plane.kubeconfig, namespace)
    started: list[OperatorProcess] = []

    def start(**extra_env: str) -> OperatorProcess:
        proc = OperatorProcess(control_plane.kubeconfig, redis_url, namespace, tmp_path / "operator.log",
                               **{**(env or {}), **extra_env}).start()
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.stop()
        if started:
            print(f"--- operator log ({started[0].log_path}):\n{started[0].log(log_lines)}")
            if pod_logs:
                for log in turn_pod_logs(control_plane, namespace):
                    print(f"--- turn pod log ({log}):\n{log.read_text(errors='replace')[-6000:]}")


def turn_pod_logs(cluster: Any, namespace: str) -> list[Path]:
    """The log files of the namespace's pods: the pod runner's, or the real node's kubelet's (both kept after the
    pods are gone)."""
    found = sorted((cluster.data_dir / "pods").glob(f"{namespace}_*/*.log"))
    node = getattr(cluster, "real_node", None)
    if node is not None:
        found += sorted(node.paths.pod_logs.glob(f"{namespace}_*/*/*.log"))
    return found


class Tasks:
    """AgentTask CRUD for one namespace."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace

    def create(self, name: str, spec: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentTask", "metadata": {"name": name}, "spec": spec}
        return dict(self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body,
                                                                **kwargs))

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec})

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def all(self) -> list[dict[str, Any]]:
        return list(self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)["items"])

    def phase(self, name: str) -> str | None:
        obj = self.get(name)
        return ((obj or {}).get("status") or {}).get("phase")

    def jobs(self) -> list[Any]:
        return list(self.batch.list_namespaced_job(self.namespace).items)

    def pods(self) -> list[Any]:
        return list(self.core.list_namespaced_pod(self.namespace).items)

    def all_phases(self) -> dict[str, str | None]:
        return {obj["metadata"]["name"]: (obj.get("status") or {}).get("phase") for obj in self.all()}


def running_pods(tasks: Tasks) -> list[Any]:
    return [pod for pod in tasks.pods() if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp]


def long_script(name: str, seconds: float) -> dict[str, Any]:
    """Task ``name`` answers its first message after ``seconds`` (a long, healthy model call), then echoes."""
    return {"tasks": {name: [{"sleep": seconds, "text": "Slow answer."}, {"echo": True}]}}


GATE = "go"  # the gate of gated_script's first model call


def gated_script(name: str, gate: str = GATE) -> dict[str, Any]:
    """Task ``name`` answers its first message once the test opens the task's gate ``gate`` (a model call that lasts
    until the test's fault is in place: ``unicore.store.gates.open_gate``), then echoes; the same answers as
    ``long_script``."""
    return {"tasks": {name: [{"gate": gate, "text": "Slow answer."}, {"echo": True}]}}


def task_events(tasks: Tasks, name: str, reason: str) -> list[Any]:
    """Events with ``reason`` about the AgentTask ``name``."""
    found = tasks.core.list_namespaced_event(tasks.namespace, field_selector=f"involvedObject.name={name}").items
    return [event for event in found if event.reason == reason]


def stored_messages(client: Any, task_id: str) -> list[dict[str, Any]]:
    """The task's stored messages (``uc:{T}:messages``) as dicts."""
    return [json.loads(raw) for raw in client.lrange(f"uc:{{{task_id}}}:messages", 0, -1)]
