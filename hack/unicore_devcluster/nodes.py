"""Fake nodes (a GPU node and a CPU node) kept Ready with status and Lease heartbeats."""

from __future__ import annotations

import datetime
import threading
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from unicore.api.contract import NODE_POOL_LABEL

from unicore_devcluster.log import logger

LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
HEARTBEAT_SECONDS = 10.0
KUBELET_VERSION = "v1.36.3-unicore-devcluster"


@dataclass(frozen=True)
class NodeSpec:
    """A node the pod runner pretends to be."""

    name: str
    labels: dict[str, str]
    capacity: dict[str, str]
    taints: tuple[dict[str, str], ...] = ()
    allocatable: dict[str, str] = field(default_factory=dict)

    def all_labels(self) -> dict[str, str]:
        base = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        return {**base, **self.labels}


GPU_NODE = NodeSpec(
    name="unicore-gpu-0",
    labels={
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.count": "4",
        "node.kubernetes.io/instance-type": "p4d.24xlarge",
        NODE_POOL_LABEL: "gpu",
    },
    capacity={
        "cpu": "16",
        "memory": "64Gi",
        "pods": "110",
        "ephemeral-storage": "100Gi",
        "nvidia.com/gpu": "4",
    },
    taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},),
)

CPU_NODE = NodeSpec(
    name="unicore-cpu-0",
    labels={"node.kubernetes.io/instance-type": "m5.2xlarge", NODE_POOL_LABEL: "cpu"},
    capacity={"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"},
)

DEFAULT_NODES = (GPU_NODE, CPU_NODE)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _time(ts: datetime.datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_time(ts: datetime.datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeAgent:
    """Registers the nodes and keeps them Ready (node status conditions + kube-node-lease Leases)."""

    def __init__(
        self,
        api_client: Any,
        nodes: tuple[NodeSpec, ...] = DEFAULT_NODES,
        *,
        kubelet_port: int = 10250,
        interval: float = HEARTBEAT_SECONDS,
    ) -> None:
        self.core: Any = client.CoreV1Api(api_client)
        self.coordination: Any = client.CoordinationV1Api(api_client)
        self.nodes = nodes
        self.kubelet_port = kubelet_port
        self.interval = interval
        self._since = _time(_now())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._uids: dict[str, str] = {}

    @property
    def names(self) -> set[str]:
        return {node.name for node in self.nodes}

    def _conditions(self) -> list[dict[str, str]]:
        beat = _time(_now())
        healthy = [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        ]
        return [
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": "unicore-devcluster node agent",
                "lastHeartbeatTime": beat,
                "lastTransitionTime": self._since,
            }
            for kind, status, reason in healthy
        ]

    def _status(self, spec: NodeSpec) -> dict[str, Any]:
        return {
            "capacity": spec.capacity,
            "allocatable": spec.allocatable or spec.capacity,
            "conditions": self._conditions(),
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}},
            "nodeInfo": {
                "machineID": spec.name,
                "systemUUID": spec.name,
                "bootID": spec.name,
                "kernelVersion": "local",
                "osImage": "unicore-devcluster",
                "containerRuntimeVersion": "local-process://1",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def register(self) -> None:
        """Create (or refresh) every node with a Ready status, then write its Lease."""
        for spec in self.nodes:
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": spec.name, "labels": spec.all_labels()},
                "spec": {"taints": list(spec.taints)},
                "status": self._status(spec),
            }
            try:
                node = self.core.create_node(body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                node = self.core.patch_node(spec.name, {"metadata": {"labels": spec.all_labels()}})
                self.core.patch_node_status(spec.name, {"status": self._status(spec)})
            self._uids[spec.name] = node.metadata.uid
            logger.info("registered node %s", spec.name)
        self.heartbeat()

    def heartbeat(self) -> None:
        for spec in self.nodes:
            try:
                self.core.patch_node_status(spec.name, {"status": {"conditions": self._conditions()}})
                self._renew_lease(spec.name)
            except Exception as exc:  # noqa: BLE001 - keep beating; the next beat may succeed
                logger.warning("heartbeat of node %s failed: %s", spec.name, exc)

    def _renew_lease(self, name: str) -> None:
        spec = {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": _micro_time(_now()),
        }
        try:
            self.coordination.patch_namespaced_lease(name, LEASE_NAMESPACE, {"spec": spec})
        except ApiException as exc:
            if exc.status != 404:
                raise
            owner = (
                [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": self._uids[name]}]
                if name in self._uids
                else []
            )
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": owner},
                "spec": spec,
            }
            self.coordination.create_namespaced_lease(LEASE_NAMESPACE, body)

    def start(self) -> None:
        self.register()
        self._thread = threading.Thread(target=self._loop, name="devcluster-node-heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.heartbeat()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
