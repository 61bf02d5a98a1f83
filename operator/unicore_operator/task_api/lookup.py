"""Does an AgentTask exist? The task API asks before it writes anything (a seam: the operator may pass a
lookup backed by its own cache; the default makes one GET with the operator's credentials)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from unicore_operator.task_api.errors import task_not_found

GROUP = "unicore.dev"
VERSION = "v1alpha1"
PLURAL = "agenttasks"


class LookupUnavailable(Exception):
    """The Kubernetes API could not be asked (the caller answers 503 and the client retries)."""


class TaskLookup(Protocol):
    def __call__(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The AgentTask object, or None when there is none."""


def kubernetes_lookup(api_client: Any | None = None) -> TaskLookup:
    """A lookup doing one ``GET agenttasks/<name>`` (in-cluster config, else the local kubeconfig)."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    if api_client is None:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        api_client = client.ApiClient()
    custom = client.CustomObjectsApi(api_client)

    def lookup(namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj = custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=10
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise LookupUnavailable(
                f"cannot read agenttask {namespace}/{name}: {exc.status} {exc.reason}"
            ) from exc
        except Exception as exc:  # connection errors
            raise LookupUnavailable(f"cannot reach the Kubernetes API: {exc}") from exc
        return dict(obj)  # type: ignore[call-overload]

    return lookup


def restricted(lookup: TaskLookup, namespaces: Iterable[str]) -> TaskLookup:
    """Only tasks in ``namespaces`` exist for the API (empty = all): the operator's UNICORE_NAMESPACES."""
    allowed = frozenset(namespaces)
    if not allowed:
        return lookup

    def check(namespace: str, name: str) -> dict[str, Any] | None:
        if namespace not in allowed:
            raise task_not_found(namespace, name, f"namespace {namespace} is not watched by this operator")
        return lookup(namespace, name)

    return check


def static_lookup(objects: Callable[[], Iterable[dict[str, Any]]]) -> TaskLookup:
    """A lookup over objects a caller already holds (Kopf index, a test)."""

    def lookup(namespace: str, name: str) -> dict[str, Any] | None:
        for obj in objects():
            meta = obj.get("metadata", {})
            if meta.get("namespace") == namespace and meta.get("name") == name:
                return obj
        return None

    return lookup
