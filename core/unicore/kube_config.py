"""Kubernetes credentials, found the same way by the operator, turn pods, the dev cluster and the demo tooling.

The first of these that applies wins:

1. ``config_file``, when the caller has one (a ``--kubeconfig`` flag, the dev cluster's own kubeconfig);
2. ``KUBECONFIG``, when it is set and not empty (one path, or several joined by ``:``);
3. the pod's ServiceAccount, when the process runs in a pod (``KUBERNETES_SERVICE_HOST`` is set and the
   ServiceAccount token is mounted);
4. ``~/.kube/config``.

So the operator and turn pods in a cluster use their ServiceAccount, the same code on a laptop uses the user's
kubeconfig, and a test or the dev cluster points ``KUBECONFIG`` at its own. With ``in_cluster_last=True`` rules 3
and 4 swap, which is kubectl's order (a kubeconfig whenever there is one, the ServiceAccount only without one): the
kubectl plugin uses it, since it acts for the user who runs it. Kubeconfigs are only read: refreshed credentials
are never written back. Each call returns a new ``ApiClient``
with its own configuration: the Kubernetes client's global default configuration is never changed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from unicore.errors import ConfigError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

KUBECONFIG_ENV = "KUBECONFIG"
SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"
# Where Kubernetes mounts a pod's ServiceAccount credentials.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class CredentialSource:
    """Where :func:`load_api_client` takes credentials from: a kubeconfig (``path``) or the pod's ServiceAccount."""

    kind: Literal["kubeconfig", "in-cluster"]
    path: str  # the kubeconfig path(s), or the ServiceAccount folder
    why: str  # which rule chose it, for messages

    def describe(self) -> str:
        return f"{self.kind} {self.path} ({self.why})"


def choose_source(
    config_file: str | None = None, environ: Mapping[str, str] | None = None, *, in_cluster_last: bool = False
) -> CredentialSource:
    """The source :func:`load_api_client` uses (the precedence in this module's docstring); ConfigError if none.

    ``in_cluster_last``: kubectl's order, ``~/.kube/config`` before the pod's ServiceAccount.
    """
    env = os.environ if environ is None else environ
    if config_file:
        return CredentialSource("kubeconfig", config_file, "given by the caller")
    if env.get(KUBECONFIG_ENV):
        return CredentialSource("kubeconfig", env[KUBECONFIG_ENV], f"${KUBECONFIG_ENV}")
    token = SERVICE_ACCOUNT_DIR / "token"
    in_cluster = CredentialSource("in-cluster", str(SERVICE_ACCOUNT_DIR), f"${SERVICE_HOST_ENV} is set")
    in_pod = bool(env.get(SERVICE_HOST_ENV)) and token.is_file()
    if in_pod and not in_cluster_last:
        return in_cluster
    home_config = Path(env.get("HOME") or Path.home()) / ".kube" / "config"
    if home_config.is_file():
        return CredentialSource("kubeconfig", str(home_config), "the default kubeconfig")
    if in_pod:
        return in_cluster
    pod_note = f"${SERVICE_HOST_ENV} is set but {token} does not exist" if env.get(SERVICE_HOST_ENV) else (
        f"not in a pod (${SERVICE_HOST_ENV} is not set)"
    )
    raise ConfigError(
        f"no Kubernetes credentials: ${KUBECONFIG_ENV} is not set, {pod_note}, and {home_config} does not exist"
    )


def load_api_client(
    config_file: str | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    in_cluster_last: bool = False,
) -> ApiClient:
    """A new ``kubernetes.client.ApiClient`` with the credentials :func:`choose_source` picks (``in_cluster_last``:
    kubectl's order, as there).

    ``context`` selects a kubeconfig context (default: the kubeconfig's current one). Credentials that cannot be
    loaded (a missing or malformed kubeconfig, an unknown context) raise ConfigError naming the source.
    """
    from kubernetes import client, config
    from kubernetes.config.incluster_config import InClusterConfigLoader

    source = choose_source(config_file, environ, in_cluster_last=in_cluster_last)
    try:
        if source.kind == "in-cluster":
            configuration = client.Configuration()
            InClusterConfigLoader(
                token_filename=str(SERVICE_ACCOUNT_DIR / "token"),
                cert_filename=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
                environ=os.environ if environ is None else environ,
            ).load_and_set(configuration)
            return client.ApiClient(configuration)
        return config.new_client_from_config(config_file=source.path, context=context, persist_config=False)
    except Exception as exc:  # the Kubernetes client raises several unrelated types (ConfigException, OSError, YAML)
        raise ConfigError(f"cannot load Kubernetes credentials from {source.describe()}: {exc}") from exc
