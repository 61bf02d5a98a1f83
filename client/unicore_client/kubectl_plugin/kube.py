"""Kubernetes access with the user's own kubeconfig: ``--kubeconfig``, else ``$KUBECONFIG`` (several paths
allowed), else ``~/.kube/config``, else the in-cluster ServiceAccount (``unicore.kube_config.load_api_client`` with
kubectl's order, ``in_cluster_last``); ``--context``; ``-n`` else the context's namespace (in a pod: the pod's) else
``default``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicore import kube_config
from unicore.errors import ConfigError

from unicore_client.kubectl_plugin.errors import PluginError

GROUP = "unicore.dev"
VERSION = "v1alpha1"
PLURAL = "agenttasks"


@dataclass
class KubeContext:
    """An authenticated API client plus the namespace a command works in."""

    api_client: Any
    namespace: str
    user: str = ""

    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api_client)

    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client)


def _kubeconfig_namespace_and_user(config_file: str | None, context: str | None) -> tuple[str | None, str]:
    from kubernetes import config

    contexts, active = config.list_kube_config_contexts(config_file=config_file)
    chosen = active
    if context:
        chosen = next((c for c in contexts if c.get("name") == context), None)
        if chosen is None:
            names = ", ".join(sorted(c.get("name", "?") for c in contexts)) or "none"
            raise PluginError(f"context {context!r} not found in the kubeconfig (contexts: {names})")
    details = (chosen or {}).get("context") or {}
    return details.get("namespace"), str(details.get("user") or "")


def connect(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
) -> KubeContext:
    try:
        source = kube_config.choose_source(kubeconfig or None, in_cluster_last=True)
        if source.kind == "in-cluster":
            api_client = kube_config.load_api_client(in_cluster_last=True)
            try:
                pod_ns = (Path(source.path) / "namespace").read_text().strip() or "default"
            except OSError:
                pod_ns = "default"
            return KubeContext(api_client, namespace or pod_ns, "serviceaccount")
        try:
            context_ns, user = _kubeconfig_namespace_and_user(source.path, context)
        except PluginError:
            raise
        except Exception as exc:  # ConfigException, missing file, bad YAML
            raise PluginError(f"cannot load the kubeconfig {source.path}: {exc}") from None
        api_client = kube_config.load_api_client(source.path, context=context)
    except ConfigError as exc:
        raise PluginError(str(exc)) from None
    return KubeContext(api_client, namespace or context_ns or "default", user)
