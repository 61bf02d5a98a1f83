"""The real node's objects in the API: CoreDNS's RBAC, the kube-dns Service and its EndpointSlice, the local-path
StorageClass, and their removal (the bodies are node_config's pure builders)."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from unicore_devcluster.log import logger
from unicore_devcluster.node_config import (
    DNS_SERVICE_IP,
    coredns_rbac,
    dns_endpoint_slice,
    dns_service,
    local_path_storage_class,
)

DNS_SLICE = "kube-dns-host"


def _apply(create: Any, replace: Any, name: str, body: dict[str, Any], *ns: str) -> None:
    """Create, or replace what is there under that name."""
    try:
        create(*ns, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        replace(name, *ns, body)


def apply_coredns_rbac(api: Any, user: str) -> None:
    rbac: Any = client.RbacAuthorizationV1Api(api)
    role, binding = coredns_rbac(user)
    _apply(rbac.create_cluster_role, rbac.replace_cluster_role, role["metadata"]["name"], role)
    _apply(rbac.create_cluster_role_binding, rbac.replace_cluster_role_binding, binding["metadata"]["name"], binding)


def apply_dns_service(api: Any, node_ip: str, port: int, node_name: str) -> None:
    """``kube-system/kube-dns`` at DNS_SERVICE_IP (re-created if it is there with another address or a selector) and
    its EndpointSlice naming ``node_ip:port``."""
    core: Any = client.CoreV1Api(api)
    discovery: Any = client.DiscoveryV1Api(api)
    try:
        existing = core.read_namespaced_service("kube-dns", "kube-system")
    except ApiException as exc:
        if exc.status != 404:
            raise
        existing = None
    if existing is not None and (existing.spec.cluster_ip != DNS_SERVICE_IP or existing.spec.selector):
        core.delete_namespaced_service("kube-dns", "kube-system")
        existing = None
    if existing is None:
        core.create_namespaced_service("kube-system", dns_service())
    _apply(
        discovery.create_namespaced_endpoint_slice,
        discovery.replace_namespaced_endpoint_slice,
        DNS_SLICE,
        dns_endpoint_slice(node_ip, port, node_name),
        "kube-system",
    )


def ensure_storage_class(api: Any) -> None:
    storage: Any = client.StorageV1Api(api)
    try:
        storage.create_storage_class(local_path_storage_class())
    except ApiException as exc:
        if exc.status != 409:
            raise


def delete_node_objects(api: Any, node_name: str) -> None:
    """The DNS EndpointSlice (its address is gone) and the Node; errors only logged (the control plane may be gone)."""
    core: Any = client.CoreV1Api(api)
    discovery: Any = client.DiscoveryV1Api(api)
    for call in (
        lambda: discovery.delete_namespaced_endpoint_slice(DNS_SLICE, "kube-system"),
        lambda: core.delete_node(node_name),
    ):
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - the control plane may be gone already
            logger.debug("deleting an API object of the node: %s", exc)
