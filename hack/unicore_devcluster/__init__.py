"""unicore_devcluster: a real Kubernetes control plane run as local processes (dev and test tooling only).

``DevCluster`` starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from their Go
modules (``hack/build-k8s.sh``), registers a GPU node and a CPU node kept Ready by heartbeats, and runs the
pods bound to them as local processes (``PodRunner``). See docs/control-plane.md.
"""

from __future__ import annotations

from unicore_devcluster.cluster import DevCluster, attach, read_state
from unicore_devcluster.launcher import ControlPlane, ControlPlaneError
from unicore_devcluster.nodes import CPU_NODE, GPU_NODE, NodeSpec

__all__ = [
    "CPU_NODE",
    "GPU_NODE",
    "ControlPlane",
    "ControlPlaneError",
    "DevCluster",
    "NodeSpec",
    "attach",
    "read_state",
]
