"""The kubeconfig a pod process gets in place of a mounted ServiceAccount token: a TokenRequest token for the pod's
ServiceAccount, bound to the pod (none when the pod or its ServiceAccount turns automounting off)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes.client.rest import ApiException

from unicore_devcluster.kubeconfig import write_kubeconfig
from unicore_devcluster.podenv import PodSetupError

TOKEN_SECONDS = 24 * 3600


def pod_kubeconfig(core: Any, pod: dict[str, Any], pod_dir: Path, *, server: str, ca_file: Path) -> Path:
    """Write ``pod_dir/kubeconfig`` for ``pod`` (``core``: a CoreV1Api); PodSetupError if its ServiceAccount is
    missing."""
    meta, spec = pod["metadata"], pod.get("spec", {})
    sa_name = spec.get("serviceAccountName") or "default"
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        try:
            sa = core.read_namespaced_service_account(sa_name, meta["namespace"])
            automount = sa.automount_service_account_token
        except ApiException as exc:
            if exc.status != 404:
                raise
            raise PodSetupError(
                "CreateContainerConfigError", f"serviceaccount {sa_name!r} not found"
            ) from exc
    path = pod_dir / "kubeconfig"
    token = None
    if automount is not False:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": TOKEN_SECONDS,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        }
        resp = core.create_namespaced_service_account_token(sa_name, meta["namespace"], body)
        token = resp.status.token
    return write_kubeconfig(
        path,
        server=server,
        ca_file=ca_file,
        user=f"system:serviceaccount:{meta['namespace']}:{sa_name}",
        token=token,
        namespace=meta["namespace"],
    )
