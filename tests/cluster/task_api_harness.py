"""The operator's task API behind the real API server in the cluster tests: a host-process operator serves it on a
free port with a serving certificate the cluster CA signs (valid for ``unicore-operator.<namespace>.svc``, the name
the aggregator checks), the Service/Endpoints of ``unicore_devcluster.operator_endpoint`` point at this host, and the
APIService ``v1alpha1.tasks.unicore.dev`` (cluster-scoped: one at a time) is registered with that CA as its
caBundle. The API server then proxies ``/apis/tasks.unicore.dev/...`` to the operator with its front-proxy
certificate (the devcluster runs the aggregation layer)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from unicore_devcluster import operator_endpoint

from tests.cluster.operator_harness import kubectl
from tests.waiting import wait_for

API = "/apis/tasks.unicore.dev/v1alpha1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


def ca_pair(cluster: Any) -> Any:
    from unicore_devcluster.pki import CertPair

    pki = cluster.control_plane.data_dir / "pki"
    return CertPair(pki / "ca.crt", pki / "ca.key")


def task_path(namespace: str, name: str, subresource: str) -> str:
    return f"{API}/namespaces/{namespace}/agenttasks/{name}/{subresource}"


@dataclass
class TaskApiEndpoint:
    """Where the operator serves (``env`` for the operator process) and how the API server reaches it."""

    cluster: Any
    namespace: str  # the operator's (its Service's) namespace
    http_port: int
    task_api_port: int
    cert_dir: Path
    ca_pem: bytes

    @property
    def env(self) -> dict[str, str]:
        return {"UNICORE_HTTP_PORT": str(self.http_port), "UNICORE_TASK_API_PORT": str(self.task_api_port),
                "UNICORE_TASK_API_CERT_DIR": str(self.cert_dir)}

    def publish(self, timeout: float = 60.0) -> None:
        """The Service and Endpoints, the APIService; returns once the API server proxies to the operator."""
        api = self.cluster.api_client()
        try:
            operator_endpoint.expose(api, self.namespace, self.http_port, task_api_port=self.task_api_port)
            operator_endpoint.register_task_api(api, self.namespace, self.ca_pem)
        finally:
            api.close()
        wait_for(self.available, timeout=timeout, interval=0.3,
                 what=f"APIService {operator_endpoint.APISERVICE} Available and answering through the API server")

    def available(self) -> bool:
        api = self.cluster.api_client()
        try:
            found: Any = client.CustomObjectsApi(api).get_cluster_custom_object(
                "apiregistration.k8s.io", "v1", "apiservices", operator_endpoint.APISERVICE)
        finally:
            api.close()
        conditions = {c["type"]: c["status"] for c in (found.get("status") or {}).get("conditions") or []}
        if conditions.get("Available") != "True":
            return False
        return self.raw(API).returncode == 0

    def raw(self, path: str, *, kubeconfig: Path | str | None = None) -> subprocess.CompletedProcess[str]:
        """``kubectl get --raw <path>`` (as the admin unless ``kubeconfig``)."""
        return kubectl(kubeconfig or self.cluster.kubeconfig, "get", "--raw", path, check=False)


@contextmanager
def aggregated_task_api(cluster: Any, namespace: str, folder: Path) -> Iterator[TaskApiEndpoint]:
    """A TaskApiEndpoint for an operator in ``namespace`` (start it with ``.env``, then ``.publish()``); the
    APIService is deleted at the end."""
    cert_dir = folder / "task-api-certs"
    ca_pem = operator_endpoint.serving_certificate(cluster.control_plane.data_dir / "pki", cert_dir, namespace)
    endpoint = TaskApiEndpoint(cluster, namespace, free_port(), free_port(), cert_dir, ca_pem)
    try:
        yield endpoint
    finally:
        api = cluster.api_client()
        try:
            operator_endpoint.unregister_task_api(api)
        finally:
            api.close()
