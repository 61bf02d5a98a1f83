"""Expose an operator that runs as a HOST process (the local control plane, `make demo`, the cluster tests) behind
the API server: its plain port through the service proxy, and its task API as the aggregated API
``tasks.unicore.dev/v1alpha1`` (an APIService), so ``kubectl agenttask send/logs`` work there exactly as in a real
cluster.

What the API server needs (verified on v1.36; pkg/registry/core/service ResourceLocation):
- it resolves ``services/<svc>:<port>/proxy`` through the v1 **Endpoints** object (not EndpointSlices);
- every address must carry a ``targetRef`` to a **Pod in the Service's namespace** whose ``status.podIPs``
  holds that IP, else it logs "Address has no target ref, skipping" and answers 503 "no endpoints available";
- the IP must not be loopback or link-local (the proxy refuses those, and validation rejects them).
- An APIService's Service is resolved to the same endpoints when the API server runs with
  ``--enable-aggregator-routing`` (the devcluster does); the operator's serving certificate must be valid for
  ``unicore-operator.<namespace>.svc`` and signed by the APIService's ``caBundle``.

So this module creates: a selector-less Service ``unicore-operator`` (port ``http``, and ``task-api`` 9443 as the
chart's when the task API's port is given), a placeholder Pod that never runs (a scheduling gate keeps it
unscheduled) whose status claims the host's non-loopback IP, and an Endpoints object pointing at that IP with a
targetRef to the placeholder; ``serving_certificate`` issues the operator's certificate from the devcluster's CA,
``register_task_api`` adds the APIService with that CA as its caBundle. The operator must listen on 0.0.0.0.

    python -m unicore_devcluster.operator_endpoint --namespace unicore-system --port 8080 \
        --task-api-port 9443 --cert-dir /tmp/operator-certs    # then UNICORE_TASK_API_CERT_DIR=/tmp/operator-certs
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import os
import socket
import sys
from pathlib import Path
from typing import Any

from unicore.api import contract
from unicore.kube_config import load_api_client

SERVICE = "unicore-operator"
PORT_NAME = "http"
SERVICE_PORT = 8080
TASK_API_PORT_NAME = "task-api"
TASK_API_SERVICE_PORT = 9443  # as the chart's Service (443 is the webhook's)
APISERVICE = "v1alpha1.tasks.unicore.dev"
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


def manifests(namespace: str, ip: str, port: int, task_api_port: int | None = None) -> dict[str, dict[str, Any]]:
    meta = {"namespace": namespace, "labels": LABELS}
    service_ports = [{"name": PORT_NAME, "port": SERVICE_PORT, "targetPort": port, "protocol": "TCP"}]
    endpoint_ports = [{"name": PORT_NAME, "port": port, "protocol": "TCP"}]
    if task_api_port:
        service_ports.append({"name": TASK_API_PORT_NAME, "port": TASK_API_SERVICE_PORT, "targetPort": task_api_port,
                              "protocol": "TCP"})
        endpoint_ports.append({"name": TASK_API_PORT_NAME, "port": task_api_port, "protocol": "TCP"})
    return {
        "service": {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, **meta},
            "spec": {"ports": service_ports},
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
                    "ports": endpoint_ports,
                }
            ],
        },
    }


def expose(api_client: Any, namespace: str, port: int, ip: str | None = None, *,
           task_api_port: int | None = None) -> str:
    """Create or update the objects above (the Service's ``task-api`` port only with ``task_api_port``); returns
    the IP the operator is reached at."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    chosen = ip or host_ip()
    objs = manifests(namespace, chosen, port, task_api_port)

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


def serving_certificate(pki_dir: Path, cert_dir: Path, namespace: str) -> bytes:
    """The operator's serving certificate for ``unicore-operator.<namespace>.svc`` (the name the aggregator checks),
    signed by the devcluster's CA in ``pki_dir``, as ``cert_dir``/tls.crt and tls.key (issued once, kept while it
    names this namespace); returns the CA's PEM, the APIService's caBundle."""
    from cryptography import x509

    from unicore_devcluster import pki

    ca = pki.CertPair(pki_dir / "ca.crt", pki_dir / "ca.key")
    name = f"{SERVICE}.{namespace}.svc"
    crt, key = cert_dir / "tls.crt", cert_dir / "tls.key"
    current = None
    if crt.exists() and key.exists():
        current = x509.load_pem_x509_certificate(crt.read_bytes())
    names = (current.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
             .get_values_for_type(x509.DNSName) if current is not None else [])
    signed_by_ca = current is not None and current.issuer == x509.load_pem_x509_certificate(
        ca.cert.read_bytes()).subject
    if name not in names or not signed_by_ca:
        pair = pki.issue(ca, cert_dir, "serving", name, server=True, dns=(name, f"{SERVICE}.{namespace}"))
        os.replace(pair.cert, crt)
        os.replace(pair.key, key)
    return ca.cert.read_bytes()


def apiservice(namespace: str, ca_pem: bytes) -> dict[str, Any]:
    """The APIService of the operator's task API behind Service ``unicore-operator`` port 443 in ``namespace`` (as
    the chart's, helm/unicore/templates/task-api.yaml)."""
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": APISERVICE, "labels": LABELS},
        "spec": {
            "group": "tasks.unicore.dev",
            "version": "v1alpha1",
            "service": {"name": SERVICE, "namespace": namespace, "port": TASK_API_SERVICE_PORT},
            "caBundle": base64.b64encode(ca_pem).decode(),
            "groupPriorityMinimum": 100,  # below the CRDs' 1000: `agenttasks` stays unicore.dev's for kubectl
            "versionPriority": 10,
        },
    }


def register_task_api(api_client: Any, namespace: str, ca_pem: bytes) -> None:
    """Create or replace the APIService ``v1alpha1.tasks.unicore.dev`` pointing at this namespace's operator."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(api_client)
    body = apiservice(namespace, ca_pem)
    try:
        custom.create_cluster_custom_object("apiregistration.k8s.io", "v1", "apiservices", body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        current: Any = custom.get_cluster_custom_object("apiregistration.k8s.io", "v1", "apiservices", APISERVICE)
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        custom.replace_cluster_custom_object("apiregistration.k8s.io", "v1", "apiservices", APISERVICE, body)


def unregister_task_api(api_client: Any) -> bool:
    """Delete the APIService; False when there was none."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        client.CustomObjectsApi(api_client).delete_cluster_custom_object(
            "apiregistration.k8s.io", "v1", "apiservices", APISERVICE)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _running_pki_dir() -> Path:
    from unicore_devcluster.cluster import read_state

    state = read_state()
    if state is None:
        raise SystemExit("operator_endpoint: no running devcluster; give --pki-dir")
    return Path(state["data_dir"]) / "pki"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", default="unicore-system")
    parser.add_argument("--port", type=int, default=8080, help="the port the host operator listens on")
    parser.add_argument("--ip", help="the address to publish (default: this machine's non-loopback IPv4)")
    parser.add_argument("--task-api-port", type=int, help="the host operator's UNICORE_TASK_API_PORT: also serve "
                        f"Service port {TASK_API_PORT_NAME} and register the APIService {APISERVICE}")
    parser.add_argument("--cert-dir", help="with --task-api-port: the operator's UNICORE_TASK_API_CERT_DIR; its "
                        "tls.crt and tls.key are issued there by the devcluster's CA unless they are already")
    parser.add_argument("--pki-dir", help="the devcluster's pki folder (default: the running devcluster's)")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG, else ~/.kube/config")
    args = parser.parse_args(argv)
    if args.task_api_port and not args.cert_dir:
        parser.error("--task-api-port needs --cert-dir")
    ca_pem = b""
    if args.task_api_port:
        pki_dir = Path(args.pki_dir) if args.pki_dir else _running_pki_dir()
        ca_pem = serving_certificate(pki_dir, Path(args.cert_dir), args.namespace)
    api_client = load_api_client(args.kubeconfig)
    ip = expose(api_client, args.namespace, args.port, args.ip, task_api_port=args.task_api_port)
    print(f"service {args.namespace}/{SERVICE}:{PORT_NAME} -> {ip}:{args.port}")
    if args.task_api_port:
        register_task_api(api_client, args.namespace, ca_pem)
        print(f"apiservice {APISERVICE} -> service {args.namespace}/{SERVICE}:{TASK_API_PORT_NAME} -> "
              f"{ip}:{args.task_api_port}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
