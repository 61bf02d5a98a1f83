"""Pure builders of the real node's configuration: kubelet, kube-proxy, CNI, CoreDNS, the DNS Service.

No I/O here: every function turns parameters into the dict or text a component reads, so the unit tests check
them without a cluster (tests/unit/test_node_config.py). ``realnode.py`` writes them and starts the processes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicore.api import contract

from unicore_devcluster.launcher import SERVICE_CIDR

POD_CIDR = "10.244.0.0/24"
CLUSTER_DOMAIN = "cluster.local"
DNS_SERVICE_IP = "10.0.0.10"  # a fixed address in SERVICE_CIDR, as kubeadm's 10.96.0.10 in its range
BRIDGE = "unicore0"
CNI_NETWORK = "unicore-node"
LOCAL_PATH_CLASS = "local-path"
LOCAL_PATH_PROVISIONER = contract.LOCAL_PATH_PROVISIONER
ENDPOINTS_MANAGER = "unicore-devcluster"
CGROUP_ROOT = "unicore-node"  # the kubelet's cgroupRoot: /unicore-node in every hierarchy
RUNNING_MARKER = "running"  # in the node's config/: written at start, removed by a completed stop


@dataclass(frozen=True)
class NodePaths:
    """Where the node keeps its files (all under one state folder, so tear-down knows what is its own)."""

    state_dir: Path

    @property
    def kubelet_root(self) -> Path:
        return self.state_dir / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.state_dir / "pod-logs"

    @property
    def cni_conf_dir(self) -> Path:
        return self.state_dir / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.state_dir / "cni" / "ipam"

    @property
    def config_dir(self) -> Path:
        return self.state_dir / "config"

    @property
    def volumes(self) -> Path:
        return self.state_dir / "local-path"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"


def gateway(pod_cidr: str = POD_CIDR) -> str:
    """The bridge's address: the first host address of the pod CIDR."""
    return str(next(ipaddress.ip_network(pod_cidr).hosts()))


def kubelet_config(
    *,
    node_ip: str,
    port: int,
    healthz_port: int,
    ca_file: Path,
    tls_cert: Path,
    tls_key: Path,
    runtime_socket: Path,
    pod_logs_dir: Path,
    cgroup_root: str,
    cluster_dns: str = DNS_SERVICE_IP,
    cluster_domain: str = CLUSTER_DOMAIN,
    resolv_conf: str = "/etc/resolv.conf",
    max_pods: int = 110,
) -> dict[str, Any]:
    """The KubeletConfiguration (kubelet.config.k8s.io/v1beta1) of the real node.

    cgroup v1 with the cgroupfs driver (this host's setup) needs ``failCgroupV1: false`` from Kubernetes 1.35 on.
    Image garbage collection is off: the images were imported, not pulled, and could not be pulled again.
    Eviction thresholds are low so a busy shared disk does not evict the test pods.
    """
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(tls_cert),
        "tlsPrivateKeyFile": str(tls_key),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "cgroupsPerQOS": True,
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDNS": [cluster_dns],
        "clusterDomain": cluster_domain,
        "resolvConf": resolv_conf,
        "podLogsDir": str(pod_logs_dir),
        "maxPods": max_pods,
        "registerNode": True,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "2%",
            "nodefs.inodesFree": "2%",
            "imagefs.available": "2%",
        },
        "evictionPressureTransitionPeriod": "10s",
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        "enableDebuggingHandlers": True,
        "logging": {"format": "text"},
    }


def kube_proxy_config(
    *,
    kubeconfig: Path,
    node_name: str,
    node_ip: str,
    healthz_port: int,
    metrics_port: int,
    cluster_cidr: str = POD_CIDR,
) -> dict[str, Any]:
    """The KubeProxyConfiguration (iptables mode). Conntrack sysctls are left as the host has them (``maxPerCore: 0``
    and zero timeouts mean "do not set"), and ``localhostNodePorts: false`` keeps ``route_localnet`` off."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "bindAddress": node_ip,
        "clusterCIDR": cluster_cidr,
        "detectLocalMode": "ClusterCIDR",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{node_ip}/32"],
        "iptables": {
            "localhostNodePorts": False,
            "masqueradeAll": False,
            "syncPeriod": "30s",
            "minSyncPeriod": "0s",
        },
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
            "udpTimeout": "0s",
            "udpStreamTimeout": "0s",
        },
    }


def cni_conflist(
    *, ipam_dir: Path, pod_cidr: str = POD_CIDR, bridge: str = BRIDGE, name: str = CNI_NETWORK
) -> dict[str, Any]:
    """The CNI network: a bridge (the pods' gateway, no masquerade: pods reach the node and each other, nothing
    beyond) with host-local IPAM keeping its leases under the node's state folder."""
    return {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr, "gateway": gateway(pod_cidr)}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            }
        ],
    }


def corefile(
    *,
    node_ip: str,
    port: int,
    health_port: int,
    ready_port: int,
    kubeconfig: Path,
    upstreams: list[str],
    cluster_domain: str = CLUSTER_DOMAIN,
) -> str:
    """CoreDNS's Corefile: the cluster zone from the API (kubernetes plugin), other names to the host's
    resolvers (none: answered SERVFAIL), on ``node_ip:port`` (the kube-dns Service's endpoint)."""
    forward = f"    forward . {' '.join(upstreams)}\n" if upstreams else ""
    return (
        f".:{port} {{\n"
        f"    bind {node_ip}\n"
        "    errors\n"
        f"    health 127.0.0.1:{health_port}\n"
        f"    ready 127.0.0.1:{ready_port}\n"
        f"    kubernetes {cluster_domain} in-addr.arpa ip6.arpa {{\n"
        f"        kubeconfig {kubeconfig}\n"
        "        pods insecure\n"
        "        fallthrough in-addr.arpa ip6.arpa\n"
        "        ttl 30\n"
        "    }\n"
        f"{forward}"
        "    cache 30\n"
        "    loadbalance\n"
        "}\n"
    )


def resolv_upstreams(resolv_conf_text: str) -> list[str]:
    """The ``nameserver`` lines of a resolv.conf, loopback ones left out (a pod's query must not come back)."""
    out = []
    for line in resolv_conf_text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            try:
                if ipaddress.ip_address(fields[1]).is_loopback:
                    continue
            except ValueError:
                continue
            out.append(fields[1])
    return out


def dns_service(cluster_ip: str = DNS_SERVICE_IP) -> dict[str, Any]:
    """``kube-system/kube-dns`` without a selector: its endpoints are the host's CoreDNS (dns_endpoint_slice)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kube-dns",
            "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
        },
        "spec": {
            "clusterIP": cluster_ip,
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            ],
        },
    }


def dns_endpoint_slice(node_ip: str, port: int, node_name: str) -> dict[str, Any]:
    """The EndpointSlice kube-proxy reads for kube-dns: the host's CoreDNS at ``node_ip:port``."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kube-dns-host",
            "namespace": "kube-system",
            "labels": {
                "kubernetes.io/service-name": "kube-dns",
                "endpointslice.kubernetes.io/managed-by": ENDPOINTS_MANAGER,
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [node_ip], "conditions": {"ready": True}, "nodeName": node_name}],
        "ports": [
            {"name": "dns", "port": port, "protocol": "UDP"},
            {"name": "dns-tcp", "port": port, "protocol": "TCP"},
        ],
    }


def coredns_rbac(user: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ClusterRole CoreDNS's kubernetes plugin needs (as CoreDNS's own deployment has it) and its binding."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "system:coredns"},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["endpoints", "services", "pods", "namespaces"],
                "verbs": ["list", "watch"],
            },
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "system:coredns"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    return role, binding


def local_path_storage_class() -> dict[str, Any]:
    """The default StorageClass ``local-path`` (the provisioner in localpath.py); WaitForFirstConsumer as
    rancher's local-path-provisioner, so a claim is made on the node its first pod is scheduled to."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": LOCAL_PATH_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": LOCAL_PATH_PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def isolation_rules(
    pod_cidr: str = POD_CIDR, bridge: str = BRIDGE, service_cidr: str = SERVICE_CIDR
) -> list[list[str]]:
    """iptables filter rules (chain UNICORE-NODE, jumped to from FORWARD): pods reach the node and each other,
    nothing beyond the machine; a Service address nothing translated (no endpoints yet) goes nowhere either."""
    return [
        ["-s", pod_cidr, "!", "-o", bridge, "-j", "REJECT"],
        ["-d", service_cidr, "-j", "REJECT"],
    ]
