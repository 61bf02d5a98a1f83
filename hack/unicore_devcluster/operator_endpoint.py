"""Expose an operator that runs as a HOST process (the local control plane, `make demo`) through the API
server's service proxy, so ``kubectl agenttask send/logs`` work there exactly as in a real cluster.

What the API server needs (verified on v1.36; pkg/registry/core/service ResourceLocation):
- it resolves ``services/<svc>:<port>/proxy`` through the v1 **Endpoints** object (not EndpointSlices);
- every address must carry a ``targetRef`` to a **Pod in the Service's namespace** whose ``status.podIPs``
  holds that IP, else it logs "Address has no target ref, skipping" and answers 503 "no endpoints available";
- the IP must not be loopback or link-local (the proxy refuses those, and validation rejects them).

So this module creates: a selector-less Service ``unicore-operator`` (port ``http``), a placeholder Pod that
never runs (a scheduling gate keeps it unscheduled) whose status claims the host's non-loopback IP, and an
Endpoints object pointing at that IP with a targetRef to the placeholder. The operator must listen on 0.0.0.0.

    python -m unicore_devcluster.operator_endpoint --namespace unicore-system --port 8080
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from typing import Any

from unicore import contract
from unicore.kube_config import load_api_client

SERVICE = "unicore-operator"
PORT_NAME = "http"
SERVICE_PORT = 8080
PLACEHOLDER = "unicore-operator-host"
GATE = contract.HOST_PROCESS_GATE
LABELS = {contract.NAME_LABEL: "unicore", contract.COMPONENT_LABEL: "operator-host-endpoint"}


def _usable(ip: str) -> bool:
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return address.version == 4 and not (
        address.is_loopback or address.is_link_local or address.is_unspecified
    )


def host_ip() -> str:
    """This machine's non-loopback IPv4 address (the outgoing route's, else one of the hostname's)."""
    for probe in ("192.0.2.1", "10.255.255.255", "8.8.8.8"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect((probe, 9))  # UDP connect sends nothing; it only picks the outgoing address
            except OSError:
                continue
            ip = str(sock.getsockname()[0])
            if _usable(ip):
                return ip
    for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
        ip = str(info[4][0])
        if _usable(ip):
            return ip
    raise RuntimeError(
        "no non-loopback IPv4 address on this machine: the API server cannot proxy to the operator"
    )


def manifests(namespace: str, ip: str, port: int) -> dict[str, dict[str, Any]]:
    meta = {"namespace": namespace, "labels": LABELS}
    return {
        "service": {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, **meta},
            "spec": {
                "ports": [{"name": PORT_NAME, "port": SERVICE_PORT, "targetPort": port, "protocol": "TCP"}]
            },
        },
        "pod": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": PLACEHOLDER, **meta},
            "spec": {
                "schedulingGates": [{"name": GATE}],
                "automountServiceAccountToken": False,
                "containers": [{"name": "operator", "image": "host-process/unicore-operator"}],
            },
        },
        "pod_status": {"status": {"podIP": ip, "podIPs": [{"ip": ip}]}},
        "endpoints": {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": SERVICE, **meta},
            "subsets": [
                {
                    "addresses": [
                        {"ip": ip, "targetRef": {"kind": "Pod", "name": PLACEHOLDER, "namespace": namespace}}
                    ],
                    "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP"}],
                }
            ],
        },
    }


def expose(api_client: Any, namespace: str, port: int, ip: str | None = None) -> str:
    """Create or update the objects above; returns the IP the operator is reached at."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    chosen = ip or host_ip()
    objs = manifests(namespace, chosen, port)

    def apply(create: Any, replace: Any, name: str, body: dict[str, Any]) -> None:
        try:
            create(namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            replace(name, namespace, body)

    apply(
        core.create_namespaced_service,
        lambda n, ns, b: core.patch_namespaced_service(n, ns, b),
        SERVICE,
        objs["service"],
    )
    try:
        core.create_namespaced_pod(namespace, objs["pod"])  # type: ignore[arg-type]
    except ApiException as exc:
        if exc.status != 409:
            raise
    core.patch_namespaced_pod_status(PLACEHOLDER, namespace, objs["pod_status"])
    apply(core.create_namespaced_endpoints, core.replace_namespaced_endpoints, SERVICE, objs["endpoints"])
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", default="unicore-system")
    parser.add_argument("--port", type=int, default=8080, help="the port the host operator listens on")
    parser.add_argument("--ip", help="the address to publish (default: this machine's non-loopback IPv4)")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG, else ~/.kube/config")
    args = parser.parse_args(argv)
    api_client = load_api_client(args.kubeconfig)
    ip = expose(api_client, args.namespace, args.port, args.ip)
    print(f"service {args.namespace}/{SERVICE}:{PORT_NAME} -> {ip}:{args.port}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
